"""vLLM's async scheduling on the vLLM engine (``--async-scheduling``; vllm-engine.md §7).

With async scheduling vLLM schedules the next batch **before** the tokens of the batch on the GPU
are known. Its engine loop keeps a queue of at most two batches; each turn it schedules a batch
(while it has requests) and, once two are queued (or nothing else can be scheduled), waits for the
oldest batch and processes its output. What follows from that, as implemented here:

- **Placeholders.** A scheduled request whose prompt is complete after this batch will sample a
  token that nobody knows yet: it gets one *output placeholder*. A request asks for
  ``known tokens + placeholders − computed`` tokens, so it is scheduled for its next decode while
  the token it decodes is still in flight.
- **No extra decode.** A request whose last output token is in flight is skipped by the running
  pass (``computed + 2 − placeholders ≥ prompt + output``) but stays in the running list: it keeps
  its slot (``max_num_seqs``) and its KV blocks until that output is processed, which happens after
  the next batch has been scheduled.
- **Outputs one batch late.** Processing a batch turns its placeholders into tokens (stamped at the
  end of the batch), caches the blocks those tokens complete, and finishes and frees the requests
  that reached their output length (:mod:`sched.vllm.async_outputs`, inherited).
- **Preemption with a batch in flight.** The victim's placeholders become *stale*; the token still
  arrives with its batch and is appended, so recompute covers it too.
- **Time.** The GPU runs one batch with tokens at a time, back to back: a batch scheduled at ``now``
  runs from ``max(now, end of the batch before)``; an empty batch takes no time. Requests with
  ``arrival <= now`` join before each scheduling. Processing a batch waits for its end. With unit
  steps a batch lasts one tick and its *step* is the tick it runs in (the async oracle corpus's
  convention); with ``step_time`` the batch lasts ``step_time(prompt, decode)``.

The scheduling pass itself (running list first, the policy's preemption, admission only in a step
that preempted no one) is vLLM's, as in :mod:`sched.vllm.engine`; only what it asks of each running
request differs. Checked against vLLM 0.33.0's own ``AsyncScheduler`` driven through its batch-queue
loop: every request and every step of the 30 async oracle cases (``tests/test_vllm_oracle_async.py``).

Speed (the records are the walk's, ``tests/test_vllm_async_jumps.py``): without prefix caching runs
of decode-only batches are jumped over (:mod:`sched.vllm.async_jump`); with prefix caching decoding
requests run open, a turn whose running pass fits the budget and the free blocks walks only the
others (:mod:`sched.vllm.async_runs`), and runs of turns where only open runs decode are jumped over
(:mod:`sched.vllm.async_open_jump`).
"""

from __future__ import annotations

import gc
from collections import deque

from ..core.records import CaseResult, SimulationError
from .config import VllmKnobs
from .engine import VllmSimulation
from .async_jump import jump as decode_jump
from .async_outputs import AsyncOutputs
from .async_runs import AsyncDecodeRuns
from .kv_cache import PrefixCachingKV
from .kv_counts import KVCache

__all__ = ["AsyncVllmSimulation", "make_simulation", "simulate"]

#: Whether runs without prefix caching jump over runs of decode-only batches
#: (:meth:`AsyncVllmSimulation.jump`) and runs with it keep decoding requests as open runs
#: (:mod:`sched.vllm.async_runs`; timeline ``counts`` or ``off``); off, every batch is walked
#: (the tests compare both).
DECODE_JUMPS = True

#: Batches in flight at most: vLLM's ``max_concurrent_batches`` with async scheduling and no
#: pipeline parallelism.
BATCH_QUEUE_SIZE = 2


