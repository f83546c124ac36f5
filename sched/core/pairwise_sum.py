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
but the last holds a multiple of 8 values (at least 56: a split part holds at least 64), and the
values of a *group* of 64 consecutive leaves (at most 8,192 values: a group stays in the CPU cache
while it is read) are copied into one list, end to end. Its running sums are made by one of two
ways that give the same doubles (both add left to right in C doubles):

- before Python 3.12, each running sum is a slice of the group, ``group[o + j:o + size:8]`` for the
  leaf at offset ``o``, summed by the builtin ``sum`` from ``-0.0`` (its plain loop
  ``f_result += x``: no float object per addition; ``-0.0 + x`` is ``x``); the slices depend only
  on the group's leaf sizes, and a count's groups have very few patterns of sizes (2 to 4), so
  they are made once per pattern;
- from 3.12 on (where ``sum`` of floats is compensated: another double), column by column: each
  leaf is copied into a block of 128 filled with ``-0.0`` (``x + -0.0`` is ``x`` for every double
  ``x``: ``-0.0``, ``+0.0``, infinities and NaN included, so the filling changes no running sum),
  the running sums ``j`` of every leaf start as ``padded[j::128]`` and each following offset
  ``padded[j + 8 i::128]`` is added to them by ``map(add, ...)`` (one C-level pass per offset,
  faster than ``functools.reduce`` over each running sum).

The values may come as one list or as :class:`Pieces`, slices of one list taken in turn (a short
list of distinct values, say, each read many times): each group is copied straight from the slices
it covers, so the whole sample is never held in one list.
"""

from __future__ import annotations

import sys
from functools import lru_cache, reduce
from itertools import chain, repeat
from operator import add, le

__all__ = ["pairwise_sum", "block_sum", "Pieces", "PAIRWISE_BLOCK"]

#: At most this many values are one leaf of the pairwise summation.
PAIRWISE_BLOCK = 128

#: Leaves summed together (8,192 values: a group stays in the CPU cache while its slices are read).
_LEAVES_AT_ONCE = 64

#: ``-0.0`` values that fill a leaf to 128.
_PADDING = [-0.0] * PAIRWISE_BLOCK


class Pieces:
    """The values ``source[start:stop]`` for each ``start`` of ``starts`` and ``stop`` of ``stops``
    (two lists of the same length) in turn, ``0 <= start <= stop <= len(source)`` (an empty slice
    is allowed). ``size``: how many values that is; ``len`` gives it, iterating gives the values one
    by one, ``==`` compares the values with a list's or another :class:`Pieces`' in order.
    :func:`pairwise_sum` reads the slices, never joining them into one list. Raises
    :class:`ValueError` for a slice outside ``source`` or lists of different lengths."""

    __slots__ = ("source", "starts", "stops", "size")

    def __init__(self, source: list, starts: list, stops: list) -> None:
        if len(starts) != len(stops) or starts and (min(starts) < 0 or max(stops) > len(source)) \
                or not all(map(le, starts, stops)):
            raise ValueError(f"the slices ({len(starts)} starts, {len(stops)} stops) are not all within "
                             f"a list of {len(source)} values, each start at or before its stop")
        self.source, self.starts, self.stops, self.size = source, starts, stops, sum(stops) - sum(starts)

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        return chain.from_iterable(map(self.source.__getitem__, map(slice, self.starts, self.stops)))

    def __eq__(self, other) -> bool:
        """Equal to a list or :class:`Pieces` of the same values in the same order (as two lists
        compare: the whole sample is made; for checks, not for the sums)."""
        if isinstance(other, (Pieces, list)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None


def block_sum(block: list) -> float:
    """One leaf (at most 128 values) in numpy's order (module docstring)."""
    count = len(block)
    if count < 8:
        return reduce(add, block, -0.0)
    whole = count - count % 8
    s0, s1, s2, s3, s4, s5, s6, s7 = (reduce(add, block[j:whole:8]) for j in range(8))
    return reduce(add, block[whole:], ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)))


def _combined(s0, s1, s2, s3, s4, s5, s6, s7):
    """Leaf by leaf, ``((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))`` of its 8 running sums
    (each argument: an iterable of one running sum per leaf)."""
    return map(add, map(add, map(add, s0, s1), map(add, s2, s3)), map(add, map(add, s4, s5), map(add, s6, s7)))


def _leaf_sums_by_builtin(group: list, leaves: tuple, running: list):
    """The sums (an iterable, in order) of the leaves of ``group`` (their values end to end, sizes
    ``leaves``): each running sum the slice of ``running`` (:func:`_groups`) summed by the builtin
    ``sum`` from ``-0.0``, a C loop of plain double additions before Python 3.12 (module docstring)."""
    sums = list(map(sum, map(group.__getitem__, running), repeat(-0.0)))
    return _combined(*(sums[j::8] for j in range(8)))


