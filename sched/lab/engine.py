"""The tick engine: one simulated case of one run (lab.md §3).

Each tick ``t`` spends one budget in the order the spec gives: arrivals, deadlines, admission,
decode first, prefill with what is left, retire. Token times are stamped ``t + 1`` (the token
exists at the end of the tick that computed it). The engine never writes files.

The cost follows events, not ticks × requests (lab.md §3 last paragraph: skipping must give the
same results as walking):

- idle ticks (nothing waiting or active) are skipped;
- a decoding request holds an *open run* of consecutive token stamps that grows by itself while
  every tick decodes it, so a tick in which every decoding request can pay costs O(1) per event
  (arrival, admission, prefill chunk, completion, deadline), not O(active requests);
- *steady decoding* (every active request decoding, the budget enough for all, no admission
  possible, no arrival, completion or deadline due) is advanced in one jump to the next event, and
  *steady prefill* (the same chunks as the tick before, nothing else happening) without the full
  step (:mod:`sched.lab.steady`);
- the full step is kept for every other tick: admissions, arrivals, deadlines, a prompt
  completing, a decode tick whose budget cannot pay every decoding request (the per-tick walk
  over the active list, where order matters).

``Simulation(..., per_tick=True)`` forces one :meth:`Simulation.step` per tick (no jumps); tests
compare both walks with the lab core's literal engine on golden and randomised workloads.

Example (the lab's baseline, continuous case)::

    >>> from sched.workload.specs import scenario
    >>> from sched.core.config import EngineConfig, cases_for
    >>> cfg = EngineConfig()
    >>> result = Simulation(scenario("baseline"), cfg, cases_for(cfg)[1]).run()
    >>> [r.first_token_at for r in result.requests][:2]
    [9, 12]
"""

from __future__ import annotations

import gc

from .cache import PrefixCache
from ..core.config import Case, EngineConfig
from .decoding import DecodingSide
from .policy import POLICIES
from ..core.records import TIMELINE_DETAILS, CaseResult, CountsKeeper, Request, SimulationError, Status, TickRecord, CurrentTick
from .steady import SteadyTicks
from .waiting import WaitingSide
from ..workload.specs import RequestSpec

_DECODE = Status.DECODE

__all__ = ["Simulation", "simulate", "run_cases"]