class Batch:
    """One scheduled batch: what ``schedule()`` decided and what its output will deliver.

    ``step``: the step ordinal (the tick it runs in with unit steps, else the number of batches with
    tokens before it); ``start``/``end``: when it runs on the GPU (``end`` is ``None`` for an empty
    batch, which takes no time); ``scheduled``: (request, tokens) in vLLM's order; ``samplers``: the
    requests that sample a token in it; ``preempted``: (victim, request that needed the blocks);
    ``kv_used``, ``num_running``, ``num_waiting``: right after scheduling; ``num_open``: open runs
    (:mod:`sched.vllm.async_runs`) scheduled one token each, listed neither in ``scheduled`` nor in
    ``samplers`` (their tokens are delivered by the run).
    """

    __slots__ = ("step", "start", "end", "scheduled", "samplers", "num_prompt", "num_decode", "preempted",
                 "admitted", "hits", "kv_used", "num_running", "num_waiting", "num_open", "merged")

    def __init__(self, *, step, start, end, scheduled, samplers, num_prompt, num_decode, preempted, admitted, hits,
                 kv_used, num_running, num_waiting, num_open=0) -> None:
        self.step, self.start, self.end, self.scheduled, self.samplers = step, start, end, scheduled, samplers
        self.num_prompt, self.num_decode, self.preempted, self.admitted = num_prompt, num_decode, preempted, admitted
        self.hits, self.kv_used, self.num_running, self.num_waiting = hits, kv_used, num_running, num_waiting
        self.num_open = num_open    # open runs scheduled one token each, not in ``scheduled``/``samplers``
        self.merged = False         # runs closed into ``samplers`` at its end (not in running order)


