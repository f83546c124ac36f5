"""The requests of a finished lab-engine case kept as columns (lab.md §7: what the artifacts read).

A finished case holds one :class:`~sched.core.records.Request` per request: an object with fifteen
slots, a list of token runs and a few int objects, about 300 bytes each. Once the case is
simulated, checked, summarised and its ``requests.jsonl`` lines rendered, its artifacts need only
a few lanes of ``timeline.svg`` and, should the rendered lines be lost, the lines again.
:class:`PackedRequests` keeps the same values as arrays (one per field, 4 or 8 bytes a value,
all token runs of the case in one array): about 40 bytes per request. It is a read-only sequence
of :class:`Request`: indexing or iterating builds each record on demand, equal in every field to
the one packed (a new object each time: compare records by ``index``, not identity).

Only ended requests are packed (no open token run) of an engine that never preempts (the lab
engine): :meth:`PackedRequests.pack` raises ``ValueError`` otherwise. Request ``i`` is the
workload's request ``i`` (its ``spec`` and ``index``), as every lab-engine case lists them.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate, chain, compress, repeat
from operator import attrgetter, eq, is_not, sub

from .records import CurrentTick, Request, Status

__all__ = ["ColumnRequests", "PackedRequests"]

_STATUSES = tuple(Status)   # a status is packed as its position here
_CODE = {status.value: code for code, status in enumerate(_STATUSES)}   # by value: a str hashes in C
_DONE = _CODE[Status.DONE.value]
_STATUS_VALUE = attrgetter("status._value_")
#: The int fields packed besides the status and the token runs, in column order; ``None`` is
#: packed as the column's smallest value (:func:`_column`).
_FIELDS = ("admitted_at", "hit_tokens", "prefilled_tokens", "prefill_done_at", "done_at", "_num_closed", "_seq")
_INT32 = 1 << 31


def _column(values) -> tuple[array, int]:
    """``values`` (a list of ints or ``None``, or an iterable of ints) as an array of 4-byte ints
    where every value fits (else 8-byte), ``None`` as the type's smallest value, which then no value
    takes; returns ``(column, that value)``. Raises ``ValueError`` for an int past 8 bytes."""
    nones = values.count(None) if isinstance(values, list) else 0
    if not isinstance(values, list):
        values = list(values)
    for typecode, none in (("i", -_INT32), ("q", -(1 << 63))):
        try:
            column = array(typecode, map({None: none}.get, values, values) if nones else values)
        except OverflowError:
            continue
        if not nones or column.count(none) == nones:   # else a value equal to it: the wider type
            return column, none
    raise ValueError("a value too large to pack")


class ColumnRequests(Sequence):
    """A case's requests kept as columns: a read-only sequence of :class:`Request` in workload
    order, each record built on demand by :meth:`_request` (a new object each time, equal in every
    field to the one kept). What reads a whole case (:func:`sched.core.metrics.summarize`, the P95
    TTFT request of :mod:`sched.output.lanes`) reads the columns instead, without a record each:

    - :attr:`specs`: the requests' specs (``RequestSpec``), request ``i``'s at ``i``;
    - :meth:`summary_fields`: per request the tuple ``summarize`` reads;
    - :meth:`successful_ttfts`: ``(indices, TTFTs)`` of the successful requests.

    Subclasses: :class:`PackedRequests` (a finished lab-engine case), and
    :class:`sched.core.ended_requests.EndedRequests` (the vLLM engine's requests, packed as they end).
    """

    __slots__ = ()

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._request(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("request index out of range")
        return self._request(index)

    def __iter__(self):
        for i in range(len(self)):
            yield self._request(i)


class PackedRequests(ColumnRequests):
    """One finished case's requests as columns; a read-only sequence of :class:`Request`.

    Make one with :meth:`pack` (from the records) or :meth:`from_columns` (from :meth:`columns`,
    e.g. sent by another process). ``len()`` is the number of requests; ``packed[i]`` builds request
    ``i``'s record (negative ``i`` counts from the end; a slice gives a list); iterating builds each
    in workload order. :meth:`successful_ttfts` reads the TTFTs (ticks) of the successful requests
    straight from the columns.
    """

    __slots__ = ("_specs", "_status", "_ints", "_nones", "_runs", "_starts", "_clock")

    def __init__(self, specs, status: bytes, ints: list, nones: list, runs: array, starts: array, now: int) -> None:
        self._specs, self._status, self._ints, self._nones = specs, status, ints, nones
        self._runs, self._starts, self._clock = runs, starts, CurrentTick(now)

    @classmethod
    def pack(cls, requests: list[Request], specs, now: int) -> PackedRequests:
        """The columns of ``requests`` (one case's records, request ``i`` being ``specs[i]``, the
        workload's request ``i``); ``now``: the case's final tick (its requests' clock).
        Raises ``ValueError`` for a request that has not ended its token run, was preempted, or is
        not at its position (``index``) in the list."""
        if len(requests) != len(specs) or list(map(attrgetter("index"), requests)) != list(range(len(requests))):
            raise ValueError("the requests are not the workload's, in workload order")
        if any(map(is_not, map(attrgetter("_open_from"), requests), repeat(None))):
            raise ValueError("a request still has an open token run")
        if any(map(attrgetter("num_preemptions"), requests)):
            raise ValueError("a preempted request (only the lab engine's requests are packed)")
        status = bytes(map(_CODE.__getitem__, map(_STATUS_VALUE, requests)))
        packed = [_column(list(map(attrgetter(name), requests))) for name in _FIELDS]
        run_lists = list(map(attrgetter("_runs"), requests))
        runs, _ = _column(chain.from_iterable(run_lists))
        starts, _ = _column(accumulate(map(len, run_lists), initial=0))
        return cls(specs, status, [column for column, _ in packed], [none for _, none in packed], runs, starts, now)

    def columns(self) -> tuple:
        """Everything packed but the specs, as plain values and arrays (cheap to pickle):
        ``(status bytes, int columns, their None values, token runs, run starts, now)``."""
        return self._status, self._ints, self._nones, self._runs, self._starts, self._clock.now

    @classmethod
    def from_columns(cls, specs, columns: tuple) -> PackedRequests:
        """The requests :meth:`columns` gave, on ``specs`` (the same workload)."""
        return cls(specs, *columns)

    def __len__(self) -> int:
        return len(self._status)

    def _request(self, i: int) -> Request:
        request = Request.__new__(Request)
        request.spec, request.index, request.status = self._specs[i], i, _STATUSES[self._status[i]]
        (request.admitted_at, request.hit_tokens, request.prefilled_tokens, request.prefill_done_at,
         request.done_at, request._num_closed, request._seq) = (
            None if column[i] == none else column[i] for column, none in zip(self._ints, self._nones))
        request._runs = self._runs[self._starts[i]:self._starts[i + 1]].tolist()
        request._clock, request._open_from = self._clock, None
        request.num_preemptions, request.preempted_at = 0, ()
        return request

    @property
    def specs(self):
        """The workload's requests (``RequestSpec``), request ``i``'s spec at ``i``."""
        return self._specs

    def summary_fields(self):
        """Per request in workload order, the tuple :func:`sched.core.metrics.summarize` reads:
        ``(status, arrival, admitted_at, done_at, hit_tokens, priority, flat token runs, None)``
        (the runs as an array slice; ``None``: no open run), without building records."""
        ints, nones = self._ints, self._nones
        admitted, done = (map({nones[k]: None}.get, ints[k], ints[k]) for k in (0, 4))   # _FIELDS order
        starts, runs = self._starts, self._runs
        return zip(map(_STATUSES.__getitem__, self._status), map(attrgetter("arrival"), self._specs),
                   admitted, done, ints[1], map(attrgetter("priority"), self._specs),
                   map(runs.__getitem__, map(slice, starts, starts[1:])), repeat(None))

    def successful_ttfts(self) -> tuple[list[int], list[int]]:
        """``(indices, TTFTs)`` of the successful requests in workload order: TTFT = first token
        stamp − arrival, ticks (lab.md §5), read from the columns without building records."""
        indices = list(compress(range(len(self)), map(eq, self._status, repeat(_DONE))))
        firsts = map(self._runs.__getitem__, map(self._starts.__getitem__, indices))
        arrivals = map(attrgetter("arrival"), map(self._specs.__getitem__, indices))
        return indices, list(map(sub, firsts, arrivals))
