"""The vLLM engine: one step of vLLM 0.33.0's scheduler at a time (vllm-engine.md §2).

Each step at time ``T``: arrivals join the waiting queue, expired deadlines abort their requests
(freeing their KV blocks at once), then **one pass over the running list** gives every running
request the tokens it still needs (a decode is 1 token), preempting the policy's victim when KV
blocks run out, then — only if nothing was preempted — the **waiting queue** is admitted while
budget, slots and KV room for the whole sequence remain. Every scheduled request whose computed
count reaches its length samples one output token, stamped at the end of the step. The engine
never writes files; it hands the shared records of :mod:`sched.engine` (:class:`Request`,
:class:`CaseResult`) to metrics, artifacts, invariants and pictures.

Time. By default every step lasts one tick: step ``t`` starts at tick ``t`` and its tokens are
stamped ``t + 1`` (as in the lab). ``step_time(num_prompt_tokens, num_decode_tokens) -> duration``
makes the clock continuous (vllm-engine.md §6): step ``k`` starts at ``T_k``, requests with
``arrival <= T_k`` join before it is scheduled, its tokens are stamped ``T_k + duration``, the next
step starts there, and an idle engine jumps to the next arrival. Times stay exact for ``int``,
``Fraction`` and ``float`` durations: the clock only ever adds durations, in step order.

Prompt versus decode tokens of a step (the two arguments of ``step_time``): a request scheduled
exactly **one** token, which has sampled at least one output token and whose computed count before
the step is ``num_tokens − 1`` (prompt and every output token but the newest computed), is *decoding*:
that token is a decode token. Every other scheduled token — prefill chunks, and the recompute of
prompt + generated tokens after a preemption — is a prompt token.

Speed (issue 9 item 6), without prefix caching: a running request that decodes is kept as an
*open run* (it samples one token per step from ``open_from`` on), so a step in which the budget and
the free blocks cover every running request costs O(events + requests in prefill), not O(running);
steps in which nothing but decoding happens are advanced in one jump to the next event (an
arrival or deadline that can matter, a completion, or the first step whose new KV blocks would not
fit: a decode needs a new block only every ``block_size`` tokens). Any other step materialises the
open runs and walks the running list in order (:meth:`VllmSimulation._walk`). Timeline ``full``,
prefix caching and ``per_step=True`` always walk; the tests compare both ways on the oracle corpus
and on random workloads.
"""

from __future__ import annotations

import gc
import heapq
from collections import deque

from .engine import TIMELINE_DETAILS, CaseResult, Request, SimulationError, Status
from .kv_cache import blocks_for, make_kv_cache
from .vllm_config import VllmKnobs
from .vllm_records import StepCounts, StepRecord, keep_counts

__all__ = ["VllmSimulation", "StepRecord", "StepCounts", "simulate_vllm"]


