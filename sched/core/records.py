"""The records both engines hand on: the shared interface between the lab's tick engine
(:mod:`sched.lab.engine`, lab.md §3) and the vLLM engine (``sched/vllm_*.py``, vllm-engine.md).

Everything downstream of a simulation (invariants, metrics, pictures, artifacts, explain, the
parallel runner) reads only these records, never an engine's internals; the engines differ only in
their scheduling rules. This module imports nothing of either engine (imports flow one way:
``records`` → ``engine`` and ``vllm_*``).

Units: times are ticks (``None`` until they happen); a token is stamped with the tick at the end
of the tick or step that computed it. Counts are tokens; ``budget_used`` and ``budget_spent`` are
abstract budget units (lab.md §1). Only a vLLM run given a step model keeps its clock in another
unit (whole microseconds, :mod:`sched.timing.replay`, vllm-engine.md §6), and says so.

- :class:`Request`: one request's life in one case (status, admission, cache hit, token stamps);
- :class:`TickRecord` / :class:`TickCounts`: the lab engine's timeline records (``full``/``counts``),
  :class:`CountsKeeper` the bounded builder of the latter;
- :class:`CaseResult`: everything one case produced;
- :class:`Status`, :class:`SimulationError`, :data:`TIMELINE_DETAILS`, :data:`MAX_COUNTS_RECORDS`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from enum import Enum

from .config import Case, EngineConfig
from ..workload.specs import RequestSpec

__all__ = ["Status", "Request", "TickRecord", "TickCounts", "CountsKeeper", "CaseResult", "SimulationError",
           "TIMELINE_DETAILS", "MAX_COUNTS_RECORDS"]

#: Timeline detail levels (lab.md §7 ``timeline.jsonl``): one full record per walked tick, one
#: record of counts per step or jump (merged above :data:`MAX_COUNTS_RECORDS`), or none.
TIMELINE_DETAILS = ("full", "counts", "off")

#: Most ``counts`` records one case keeps (memory and file size stay bounded at any scale). When the
#: list reaches it, adjacent pairs are merged and the span a record may cover doubles; a later record
#: falling inside the last record's span is merged into it (:class:`CountsKeeper`).
MAX_COUNTS_RECORDS = 32768


class SimulationError(RuntimeError):
    """The simulation broke its own rules: an internal error (exit code 3), never bad input."""


class Status(Enum):
    """Where a request is in its life (lab.md §3)."""

    WAITING = "waiting"    # arrived (or not yet), not admitted
    PREFILL = "prefill"    # admitted, computing its prompt
    DECODE = "decode"      # prompt done, emitting output tokens
    DONE = "ok"            # emitted every output token
    TIMEOUT = "timeout"    # reached its deadline first

    @property
    def ended(self) -> bool:
        return self in (Status.DONE, Status.TIMEOUT)


class CurrentTick:
    """The simulation's current tick, shared with its requests so open token runs can be read."""

    __slots__ = ("now",)

    def __init__(self, now: int = 0) -> None:
        self.now = now