class AsyncVllmSimulation(AsyncOutputs, VllmSimulation):
    """One run under vLLM's async scheduling (module docstring), same interface as
    :class:`VllmSimulation` (``workload``, ``knobs`` with ``async_scheduling``, ``timeline``,
    ``step_time``); without prefix caching, runs of decode-only batches are jumped over
    (:mod:`sched.vllm.async_jump`); with it (timeline ``counts`` or ``off``) decoding requests run
    open (:mod:`sched.vllm.async_runs`); both give the walk's records. Request deadlines are refused by
    :class:`VllmKnobs`. A run that can make no progress raises :class:`SimulationError`."""

    ASYNC = True

    def __init__(self, workload, knobs: VllmKnobs, *, timeline: str = "full", step_time=None,
                 per_step: bool = False, max_concurrency: int | None = None) -> None:
        super().__init__(workload, knobs, timeline=timeline, step_time=step_time, per_step=True,
                         max_concurrency=max_concurrency)
        self.gpu_free = 0               # when the GPU finishes the last batch with tokens
        self.batches: deque[Batch] = deque()   # scheduled, output not processed yet; newest first
        self._reported_finish = False   # vLLM's finished request ids, cleared by the next schedule()
        self._held: Batch | None = None  # an empty batch that only preempted, logged with its step
        # With prefix caching (its fast pool) and a timeline without names: open decode runs.
        self.open_runs = (AsyncDecodeRuns(self) if DECODE_JUMPS and type(self.kv) is PrefixCachingKV
                          and timeline != "full" else None)

    # --- schedule() ----------------------------------------------------------------------------

    def schedule(self, now) -> Batch:
        """vLLM's ``schedule()`` at time ``now`` under async scheduling; returns the batch (queued
        by the caller), its placeholders already given. With open runs an easy turn is taken
        without walking them (:mod:`sched.vllm.async_runs`), any other turn walked."""
        if self.open_runs is not None:
            return self.open_runs.schedule(now)
        return self._walk(now)

    def _walk(self, now) -> Batch:
        """The literal ``schedule()``: the running list in order, preempting when KV blocks run out.

        An open run met on the way (fcfs: priority closes them all first) takes its 1 token and, when
        one is due, a KV block; it is closed when it is preempted or the budget runs out before it
        (:meth:`sched.vllm.async_runs.AsyncDecodeRuns.close_in_walk`)."""
        knobs, kv = self.knobs, self.kv
        start = now if now > self.gpu_free else self.gpu_free
        step = start if self.stamp_times is None else len(self.stamp_times) - 1
        self._reported_finish = False
        cap = knobs.long_prefill_token_threshold if len(self.running) + self.waiting.size > 1 else 0
        running = list(self.running)
        budget = knobs.max_num_batched_tokens
        scheduled: dict = {}
        preempted: list = []
        # Without prefix caching a block table is a count: the pass below does KVCache's arithmetic
        # in place (blocks_to_allocate, allocate), the same numbers without two calls per request.
        counts, bs = not kv.caching, kv.block_size
        # With prefix caching, the engine's own pool: its allocate() for a request with room in its
        # last block does nothing but enter newly full blocks, so such a request is settled inline.
        cached_inline = type(kv) is PrefixCachingKV
        runs, num_open = self.open_runs, 0
        due = None if runs is None else runs.turn % bs   # open runs taking a new block in this turn
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            if seq.open_from is not None:   # an open run: 1 decode token, a new block when one is due
                need = 1 if (seq.open_from - seq.num_tokens) % bs == due else 0
                if need > kv.num_free:   # fcfs here: under priority open runs are walked closed
                    i, _ = self._preempt_for(seq, need, running, i, scheduled, preempted, start, step)
                if seq.state != "running":
                    break
                if need:
                    kv.reserve(1)
                num_open += 1
                budget -= 1
                i += 1
                continue
            # Its last token is in flight: not scheduled again (it keeps its slot and blocks).
            if seq.placeholders and seq.computed + 2 - seq.placeholders >= seq.prompt + seq.output:
                i += 1
                continue
            n = seq.num_tokens + seq.placeholders - seq.computed   # min(n, cap or budget, budget)
            if cap and n > cap:
                n = cap
            if n > budget:
                n = budget
            if n <= 0:
                i += 1
                continue
            target = seq.computed + n
            if counts:
                need = -(-target // bs) - seq.blocks
            elif cached_inline:
                table = seq.blocks   # a list, or a count of private blocks (kv.held)
                need = -(-target // bs) - (table if type(table) is int else len(table))
                if need <= 0:   # no new block: allocate() would only enter newly full blocks
                    if (target if target < seq.num_tokens else seq.num_tokens) // bs > seq.num_cached:
                        kv.cache_full(seq, target if target < seq.num_tokens else seq.num_tokens)
                    scheduled[seq] = n
                    budget -= n
                    i += 1
                    continue
            else:
                need = kv.blocks_to_allocate(seq, target)
            if need > kv.num_free:   # out of KV blocks: preempt the policy's victims (recompute)
                i, back = self._preempt_for(seq, need, running, i, scheduled, preempted, start, step)
                budget += back
            if seq.state != "running":
                if self._priority:
                    continue
                break
            if not counts:
                kv.allocate(seq, seq.computed + n)
            elif need > 0:
                kv.num_free -= need
                seq.blocks += need
            scheduled[seq] = n
            budget -= n
            i += 1
        if runs is not None and runs.num_open:
            for seq in running[i:]:   # open runs the budget did not reach: no token in this batch
                if seq.open_from is not None:
                    runs.close_in_walk(seq)
        self.running = dict.fromkeys(running)
        return self._complete(start, step, cap, budget, scheduled, preempted, num_open)

    def _complete(self, start, step, cap, budget, scheduled, preempted, num_open) -> Batch:
        """The end of ``schedule()`` after the running pass: admission (when nobody was preempted),
        vLLM's ``_update_after_schedule``, the batch's time. ``num_open``: open runs scheduled one
        decode token each besides ``scheduled``."""
        kv = self.kv
        admitted, hits = ([], []) if preempted else self.admit(start, cap, budget, scheduled)
        # vLLM's _update_after_schedule: tokens count as computed now; a request whose prompt is
        # complete samples a token nobody knows yet (a placeholder).
        samplers, num_decode, used = [], num_open, num_open
        for seq, n in scheduled.items():
            known_and_pending = seq.num_tokens + seq.placeholders
            if n == 1 and seq.computed == known_and_pending - 1 and seq.generated + seq.placeholders:
                num_decode += 1
            seq.computed += n
            used += n
            if seq.computed == known_and_pending:
                seq.placeholders += 1
                samplers.append(seq)
        end = None
        if used:
            if self.stamp_times is None:
                duration = 1
            elif self.reads_kv:   # a step time asking for the KV blocks held (engine.py, time)
                duration = self.step_time(used - num_decode, num_decode, kv.num_used)
            else:
                duration = self.step_time(used - num_decode, num_decode)
            if not duration > 0:
                raise ValueError(f"step_time({used - num_decode}, {num_decode}) gave {duration!r}: a step must last > 0")
            end = start + duration
            self.gpu_free = end
            if self.stamp_times is not None:
                self.stamp_times.append(end)
            self.budget_spent += used
            self.busy_steps += 1
            self.num_steps += 1
        return Batch(step=step, start=start, end=end, scheduled=list(scheduled.items()), samplers=samplers,
                     num_prompt=used - num_decode, num_decode=num_decode, preempted=preempted, admitted=admitted,
                     hits=hits, kv_used=kv.num_used, num_running=len(self.running), num_waiting=self.waiting.size,
                     num_open=num_open)

    def _preempt(self, seq, t, ordinal) -> None:
        """Recompute preemption; a token still in flight for ``seq`` becomes stale (still delivered)."""
        if seq.open_from is not None:
            self.open_runs.close_in_walk(seq)
        seq.stale += seq.placeholders
        seq.placeholders = 0
        super()._preempt(seq, t, ordinal)

    # --- decode jumps ----------------------------------------------------------------------------

    def jump(self, now):
        """The loop turns from ``now`` in which nothing but decoding can happen, run at once
        (:func:`sched.vllm.async_jump.jump`); returns the time after them, or ``None``."""
        return decode_jump(self, now)

    # --- the engine loop -----------------------------------------------------------------------

    def step(self):
        raise NotImplementedError("async scheduling runs whole batches through run()")

    def _has_requests(self) -> bool:
        return bool(self.running) or self.waiting.size > 0 or self._reported_finish

    def run(self, progress=None) -> CaseResult:
        """vLLM's batch-queue engine loop (module docstring) until every request has ended; returns
        the run's :class:`CaseResult` (one case, ``vllm``)."""
        collecting = gc.isenabled()
        gc.disable()
        total, arrivals, batches = self.num_requests, self.arrivals, self.batches
        now = self.now
        jumps = DECODE_JUMPS and type(self.kv) is KVCache and self._held is None
        runs = self.open_runs
        try:
            while self._num_ended < total:
                if not self._has_requests() and not batches:
                    now = max(now, arrivals.upcoming)   # idle: nothing happens before the next arrival
                if arrivals.upcoming is not None and arrivals.upcoming <= now:
                    self.arrive(now)
                if len(batches) == 1 and (jumps or runs is not None and not runs.others and not batches[0].samplers):
                    jumped = self.jump(now) if jumps else runs.jump(now)
                    if jumped is not None:
                        self.now = now = jumped
                        if progress is not None:
                            progress(self.case.name, now, self._num_ended, total)
                        continue
                progressed = False
                take_oldest = bool(batches)
                newest = None
                if self._has_requests():
                    batch = newest = self.schedule(now)
                    progressed = bool(batch.scheduled or batch.num_open or batch.preempted)
                    batches.appendleft(batch)
                    take_oldest = not (len(batches) < BATCH_QUEUE_SIZE and
                                       (batch.end is not None or self.running or self.waiting.size))
                if take_oldest:
                    batch = batches.pop()
                    if batch.end is not None and batch.end > now:
                        now = batch.end          # wait for the GPU to finish it
                    progressed = self.process(batch) or progressed
                if runs is not None and len(batches) == 1 and batches[0] is newest and newest.end is not None:
                    runs.reopen(batches[0])   # the batch of this turn: its decoding samplers run open
                self.now = now
                if not progressed and not any(b.end is not None for b in batches):
                    # Nothing in flight and nothing changed: frozen until the next arrival.
                    if arrivals.upcoming is not None:
                        now = max(now, arrivals.upcoming)
                        continue
                    if self._num_ended == total:
                        break
                    raise SimulationError(f"vllm: step at {now}: no request can make progress "
                                          f"({len(self.running)} running, {self.waiting.size} waiting)")
                if progress is not None:
                    progress(self.case.name, now, self._num_ended, total)
            self._log_left(batches)   # batches left after the last finish scheduled nothing
        finally:
            self.open_runs = None   # it refers back to the simulation: no cycle left for a paused collector
            if collecting:
                gc.enable()
        return self._result()


def make_simulation(workload, knobs: VllmKnobs, **options) -> VllmSimulation:
    """The simulation ``knobs`` ask for: :class:`AsyncVllmSimulation` with ``async_scheduling``,
    else :class:`VllmSimulation` (``options`` as theirs: ``timeline``, ``step_time``, ``per_step``)."""
    return (AsyncVllmSimulation if knobs.async_scheduling else VllmSimulation)(workload, knobs, **options)


def simulate(workload, knobs: VllmKnobs, progress=None, **options) -> CaseResult:
    """Run ``workload`` under ``knobs`` to the end, sync or async as ``knobs`` say (see
    :func:`make_simulation`); the async-aware form of :func:`sched.vllm.engine.simulate_vllm`."""
    return make_simulation(workload, knobs, **options).run(progress)