def _leaf_sums_by_columns(group: list, leaves: tuple, running: list):
    """The same doubles as :func:`_leaf_sums_by_builtin` on any Python: each leaf copied into a
    block of 128 filled with ``-0.0``, running sum ``j`` of every leaf starts as ``padded[j::128]``,
    and ``padded[j + 8 i::128]`` (``i`` = 1 .. 15) is added to them left to right, one
    ``map(add, ...)`` per offset (module docstring)."""
    padded, start = [], 0
    for size in leaves:
        padded += group[start:start + size]
        start += size
        if size < PAIRWISE_BLOCK:
            padded += _PADDING[size:]
    columns = []
    for j in range(8):
        sums = padded[j::PAIRWISE_BLOCK]
        for offset in range(j + 8, PAIRWISE_BLOCK, 8):
            sums = map(add, sums, padded[offset::PAIRWISE_BLOCK])
        columns.append(sums)
    return _combined(*columns)


#: How :func:`pairwise_sum` sums its leaves on this Python (module docstring).
_leaf_sums = _leaf_sums_by_builtin if sys.version_info < (3, 12) else _leaf_sums_by_columns


def _leaf_sizes(count: int, sizes: list) -> None:
    """Append the sizes of the leaves of ``count`` values to ``sizes``, in order."""
    if count <= PAIRWISE_BLOCK:
        sizes.append(count)
        return
    half = count // 2
    half -= half % 8
    _leaf_sizes(half, sizes)
    _leaf_sizes(count - half, sizes)


@lru_cache(maxsize=4)
def _groups(count: int) -> tuple[tuple, int]:
    """``(groups, tail)`` of ``count`` (more than 128) values. ``groups``: per group of at most 64
    consecutive leaves, in order, ``(leaves, need, running)``: the leaves' sizes (the last leaf's
    less ``tail``), their sum, and the slices of the running sums of the group's values laid end to
    end (``slice(o + j, o + size, 8)`` for the leaf of ``size`` values at offset ``o``, ``j`` = 0 ..
    7), shared by the groups of one pattern of sizes. ``tail``: the values after the last leaf's
    largest multiple of 8 (only the last leaf can hold a number of values that is not a multiple
    of 8). Kept for the last few counts: a mean and its standard deviation sum as many values."""
    sizes = []
    _leaf_sizes(count, sizes)
    tail = sizes[-1] % 8
    sizes[-1] -= tail
    patterns, groups = {}, []
    for first in range(0, len(sizes), _LEAVES_AT_ONCE):
        leaves = tuple(sizes[first:first + _LEAVES_AT_ONCE])
        if leaves not in patterns:
            running, offset = [], 0
            for size in leaves:
                running += [slice(offset + j, offset + size, 8) for j in range(8)]
                offset += size
            patterns[leaves] = (leaves, offset, running)
        groups.append(patterns[leaves])
    return tuple(groups), tail


def _combine(count: int, sums) -> float:
    """The leaf sums ``sums`` (an iterator, in order) of ``count`` values added up the split tree."""
    if count <= PAIRWISE_BLOCK:
        return next(sums)
    half = count // 2
    half -= half % 8
    left = _combine(half, sums)
    return left + _combine(count - half, sums)


def pairwise_sum(values) -> float:
    """``values`` (a list of floats, or :class:`Pieces`) summed in numpy's pairwise order (module
    docstring); ``-0.0`` for no values (numpy's empty leaf; ``numpy.sum`` adds it to ``0.0``)."""
    if isinstance(values, Pieces):
        source, cuts, count = values.source, zip(values.starts, values.stops), values.size
    else:
        source, cuts, count = values, iter(((0, len(values)),)), len(values)
    if count <= PAIRWISE_BLOCK:
        return block_sum(list(values))
    groups, tail = _groups(count)
    sums = []
    start, stop = next(cuts)   # the values of source[start:stop] not read yet, then those of the next cuts
    for leaves, need, running in groups:
        if stop - start >= need:
            group = source[start:start + need]
            start += need
        else:   # the group goes on in the next cuts (their sizes add up to the count: they hold it)
            group = source[start:stop]
            for start, stop in cuts:
                missing = need - len(group)
                if stop - start >= missing:
                    group += source[start:start + missing]
                    start += missing
                    break
                group += source[start:stop]
        sums += _leaf_sums(group, leaves, running)
    if tail:
        rest = source[start:stop]
        for start, stop in cuts:
            rest += source[start:stop]
        sums[-1] = reduce(add, rest, sums[-1])
    return _combine(count, iter(sums))
