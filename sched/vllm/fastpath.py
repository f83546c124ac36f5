"""The vLLM engine's fast path: open decode runs and decode-only jumps (the results equal the
step-by-step walk, which the tests check).

A running request that decodes is an *open run*: from step ``open_from`` on it is scheduled one
token per step and samples one token per step, so nothing about it needs touching until it
finishes, is preempted, or a step's budget runs out before its turn. Its counts are those of step
``open_from``; :meth:`DecodeRuns.close` brings them up to date. What the runs need from the pool
is known ahead: a decode needs a new KV block only when its token count crosses a block boundary,
so ``due[r]`` counts the runs needing one in every step whose ordinal is ``≡ r (mod block_size)``.

- A step whose running pass **fits** — the demand of every running request within the budget, the
  blocks it needs within the free blocks — cannot preempt and cannot starve anyone, so its order
  does not matter: :meth:`DecodeRuns.easy_step` costs O(requests in prefill + events), not
  O(running). Any other step is walked in order by the simulation (open runs take their 1 token
  there too, and stay open).
- Steps in which nothing but decoding can happen are advanced in one :meth:`DecodeRuns.jump`: up to
  the first step that completes a request, admits one, sees an arrival that can matter or a
  deadline, or whose new blocks would not fit.

Without prefix caching only block *counts* matter, which is what makes this exact. With it, which
block is taken and evicted matters: a request runs open only when its output blocks are private
(nobody else can hit them, :meth:`sched.vllm.kv_cache.PrefixCachingKV.can_open`); the blocks its
run starts are taken from the free queue in their step (the same evictions) and handed over with
their cache entries when the run closes; requests finishing in one step are freed in running order
(the free queue's order); a priority walk closes the open runs first (a victim's block of the step
returns with its table); and a jump logs each of its steps in the ``counts`` timeline, as the walk
did before this fast path existed.
"""

from __future__ import annotations

import heapq
from itertools import accumulate, chain

from .kv_counts import blocks_for
from ..core.records import Status

__all__ = ["DecodeRuns"]


