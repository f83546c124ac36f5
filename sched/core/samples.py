"""A sample of one value per request held compactly (lab.md §5's samples, for :mod:`sched.core.metrics`):
columns of 4-byte integers (8 where a value needs it) instead of a list of int objects (a column turns into a list for a value
an array cannot hold), and a sample ordered for its percentiles as a histogram {value: count} when it
holds few distinct values, else as the sorted list. At 10⁶ requests a list of ints costs about 40 MB
a column, an array 4 MB.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import Counter

__all__ = ["extend_columns", "like", "ordered_sample", "at_rank", "low_high"]


def extend_columns(columns: list, rows: list) -> None:
    """Move ``rows`` (tuples, one per request) into ``columns``, one column per tuple position (a
    row's fields beyond the columns are left out): an integer array (4 bytes a value, no object
    per value) widens to 8 bytes for a value beyond 32 bits and turns into a list for a value it
    cannot hold (a non-integer, an integer beyond 64 bits); a list takes any value."""
    for at, values in zip(range(len(columns)), zip(*rows)):
        column = columns[at]
        while type(column) is array:
            try:
                column.extend(array(column.typecode, values))
                break
            except (TypeError, OverflowError):
                wide = column.typecode == "i" and all(type(v) is int and -2**63 <= v < 2**63 for v in values)
                columns[at] = column = array("q", column) if wide else column.tolist()
        else:
            column.extend(values)


def like(column, values):
    """``values`` (drawn from ``column``) as an integer array of its kind when ``column`` is one,
    else as a list."""
    return array(column.typecode, values) if type(column) is array else list(values)


def ordered_sample(column, chunk: int = 65536):
    """The sample ``column`` (integers) ordered for its percentiles: a histogram {value: count} when
    it holds few distinct values (at most an eighth of its size, or 1,024: no object per value),
    else the sorted list."""
    counts = Counter()
    limit = max(1024, len(column) >> 3)
    for at in range(0, len(column), chunk):
        counts.update(column[at:at + chunk])
        if len(counts) > limit:
            return sorted(column)
    return counts


def at_rank(ordered, rank: int) -> tuple:
    """``(value, lo, hi)``: the value at 0-based ``rank`` of a sample ordered by :func:`ordered_sample`
    and the ranks ``lo`` .. ``hi - 1`` that the values equal to it hold in sorted order. Raises
    :class:`IndexError` for a rank past the sample."""
    if type(ordered) is Counter:
        below = 0
        for value in sorted(ordered):
            count = ordered[value]
            if rank < below + count:
                return value, below, below + count
            below += count
        raise IndexError(rank)
    value = ordered[rank]
    return value, bisect_left(ordered, value), bisect_right(ordered, value)


def low_high(ordered) -> tuple:
    """The least and greatest value of a non-empty sample ordered by :func:`ordered_sample`."""
    return (min(ordered), max(ordered)) if type(ordered) is Counter else (ordered[0], ordered[-1])
