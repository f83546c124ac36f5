"""The lab core's literal per-tick engine (lab.md §3), kept as the reference the fast engine is
proven against (tests/test_lab_event_engine.py). Every tick is walked and every token appended, exactly
as the spec reads; it is slow on purpose and never used by the lab itself.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import Enum

from sched.lab.cache import PrefixCache
from sched.core.config import Batching, Case, EngineConfig
from sched.lab.policy import POLICIES
from sched.core.records import CaseResult, Request, Status, TickRecord
from sched.workload.specs import RequestSpec

__all__ = ["ReferenceSimulation"]


class ReferenceSimulation:
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
        self._tokens = {request.index: [] for request in self.requests}  # plain lists, as in the lab core
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
            self._tokens[request.index].append(t + 1)  # stamped t + 1
            decoded.append(request.name)
            if len(self._tokens[request.index]) == request.spec.output_tokens:
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

    def run(self) -> CaseResult:
        """Step until every request has ended; idle ticks (nothing waiting or active) are skipped."""
        while not self.finished:
            if not self.active and not self._num_waiting:
                # Nothing to do until the next arrival: skipping gives the same results as walking.
                self.now = max(self.now, self._arrivals[self._next_arrival].spec.arrival)
            self.ticks.append(self.step())
        for request in self.requests:
            request.token_times = self._tokens[request.index]
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