class DecodeRuns:
    """The open runs of one :class:`sched.vllm.engine.VllmSimulation` and the steps they allow.

    Reads and advances the simulation's state (its running list, queue, pool, clock and log).
    ``others`` holds the running requests without an open run, in running order.
    """

    def __init__(self, sim) -> None:
        self.sim = sim
        self.block_size = sim.knobs.block_size
        self.due = [0] * self.block_size     # open runs needing a new block at ordinal ≡ r
        self.finishes: list = []             # (ordinal of last token, index, open_from, seq), lazily pruned
        self.others: dict = {}

    def open(self, seq, ordinal: int) -> None:
        """Let ``seq`` (decode-ready) decode one token per step from step ``ordinal`` on."""
        seq.open_from = ordinal
        self.due[(ordinal + 1 - seq.num_tokens) % self.block_size] += 1
        heapq.heappush(self.finishes, (ordinal + seq.output - seq.generated - 1, seq.index, ordinal, seq))

    def close(self, seq, ordinal: int) -> None:
        """Bring an open run's counts up to the start of step ``ordinal`` and close it."""
        opened, steps = seq.open_from, ordinal - seq.open_from
        self.due[(opened + 1 - seq.num_tokens) % self.block_size] -= 1
        seq.open_from = None
        if steps:
            seq.generated += steps
            seq.num_tokens += steps
            seq.rec.emit(opened + 1, steps)
        seq.computed = seq.num_tokens - 1
        kv = self.sim.kv
        if kv.caching:
            kv.settle(seq)   # its table and its cache entries caught up
        else:
            seq.blocks = blocks_for(seq.computed, self.block_size)

    def finish(self, ordinal: int, end, free: bool = True) -> list:
        """End the open runs whose last token is sampled in step ``ordinal`` (stamped ``end``).
        ``free=False``: only close them (the caller frees them, in running order, with the others
        finishing in the step: with prefix caching the order of frees is the free queue's order)."""
        sim, finished, heap = self.sim, [], self.finishes
        while heap and heap[0][0] <= ordinal:
            _, _, opened, seq = heapq.heappop(heap)
            if seq.open_from == opened and seq.state == "running":
                self.close(seq, ordinal + 1)
                finished.append(seq)
        if not free:
            return finished
        for seq in finished:
            sim.kv.free(seq)
            del sim.running[seq]
            sim.end(seq, Status.DONE, end)
        return finished

    def reopen(self, ordinal: int, scheduled, closed: bool = False) -> None:
        """After a walked step: the scheduled requests now decode-ready run on as open runs.
        ``closed``: the step closed open runs that stay running (a priority walk with prefix caching)."""
        sim = self.sim
        kv = sim.kv
        for seq in scheduled:
            if seq.state == "running" and seq.generated and seq.computed == seq.num_tokens - 1 and \
                    (not kv.caching or kv.can_open(seq)):
                self.open(seq, ordinal + 1)
        if closed:
            self.others = dict.fromkeys(s for s in sim.running if s.open_from is None)
        else:   # only the step's requests can have changed: the others before it, then its admissions
            self.others = dict.fromkeys(s for s in chain(self.others, scheduled)
                                        if s.state == "running" and s.open_from is None)

    def fits(self, cap: int, ordinal: int) -> bool:
        """Whether this step's running pass can run out of neither budget nor KV blocks."""
        sim, bs = self.sim, self.block_size
        demand = len(sim.running) - len(self.others)
        blocks = self.due[ordinal % bs]
        for seq in self.others:
            n = seq.num_tokens - seq.computed
            if cap and n > cap:
                n = cap
            demand += n
            table = seq.blocks   # a count, or with prefix caching maybe a list (kv.held)
            blocks += blocks_for(seq.computed + n, bs) - (table if type(table) is int else len(table))
        return demand <= sim.knobs.max_num_batched_tokens and blocks <= sim.kv.num_free

    def easy_step(self, t, ordinal: int, cap: int, timeouts):
        """A step whose running pass :meth:`fits`: open runs decode by themselves."""
        sim, kv, budget = self.sim, self.sim.kv, self.sim.knobs.max_num_batched_tokens
        num_open = len(sim.running) - len(self.others)
        if kv.caching:
            if due := self.due[ordinal % self.block_size]:
                kv.reserve(due)
        else:
            kv.num_free -= self.due[ordinal % self.block_size]
        scheduled: dict = {}
        used = num_open
        for seq in self.others:
            n = min(seq.num_tokens - seq.computed, cap or budget)
            kv.allocate(seq, seq.computed + n)
            scheduled[seq] = n
            used += n
        admitted = hits = ()
        # Step 4 only when the head passes the admission gate (whole sequence in the free blocks;
        # no hit without prefix caching), as in jump: a long trace is mostly steps whose head waits.
        # With prefix caching step 4 itself skips a head known to be blocked (sim.blocked_head).
        # A head that no hit can help (kv.may_hit) is gated on its whole sequence as without caching.
        if sim.waiting.size and used < budget and len(sim.running) < sim.knobs.max_num_seqs and (
                blocks_for((head := sim.waiting.peek()).num_tokens, self.block_size) - kv.held(head) <= kv.num_free
                or kv.caching and (head.hashes or head.first_private != 0) and kv.may_hit(head)):
            admitted, hits = sim.admit(t, cap, budget - used, scheduled)
            used = num_open + sum(scheduled.values())
        num_decode = num_open
        for seq, n in scheduled.items():
            if n == 1 and seq.generated and seq.computed == seq.num_tokens - 1:
                num_decode += 1
        kv_used = kv.capacity - kv.num_free
        if sim.step_time is None:
            duration, end = 1, t + 1
        else:
            duration = sim.duration(used - num_decode, num_decode)
            end = t + duration
        heap = self.finishes
        caching = kv.caching
        finished = self.finish(ordinal, end, not caching) if heap and heap[0][0] <= ordinal else []
        if caching:   # every request finishing in the step is freed by execute, in running order
            if scheduled or len(finished) > 1:
                finished = sim.execute(scheduled, ordinal, end, finished)
                if finished and scheduled:
                    scheduled = {seq: n for seq, n in scheduled.items() if seq.state == "running"}
            elif finished:   # one open run ends, nothing else: no order to keep
                seq = finished[0]
                kv.free(seq)
                del sim.running[seq]
                sim.end(seq, Status.DONE, end)
        if scheduled:
            others = self.others
            for seq in scheduled:   # admissions join the list at its end
                if seq not in others:
                    others[seq] = None
            if not caching:
                finished = finished + sim.execute(scheduled, ordinal, end)
            for seq in scheduled:
                if seq.state == "running" and seq.generated and seq.computed == seq.num_tokens - 1 \
                        and (not caching or kv.can_open(seq)):
                    del others[seq]
                    self.open(seq, ordinal + 1)
        return sim.end_step(t, ordinal, duration, used, num_decode, kv_used, (), (), admitted, hits, finished,
                            timeouts)

    def jump(self) -> None:
        """Advance over decode-only steps up to (not including) the next step where anything else
        can happen. Needs every running request to hold an open run."""
        sim, knobs, kv, bs = self.sim, self.sim.knobs, self.sim.kv, self.block_size
        num_open = len(sim.running)
        if self.others or not num_open or num_open > knobs.max_num_batched_tokens:
            return
        ordinal = sim.ordinal()
        waiting = sim.waiting.size
        if waiting and num_open < knobs.max_num_seqs and num_open < knobs.max_num_batched_tokens:
            head = sim.waiting.peek()
            # With prefix caching a hit can let in a head that does not fit whole: ask the memo, or look up.
            if blocks_for(head.num_tokens, bs) - kv.held(head) <= kv.num_free or \
                    (kv.caching and (head.hashes or head.first_private != 0) and kv.may_hit(head)
                     and sim.head_admissible(head)):
                return     # the next step admits
        heap = self.finishes
        while heap and (heap[0][3].open_from != heap[0][2] or heap[0][3].state != "running"):
            heapq.heappop(heap)
        limit = heap[0][0] - ordinal      # steps before the one sampling the first last token
        # Time: every jumped step starts before the next arrival that can matter and the next deadline.
        blocked = bool(waiting) or num_open >= knobs.max_num_seqs
        until = sim.arrivals.jump_limit(knobs.policy == "priority", blocked)
        t = sim.now
        if sim.step_time is None and until is not None:
            limit = min(limit, until - t)
        if limit < 2:
            return
        # KV: step j takes the runs due at ordinal + j; stop before the first that would not fit.
        due, free = self.due, kv.num_free
        cycles = min(limit // bs, free // num_open)
        taken, span = cycles * num_open, cycles * bs
        while span < limit and taken + due[(ordinal + span) % bs] <= free:
            taken += due[(ordinal + span) % bs]
            span += 1
        if sim.step_time is None:
            if span < 2:
                return
            sim.now = t + span
        else:
            ends, now, steps = [], t, 0
            if sim.reads_kv:   # step j holds the blocks taken up to it: asked once per step
                if span < 2:
                    return
                held, durations = kv.num_used, []
                while steps < span and (until is None or now < until):
                    held += due[(ordinal + steps) % bs]
                    duration = sim.step_time(0, num_open, held)
                    if not duration > 0:
                        raise ValueError(f"step_time(0, {num_open}, {held}) gave {duration!r}: a step must last > 0")
                    durations.append(duration)
                    now += duration
                    ends.append(now)
                    steps += 1
            else:
                duration = sim.step_time(0, num_open)   # the same batch every step: the same duration
                if not duration > 0:
                    raise ValueError(f"step_time(0, {num_open}) gave {duration!r}: a step must last > 0")
                while steps < span and (until is None or now < until):
                    now += duration
                    ends.append(now)
                    steps += 1
            span = steps
            # A step-time function that reads the KV blocks is asked exactly once per step taken, so a
            # step it was asked for is kept (alone, it is the decode-only step the walk would make).
            if span < (1 if sim.reads_kv else 2):
                return
            sim.stamp_times.extend(ends)
            sim.now = now
        kv_used, waiting = kv.num_used, sim.waiting.size   # before the jump's steps
        sim.num_steps += span
        sim.budget_spent += span * num_open
        sim.busy_steps += span
        if kv.caching and sim.log.detail == "counts":
            # A prefix-cached run's counts timeline holds the walk's per-step records (its bytes
            # predate this fast path): one decode-only step record each, in step order.
            # (A step time reading the KV blocks gives each step its own duration: the one asked for.)
            r = ordinal % bs   # the blocks held at each step: the due counts from ordinal on, summed
            used = due[r:r + span] if r + span <= bs else ((due[r:] + due[:r]) * (span // bs + 1))[:span]
            used[0] += kv_used
            used = list(accumulate(used))
            kv.reserve(used[-1] - kv_used)   # the blocks the jump's steps take
            if sim.step_time is None:
                starts, durations = range(t, t + span), [1] * span
            else:
                starts, durations = [t, *ends[:-1]], durations if sim.reads_kv else [duration] * span
            upcoming = sim.arrivals.upcoming   # no arrival before the last step starts: the same queue
            if upcoming is None or upcoming > starts[-1] and not sim._gated:
                num_waiting = [waiting] * span
            else:
                num_waiting = sim.arrivals.count_due(starts, waiting)
            sim.log.add_decode_steps(ordinal, starts, durations, num_open, used, num_open, num_waiting)
            sim.arrive(sim.now)
            return
        kv.reserve(span // bs * num_open + sum(due[(ordinal + j) % bs] for j in range(span % bs)))
        if sim.log.detail == "counts":   # the queue's length at the last jumped step (the largest seen)
            last_start = t + span - 1 if sim.step_time is None else ends[-2] if span > 1 else t
            waiting += sim.arrivals.count_due((last_start,))[0]
        sim.arrive(sim.now)
        # One step (a step time reading the KV blocks): its duration as asked, as the walk logs it.
        duration = sim.now - t if span > 1 else durations[0] if sim.step_time is not None else 1
        sim.log.add_jump(ordinal, t, span, duration, span * num_open, kv.num_used, num_open, waiting)
