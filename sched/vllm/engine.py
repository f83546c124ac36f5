"""The vLLM engine: one step of vLLM 0.33.0's scheduler at a time (vllm-engine.md §2).

Each step at time ``T``: arrivals join the waiting queue, expired deadlines abort their requests
(freeing their KV blocks at once), then **one pass over the running list** gives every running
request the tokens it still needs (a decode is 1 token), preempting the policy's victim when KV
blocks run out, then — only if nothing was preempted — the **waiting queue** is admitted while
budget, slots and KV room for the whole sequence remain. Every scheduled request whose computed
count reaches its length samples one output token, stamped at the end of the step. The engine
never writes files; it hands the shared records of :mod:`sched.core.records` (:class:`Request`,
:class:`CaseResult`) to metrics, artifacts, invariants and pictures.

Time. By default every step lasts one tick: step ``t`` starts at tick ``t`` and its tokens are
stamped ``t + 1`` (as in the lab). ``step_time(num_prompt_tokens, num_decode_tokens) -> duration``
(or, for a ``step_time`` marked ``reads_kv_blocks = True``, ``step_time(num_prompt_tokens,
num_decode_tokens, kv_blocks)`` with the KV blocks held by running requests during the step, after
its allocations: the context the step's attention reads, in blocks; called once per step, in order)
makes the clock continuous (vllm-engine.md §6): step ``k`` starts at ``T_k``, requests with
``arrival <= T_k`` join before it is scheduled, its tokens are stamped ``T_k + duration``, the next
step starts there, and an idle engine jumps to the next arrival. Times stay exact for ``int``,
``Fraction`` and ``float`` durations: the clock only ever adds durations, in step order.

Prompt versus decode tokens of a step (the two arguments of ``step_time``): a request scheduled
exactly **one** token, which has sampled at least one output token and whose computed count before
the step is ``num_tokens − 1`` (prompt and every output token but the newest computed), is *decoding*:
that token is a decode token. Every other scheduled token — prefill chunks, and the recompute of
prompt + generated tokens after a preemption — is a prompt token.

Speed: decoding requests are open runs and decode-only steps are jumped over
(:mod:`sched.vllm.fastpath`); a step whose order matters is walked (:func:`sched.vllm.walk.walk`).
With prefix caching only requests whose output blocks nobody else can hit run open, and a head of
queue that failed the admission gate is not looked up again until free blocks grow or the cache
changes (:meth:`VllmSimulation.blocked_head`). Timeline ``full`` and ``per_step=True`` always walk;
the tests compare both ways on the oracle corpus and on random workloads.
"""

from __future__ import annotations

import gc

from .kv_cache import make_kv_cache
from ..core.ended_requests import EndedRequests
from ..core.records import TIMELINE_DETAILS, CaseResult, Request, SimulationError, Status
from ..core.step_stamps import restamp
from .config import VllmKnobs
from .fastpath import DecodeRuns
from .walk import walk
from .queue import Arrivals, Seq, WaitingQueue, running_order
from .client_gate import GatedArrivals
from .waiting_side import WaitingSide, never_blocked
from .records import StepCounts, StepLog, StepRecord

__all__ = ["VllmSimulation", "StepRecord", "StepCounts", "simulate_vllm", "FAST_PATHS"]

#: The one switch of every fast path (read when a simulation is made). ``False`` gives the literal
#: reference the differential tests compare against: every step walked in running order (no open
#: runs, no jumps), the admission gate's prefix lookup made at every step (no memo of a blocked
#: head), and with prefix caching every full block interned from its tokens (no private ids, no
#: workload blocks interned together; :class:`sched.vllm.kv_cache.LiteralPrefixKV`). The results
#: are the same either way; only the time taken differs.
FAST_PATHS = True

#: Whether a run packs its ended requests into columns (:class:`sched.core.ended_requests.EndedRequests`,
#: read when a simulation is made; only a sync run without a step time does). ``False`` keeps every
#: record whole in a list from the start, as tests compare: the records read back are equal either way.
PACK_ENDED_REQUESTS = True


