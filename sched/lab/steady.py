"""Ticks of the lab engine that need not go through the full step (lab.md §3 last paragraph:
skipping must give the same results as walking; the tests compare every walk with the lab core's
literal engine).

:class:`SteadyTicks` advances a :class:`sched.lab.engine.Simulation` over

- *steady decoding*: every active request decoding, the budget enough for all of them, no
  admission possible, and no arrival, deadline or run end due: one jump (one record) to the next
  event. A tick whose only event is that runs end is simulated here too and the jump goes on;
- *steady prefill*: the same prompt chunks as the tick before, no prompt completing, everything
  else as for steady decoding: tick by tick, without the full step.

Everything else (admissions, arrivals, deadlines, a prompt completing, a decode tick whose budget
cannot pay every decoding request) is left to :meth:`sched.lab.engine.Simulation.step`. The records
written are those the step would write.
"""

from __future__ import annotations

import heapq

from ..core.config import Batching
from ..core.records import Status, TickRecord

__all__ = ["SteadyTicks"]

_DECODE = Status.DECODE


class SteadyTicks:
    """The steady-tick walker of one :class:`sched.lab.engine.Simulation` (reads and advances its
    state: active list, queues, clock, records)."""

    def __init__(self, sim) -> None:
        self.sim = sim

    def advance(self) -> None:
        """Advance the simulation up to the next tick its :meth:`~sched.lab.engine.Simulation.step`
        must walk (possibly not at all), or until nothing is active.

        Steady decoding (nothing in prefill or stalled, the budget pays every active request's
        decode, no admission possible): the ticks before the next event (arrival, deadline, a
        run's last token) are jumped over in one record; a tick whose only event is that runs end
        (or also arrivals that cannot be admitted in it) is simulated here too (:meth:`_quiet_tick`)
        and the jump goes on. With requests in
        prefill: :meth:`_prefill_span`.
        """
        sim = self.sim
        config = sim.config
        budget, cost, max_active = config.budget, config.decode_cost, config.max_active
        static = sim.case.batching is Batching.STATIC
        arrival_ticks, active = sim._arrival_ticks, sim._active
        while True:
            num_active = len(active)
            if not num_active or sim._stalled:
                return
            if sim._num_waiting and not static and num_active < max_active:
                return  # the next step admits
            if sim._prefilling:
                self._prefill_span()
                return
            if num_active * cost > budget:
                return
            last = self._next_last_stamp()
            if last is None:
                return
            t, target = sim._clock.now, last - 1   # the tick that emits the last token of a run
            arrival = arrival_ticks[sim._next_arrival] if sim._next_arrival < len(arrival_ticks) else None
            deadline = self._next_deadline()
            walk = deadline is not None and deadline <= target and (arrival is None or deadline <= arrival)
            if walk:
                target = deadline
            elif arrival is not None and arrival <= target:
                # Arrivals that cannot be admitted in their tick (a static batch is running, or
                # every slot is taken) only join the queue: a quiet tick. Others: step admits.
                walk = not (static or num_active >= max_active)
                target = arrival
            span = target - t
            if span < 0:
                return
            if span:
                used = num_active * cost
                sim.budget_spent += span * used
                sim.busy_ticks += span
                if sim.timeline == "full":
                    # The records a per-tick walk would have written: nothing but every active request decoding.
                    waiting, names = sim._waiting_names(), [r.name for r in active.values()]
                    sim.ticks.extend(TickRecord(tick, list(waiting), list(names), [], [], [], list(names), [], used, [])
                                     for tick in range(t, target))
                elif sim._counts is not None:
                    sim._counts.add([t, span, sim._num_waiting, num_active, 0, 0, 0, span * num_active, 0,
                                     span * used, 0])
                sim._clock.now = target
            if walk:
                return
            self._quiet_tick(target)

    def _next_last_stamp(self) -> int | None:
        """Stamp of the earliest last token of a still open run (stale heap entries dropped)."""
        sim = self.sim
        heap = sim._completions
        while heap:
            last, _, start, request = heap[0]
            if request.status is _DECODE and request._open_from == start:
                return last
            heapq.heappop(heap)
        return None

    def _next_deadline(self) -> int | None:
        """The first deadline not yet passed (never before now), ``None`` without one."""
        sim = self.sim
        timeout = sim.config.timeout_ticks
        if timeout is None or sim._deadline_cursor >= len(sim._arrived):
            return None
        # The first not yet expired arrival's deadline bounds every unended request's.
        return sim._arrived[sim._deadline_cursor].spec.arrival + timeout

    def _prefill_span(self) -> None:
        """Simulate, without the full step, the ticks from now that only repeat the same prefill
        chunks: every decoding request decodes, the budget left is shared out to the requests in
        prefill exactly as in the tick before (none of them completes its prompt), and no arrival,
        deadline, admission or run end happens. Same records as the step; stops before the
        first tick that differs (the caller checked that nothing is stalled and no admission is
        possible)."""
        sim = self.sim
        config, t = sim.config, sim._clock.now
        active, prefilling, cost = sim._active, sim._prefilling, config.decode_cost
        num_decoding = len(active) - len(prefilling)
        remaining = config.budget - num_decoding * cost
        if remaining <= 0:
            return
        cap, chunks, end = sim.case.chunk_tokens, [], None
        for request in prefilling.values():   # step's share-out (§3 step 5), none completing
            spec = request.spec
            left = spec.prefix_tokens + spec.suffix_tokens - request.hit_tokens - request.prefilled_tokens
            tokens = left if left < remaining else remaining
            if cap is not None and cap < tokens:
                tokens = cap
            if tokens == left:
                return   # completes its prompt now: step walks this tick
            chunks.append((request, tokens))
            # The same chunk while more than one chunk is left: ticks t .. t + (left - 1) // tokens - 1.
            last_tick = t + (left - 1) // tokens
            end = last_tick if end is None or last_tick < end else end
            remaining -= tokens
            if not remaining:
                break
        if sim._next_arrival < len(sim._arrival_ticks) and sim._arrival_ticks[sim._next_arrival] < end:
            end = sim._arrival_ticks[sim._next_arrival]
        deadline = self._next_deadline()
        if deadline is not None and deadline < end:
            end = deadline
        last = self._next_last_stamp()
        if last is not None and last - 1 < end:
            end = last - 1   # the tick that emits a run's last token
        span = end - t
        if span <= 0:
            return
        num_prefill_tokens = sum(tokens for _, tokens in chunks)
        used = num_decoding * cost + num_prefill_tokens
        sim.budget_spent += span * used
        sim.busy_ticks += span
        for request, tokens in chunks:
            request.prefilled_tokens += span * tokens
        if sim.timeline == "full":
            waiting, names = sim._waiting_names(), [r.name for r in active.values()]
            decoded = [r.name for r in active.values() if r.status is _DECODE]
            prefilled = [(request.name, tokens) for request, tokens in chunks]
            sim.ticks.extend(TickRecord(tick, list(waiting), list(names), [], [], [], list(decoded), list(prefilled),
                                         used, []) for tick in range(t, end))
        elif sim._counts is not None:
            add, num_waiting, num_active = sim._counts.add, sim._num_waiting, len(active)
            for tick in range(t, end):
                add([tick, 1, num_waiting, num_active, 0, 0, 0, num_decoding, num_prefill_tokens, used, 0])
        sim._clock.now = end

    def _quiet_tick(self, t: int) -> None:
        """The step of a steady tick ``t`` whose only events are arrivals that cannot be admitted
        in it (they join the queue) and runs ending (no deadline, no admission possible, nothing
        in prefill or stalled): every active request decodes, those whose last token is stamped
        ``t + 1`` end; same records, same clock."""
        sim = self.sim
        active = sim._active
        num_active = len(active)
        used = num_active * sim.config.decode_cost
        if sim._next_arrival < len(sim._arrival_ticks) and sim._arrival_ticks[sim._next_arrival] <= t:
            sim._arrive(t)
        if sim.timeline == "full":
            names = [r.name for r in active.values()]
            waiting = sim._waiting_names()
        completions = sim._completions
        finished = sim._complete(t + 1) if completions and completions[0][0] <= t + 1 else []
        sim.budget_spent += used
        sim.busy_ticks += 1
        if sim.timeline == "full":
            sim.ticks.append(TickRecord(tick=t, waiting=waiting, active=names, admitted=[], cache_hits=[],
                                        timeouts=[], decoded=list(names), prefilled=[], budget_used=used,
                                        finished=finished))
        elif sim._counts is not None:
            sim._counts.add([t, 1, sim._num_waiting, num_active, 0, 0, 0, num_active, 0, used, len(finished)])
        sim._clock.now = t + 1
