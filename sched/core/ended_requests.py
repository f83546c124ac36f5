"""A vLLM-engine case's requests packed as they end (vllm-engine.md §5: what the artifacts read).

The vLLM engine used to hold one :class:`~sched.core.records.Request` per workload request from
the start to the end of the run: fifteen slots, a tuple of token runs and a few int objects, about
340 bytes each (340 MB at 10⁶ requests). Once a request has ended nothing changes it any more, so
:class:`EndedRequests` takes its values into columns there and then (:meth:`EndedRequests.add`)
and the record itself is let go with the scheduler's view of the request: the engine holds a
record only from a request's arrival to its end (memory bounded by what is running or waiting).

Per request the columns hold its status (1 byte), admission time, hit tokens, end time and first
token stamp (4 bytes each): about 17 bytes. A request's token runs are not stored when they are
one run of all its ``output_tokens`` (every successful request that was never preempted: the run
is ``(first stamp, output_tokens)``); other runs, preemption times and a re-stamped spec (a
benchmark client's ``--max-concurrency`` start time) are kept in small dicts by index. A record
whose values do not fit the columns (a time that is not a whole number of ticks, a field only the
lab engine sets) is kept whole.

It is a read-only sequence of :class:`Request` in workload order, as
:class:`~sched.core.packed_requests.ColumnRequests` says: ``requests[i]`` builds request ``i``'s record,
equal in every field to the one that ended (its runs a tuple, as the engine leaves them; its
preemption times a list when preempted, else ``()``); a request that has not ended reads as not
yet arrived (``Request(spec, i)``).
"""

from __future__ import annotations

from array import array
from itertools import compress, repeat
from operator import attrgetter, eq, sub

from .packed_requests import ColumnRequests
from .records import Request, Status

__all__ = ["EndedRequests", "RECORD_FIELDS", "preemption_counts"]

_STATUSES = tuple(Status)   # a status is kept as its position here (0: WAITING, not ended)
_CODE = {status: code for code, status in enumerate(_STATUSES)}
_DONE = _CODE[Status.DONE]
_ENDED = {Status.DONE.value: _DONE, Status.TIMEOUT.value: _CODE[Status.TIMEOUT]}   # by value: a str hashes in C
_KEPT = 255                 # the record is kept whole (:attr:`EndedRequests._kept`)
_ARRIVAL = attrgetter("arrival")
_PRIORITY = attrgetter("priority")