class _Seq:
    """The scheduler's view of one request (vLLM's ``Request``): token counts and block table.

    While ``open_from`` is set the counts are those at step ``open_from`` (``generated`` and
    ``num_tokens`` then grow by one per step; :meth:`VllmSimulation._close` brings them up to date).
    """

    __slots__ = ("rec", "spec", "index", "key", "prompt", "output", "num_tokens", "computed", "generated",
                 "blocks", "num_cached", "hashes", "state", "open_from")

    def __init__(self, rec: Request, table) -> None:
        spec = rec.spec
        self.rec, self.spec, self.index = rec, spec, rec.index
        self.key = (spec.priority or 0, spec.arrival, rec.index)   # vLLM: (priority, arrival_time)
        self.prompt, self.output = spec.prompt_tokens, spec.output_tokens
        self.num_tokens = self.prompt     # prompt + output tokens sampled so far
        self.computed = 0                 # tokens whose KV is computed (or being computed)
        self.generated = 0
        self.blocks = table
        self.num_cached = 0
        self.hashes: list[int] = []
        self.state = "future"             # future, waiting, running, ended
        self.open_from = None


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
        self.knobs, self.case, self.timeline, self.step_time = knobs, knobs.case(), timeline, step_time
        self.kv = make_kv_cache(knobs.gpu_blocks_for(workload), knobs.block_size, knobs.enable_prefix_caching)
        self.walk_only = per_step or timeline == "full" or self.kv.caching
        self.requests = [Request(spec, index) for index, spec in enumerate(workload)]
        self._seqs = [_Seq(rec, self.kv.new_table()) for rec in self.requests]
        self._arrivals = sorted(self._seqs, key=lambda s: (s.spec.arrival, s.index))
        self._next_arrival = 0
        self._deadlines: list[_Seq] = []        # arrived requests in arrival order (one timeout for all)
        self._deadline_cursor = 0
        self._priority = knobs.policy == "priority"
        self._waiting: deque | list = [] if self._priority else deque()
        self.num_waiting = 0
        self._running: dict[_Seq, None] = {}    # the running list, in order
        self._others: dict[_Seq, None] = {}     # running requests without an open run, in order
        self._open_due = [0] * knobs.block_size  # open runs needing a new block at ordinal ≡ r
        self._finishes: list = []                # (ordinal of last token, index, open_from, seq)
        self.now = 0                             # start time of the next step
        self.num_steps = 0                       # steps simulated
        self._stamp_times: list | None = None if step_time is None else [None]
        self._num_ended = 0
        self.records: list = []
        self._span = 1
        self.budget_spent = 0
        self.busy_steps = 0

    @property
    def running(self) -> list:
        """The running list, in order."""
        return list(self._running)

    @property
    def finished(self) -> bool:
        return self._num_ended == len(self._seqs)

    def _ordinal(self) -> int:
        # With unit steps the ordinal is the start tick itself (token of step t stamped t + 1).
        return self.now if self._stamp_times is None else self.num_steps

    def _duration(self, num_prompt: int, num_decode: int):
        if self._stamp_times is None:
            return 1
        duration = self.step_time(num_prompt, num_decode)
        self._stamp_times.append(self.now + duration)
        return duration

    # --- one step (vllm-engine.md §2) -------------------------------------------------------------

    def step(self):
        """Simulate one step starting at ``self.now``; returns its record (``None`` for ``off``)."""
        t, knobs = self.now, self.knobs
        ordinal = t if self._stamp_times is None else self.num_steps
        # 1. Arrivals, then deadlines (an aborted request frees its blocks before scheduling).
        if self._next_arrival < len(self._arrivals) and self._arrivals[self._next_arrival].spec.arrival <= t:
            self._arrive(t)
        timeouts = self._expire(t, ordinal) if knobs.timeout_ticks is not None else []
        # 2. The chunk cap binds only while more than one request is running or waiting.
        cap = knobs.long_prefill_token_threshold if len(self._running) + self.num_waiting > 1 else 0
        if self.walk_only or not self._fits(cap, ordinal):
            return self._walk(t, ordinal, cap, timeouts)
        return self._easy(t, ordinal, cap, timeouts)

    def _walk(self, t, ordinal, cap, timeouts):
        """The literal step: the running list in order, preempting when KV blocks run out.

        An open run met on the way takes its 1 token and, every ``block_size`` steps, one block;
        it stays open unless it is preempted or the budget runs out before its turn."""
        knobs, kv, bs = self.knobs, self.kv, self.knobs.block_size
        due = ordinal % bs
        running = list(self._running)
        budget = knobs.max_num_batched_tokens
        scheduled: dict[_Seq, int] = {}    # requests without an open run -> tokens
        opened: dict[_Seq, int] = {}       # open runs scheduled in this step -> blocks they took
        preempted: list[tuple[_Seq, _Seq]] = []   # (victim, the request that needed its blocks)
        # 3. The running list, in order, while budget remains.
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            if seq.open_from is None:
                n = min(seq.num_tokens - seq.computed, cap or budget, budget)
                need = kv.blocks_to_allocate(seq, seq.computed + n)
            else:
                n, need = 1, int((seq.open_from + 1 - seq.num_tokens) % bs == due)
            while need > kv.num_free:
                # Out of KV blocks: preempt the policy's victim (recompute) and retry.
                if self._priority:
                    victim = max(running, key=lambda s: s.key)
                    where = running.index(victim)
                    del running[where]
                    if where < i:
                        i -= 1
                    if victim in scheduled:   # already scheduled this step: its tokens return
                        budget += scheduled.pop(victim)
                    elif victim in opened:
                        budget += 1
                        kv.num_free += opened.pop(victim)
                else:
                    victim = running.pop()
                self._preempt(victim, t, ordinal)
                preempted.append((victim, seq))
                if victim is seq:
                    break
            if seq.state != "running":
                if self._priority:
                    continue      # the pass goes on with the next running request
                break             # fcfs: the request itself was the last one left to preempt
            if seq.open_from is None:
                kv.allocate(seq, seq.computed + n)
                scheduled[seq] = n
            else:
                kv.num_free -= need
                opened[seq] = need
            budget -= n
            i += 1
        for seq in running[i:]:   # open runs the budget did not reach: no token in this step
            if seq.open_from is not None:
                self._close(seq, ordinal)
                self._open(seq, ordinal + 1)
        self._running = dict.fromkeys(running)
        # 4. The waiting queue, only if nothing was preempted in this step.
        admitted, hits = ([], []) if preempted else self._admit(t, cap, budget, scheduled)
        # 5. Execute.
        used = sum(scheduled.values()) + len(opened)
        num_decode = len(opened) + sum(1 for seq, n in scheduled.items()
                                       if n == 1 and seq.generated and seq.computed == seq.num_tokens - 1)
        kv_used = kv.num_used
        duration = self._duration(used - num_decode, num_decode)
        end = t + duration
        finished = self._finish_open(ordinal, end) if opened else []
        finished += self._execute(scheduled, ordinal, end)
        if not self.walk_only:   # decode-ready requests run on as open runs from the next step
            for seq in scheduled:
                if seq.state == "running" and seq.generated and seq.computed == seq.num_tokens - 1:
                    self._open(seq, ordinal + 1)
            self._others = dict.fromkeys(s for s in self._running if s.open_from is None)
        return self._end_step(t, ordinal, duration, used, num_decode, kv_used, scheduled, preempted, admitted,
                              hits, finished, timeouts)

    def _finish_open(self, ordinal, end) -> list:
        """End the open runs whose last token is sampled in step ``ordinal`` (stamped ``end``)."""
        finished, heap = [], self._finishes
        while heap and heap[0][0] <= ordinal:
            _, _, opened, seq = heapq.heappop(heap)
            if seq.open_from == opened and seq.state == "running":
                self._close(seq, ordinal + 1)
                finished.append(seq)
        for seq in finished:
            self.kv.free(seq)
            del self._running[seq]
            self._end(seq, Status.DONE, end)
        return finished

    def _admit(self, t, cap, budget, scheduled) -> tuple[list, list]:
        """Step 4: admit from the head of the waiting queue while budget, a slot and KV room for
        the whole sequence (minus its hit) remain. Returns (first admissions, those with a hit)."""
        knobs, kv = self.knobs, self.kv
        admitted, hits = [], []
        while self.num_waiting and budget > 0 and len(self._running) < knobs.max_num_seqs:
            seq = self._peek()
            hit = kv.find_hit(seq) if kv.caching else []
            computed = len(hit) * knobs.block_size
            n = min(seq.num_tokens - computed, cap or budget, budget)
            if kv.blocks_to_allocate(seq, seq.num_tokens, hit) > kv.num_free:
                break     # admission gate: a waiting request never preempts
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
            self._running[seq] = None
            scheduled[seq] = n
            budget -= n
        return admitted, hits

    def _execute(self, scheduled, ordinal, end) -> list:
        """Step 5 for the requests in ``scheduled``: compute, sample (stamped ``end``), retire."""
        finished = []
        for seq, n in scheduled.items():
            seq.computed += n
            if seq.computed == seq.num_tokens:
                seq.generated += 1
                seq.num_tokens += 1
                seq.rec.emit(ordinal + 1)
                if seq.generated == seq.output:
                    finished.append(seq)
        for seq in finished:
            self.kv.free(seq)
            del self._running[seq]
            self._others.pop(seq, None)
            self._end(seq, Status.DONE, end)
        return finished

    # --- the fast path (no prefix caching) -------------------------------------------------------

    def _fits(self, cap, ordinal) -> bool:
        """Whether this step's running pass can neither run out of budget nor of KV blocks, so its
        order does not matter: every running request gets what it needs, nobody is preempted."""
        demand = len(self._running) - len(self._others)
        blocks = self._open_due[ordinal % self.knobs.block_size]
        bs = self.knobs.block_size
        for seq in self._others:
            n = seq.num_tokens - seq.computed
            if cap and n > cap:
                n = cap
            demand += n
            blocks += blocks_for(seq.computed + n, bs) - seq.blocks
        return demand <= self.knobs.max_num_batched_tokens and blocks <= self.kv.num_free

    def _easy(self, t, ordinal, cap, timeouts):
        """A step whose running pass fits (:meth:`_fits`): open runs decode by themselves."""
        knobs, kv, bs = self.knobs, self.kv, self.knobs.block_size
        num_open = len(self._running) - len(self._others)
        kv.num_free -= self._open_due[ordinal % bs]
        scheduled: dict[_Seq, int] = {}
        used = num_open
        for seq in self._others:
            n = min(seq.num_tokens - seq.computed, cap or knobs.max_num_batched_tokens)
            kv.allocate(seq, seq.computed + n)
            scheduled[seq] = n
            used += n
        admitted = hits = ()
        if self.num_waiting and used < knobs.max_num_batched_tokens and len(self._running) < knobs.max_num_seqs:
            admitted, hits = self._admit(t, cap, knobs.max_num_batched_tokens - used, scheduled)
            used = num_open + sum(scheduled.values())
        num_decode = num_open
        for seq, n in scheduled.items():
            if n == 1 and seq.generated and seq.computed == seq.num_tokens - 1:
                num_decode += 1
        kv_used = kv.capacity - kv.num_free
        if self._stamp_times is None:
            duration, end = 1, t + 1
        else:
            duration = self._duration(used - num_decode, num_decode)
            end = t + duration
        heap = self._finishes
        finished = self._finish_open(ordinal, end) if heap and heap[0][0] <= ordinal else []
        done = ()
        if scheduled:
            others = self._others
            for seq in scheduled:   # admissions and prefill chunks: keep the list order
                if seq not in others:
                    others[seq] = None
            done = self._execute(scheduled, ordinal, end)
            for seq in scheduled:
                if seq.state == "running" and seq.generated and seq.computed == seq.num_tokens - 1:
                    del others[seq]
                    self._open(seq, ordinal + 1)
        return self._end_step(t, ordinal, duration, used, num_decode, kv_used, None, (), admitted, hits,
                              finished + list(done) if done else finished, timeouts)

    def _open(self, seq: _Seq, ordinal: int) -> None:
        """Let ``seq`` (decode-ready) decode one token per step from ``ordinal`` on."""
        seq.open_from = ordinal
        self._open_due[(ordinal + 1 - seq.num_tokens) % self.knobs.block_size] += 1
        heapq.heappush(self._finishes, (ordinal + seq.output - seq.generated - 1, seq.index, ordinal, seq))

    def _close(self, seq: _Seq, ordinal: int) -> None:
        """Bring an open run's counts up to the start of step ``ordinal`` and close it."""
        opened, steps = seq.open_from, ordinal - seq.open_from
        self._open_due[(opened + 1 - seq.num_tokens) % self.knobs.block_size] -= 1
        seq.open_from = None
        if steps:
            seq.generated += steps
            seq.num_tokens += steps
            seq.rec.emit(opened + 1, steps)
        seq.computed = seq.num_tokens - 1
        seq.blocks = blocks_for(seq.computed, self.knobs.block_size)

    def _jump(self) -> None:
        """Advance over decode-only steps up to (not including) the next step where anything else
        can happen; every running request holds an open run."""
        knobs, kv = self.knobs, self.kv
        num_open = len(self._running)
        if self._others or not num_open or num_open > knobs.max_num_batched_tokens:
            return
        ordinal, bs = self._ordinal(), knobs.block_size
        if self.num_waiting and num_open < knobs.max_num_seqs and num_open < knobs.max_num_batched_tokens:
            head = self._peek()
            if blocks_for(head.num_tokens, bs) - head.blocks <= kv.num_free:
                return     # the next step admits
        heap = self._finishes
        while heap and (heap[0][3].open_from != heap[0][2] or heap[0][3].state != "running"):
            heapq.heappop(heap)
        limit = heap[0][0] - ordinal      # steps before the one emitting the first last token
        # KV: step j takes the open runs due at ordinal + j; stop before the first that would not fit.
        due, free = self._open_due, kv.num_free
        cycles = min(limit // bs, free // num_open)
        taken, span = cycles * num_open, cycles * bs
        while span < limit and taken + due[(ordinal + span) % bs] <= free:
            taken += due[(ordinal + span) % bs]
            span += 1
        # Time: every jumped step must start before the next arrival that can matter and deadline.
        until = None
        if self._next_arrival < len(self._arrivals) and (
                self._priority or knobs.timeout_ticks is not None
                or (not self.num_waiting and num_open < knobs.max_num_seqs)):
            until = self._arrivals[self._next_arrival].spec.arrival
        if knobs.timeout_ticks is not None and self._deadline_cursor < len(self._deadlines):
            deadline = self._deadlines[self._deadline_cursor].spec.arrival + knobs.timeout_ticks
            until = deadline if until is None else min(until, deadline)
        t = self.now
        if self._stamp_times is None:
            if until is not None:
                span = min(span, until - t)
            if span < 2:
                return
            self.now = t + span
        else:
            ends, now, steps = [], t, 0
            while steps < span and (until is None or now < until):
                now += self.step_time(0, num_open)
                ends.append(now)
                steps += 1
            span = steps
            if span < 2:
                return
            self._stamp_times.extend(ends)
            self.now = now
        kv.num_free -= span // bs * num_open + sum(due[(ordinal + j) % bs] for j in range(span % bs))
        self.num_steps += span
        self.budget_spent += span * num_open
        self.busy_steps += span
        self._arrive(self.now)
        if self.timeline == "counts":
            self._span = keep_counts(self.records, StepCounts(
                ordinal, t, span, self.now - t, 0, span * num_open, 0, 0, 0, 0, 0, kv.num_used, num_open,
                self.num_waiting), self._span)

    # --- the loop ------------------------------------------------------------------------------

    def run(self, progress=None) -> CaseResult:
        """Advance until every request has ended; returns the run's :class:`CaseResult` (one case,
        ``vllm``). ``progress(case, now, num_ended, num_requests)`` is called after every step."""
        collecting = gc.isenabled()
        gc.disable()
        kv, total, full, walk_only = self.kv, len(self._seqs), self.timeline == "full", self.walk_only
        try:
            while self._num_ended < total:
                if not self._running and not self.num_waiting:
                    # Idle: jump to the next arrival (nothing happens in between).
                    self.now = max(self.now, self._arrivals[self._next_arrival].spec.arrival)
                elif not walk_only:
                    self._arrive(self.now)
                    if not self._deadline_due() and not self._others:
                        self._jump()
                spent, ended, free, waiting = self.budget_spent, self._num_ended, kv.num_free, self.num_waiting
                record = self.step()
                if spent == self.budget_spent and ended == self._num_ended and free == kv.num_free \
                        and waiting == self.num_waiting:
                    raise SimulationError(f"vllm: step at {self.now}: no request can make progress "
                                          f"({len(self._running)} running, {self.num_waiting} waiting)")
                if record is not None:
                    if full:
                        self.records.append(record)
                    else:
                        self._span = keep_counts(self.records, record, self._span)
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

    def _preempt(self, seq: _Seq, t, ordinal) -> None:
        """Recompute preemption in the step ``ordinal`` starting at ``t``: free the blocks, forget
        the computed tokens, back to the queue (fcfs: its front; priority: its place by key)."""
        if seq.open_from is not None:
            self._close(seq, ordinal)
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

    def _deadline_due(self) -> bool:
        return self.knobs.timeout_ticks is not None and self._deadline_cursor < len(self._deadlines) and \
            self._deadlines[self._deadline_cursor].spec.arrival + self.knobs.timeout_ticks <= self.now

    def _expire(self, t, ordinal) -> list:
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
                if seq.open_from is not None:
                    self._close(seq, ordinal)
                del self._running[seq]
                self._others.pop(seq, None)
                self.kv.free(seq)
            self._end(seq, Status.TIMEOUT, deadline)
            expired.append(seq)
        return expired

    def _end(self, seq: _Seq, status: Status, at) -> None:
        seq.state = "ended"
        seq.rec.status = status
        seq.rec.done_at = at
        self._num_ended += 1

    def _end_step(self, t, ordinal, duration, used, num_decode, kv_used, scheduled, preempted, admitted, hits,
                  finished, timeouts):
        """Advance the clock and return the step's record for the timeline detail."""
        if used:
            self.budget_spent += used
            self.busy_steps += 1
        self.now = t + duration
        self.num_steps += 1
        num_running = len(self._running) + len(finished)
        if self.timeline == "full":
            return StepRecord(ordinal, t, duration, [(s.spec.name, n) for s, n in scheduled.items()],
                              used - num_decode, num_decode, sorted(v.spec.name for v, _ in preempted),
                              [s.spec.name for s in admitted], [s.spec.name for s in hits],
                              [s.spec.name for s in finished], [s.spec.name for s in timeouts], kv_used,
                              num_running, self.num_waiting, [(v.spec.name, s.spec.name) for v, s in preempted])
        if self.timeline == "counts":
            records = self.records
            if self._span > 1 and records and ordinal < records[-1].step + self._span:
                last = records[-1]   # merged into the last record at once (see keep_counts)
                last.num_steps = ordinal + 1 - last.step
                last.duration = t + duration - last.tick
                last.num_prompt_tokens += used - num_decode
                last.num_decode_tokens += num_decode
                last.num_preempted += len(preempted)
                last.num_admitted += len(admitted)
                last.num_cache_hits += len(hits)
                last.num_finished += len(finished)
                last.num_timeouts += len(timeouts)
                last.kv_blocks_used = max(last.kv_blocks_used, kv_used)
                last.num_running = max(last.num_running, num_running)
                last.num_waiting = max(last.num_waiting, self.num_waiting)
                return None
            return StepCounts(ordinal, t, 1, duration, used - num_decode, num_decode, len(preempted), len(admitted),
                              len(hits), len(finished), len(timeouts), kv_used, num_running, self.num_waiting)
        return None

    def _finish_records(self) -> None:
        """With a step-time clock, turn the token stamps (step ordinal + 1) into times."""
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
