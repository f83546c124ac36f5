"""The tick engine: one simulated case of one run (lab.md §3).

Each tick ``t`` spends one budget in the order the spec gives: arrivals, deadlines, admission,
decode first, prefill with what is left, retire. Token times are stamped ``t + 1`` (the token
exists at the end of the tick that computed it). The engine never writes files.

Example (the lab's baseline, continuous case)::

    >>> from sched.workload import scenario
    >>> from sched.config import EngineConfig, cases_for
    >>> cfg = EngineConfig()
    >>> result = Simulation(scenario("baseline"), cfg, cases_for(cfg)[1]).run()
    >>> [r.first_token_at for r in result.requests][:2]
    [9, 12]
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import Enum

from .cache import PrefixCache
from .config import Batching, Case, EngineConfig
from .policy import POLICIES
from .workload import RequestSpec

__all__ = ["Status", "Request", "TickRecord", "CaseResult", "Simulation", "SimulationError", "simulate",
           "run_cases"]


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


@dataclass(slots=True, eq=False)
class Request:
    """The simulated life of one request in one case.

    Times are ticks (``None`` until they happen); counts are tokens. ``token_times`` holds the
    tick stamp of each emitted output token, strictly increasing.
    """

    spec: RequestSpec
    index: int
    status: Status = Status.WAITING
    admitted_at: int | None = None
    hit_tokens: int = 0
    prefilled_tokens: int = 0
    prefill_done_at: int | None = None
    token_times: list[int] = field(default_factory=list)
    done_at: int | None = None

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

    @property
    def first_token_at(self) -> int | None:
        return self.token_times[0] if self.token_times else None

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
class CaseResult:
    """Everything one case produced: requests in workload order and one record per walked tick.

    ``budget_spent`` is the total of budget units used over the run; ``busy_ticks`` counts ticks in
    which any budget was spent (compare.md §2 divides both by the makespan).
    """

    case: Case
    config: EngineConfig
    requests: list[Request]
    ticks: list[TickRecord]
    budget_spent: int = 0
    busy_ticks: int = 0


class Simulation:
    """One case of one run, advanced tick by tick with :meth:`step` (lab.md §3).

    ``workload`` is the list of request specs in workload order; all state (queue, cache, clock)
    lives in the instance, so simulations never see each other.
    """

    def __init__(self, workload: list[RequestSpec], config: EngineConfig, case: Case,
                 policy: str = "fcfs") -> None:
        self.config = config
        self.case = case
        self.now = 0
        self.requests = [Request(spec, index) for index, spec in enumerate(workload)]
        self._key = POLICIES[policy]
        self._cache = PrefixCache()
        # Requests not yet arrived, in arrival order (ties by workload order).
        self._arrivals = sorted(self.requests, key=lambda r: (r.spec.arrival, r.index))
        self._next_arrival = 0
        # Unended requests that have arrived, in arrival order: deadlines fall in the same order,
        # since every request has the same timeout.
        self._arrived: list[Request] = []
        self._deadline_cursor = 0
        self._waiting: list[tuple[tuple, Request]] = []   # heap by policy key, lazily pruned
        self._num_waiting = 0
        self.active: list[Request] = []
        self._num_ended = 0
        self.ticks: list[TickRecord] = []
        self.budget_spent = 0
        self.busy_ticks = 0

    @property
    def finished(self) -> bool:
        return self._num_ended == len(self.requests)

    def step(self) -> TickRecord:
        """Simulate tick ``self.now`` and advance the clock; returns what happened."""
        t = self.now
        config, case = self.config, self.case
        remaining = config.budget

        # 1. Arrivals: everything with arrival <= t joins the waiting queue.
        while self._next_arrival < len(self._arrivals) and self._arrivals[self._next_arrival].spec.arrival <= t:
            request = self._arrivals[self._next_arrival]
            self._next_arrival += 1
            self._arrived.append(request)
            heapq.heappush(self._waiting, (self._key(request.spec, request.index, config.decode_cost), request))
            self._num_waiting += 1

        # 2. Deadlines, before admission so a timed-out request frees its slot now.
        timeouts = self._expire(t)

        # 3. Admission.
        admitted, hits = self._admit(t)

        # 4. Decode first: requests whose prefill completed in an earlier tick, in active order.
        decoded, finished = [], []
        for request in self.active:
            if request.status is not Status.DECODE:
                continue
            if remaining < config.decode_cost:
                continue  # skipped for lack of budget: emits nothing this tick
            remaining -= config.decode_cost
            request.token_times.append(t + 1)  # stamped t + 1
            decoded.append(request.name)
            if len(request.token_times) == request.spec.output_tokens:
                self._end(request, Status.DONE, t + 1)
                finished.append(request.name)

        # 5. Prefill with what is left, in active order, each capped by the chunk size if any.
        prefilled = []
        for request in self.active:
            if request.status is not Status.PREFILL or remaining == 0:
                continue
            tokens = min(request.prefill_left, remaining)
            if case.chunk_tokens is not None:
                tokens = min(tokens, case.chunk_tokens)
            remaining -= tokens
            request.prefilled_tokens += tokens
            prefilled.append((request.name, tokens))
            if request.prefill_left == 0:
                # Decodes from t + 1 (first token stamped t + 2 at the earliest). The cache entry
                # is inserted now but only read by admissions, which for this tick already ran:
                # requests admitted from t + 1 on hit.
                request.status = Status.DECODE
                request.prefill_done_at = t
                if case.apc:
                    self._cache.insert(request.spec)

        record = TickRecord(
            tick=t,
            waiting=[r.name for _, r in sorted(self._waiting, key=lambda item: item[0])
                     if r.status is Status.WAITING],
            active=[r.name for r in self.active],
            admitted=admitted, cache_hits=hits, timeouts=timeouts, decoded=decoded,
            prefilled=prefilled, budget_used=config.budget - remaining, finished=finished,
        )

        if remaining < config.budget:
            self.budget_spent += config.budget - remaining
            self.busy_ticks += 1

        # 6. Retire: finished requests leave the active list.
        if finished:
            self.active = [r for r in self.active if not r.status.ended]
        self.now = t + 1
        return record

    def run(self, progress=None) -> CaseResult:
        """Step until every request has ended; idle ticks (nothing waiting or active) are skipped.

        ``progress``, if given, is called after every tick as ``progress(case_name, now, num_ended,
        num_requests)``: a display hook that must not change the simulation. Raises
        :class:`SimulationError` as soon as a tick makes no progress (nothing admitted, no budget
        spent, nothing timed out): under a valid configuration that cannot happen.
        """
        while not self.finished:
            if not self.active and not self._num_waiting:
                # Nothing to do until the next arrival: skipping gives the same results as walking.
                self.now = max(self.now, self._arrivals[self._next_arrival].spec.arrival)
            record = self.step()
            # A walked tick always admits, spends budget or times a request out (proof in the README,
            # "输入校验与退出码"); one that does none of these would repeat forever.
            if not (record.admitted or record.budget_used or record.timeouts):
                raise SimulationError(f"{self.case.name}: tick {record.tick}: no request can make progress "
                                      f"({len(self.active)} active, {self._num_waiting} waiting)")
            self.ticks.append(record)
            if progress is not None:
                progress(self.case.name, self.now, self._num_ended, len(self.requests))
        return CaseResult(self.case, self.config, self.requests, self.ticks, self.budget_spent, self.busy_ticks)

    # --- helpers -------------------------------------------------------------------------------

    def _expire(self, t: int) -> list[str]:
        timeout = self.config.timeout_ticks
        if timeout is None:
            return []
        expired = []
        while self._deadline_cursor < len(self._arrived):
            request = self._arrived[self._deadline_cursor]
            if request.spec.arrival + timeout > t:
                break
            self._deadline_cursor += 1
            if request.status.ended:
                continue
            # Ends at its deadline with what it already emitted; nothing is invented for it.
            if request.status is Status.WAITING:
                self._num_waiting -= 1
            self._end(request, Status.TIMEOUT, request.spec.arrival + timeout)
            expired.append(request.name)
        if expired:
            self.active = [r for r in self.active if not r.status.ended]
        return expired

    def _admit(self, t: int) -> tuple[list[str], list[str]]:
        if self.case.batching is Batching.STATIC and self.active:
            return [], []  # static: a new batch only once the whole previous batch ended
        admitted, hits = [], []
        while self._waiting and len(self.active) < self.config.max_active:
            _, request = heapq.heappop(self._waiting)
            if request.status is not Status.WAITING:
                continue  # timed out while queued
            self._num_waiting -= 1
            request.status = Status.PREFILL
            request.admitted_at = t
            if self.case.apc:
                request.hit_tokens = self._cache.hit_tokens(request.spec)
                if request.hit_tokens:
                    hits.append(request.name)
            self.active.append(request)
            admitted.append(request.name)
        return admitted, hits

    def _end(self, request: Request, status: Status, at: int) -> None:
        request.status = status
        request.done_at = at
        self._num_ended += 1


def simulate(workload: list[RequestSpec], config: EngineConfig, case: Case,
             policy: str = "fcfs", progress=None) -> CaseResult:
    """Run one case to the end; see :class:`Simulation` (``progress``: see :meth:`Simulation.run`)."""
    return Simulation(workload, config, case, policy).run(progress)


def run_cases(workload: list[RequestSpec], config: EngineConfig, cases, policy: str = "fcfs",
              progress=None) -> list[CaseResult]:
    """Simulate every case on the same workload, each from a cold start (lab.md §4)."""
    return [simulate(workload, config, case, policy, progress) for case in cases]
