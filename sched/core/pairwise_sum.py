"""numpy's pairwise summation of float64 values in plain Python: the very double numpy gives.

``numpy.sum``/``numpy.mean`` of a contiguous float64 array (``add.reduce``, ``pairwise_sum`` in
numpy's ``loops_utils.h.src``) do not add left to right: at most 128 values are one *leaf*, summed
with 8 running sums (sum ``j`` takes offsets ``j``, ``j + 8``, ... of the largest multiple of 8),
combined as ``((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))``, then the last ``len % 8`` values
added left to right (fewer than 8 values: left to right from ``-0.0``); more than 128 values are
split at half the count rounded down to a multiple of 8, each part summed so, then the two added.
vLLM's bench metrics are numpy means and standard deviations of such sums, so the lab sums in this
order (:mod:`sched.core.bench_metrics`).

:func:`pairwise_sum` sums many leaves at once: every split point is a multiple of 8, so every leaf
but the last holds a multiple of 8 values; each leaf is copied into a block of 128 filled with
``-0.0`` (``x + -0.0`` is ``x`` for every double ``x``: ``-0.0``, ``+0.0``, infinities and NaN
included, so the filling changes no running sum), and the running sums of 64 leaves are one
C-level ``map`` over fixed slices. Each running sum is added left to right by the builtin ``sum``
in C doubles before Python 3.12 (its plain loop ``f_result += x``), by ``functools.reduce`` with
``operator.add`` from 3.12 on (where ``sum`` of floats is compensated: another double).
"""

from __future__ import annotations

import sys
from functools import reduce
from itertools import repeat
from operator import add

__all__ = ["pairwise_sum", "block_sum", "PAIRWISE_BLOCK"]

#: At most this many values are one leaf of the pairwise summation.
PAIRWISE_BLOCK = 128

#: Leaves summed together (8,192 values: a group stays in the CPU cache while its slices are read).
_LEAVES_AT_ONCE = 64

#: Running sum ``j`` of leaf ``l`` in a group of 128-value blocks: ``padded[128 l + j::8]`` up to the
#: block's end, at ``8 l + j``.
_RUNNING = [slice(leaf * PAIRWISE_BLOCK + j, (leaf + 1) * PAIRWISE_BLOCK, 8)
            for leaf in range(_LEAVES_AT_ONCE) for j in range(8)]

#: ``-0.0`` values that fill a leaf to 128.
_PADDING = [-0.0] * PAIRWISE_BLOCK


def block_sum(block: list) -> float:
    """One leaf (at most 128 values) in numpy's order (module docstring)."""
    count = len(block)
    if count < 8:
        return reduce(add, block, -0.0)
    whole = count - count % 8
    s0, s1, s2, s3, s4, s5, s6, s7 = (reduce(add, block[j:whole:8]) for j in range(8))
    return reduce(add, block[whole:], ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)))


def _sums_by_reduce(slices):
    """Each slice (a non-empty list of floats) summed left to right, as doubles: ``reduce(add, s)``."""
    return map(reduce, repeat(add), slices)


def _sums_by_builtin(slices):
    """The same doubles as :func:`_sums_by_reduce` by the builtin ``sum`` from ``-0.0``
    (``-0.0 + x`` is ``x``), a C loop of plain double additions before Python 3.12."""
    return map(sum, slices, repeat(-0.0))


#: How :func:`pairwise_sum` sums its running sums on this Python (module docstring).
_running_sums = _sums_by_builtin if sys.version_info < (3, 12) else _sums_by_reduce


def _leaf_sizes(count: int, sizes: list) -> None:
    """Append the sizes of the leaves of ``count`` values to ``sizes``, in order."""
    if count <= PAIRWISE_BLOCK:
        sizes.append(count)
        return
    half = count // 2
    half -= half % 8
    _leaf_sizes(half, sizes)
    _leaf_sizes(count - half, sizes)


def _combine(count: int, sums) -> float:
    """The leaf sums ``sums`` (an iterator, in order) of ``count`` values added up the split tree."""
    if count <= PAIRWISE_BLOCK:
        return next(sums)
    half = count // 2
    half -= half % 8
    left = _combine(half, sums)
    return left + _combine(count - half, sums)


def pairwise_sum(values: list) -> float:
    """``values`` (a list of floats) summed in numpy's pairwise order (module docstring); ``-0.0``
    for no values (numpy's empty leaf; ``numpy.sum`` adds it to ``0.0``)."""
    count = len(values)
    if count <= PAIRWISE_BLOCK:
        return block_sum(values)
    sizes = []
    _leaf_sizes(count, sizes)
    tail = sizes[-1] % 8   # only the last leaf can hold a number of values that is not a multiple of 8
    sizes[-1] -= tail
    sums, start = [], 0
    for group in range(0, len(sizes), _LEAVES_AT_ONCE):
        padded = []
        for size in sizes[group:group + _LEAVES_AT_ONCE]:
            padded += values[start:start + size]
            start += size
            if size < PAIRWISE_BLOCK:
                padded += _PADDING[size:]
        running = list(_running_sums(map(padded.__getitem__, _RUNNING[:len(padded) // 16])))
        s0, s1, s2, s3, s4, s5, s6, s7 = (running[j::8] for j in range(8))
        sums += map(add, map(add, map(add, s0, s1), map(add, s2, s3)), map(add, map(add, s4, s5), map(add, s6, s7)))
    if tail:
        sums[-1] = reduce(add, values[start:], sums[-1])
    return _combine(count, iter(sums))
