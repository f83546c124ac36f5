"""The vLLM engine: one step of vLLM 0.33.0's scheduler at a time (vllm-engine.md §2).

Each step at time ``T``: arrivals join the waiting queue, expired deadlines abort their requests
(freeing their KV blocks at once), then **one pass over the running list** gives every running
request the tokens it still needs (a decode is 1 token), preempting the victim of the policy when
KV blocks run out, then — only if nothing was preempted — the **waiting queue** is admitted while
budget, slots and KV room for the whole sequence remain. Every scheduled request whose computed
count reaches its length samples one output token, stamped at the end of the step. The engine
never writes files; it hands the shared records of :mod:`sched.engine` (:class:`Request`,
:class:`CaseResult`) to metrics, artifacts, invariants and pictures.

Time. By default every step lasts one tick: step ``t`` starts at tick ``t`` and its tokens are
stamped ``t + 1`` (as in the lab). ``step_time(num_prompt_tokens, num_decode_tokens) -> duration``
makes the clock continuous (vllm-engine.md §6): step ``k`` starts at ``T_k``, requests with
``arrival <= T_k`` join before it is scheduled, its tokens are stamped ``T_k + duration``, the next
step starts there, and an idle engine jumps to the next arrival. Times stay exact for ``int``,
``Fraction`` and ``float`` durations (the clock only ever adds durations, in step order).

Prompt versus decode tokens of a step (the two arguments of ``step_time``): a request scheduled
exactly **one** token whose computed count is then ``num_tokens − 1`` (its whole prompt and every
output token but the newest are computed) and which has sampled at least one output token is
*decoding*: that token is a decode token. Every other scheduled token — a prefill chunk, and the
recompute of prompt + generated tokens after a preemption — is a prompt token.

Speed (issue item 6): steps in which nothing but decoding happens are advanced in one jump to the
next event (an admission, arrival that can matter, deadline, completion, or the first step whose
new KV blocks would not fit); ``per_step=True`` walks every step (the reference walk; the tests
compare both).
"""

from __future__ import annotations

import gc
import heapq
from collections import deque
from dataclasses import dataclass

from .engine import TIMELINE_DETAILS, CaseResult, Request, SimulationError, Status
from .kv_cache import blocks_for, make_kv_cache
from .vllm_config import VllmKnobs

__all__ = ["VllmSimulation", "StepRecord", "StepCounts", "simulate_vllm"]

MAX_COUNTS_RECORDS = 32768


@dataclass(slots=True)
class StepRecord:
    """One engine step (timeline ``full``, vllm-engine.md §5).

    ``step`` is the step's ordinal (its start tick with unit steps), ``tick`` its start time,
    ``duration`` its length; ``scheduled`` pairs each request with its tokens in vLLM's order
    (running list first, then admissions); ``num_prompt_tokens``/``num_decode_tokens`` split them
    (module docstring); ``kv_blocks_used`` counts the blocks held after scheduling, before finished
    requests free theirs; ``num_running``/``num_waiting`` are taken after scheduling.
    """

    step: int
    tick: object
    duration: object
    scheduled: list
    num_prompt_tokens: int
    num_decode_tokens: int
    preempted: list
    admitted: list
    cache_hits: list
    finished: list
    timeouts: list
    kv_blocks_used: int
    num_running: int
    num_waiting: int


@dataclass(slots=True)
class StepCounts:
    """Counts of one step or one jump over ``num_steps`` decode-only steps (timeline ``counts``).

    Token, admission, preemption, timeout and finish counts are summed over the span;
    ``num_running``, ``num_waiting`` and ``kv_blocks_used`` keep the largest value seen.
    """

    step: int
    tick: object
    num_steps: int
    duration: object
    num_prompt_tokens: int
    num_decode_tokens: int
    num_preempted: int
    num_admitted: int
    num_cache_hits: int
    num_finished: int
    num_timeouts: int
    kv_blocks_used: int
    num_running: int
    num_waiting: int

    def merge(self, later: "StepCounts") -> None:
        """Absorb ``later`` (a record starting after this one)."""
        self.num_steps = later.step + later.num_steps - self.step
        self.duration = later.tick + later.duration - self.tick
        for name in ("num_prompt_tokens", "num_decode_tokens", "num_preempted", "num_admitted",
                     "num_cache_hits", "num_finished", "num_timeouts"):
            setattr(self, name, getattr(self, name) + getattr(later, name))
        for name in ("kv_blocks_used", "num_running", "num_waiting"):
            setattr(self, name, max(getattr(self, name), getattr(later, name)))