class EndedRequests(ColumnRequests):
    """The requests of one vLLM-engine case (request ``i`` is ``specs[i]``, the workload's), each
    packed by :meth:`add` when it ends; a read-only sequence of :class:`Request` (module docstring).

    ``len()`` is the number of workload requests. :meth:`preemption_counts` gives the case's
    preemptions without a record each; :attr:`specs`, :meth:`summary_fields` and
    :meth:`successful_ttfts` as :class:`~sched.core.packed_requests.ColumnRequests` says.
    """

    __slots__ = ("_workload", "_respecs", "_status", "_admitted", "_hits", "_done", "_firsts", "_runs", "_preempted",
                 "_kept")

    def __init__(self, specs) -> None:
        n = len(specs)
        self._workload = specs
        self._respecs: dict[int, object] = {}     # index -> its re-stamped spec (not the workload's)
        self._status = bytearray(n)               # _CODE of the status; 0: not ended; _KEPT: kept whole
        self._admitted = array("i", [-1]) * n     # admission tick, -1: never admitted
        self._hits = array("i", bytes(4 * n))      # hit tokens
        self._done = array("i", bytes(4 * n))      # end tick
        self._firsts = array("i", [-1]) * n       # first token stamp, -1: no token
        self._runs: dict[int, tuple] = {}         # index -> token runs other than one run of every output token
        self._preempted: dict[int, tuple] = {}    # index -> preemption times (ticks)
        self._kept: dict[int, Request] = {}       # index -> a record the columns cannot hold

    def add(self, rec: Request) -> None:
        """Pack ``rec`` (request ``rec.index``, ended: status ``ok`` or ``timeout``, no open run);
        the caller lets the record go. Raises ``ValueError`` for a request that has not ended."""
        i, runs, preempted, admitted = rec.index, rec._runs, rec.preempted_at, rec.admitted_at
        code = _ENDED.get(rec.status._value_)
        if code is None or rec._open_from is not None:
            raise ValueError(f"request {i} has not ended")
        if len(runs) == 2:
            first, closed = runs
        else:
            first, closed = runs[0] if runs else -1, sum(runs[1::2])
        try:   # a value an int column cannot hold (not an int, or past 4 bytes) raises: kept whole
            if (rec._num_closed != closed or rec.prefilled_tokens or rec.prefill_done_at is not None
                    or rec._seq is not None or rec._clock is not None
                    or (len(preempted) != rec.num_preemptions or type(preempted) is not list if preempted
                        else rec.num_preemptions or type(preempted) is not tuple)
                    or admitted is not None and admitted < 0 or runs and first < 0):   # -1 stands for None
                raise TypeError("not held by the columns")
            if admitted is not None:
                self._admitted[i] = admitted
            self._hits[i] = rec.hit_tokens
            self._done[i] = rec.done_at
            self._firsts[i] = first
        except (TypeError, OverflowError):
            self._status[i] = _KEPT   # what the columns got of it is never read
            self._kept[i] = rec
            return
        spec = rec.spec
        if runs and (len(runs) != 2 or closed != spec.output_tokens):
            self._runs[i] = tuple(runs)
        if preempted:
            self._preempted[i] = tuple(preempted)
        if spec is not self._workload[i]:
            self._respecs[i] = spec
        self._status[i] = code

    def __len__(self) -> int:
        return len(self._status)

    def _spec(self, i: int):
        return self._respecs.get(i) or self._workload[i] if self._respecs else self._workload[i]

    def _request(self, i: int) -> Request:
        code = self._status[i]
        if code == _KEPT:
            return self._kept[i]
        spec = self._spec(i)
        if not code:
            return Request(spec, i)
        request = Request.__new__(Request)
        request.spec, request.index, request.status = spec, i, _STATUSES[code]
        admitted = self._admitted[i]
        request.admitted_at = None if admitted < 0 else admitted
        request.hit_tokens, request.done_at = self._hits[i], self._done[i]
        first = self._firsts[i]
        runs = self._runs.get(i) or (() if first < 0 else (first, spec.output_tokens))
        request._runs, request._num_closed = runs, sum(runs[1::2])
        preempted = self._preempted.get(i)
        request.num_preemptions, request.preempted_at = (len(preempted), list(preempted)) if preempted else (0, ())
        request.prefilled_tokens, request.prefill_done_at = 0, None
        request._open_from = request._clock = request._seq = None
        return request

    @property
    def specs(self):
        """The requests' specs, request ``i``'s at ``i``: the workload's, or the re-stamped one its
        record held (a list made once when any was re-stamped)."""
        if not self._respecs and not self._kept:
            return self._workload
        specs = list(self._workload)
        for i, spec in self._respecs.items():
            specs[i] = spec
        for i, rec in self._kept.items():
            specs[i] = rec.spec
        return specs

    def preemption_counts(self) -> tuple[int, int]:
        """``(preemptions in all, requests preempted at least once)``."""
        counts = [len(times) for times in self._preempted.values()]
        counts += [rec.num_preemptions for rec in self._kept.values() if rec.num_preemptions]
        return sum(counts), len(counts)

    def summary_fields(self):
        """Per request in workload order, the tuple :func:`sched.core.metrics.summarize` reads:
        ``(status, arrival, admitted_at, done_at, hit_tokens, priority, flat token runs, None)``,
        without building records (a record kept whole gives its own fields). Raises ``ValueError``
        while a request has not ended."""
        if self._status.count(0):
            raise ValueError("a request has not ended")
        specs = self.specs
        runs = self._runs
        flat = map(runs.get, range(len(self)), map(_one_run, self._firsts, map(_OUTPUT, specs)))
        rows = zip(map(_STATUSES.__getitem__, map(_KEPT_AS_DONE.__getitem__, self._status)), map(_ARRIVAL, specs),
                   map(_none_below_zero, self._admitted), self._done, self._hits, map(_PRIORITY, specs), flat,
                   repeat(None))
        if not self._kept:
            return rows
        kept = self._kept
        return (_kept_fields(kept[i]) if i in kept else row for i, row in enumerate(rows))

    def fields(self):
        """Per request in workload order, without building records, the tuple
        ``(status, done_at, admitted_at, hit_tokens, num_preemptions, preempted_at, token runs, None, spec)``
        (:data:`RECORD_FIELDS` of a record; ``None``: no open run): the runs flat, ``(first stamp,
        count, ...)``, the preemption times a tuple (``()`` when never preempted). A record kept
        whole gives its own. Raises ``ValueError`` while a request has not ended."""
        if self._status.count(0):
            raise ValueError("a request has not ended")
        n, specs = len(self), self.specs
        runs = map(self._runs.get, range(n), map(_one_run, self._firsts, map(_OUTPUT, specs)))
        preempted = list(map(self._preempted.get, range(n), repeat(()))) if self._preempted else repeat((), n)
        rows = zip(map(_STATUSES.__getitem__, map(_KEPT_AS_DONE.__getitem__, self._status)), self._done,
                   map(_none_below_zero, self._admitted), self._hits,
                   map(len, preempted) if self._preempted else repeat(0, n), preempted, runs, repeat(None), specs)
        if not self._kept:
            return rows
        kept = self._kept
        return (RECORD_FIELDS(kept[i]) if i in kept else row for i, row in enumerate(rows))

    def successful_ttfts(self) -> tuple:
        """``(indices, TTFTs)`` of the successful requests in workload order: TTFT = first token
        stamp − arrival, ticks (vllm-engine.md §5), read from the columns: two integer arrays (lists
        when a record is kept whole)."""
        kept, specs = self._kept, self.specs
        ok = compress(range(len(self)), map(eq, self._status, repeat(_DONE)))
        if not kept:   # 4 and 8 bytes a value, not an int object each
            indices = array("i", ok)
            firsts = map(self._firsts.__getitem__, indices)
            return indices, array("q", map(sub, firsts, map(_ARRIVAL, map(specs.__getitem__, indices))))
        indices = sorted([*ok, *(i for i, rec in kept.items() if rec.status is Status.DONE)])
        firsts = [kept[i]._runs[0] if i in kept else self._firsts[i] for i in indices]
        return indices, list(map(sub, firsts, map(_ARRIVAL, map(specs.__getitem__, indices))))