class VllmSimulation(WaitingSide):
    """One run under vLLM's rules (vllm-engine.md §2–3), advanced by :meth:`step` and :meth:`run`.

    ``workload``: request specs in workload order; ``knobs``: :class:`VllmKnobs`; ``timeline``:
    ``full`` (one :class:`StepRecord` per step), ``counts`` (:class:`StepCounts` per step or jump,
    merged above 32,768 records) or ``off``; ``step_time``: ``None`` (every step lasts 1 tick) or
    ``f(num_prompt_tokens, num_decode_tokens) -> duration > 0``, a pure function of its arguments
    (a jump asks it once for its identical steps), or, marked ``f.reads_kv_blocks = True``,
    ``f(num_prompt_tokens, num_decode_tokens, kv_blocks)`` asked once for every step; ``per_step``: walk every step.
    ``running`` is the running list in order (a dict used as an ordered set), ``waiting`` the queue.
    The caller checks that every request can fit (:func:`sched.vllm.config.check_fits`); a run that
    stops making progress raises :class:`SimulationError`.
    """

    #: Whether this class follows vLLM's async scheduling (:mod:`sched.vllm.async_step`).
    ASYNC = False

    def __init__(self, workload, knobs: VllmKnobs, *, timeline: str = "full", step_time=None,
                 per_step: bool = False, max_concurrency: int | None = None) -> None:
        if timeline not in TIMELINE_DETAILS:
            raise ValueError(f"timeline detail must be one of {', '.join(TIMELINE_DETAILS)}, got {timeline!r}")
        if knobs.async_scheduling and not self.ASYNC:
            raise ValueError("async scheduling runs in sched.vllm.async_step (make_simulation picks it)")
        self.knobs, self.case, self.timeline, self.step_time = knobs, knobs.case(), timeline, step_time
        # A step time marked ``reads_kv_blocks`` also receives the KV blocks held during the step.
        self.reads_kv = bool(getattr(step_time, "reads_kv_blocks", False))
        fast = FAST_PATHS
        self.kv = make_kv_cache(knobs.gpu_blocks_for(workload), knobs.block_size, knobs.enable_prefix_caching,
                                literal=not fast)
        # The scheduler's view of a request (Seq) and its record live from its arrival until it ends,
        # held only by the queues; an ended request is packed into columns (EndedRequests): memory
        # follows what is running or waiting, not the whole workload. Records stay whole (made at the
        # start, in a list) when the run restamps them at its end (a step time) or when async
        # scheduling may still touch an ended request. A benchmark client's --max-concurrency holds
        # requests back until one ends (client_gate).
        packed = PACK_ENDED_REQUESTS and step_time is None and not self.ASYNC
        self._ended = EndedRequests(workload) if packed else None
        self.requests = self._ended if packed else [Request(spec, index) for index, spec in enumerate(workload)]
        pending, make = (workload, Request) if packed else (self.requests, None)
        if self.kv.caching:
            self.kv.note_prompts(workload)   # which requests' output blocks nobody else can hit
        starts = self.kv.private_starts if self.kv.caching else None
        self.arrivals = (Arrivals(pending, knobs.timeout_ticks, self.kv.new_table, make, starts)
                         if max_concurrency is None else
                         GatedArrivals(pending, knobs.timeout_ticks, max_concurrency, self.kv.new_table, make, starts))
        self._gated = max_concurrency is not None
        self.num_requests = len(workload)
        self._priority = knobs.policy == "priority"
        self.waiting = WaitingQueue(self._priority)
        self.running: dict[Seq, None] = {}
        walk_only = per_step or timeline == "full" or not fast
        self.runs = None if walk_only else DecodeRuns(self)
        if not fast:
            self.blocked_head = never_blocked   # the literal gate: a prefix lookup every time
        self.now = 0                              # start time of the next step
        self.num_steps = 0                        # steps simulated
        self.stamp_times: list | None = None if step_time is None else [None]   # step ordinal + 1 -> end
        self._num_ended = 0
        self.log = StepLog(timeline)
        self.budget_spent = 0
        self.busy_steps = 0
        self._blocked = None                      # (head, blocks it needed, cache epoch) of a failed admission

    @property
    def finished(self) -> bool:
        return self._num_ended == self.num_requests

    def ordinal(self) -> int:
        """The next step's ordinal: with unit steps its start tick (its tokens stamped tick + 1)."""
        return self.now if self.stamp_times is None else self.num_steps

    def duration(self, num_prompt: int, num_decode: int):
        """The length of the step starting now (1 tick, or ``step_time``), its end time kept."""
        if self.stamp_times is None:
            return 1
        if self.reads_kv:
            duration = self.step_time(num_prompt, num_decode, self.kv.num_used)
        else:
            duration = self.step_time(num_prompt, num_decode)
        if not duration > 0:
            raise ValueError(f"step_time({num_prompt}, {num_decode}) gave {duration!r}: a step must last > 0")
        self.stamp_times.append(self.now + duration)
        return duration

    # --- one step (vllm-engine.md §2) -------------------------------------------------------------

    def step(self):
        """Simulate one step starting at ``self.now``; returns its new record, if any."""
        t, knobs = self.now, self.knobs
        ordinal = self.ordinal()
        # 1. Arrivals, then deadlines (an aborted request frees its blocks before scheduling).
        upcoming = self.arrivals.upcoming
        if upcoming is not None and upcoming <= t:
            self.arrive(t)
        timeouts = self._expire(t, ordinal) if knobs.timeout_ticks is not None else []
        # 2. The chunk cap binds only while more than one request is running or waiting.
        cap = knobs.long_prefill_token_threshold if len(self.running) + self.waiting.size > 1 else 0
        if self.runs is not None and self.runs.fits(cap, ordinal):
            return self.runs.easy_step(t, ordinal, cap, timeouts)
        return walk(self, t, ordinal, cap, timeouts)

    def execute(self, scheduled, ordinal, end, closed=()) -> list:
        """Step 5 for the requests in ``scheduled``: compute, sample (stamped ``end``), retire.
        ``closed``: open runs that finished in the step, closed but not yet freed; all are freed
        in running order."""
        finished = []
        for seq, n in scheduled.items():
            seq.computed += n
            if seq.computed == seq.num_tokens:
                seq.generated += 1
                seq.num_tokens += 1
                seq.rec.emit(ordinal + 1)
                if seq.generated == seq.output:
                    finished.append(seq)
        if closed:
            if finished or len(closed) > 1:
                finished = running_order([*closed, *finished], self.running)
            else:
                finished = list(closed)
        for seq in finished:
            self.kv.free(seq)
            del self.running[seq]
            if self.runs is not None:
                self.runs.others.pop(seq, None)
            self.end(seq, Status.DONE, end)
        return finished

    def end_step(self, t, ordinal, duration, used, num_decode, kv_used, scheduled, preempted, admitted, hits,
                 finished, timeouts):
        """Advance the clock and log the step; returns its new record, if any."""
        if used:
            self.budget_spent += used
            self.busy_steps += 1
        self.now = t + duration
        self.num_steps += 1
        return self.log.add_step(ordinal, t, duration, scheduled, used - num_decode, num_decode, preempted, admitted,
                                 hits, finished, timeouts, kv_used, len(self.running) + len(finished),
                                 self.waiting.size)

    # --- the loop ------------------------------------------------------------------------------

    def run(self, progress=None) -> CaseResult:
        """Advance until every request has ended; returns the run's :class:`CaseResult` (one case,
        ``vllm``). ``progress(case, now, num_ended, num_requests)`` is called after every step."""
        collecting = gc.isenabled()
        gc.disable()
        kv, total, runs, arrivals = self.kv, self.num_requests, self.runs, self.arrivals
        timed = self.knobs.timeout_ticks is not None
        try:
            while self._num_ended < total:
                if not self.running and not self.waiting.size:
                    # Idle: jump to the next arrival (nothing happens in between).
                    self.now = max(self.now, arrivals.upcoming)
                elif runs is not None:
                    if arrivals.upcoming is not None and arrivals.upcoming <= self.now:
                        self.arrive(self.now)
                    if not runs.others and not (timed and arrivals.deadline_due(self.now)):
                        runs.jump()
                spent, ended, free, waiting = self.budget_spent, self._num_ended, kv.num_free, self.waiting.size
                self.step()
                if spent == self.budget_spent and ended == self._num_ended and free == kv.num_free \
                        and waiting == self.waiting.size:
                    raise SimulationError(f"vllm: step at {self.now}: no request can make progress "
                                          f"({len(self.running)} running, {self.waiting.size} waiting)")
                if progress is not None:
                    progress(self.case.name, self.now, self._num_ended, total)
        finally:
            if collecting:
                gc.enable()
        return self._result()

    def _result(self) -> CaseResult:
        """The finished case: token stamps (step ordinal + 1) turned into times when ``step_time``
        was given, then the :class:`~sched.core.records.CaseResult` (shared by the async engine)."""
        if self.stamp_times is not None:
            times = self.stamp_times
            spaced = all(b - a > 1 for a, b in zip(times[1:], times[2:]))   # one entry per step
            for rec in self.requests:
                restamp(rec, times, spaced)
        return CaseResult(self.case, self.knobs, self.requests, self.log.records, self.budget_spent, self.busy_steps)

def simulate_vllm(workload, knobs: VllmKnobs, progress=None, **options) -> CaseResult:
    """Run ``workload`` under ``knobs`` to the end (``options``: ``timeline``, ``step_time``,
    ``per_step``); see :class:`VllmSimulation`."""
    return VllmSimulation(workload, knobs, **options).run(progress)