class Simulation(WaitingSide, DecodingSide):
    """One case of one run, advanced with :meth:`step` (one tick) and :meth:`run` (lab.md §3).

    The tick's parts are three pieces: the waiting side (arrivals, deadlines, admission:
    :class:`sched.lab.waiting.WaitingSide`), the decoding side (open runs, completions, the in-order
    decode walk: :class:`sched.lab.decoding.DecodingSide`), and here the tick itself (prefill with
    what is left, the record) and the loop over ticks.

    ``workload`` is the list of request specs in workload order; all state (queue, cache, clock)
    lives in the instance, so simulations never see each other. ``timeline`` is one of
    :data:`TIMELINE_DETAILS`; ``per_tick=True`` walks every non-idle tick with :meth:`step`
    (the reference walk) instead of jumping over steady decoding.
    """

    def __init__(self, workload: list[RequestSpec], config: EngineConfig, case: Case,
                 policy: str = "fcfs", *, timeline: str = "full", per_tick: bool = False) -> None:
        if timeline not in TIMELINE_DETAILS:
            raise ValueError(f"timeline detail must be one of {', '.join(TIMELINE_DETAILS)}, got {timeline!r}")
        self.config = config
        self.case = case
        self.timeline = timeline
        self.per_tick = per_tick
        self._clock = CurrentTick()
        fresh, clock = Request.fresh, self._clock
        self.requests = [fresh(spec, index, clock) for index, spec in enumerate(workload)]
        self._key = POLICIES[policy]
        self._cache = PrefixCache()
        # Requests not yet arrived, in arrival order (ties by workload order).
        self._arrivals = sorted(self.requests, key=lambda r: (r.spec.arrival, r.index))
        self._arrival_ticks = [r.spec.arrival for r in self._arrivals]
        self._next_arrival = 0
        # Unended requests that have arrived, in arrival order: deadlines fall in the same order,
        # since every request has the same timeout.
        self._arrived: list[Request] = []
        self._deadline_cursor = 0
        self._waiting: list[tuple[tuple, Request]] = []   # heap by policy key, lazily pruned
        self._num_waiting = 0
        # The active list, in admission order, keyed by admission number (``Request._seq``; O(1)
        # removal); the requests still in prefill and the decoding ones without an open run, in
        # the same order.
        self._num_admitted = 0
        self._active: dict[int, Request] = {}
        self._prefilling: dict[int, Request] = {}
        self._stalled: dict[int, Request] = {}
        # (stamp of the last token, admission number, open-run start, request) of each open run.
        self._completions: list[tuple[int, int, int, Request]] = []
        self._num_ended = 0
        self.ticks: list = []   # full: a TickRecord per walked tick; counts: filled at the end of run()
        self._counts = CountsKeeper() if timeline == "counts" else None
        self.budget_spent = 0
        self.busy_ticks = 0

    @property
    def now(self) -> int:
        """The next tick to simulate."""
        return self._clock.now

    @now.setter
    def now(self, tick: int) -> None:
        self._clock.now = tick

    @property
    def active(self) -> list[Request]:
        """The active list (admitted, not ended) in admission order."""
        return list(self._active.values())

    @property
    def finished(self) -> bool:
        return self._num_ended == len(self.requests)

    def step(self) -> None:
        """Simulate tick ``self.now``, record it and advance the clock by one.

        The tick's record is appended to :attr:`ticks` (a :class:`TickRecord`, detail ``full``) or
        kept as counts (detail ``counts``: :attr:`ticks` gets its :class:`TickCounts` records at
        the end of :meth:`run`); detail ``off`` records nothing.
        """
        clock = self._clock
        t = clock.now
        config = self.config
        full = self.timeline == "full"
        remaining = config.budget
        decode_cost = config.decode_cost
        active = self._active
        prefilling = self._prefilling

        # 1. Arrivals: everything with arrival <= t joins the waiting queue.
        if self._next_arrival < len(self._arrival_ticks) and self._arrival_ticks[self._next_arrival] <= t:
            self._arrive(t)

        # 2. Deadlines, before admission so a timed-out request frees its slot now.
        timeouts = self._expire(t) if config.timeout_ticks is not None else ()

        # 3. Admission.
        admitted, hits = self._admit(t) if self._num_waiting else ((), ())
        active_names = [r.name for r in active.values()] if full else None

        # 4. Decode first: requests whose prefill completed in an earlier tick, in active order.
        num_decoding = len(active) - len(prefilling)
        if num_decoding * decode_cost <= remaining:
            # Every decoding request can pay: open runs grow by themselves (stamped t + 1).
            decoded = [r.name for r in active.values() if r.status is _DECODE] if full else None
            remaining -= num_decoding * decode_cost
            if self._stalled:
                for seq, request in self._stalled.items():
                    self._open_run(request, seq, t + 1)
                self._stalled.clear()
            completions = self._completions
            finished = self._complete(t + 1) if completions and completions[0][0] <= t + 1 else []
        else:
            decoded, finished = self._decode_in_order(t, remaining)
            remaining -= len(decoded) * decode_cost

        # 5. Prefill with what is left, in active order, each capped by the chunk size if any.
        prefilled, num_prefill_tokens = [], 0
        if remaining and prefilling:
            completed = []
            cap = self.case.chunk_tokens
            for seq, request in prefilling.items():
                spec = request.spec
                left = spec.prefix_tokens + spec.suffix_tokens - request.hit_tokens - request.prefilled_tokens
                tokens = left if left < remaining else remaining
                if cap is not None and cap < tokens:
                    tokens = cap
                remaining -= tokens
                num_prefill_tokens += tokens
                request.prefilled_tokens += tokens
                if full:
                    prefilled.append((request.name, tokens))
                if tokens == left:
                    # Decodes from t + 1 (first token stamped t + 2 at the earliest). The cache
                    # entry is inserted now but only read by admissions, which for this tick
                    # already ran: requests admitted from t + 1 on hit.
                    request.status = _DECODE
                    request.prefill_done_at = t
                    completed.append(seq)
                    self._open_run(request, seq, t + 2)
                    if self.case.apc:
                        self._cache.insert(spec)
                if remaining == 0:
                    break
            for seq in completed:
                del prefilling[seq]

        used = config.budget - remaining
        if used:
            self.budget_spent += used
            self.busy_ticks += 1
        if full:
            self.ticks.append(TickRecord(
                tick=t, waiting=self._waiting_names(), active=active_names, admitted=list(admitted),
                cache_hits=list(hits), timeouts=list(timeouts), decoded=decoded, prefilled=prefilled,
                budget_used=used, finished=list(finished)))
        elif self._counts is not None:
            self._counts.add([t, 1, self._num_waiting, len(active) + len(finished), len(admitted), len(hits),
                              len(timeouts), (used - num_prefill_tokens) // decode_cost, num_prefill_tokens, used,
                              len(finished)])
        # 6. Retire: finished requests already left the active list in _complete/_decode_in_order.
        clock.now = t + 1

    def run(self, progress=None) -> CaseResult:
        """Advance until every request has ended; returns the case's :class:`CaseResult`.

        Idle ticks (nothing waiting or active) are skipped; unless ``per_tick``, steady decoding
        is advanced in one jump (see the module docstring). Both give the same results.
        ``progress``, if given, is called after every step (a walked tick or a jump followed by
        its event tick) as ``progress(case_name, now, num_ended, num_requests)``: a display hook
        that must not change the simulation. Raises :class:`SimulationError` as soon as a walked
        tick makes no progress (nothing admitted, no budget spent, nothing timed out): under a
        valid configuration that cannot happen.
        """
        total = len(self.requests)
        step, jump = self.step, (None if self.per_tick else SteadyTicks(self).advance)
        clock, arrival_ticks, name = self._clock, self._arrival_ticks, self.case.name
        # The run allocates many long-lived objects and no reference cycles: pausing the cyclic
        # garbage collector keeps it from rescanning them all again and again (time stays linear).
        collecting = gc.isenabled()
        gc.disable()
        try:
            while self._num_ended < total:
                if not self._active and not self._num_waiting:
                    # Nothing to do until the next arrival: skipping gives the same results as walking.
                    arrival = arrival_ticks[self._next_arrival]
                    if arrival > clock.now:
                        clock.now = arrival
                elif jump is not None:
                    jump()
                    if not self._active and not self._num_waiting:
                        # The jump ended every active request: idle (or finished) from here.
                        if progress is not None:
                            progress(name, clock.now, self._num_ended, total)
                        continue
                spent, num_admitted, num_ended = self.budget_spent, self._num_admitted, self._num_ended
                step()
                # A walked tick always admits, spends budget or times a request out (proof in the
                # README, "输入校验与退出码"); one that does none of these would repeat forever.
                if (self.budget_spent == spent and self._num_admitted == num_admitted
                        and self._num_ended == num_ended):
                    raise SimulationError(f"{name}: tick {clock.now - 1}: no request can make progress "
                                          f"({len(self._active)} active, {self._num_waiting} waiting)")
                if progress is not None:
                    progress(name, clock.now, self._num_ended, total)
        finally:
            if collecting:
                gc.enable()
        if self._counts is not None:
            self.ticks = self._counts.records()
        return CaseResult(self.case, self.config, self.requests, self.ticks, self.budget_spent, self.busy_ticks)


def simulate(workload: list[RequestSpec], config: EngineConfig, case: Case, policy: str = "fcfs",
             progress=None, **options) -> CaseResult:
    """Run one case to the end; see :class:`Simulation` (``options``: ``timeline``, ``per_tick``)
    and :meth:`Simulation.run` (``progress``)."""
    return Simulation(workload, config, case, policy, **options).run(progress)


def run_cases(workload: list[RequestSpec], config: EngineConfig, cases, policy: str = "fcfs",
              progress=None, **options) -> list[CaseResult]:
    """Simulate every case on the same workload, each from a cold start (lab.md §4)."""
    return [simulate(workload, config, case, policy, progress, **options) for case in cases]