class Request:
    """The simulated life of one request in one case.

    Times are ticks (``None`` until they happen); counts are tokens. Token stamps are stored as
    runs of consecutive ticks (``token_runs``: ``[(first stamp, count), ...]``); ``token_times``
    expands them into the list of stamps, strictly increasing, e.g. runs ``[(2, 3), (14, 1)]`` are
    token times ``[2, 3, 4, 14]``. While a request decodes, its last run is *open*: it holds every
    stamp from its start up to the simulation's current tick.
    """

    __slots__ = ("spec", "index", "status", "admitted_at", "hit_tokens", "prefilled_tokens",
                 "prefill_done_at", "done_at", "num_preemptions", "preempted_at", "_runs", "_num_closed",
                 "_open_from", "_clock", "_seq")

    def __init__(self, spec: RequestSpec, index: int, status: Status = Status.WAITING,
                 admitted_at: int | None = None, hit_tokens: int = 0, prefilled_tokens: int = 0,
                 prefill_done_at: int | None = None, token_times=None, done_at: int | None = None,
                 _clock: CurrentTick | None = None) -> None:
        self.spec = spec
        self.index = index
        self.status = status
        self.admitted_at = admitted_at
        self.hit_tokens = hit_tokens
        self.prefilled_tokens = prefilled_tokens
        self.prefill_done_at = prefill_done_at
        self.done_at = done_at
        # Recompute preemptions (the vLLM engine only; vllm-engine.md §5): how many, and the
        # start tick of each step that preempted it. The lab engine never preempts.
        self.num_preemptions = 0
        self.preempted_at: list | tuple = ()
        self._clock = _clock
        self._open_from: int | None = None
        self._seq: int | None = None   # admission number, set by the simulation
        if token_times:
            self.token_times = token_times
        else:
            self._runs: list[int] = []
            self._num_closed = 0

    @classmethod
    def fresh(cls, spec: RequestSpec, index: int, clock: CurrentTick) -> "Request":
        """``Request(spec, index, _clock=clock)``: a request not yet arrived, built without the
        keyword handling (a simulation builds one per request per case)."""
        request = cls.__new__(cls)
        request.spec, request.index, request.status, request._clock = spec, index, Status.WAITING, clock
        request.admitted_at = request.prefill_done_at = request.done_at = request._open_from = request._seq = None
        request.hit_tokens = request.prefilled_tokens = request.num_preemptions = request._num_closed = 0
        request.preempted_at, request._runs = (), []
        return request

    def __repr__(self) -> str:
        return f"Request({self.name!r}, {self.status.value}, token_runs={self.token_runs})"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens that must be computed: prompt minus cache hit, in tokens."""
        return self.spec.prompt_tokens - self.hit_tokens

    @property
    def prefill_left(self) -> int:
        return self.prefill_tokens - self.prefilled_tokens

    def _open_count(self) -> int:
        # The open run holds stamps _open_from .. now (stamp now was computed in tick now - 1).
        if self._open_from is None:
            return 0
        return max(0, self._clock.now - self._open_from + 1)

    @property
    def num_tokens(self) -> int:
        """Output tokens emitted so far."""
        return self._num_closed + self._open_count()

    @property
    def token_runs(self) -> list[tuple[int, int]]:
        """Token stamps as runs ``(first stamp, count)`` of consecutive ticks, in order."""
        runs = self._runs
        closed = [(runs[i], runs[i + 1]) for i in range(0, len(runs), 2)]
        count = self._open_count()
        return closed + [(self._open_from, count)] if count else closed

    @property
    def flat_token_runs(self) -> list[int]:
        """:attr:`token_runs` flattened, ``[first stamp, count, first stamp, count, ...]``; for an
        ended request (no open run) this is the stored list itself, read it, never change it."""
        count = self._open_count()
        return self._runs + [self._open_from, count] if count else self._runs

    @property
    def token_times(self) -> list[int]:
        """The tick stamp of each emitted output token, strictly increasing (a new list)."""
        runs = self._runs
        if self._open_from is None and runs[1::2].count(1) * 2 == len(runs):   # one token a run (a ms run)
            return list(runs[0::2]) if type(runs) is tuple else runs[0::2]
        return [start + k for start, count in self.token_runs for k in range(count)]

    @token_times.setter
    def token_times(self, times) -> None:
        self._runs: list[int] = []  # flat: start0, count0, start1, count1, ...
        self._num_closed = 0
        self._open_from = None
        for stamp in times:
            self._append_run(stamp, 1)

    def emit(self, first_stamp, count: int = 1) -> None:
        """Record ``count`` output tokens stamped ``first_stamp, first_stamp + 1, ...`` (the vLLM
        engine's way in; the lab engine uses open runs)."""
        self._append_run(first_stamp, count)

    def _append_run(self, start: int, count: int) -> None:
        runs = self._runs
        if runs and runs[-2] + runs[-1] == start:
            runs[-1] += count
        else:
            runs += (start, count)
        self._num_closed += count

    def _close_run(self, last_stamp: int) -> None:
        """Close the open run after the token stamped ``last_stamp`` (nothing if it is empty)."""
        if self._open_from is not None and last_stamp >= self._open_from:
            self._append_run(self._open_from, last_stamp - self._open_from + 1)
        self._open_from = None

    @property
    def first_token_at(self) -> int | None:
        if self._runs:
            return self._runs[0]
        return self._open_from if self._open_count() else None

    @property
    def last_token_at(self) -> int | None:
        if self._open_count():
            return self._clock.now
        return self._runs[-2] + self._runs[-1] - 1 if self._runs else None

    @property
    def succeeded(self) -> bool:
        return self.status is Status.DONE


@dataclass(slots=True)
class TickRecord:
    """What happened in one tick (one line of ``timeline.jsonl``, lab.md §7).

    ``waiting`` and ``active`` are the queue and the active list after admission, i.e. while the
    tick's budget is spent; ``prefilled`` pairs a name with the prompt tokens computed this tick.
    """

    tick: int
    waiting: list[str]
    active: list[str]
    admitted: list[str]
    cache_hits: list[str]
    timeouts: list[str]
    decoded: list[str]
    prefilled: list[tuple[str, int]]
    budget_used: int
    finished: list[str]


@dataclass(slots=True)
class TickCounts:
    """Counts of one walked tick or one jump over ``num_ticks`` steady ticks (timeline ``counts``).

    ``num_waiting``/``num_active`` are taken after admission; ``num_decoded``, ``num_prefill_tokens``
    and ``budget_used`` are totals over the span (tokens, budget units). A merged record (over
    :data:`MAX_COUNTS_RECORDS`) covers ticks ``tick .. tick + num_ticks - 1`` (idle ticks inside it
    included), sums the counts and keeps the largest ``num_waiting`` and ``num_active``.
    """

    tick: int
    num_ticks: int
    num_waiting: int
    num_active: int
    num_admitted: int
    num_cache_hits: int
    num_timeouts: int
    num_decoded: int
    num_prefill_tokens: int
    budget_used: int
    num_finished: int


class CountsKeeper:
    """Builds one case's ``counts`` timeline (:class:`TickCounts` records) while it runs, bounded by
    :data:`MAX_COUNTS_RECORDS`.

    :meth:`add` takes one step's or jump's counts as a plain list in :class:`TickCounts` field
    order (``[tick, num_ticks, num_waiting, ..., num_finished]``: ticks, requests, tokens, budget
    units), cheaper to build than a record; :meth:`records` returns them as :class:`TickCounts`.
    When the list reaches the bound, adjacent pairs merge and the span a row may cover doubles; a
    later row starting inside the last row's span merges into it. A merged row spans from the
    first row's tick to the end of the later one, sums the counts and keeps the largest
    ``num_waiting`` and ``num_active``.
    """

    __slots__ = ("rows", "span")

    def __init__(self) -> None:
        self.rows: list[list[int]] = []
        self.span = 1   # ticks a row may cover; doubles when the list is halved

    def add(self, row: list[int]) -> None:
        """Keep ``row`` (taken over: not copied), merging as the class docstring says."""
        rows = self.rows
        if self.span > 1:
            last = rows[-1]
            if row[0] < last[0] + self.span:   # falls inside the last row's span: merged into it
                last[1] = row[0] + row[1] - last[0]
                if row[2] > last[2]:
                    last[2] = row[2]
                if row[3] > last[3]:
                    last[3] = row[3]
                last[4] += row[4]
                last[5] += row[5]
                last[6] += row[6]
                last[7] += row[7]
                last[8] += row[8]
                last[9] += row[9]
                last[10] += row[10]
                return
        rows.append(row)
        if len(rows) >= MAX_COUNTS_RECORDS:
            self._halve()

    def _halve(self) -> None:
        """Merge adjacent pairs of rows (an even number of them), column by column."""
        columns = list(zip(*self.rows))
        firsts = [column[0::2] for column in columns]
        seconds = [column[1::2] for column in columns]
        merged = [firsts[0],
                  [tick + num_ticks - start for start, tick, num_ticks in zip(firsts[0], seconds[0], seconds[1])],
                  list(map(max, firsts[2], seconds[2])), list(map(max, firsts[3], seconds[3]))]
        merged += [list(map(operator.add, firsts[k], seconds[k])) for k in range(4, 11)]
        self.rows = [list(row) for row in zip(*merged)]
        self.span *= 2

    def records(self) -> list[TickCounts]:
        """The kept rows as :class:`TickCounts`, in tick order."""
        return [TickCounts(*row) for row in self.rows]


@dataclass(slots=True)
class CaseResult:
    """Everything one case produced: requests in workload order and the timeline records.

    ``ticks`` holds one :class:`TickRecord` per walked tick (detail ``full``), one
    :class:`TickCounts` per step or jump (``counts``) or nothing (``off``). ``budget_spent`` is the
    total of budget units used over the run; ``busy_ticks`` counts ticks in which any budget was
    spent (compare.md §2 divides both by the makespan).
    """

    case: Case
    config: EngineConfig
    requests: list[Request]
    ticks: list
    budget_spent: int = 0
    busy_ticks: int = 0