#: A status code as :func:`EndedRequests.summary_fields` maps it (a kept record's own fields replace it).
_KEPT_AS_DONE = list(range(256))
_KEPT_AS_DONE[_KEPT] = _DONE


def _one_run(first: int, output: int):
    return () if first < 0 else (first, output)


def _none_below_zero(value: int):
    return None if value < 0 else value


#: The fields :meth:`EndedRequests.fields` gives, read from a record.
RECORD_FIELDS = attrgetter("status", "done_at", "admitted_at", "hit_tokens", "num_preemptions", "preempted_at", "_runs",
                           "_open_from", "spec")
_OUTPUT = attrgetter("output_tokens")
_KEPT_FIELDS = attrgetter("status", "spec.arrival", "admitted_at", "done_at", "hit_tokens", "spec.priority", "_runs")


def _kept_fields(rec: Request) -> tuple:
    return (*_KEPT_FIELDS(rec), None)


def preemption_counts(requests) -> tuple[int, int]:
    """``(preemptions in all, requests preempted at least once)`` of one case's requests (records,
    or :class:`EndedRequests` read from its columns)."""
    if isinstance(requests, EndedRequests):
        return requests.preemption_counts()
    counts = [r.num_preemptions for r in requests if r.num_preemptions]
    return sum(counts), len(counts)