class _Seq:
    """The scheduler's view of one request (vLLM's ``Request``): token counts and block table."""

    __slots__ = ("rec", "spec", "index", "key", "prompt", "output", "num_tokens", "computed", "generated",
                 "blocks", "num_cached", "hashes", "state")

    def __init__(self, rec: Request, table) -> None:
        spec = rec.spec
        self.rec, self.spec, self.index = rec, spec, rec.index
        self.key = (spec.priority or 0, spec.arrival, rec.index)   # vLLM: (priority, arrival_time)
        self.prompt, self.output = spec.prompt_tokens, spec.output_tokens
        self.num_tokens = self.prompt     # prompt + output tokens sampled so far
        self.computed = 0                 # tokens whose KV is computed
        self.generated = 0
        self.blocks = table
        self.num_cached = 0
        self.hashes: list[int] = []
        self.state = "future"             # future, waiting, running, ended

    @property
    def name(self) -> str:
        return self.spec.name


class VllmSimulation:
    """One run under vLLM's rules (vllm-engine.md §2–3), advanced by :meth:`step` and :meth:`run`.

    ``workload``: request specs in workload order; ``knobs``: :class:`VllmKnobs`; ``timeline``:
    ``full`` (one :class:`StepRecord` per step), ``counts`` (:class:`StepCounts` per step or jump,
    merged above 32,768 records) or ``off``; ``step_time``: ``None`` (every step lasts 1 tick) or
    ``f(num_prompt_tokens, num_decode_tokens) -> duration > 0``; ``per_step``: walk every step.
    The caller checks that every request can fit (:func:`sched.vllm_config.check_fits`); a run that
    stops making progress raises :class:`SimulationError`.
    """

    def __init__(self, workload, knobs: VllmKnobs, *, timeline: str = "full", step_time=None,
                 per_step: bool = False) -> None:
        if timeline not in TIMELINE_DETAILS:
            raise ValueError(f"timeline detail must be one of {', '.join(TIMELINE_DETAILS)}, got {timeline!r}")
        self.knobs = knobs
        self.case = knobs.case()
        self.timeline = timeline
        self.step_time = step_time
        self.per_step = per_step
        self.kv = make_kv_cache(knobs.gpu_blocks_for(workload), knobs.block_size, knobs.enable_prefix_caching)
        self.requests = [Request(spec, index) for index, spec in enumerate(workload)]
        self._seqs = [_Seq(rec, self.kv.new_table()) for rec in self.requests]
        self._arrivals = sorted(self._seqs, key=lambda s: (s.spec.arrival, s.index))
        self._next_arrival = 0
        self._deadlines: list = []             # arrived, unended requests in arrival order (same timeout)
        self._deadline_cursor = 0
        self._priority = knobs.policy == "priority"
        self._waiting: deque | list = [] if self._priority else deque()
        self.num_waiting = 0
        self.running: list[_Seq] = []
        self.now = 0                           # start time of the next step
        self.num_steps = 0                     # steps simulated (the ordinal of the next step)
        self._stamp_times: list | None = None if step_time is None else [None]
        self._num_ended = 0
        self.records: list = []
        self._counts_span = 1
        self.budget_spent = 0
        self.busy_steps = 0

    @property
    def finished(self) -> bool:
        return self._num_ended == len(self._seqs)

    # --- one step (vllm-engine.md §2) -------------------------------------------------------------

    def step(self):
        """Simulate one step starting at ``self.now``; returns its record (or ``None`` for ``off``)."""
        t, knobs, kv = self.now, self.knobs, self.kv
        ordinal = t if self._stamp_times is None else self.num_steps
        # 1. Arrivals, then deadlines (an aborted request frees its blocks before scheduling).
        self._arrive(t)
        timeouts = self._expire(t) if knobs.timeout_ticks is not None else []
        # 2. The chunk cap binds only while more than one request is running or waiting.
        running = self.running
        cap = knobs.long_prefill_token_threshold if len(running) + self.num_waiting > 1 else 0
        budget = knobs.max_num_batched_tokens
        scheduled: dict[_Seq, int] = {}
        preempted: list[_Seq] = []
        # 3. The running list, in order, while budget remains.
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            n = seq.num_tokens - seq.computed
            if cap and n > cap:
                n = cap
            if n > budget:
                n = budget
            while kv.blocks_to_allocate(seq, seq.computed + n) > kv.num_free:
                # Out of KV blocks: preempt the policy's victim (recompute) and retry.
                if self._priority:
                    victim = max(running, key=lambda s: s.key)
                    where = running.index(victim)
                    del running[where]
                    if where < i:
                        i -= 1
                    if victim in scheduled:   # already scheduled this step: its tokens return
                        budget += scheduled.pop(victim)
                else:
                    victim = running.pop()
                self._preempt(victim, t)
                preempted.append(victim)
                if victim is seq:
                    break
            if seq.state != "running":
                if self._priority:
                    continue      # the pass goes on with the next running request
                break             # fcfs: nothing after the last request is left to preempt
            kv.allocate(seq, seq.computed + n)
            scheduled[seq] = n
            budget -= n
            i += 1
        # 4. The waiting queue, only if nothing was preempted in this step.
        admitted, hits = [], []
        if not preempted:
            bs = knobs.block_size
            while self.num_waiting and budget > 0 and len(running) < knobs.max_num_seqs:
                seq = self._peek()
                hit = kv.find_hit(seq) if kv.caching else []
                computed = len(hit) * bs
                n = seq.num_tokens - computed
                if cap and n > cap:
                    n = cap
                if n > budget:
                    n = budget
                # Admission gate: the whole current sequence, minus the hit, must fit.
                if kv.blocks_to_allocate(seq, seq.num_tokens, hit) > kv.num_free:
                    break
                self._pop()
                kv.allocate(seq, computed + n, hit)
                seq.computed = computed
                seq.state = "running"
                rec = seq.rec
                if rec.admitted_at is None:   # first scheduling: admission and hit are recorded
                    rec.admitted_at = t
                    rec.hit_tokens = computed
                    admitted.append(seq)
                    if computed:
                        hits.append(seq)
                running.append(seq)
                scheduled[seq] = n
                budget -= n
        # 5. Execute: split the tokens, take the step's duration, sample, retire.
        num_decode = 0
        for seq, n in scheduled.items():
            if n == 1 and seq.generated and seq.computed == seq.num_tokens - 1:
                num_decode += 1
        used = knobs.max_num_batched_tokens - budget
        num_prompt = used - num_decode
        kv_used = kv.num_used
        if self._stamp_times is None:
            duration, end = 1, t + 1
            stamp = end
        else:
            duration = self.step_time(num_prompt, num_decode)
            end = t + duration
            self._stamp_times.append(end)
            stamp = ordinal + 1
        finished = []
        for seq, n in scheduled.items():
            seq.computed += n
            if seq.computed == seq.num_tokens:
                seq.generated += 1
                seq.num_tokens += 1
                seq.rec.emit(stamp)
                if seq.generated == seq.output:
                    finished.append(seq)
        if finished:
            for seq in finished:
                kv.free(seq)
                self._end(seq, Status.DONE, end)
            self.running = [s for s in running if s.state == "running"]
        if used:
            self.budget_spent += used
            self.busy_steps += 1
        self.now = end
        self.num_steps += 1
        return self._record(ordinal, t, duration, scheduled, num_prompt, num_decode, preempted, admitted, hits,
                            finished, timeouts, kv_used)

    # --- the loop ------------------------------------------------------------------------------

    def run(self, progress=None) -> CaseResult:
        """Advance until every request has ended; returns the run's :class:`CaseResult` (one case,
        ``vllm``). ``progress(case, now, num_ended, num_requests)`` is called after every step."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            while not self.finished:
                if not self.running and not self.num_waiting:
                    # Idle: jump to the next arrival (nothing happens in between).
                    upcoming = self._arrivals[self._next_arrival].spec.arrival
                    if upcoming > self.now:
                        self.now = upcoming
                before = (self.budget_spent, self._num_ended, self.kv.num_free, self.num_waiting)
                record = self.step()
                if (self.budget_spent, self._num_ended, self.kv.num_free, self.num_waiting) == before \
                        and not (record and getattr(record, "preempted", None)):
                    raise SimulationError(f"vllm: step at {self.now}: no request can make progress "
                                          f"({len(self.running)} running, {self.num_waiting} waiting)")
                self._keep(record)
                if progress is not None:
                    progress(self.case.name, self.now, self._num_ended, len(self._seqs))
        finally:
            if collecting:
                gc.enable()
        self._finish_records()
        return CaseResult(self.case, self.knobs, self.requests, self.records, self.budget_spent, self.busy_steps)

    # --- helpers -------------------------------------------------------------------------------

    def _arrive(self, t) -> None:
        arrivals = self._arrivals
        while self._next_arrival < len(arrivals) and arrivals[self._next_arrival].spec.arrival <= t:
            seq = arrivals[self._next_arrival]
            self._next_arrival += 1
            seq.state = "waiting"
            self._deadlines.append(seq)
            if self._priority:
                heapq.heappush(self._waiting, (seq.key, seq))
            else:
                self._waiting.append(seq)
            self.num_waiting += 1

    def _peek(self) -> _Seq:
        waiting = self._waiting
        if self._priority:
            while waiting[0][1].state != "waiting":
                heapq.heappop(waiting)
            return waiting[0][1]
        while waiting[0].state != "waiting":
            waiting.popleft()
        return waiting[0]

    def _pop(self) -> None:
        if self._priority:
            heapq.heappop(self._waiting)
        else:
            self._waiting.popleft()
        self.num_waiting -= 1

    def _preempt(self, seq: _Seq, t) -> None:
        """Recompute preemption: free the blocks, forget the computed tokens, back to the queue
        (fcfs: its front; priority: its place by key)."""
        self.kv.free(seq)
        seq.computed = 0
        seq.state = "waiting"
        rec = seq.rec
        rec.num_preemptions += 1
        if not rec.preempted_at:
            rec.preempted_at = []
        rec.preempted_at.append(t)
        if self._priority:
            heapq.heappush(self._waiting, (seq.key, seq))
        else:
            self._waiting.appendleft(seq)
        self.num_waiting += 1

    def _expire(self, t) -> list:
        timeout, expired = self.knobs.timeout_ticks, []
        while self._deadline_cursor < len(self._deadlines):
            seq = self._deadlines[self._deadline_cursor]
            deadline = seq.spec.arrival + timeout
            if deadline > t:
                break
            self._deadline_cursor += 1
            if seq.state == "ended":
                continue
            if seq.state == "waiting":
                self.num_waiting -= 1
            else:
                self.running.remove(seq)
                self.kv.free(seq)
            self._end(seq, Status.TIMEOUT, deadline)
            expired.append(seq)
        return expired

    def _end(self, seq: _Seq, status: Status, at) -> None:
        seq.state = "ended"
        seq.rec.status = status
        seq.rec.done_at = at
        self._num_ended += 1

    def _record(self, ordinal, t, duration, scheduled, num_prompt, num_decode, preempted, admitted, hits,
                finished, timeouts, kv_used):
        if self.timeline == "full":
            return StepRecord(ordinal, t, duration, [(s.spec.name, n) for s, n in scheduled.items()], num_prompt,
                              num_decode, sorted(s.spec.name for s in preempted), [s.spec.name for s in admitted],
                              [s.spec.name for s in hits], [s.spec.name for s in finished],
                              [s.spec.name for s in timeouts], kv_used, len(self.running) + len(finished),
                              self.num_waiting)
        if self.timeline == "counts":
            return StepCounts(ordinal, t, 1, duration, num_prompt, num_decode, len(preempted), len(admitted),
                              len(hits), len(finished), len(timeouts), kv_used, len(self.running) + len(finished),
                              self.num_waiting)
        return None

    def _keep(self, record) -> None:
        if record is None:
            return
        records = self.records
        if self.timeline == "full":
            records.append(record)
            return
        if self._counts_span > 1 and records and record.step < records[-1].step + self._counts_span:
            records[-1].merge(record)
            return
        records.append(record)
        if len(records) >= MAX_COUNTS_RECORDS:
            for first, second in zip(records[::2], records[1::2]):
                first.merge(second)
            del records[1::2]
            self._counts_span *= 2

    def _finish_records(self) -> None:
        """Mark unfinished statuses and, with a step-time clock, turn step ordinals into times."""
        stamps = self._stamp_times
        if stamps is None:
            return
        for rec in self.requests:
            runs = rec.token_runs
            rec.token_times = [stamps[start + k] for start, count in runs for k in range(count)]


def simulate_vllm(workload, knobs: VllmKnobs, progress=None, **options) -> CaseResult:
    """Run ``workload`` under ``knobs`` to the end (``options``: ``timeline``, ``step_time``,
    ``per_step``); see :class:`VllmSimulation`."""
    return VllmSimulation(workload, knobs, **options).run(progress)
