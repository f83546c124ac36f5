"""Open decode runs of the async vLLM engine with prefix caching (``--async-scheduling
--enable-prefix-caching``; the results equal the batch-by-batch walk, which the tests check).

Under async scheduling (:mod:`sched.vllm.async_step`) a request that decodes is, at the start of
every loop turn, in the same state: one output token in flight (one placeholder), every known token
computed. The turn schedules it one token (a decode token) and processes the batch before, which
delivers that token. Nothing about it needs touching until it reaches its last token, is preempted,
or a turn's order starts to matter. Such a request is an *open run* from turn ``open_from`` on (a
turn is one ``schedule()``; the turn index counts them): its counts are those of the end of turn
``open_from − 1`` and :meth:`AsyncDecodeRuns.close` brings them up to date at the start of a later
turn, stamping the tokens it received in between (the batches ``open_from − 1`` up to the one before
the turn's in-flight batch) and handing it the KV blocks it started, with their cache entries.

A turn is **easy** when its running pass fits: the tokens every running request asks for are within
the budget and the blocks they need within the free blocks. Then nobody is preempted and nobody is
cut off by the budget, so the order of the pass only matters among the other requests (prefills,
recomputes, requests whose last token is in flight), which are walked in running order as the
literal pass walks them; the open runs add their tokens and the blocks due in the turn (taken from
the free queue in the turn: the same evictions, a taken block holds nothing and any one serves). Any
other turn is walked in running order (:meth:`sched.vllm.async_step.AsyncVllmSimulation._walk`): an
open run met there takes its token and its due block and stays open; one preempted or not reached
by the budget is closed. Under ``priority`` a victim may be one already scheduled in the turn (its
block of the turn returns with its table): every run is closed before such a walk.

What makes it exact with prefix caching: a request runs open only while the blocks it fills are
private (nobody else can hit them, :meth:`sched.vllm.kv_cache.PrefixCachingKV.can_open`), so
entering them in the cache later changes no lookup; a run is closed at the start of the turn where
its last token is in flight (that turn skips it and the batch before delivers the token and finishes
it), so an open run never finishes, and the requests finishing in one batch are freed in running
order (the free queue's order, :meth:`sched.vllm.async_outputs.AsyncOutputs.process`).
"""

from __future__ import annotations

import heapq

from ..core.records import SimulationError
from .async_open_jump import jump as open_jump

__all__ = ["AsyncDecodeRuns"]


class AsyncDecodeRuns:
    """The open runs of one :class:`sched.vllm.async_step.AsyncVllmSimulation` (prefix caching,
    timeline ``counts`` or ``off``) and the easy turns they allow (module docstring).

    Reads and advances the simulation's state. ``others``: the running requests without an open
    run, in running order; ``due[r]``: open runs taking a new KV block in the turns ``≡ r (mod
    block_size)``; ``steps[k]``: the step ordinal of turn ``k``'s batch (its tokens are stamped
    ``steps[k] + 1``).
    """

    def __init__(self, sim) -> None:
        self.sim = sim
        self.block_size = sim.kv.block_size
        self.turn = 0                     # the index of the next turn
        self.steps: list = []             # turn -> its batch's step ordinal
        self.due = [0] * self.block_size
        self.num_open = 0
        self.finishes: list = []          # (turn whose batch skips it, index, open_from, seq), lazily pruned
        self.others: dict = {}

    # --- one turn ------------------------------------------------------------------------------

    def schedule(self, now):
        """Turn ``self.turn``'s ``schedule()`` at ``now``: an easy turn, or every run closed and the
        literal pass walked. Returns the batch."""
        sim, k = self.sim, self.turn
        batch = None
        if self.num_open or self.others:
            heap = self.finishes
            closed = []
            while heap and heap[0][0] <= k:   # their last token is in flight: the walk skips them now
                _, _, opened, seq = heapq.heappop(heap)
                if seq.open_from == opened:
                    self.close(seq, k)
                    closed.append(seq)
            if closed:
                inflight = sim.batches[0]
                inflight.samplers += closed
                inflight.merged = True    # freed in running order (process)
            asks = self._asks(k)
            batch = None if asks is None else self._easy(now, k, asks)
            if batch is None and self.num_open and sim._priority:
                self._close_all(k)   # a victim may have taken its block in the turn: walked closed
        if batch is None:
            batch = sim._walk(now)
            # The walk may have preempted, admitted, closed runs.
            self.others = {seq: None for seq in sim.running if seq.open_from is None}
        self.steps.append(batch.step)
        self.turn = k + 1
        return batch

    def _asks(self, k):
        """Turn ``k``'s running pass when it preempts no one and the budget cuts off no open run: the
        others scheduled in it, as ``[(request, tokens, new blocks)]`` in running order (a request
        whose last token is in flight, or that asks for nothing, is skipped); ``None`` otherwise.

        The budget is spent in running order. It cuts off no open run when the demand fits it, or
        when every other comes after every open run in the running order (a prefill admitted last,
        chunked by the budget): the open runs then take their token each, the others what is left,
        in order, as the literal pass gives it (``min(tokens, budget left)``, nothing once it is 0)."""
        sim = self.sim
        knobs, bs, others = sim.knobs, self.block_size, self.others
        cap = knobs.long_prefill_token_threshold if len(sim.running) + sim.waiting.size > 1 else 0
        budget, blocks, asks, cut = knobs.max_num_batched_tokens - self.num_open, self.due[k % bs], [], None
        if budget < 0:
            return None
        for seq in others:
            if seq.placeholders and seq.computed + 2 - seq.placeholders >= seq.prompt + seq.output:
                continue
            n = seq.num_tokens + seq.placeholders - seq.computed
            if cap and n > cap:
                n = cap
            if n <= 0:
                continue
            if n > budget:   # cut by the budget (to nothing once it is spent)
                n = budget
                if cut is None:
                    cut = []
            if cut is not None:
                cut.append(seq)
            if not n:
                continue
            budget -= n
            table = seq.blocks   # a list, or a count of private blocks (kv.held)
            need = -(-(seq.computed + n) // bs) - (table if type(table) is int else len(table))
            if need > 0:
                blocks += need
            asks.append((seq, n, need))
        if blocks > sim.kv.num_free:
            return None
        if cut and self.num_open and not self._open_before(cut):
            return None
        return asks

    def _open_before(self, asking) -> bool:
        """Whether every open run comes before every request of ``asking`` (others, in running
        order, from the first one the budget cuts) in the running order."""
        left, asking = len(asking), set(asking)
        for seq in reversed(self.sim.running):
            if seq in asking:
                left -= 1
                if not left:
                    return True
            elif seq.open_from is not None:
                return False
        return True

    def _easy(self, now, k, asks):
        """An easy turn (its running pass fits, ``asks`` from :meth:`_asks`): the open runs decode by
        themselves, the others are scheduled in running order as the literal pass schedules them."""
        sim = self.sim
        knobs, kv, bs = sim.knobs, sim.kv, self.block_size
        start = now if now > sim.gpu_free else sim.gpu_free
        step = start if sim.stamp_times is None else len(sim.stamp_times) - 1
        sim._reported_finish = False
        cap = knobs.long_prefill_token_threshold if len(sim.running) + sim.waiting.size > 1 else 0
        kv.reserve(self.due[k % bs])
        budget = knobs.max_num_batched_tokens - self.num_open
        scheduled: dict = {}
        for seq, n, need in asks:
            target = seq.computed + n
            if need <= 0:   # no new block: only newly full blocks enter
                if (target if target < seq.num_tokens else seq.num_tokens) // bs > seq.num_cached:
                    kv.cache_full(seq, target if target < seq.num_tokens else seq.num_tokens)
            else:
                kv.allocate(seq, target)
            scheduled[seq] = n
            budget -= n
        batch = sim._complete(start, step, cap, budget, scheduled, [], self.num_open)
        others = self.others
        for seq in scheduled:   # admissions (first or after a preemption) join the running list at its end
            if seq not in others:
                others[seq] = None
        return batch

    def jump(self, now):
        """The loop turns from ``now`` in which only open runs decode, run at once
        (:func:`sched.vllm.async_open_jump.jump`); returns the time after them, or ``None``."""
        return open_jump(self, now)

    # --- opening and closing ---------------------------------------------------------------------

    def reopen(self, batch) -> None:
        """After turn ``self.turn − 1`` (``batch``, its batch, the only one in flight): its samplers
        that now decode run open from the next turn on."""
        kv, k = self.sim.kv, self.turn
        bs, others, opened = self.block_size, self.others, False
        for seq in batch.samplers:
            if seq.state == "running" and seq.placeholders == 1 and not seq.stale \
                    and seq.computed == seq.num_tokens and seq.num_tokens == seq.prompt + seq.generated \
                    and seq.generated + 2 <= seq.output and kv.held(seq) == -(-seq.computed // bs) \
                    and seq.open_from is None and kv.can_open(seq):
                seq.open_from = k
                self.due[(k - seq.num_tokens) % bs] += 1
                heapq.heappush(self.finishes, (k + seq.output - 1 - seq.generated, seq.index, k, seq))
                self.num_open += 1
                del others[seq]
                opened = True
        if opened:   # their tokens of this batch are delivered by the run
            batch.samplers = [seq for seq in batch.samplers if seq.open_from is None]

    def close(self, seq, k) -> None:
        """Bring an open run up to the start of turn ``k`` and close it (an other again)."""
        opened = seq.open_from
        self.due[(opened - seq.num_tokens) % self.block_size] -= 1
        seq.open_from = None
        count = k - opened   # tokens of the batches opened − 1 .. k − 2
        if count:
            seq.generated += count
            seq.num_tokens += count
            seq.computed += count
            steps, rec = self.steps, seq.rec
            first = steps[opened - 1]
            if steps[k - 2] - first == count - 1:
                rec.emit(first + 1, count)
            else:
                for j in range(opened - 1, k - 1):
                    rec.emit(steps[j] + 1)
        # Its table and cache entries caught up: as the walk leaves them at a turn's start, every full
        # block but the one the token in flight would complete (computed − 1 tokens).
        self.sim.kv.settle(seq, seq.computed - 1)
        self.num_open -= 1
        self.others[seq] = None

    def close_in_walk(self, seq) -> None:
        """Close ``seq`` in a walked turn (it is preempted, or the budget runs out before it): its
        token in flight is delivered with the batch in flight (it cannot be its last, so where it
        stands among that batch's samplers changes nothing)."""
        self.close(seq, self.turn)
        self.sim.batches[0].samplers.append(seq)

    def _close_all(self, k) -> None:
        """Close every open run before a walked turn ``k``; the batch in flight then lists every
        request it sampled, in running order."""
        sim = self.sim
        inflight = sim.batches[0]
        members = set(inflight.samplers)
        for seq in sim.running:
            if seq.open_from is not None:
                self.close(seq, k)
                members.add(seq)
        samplers = [seq for seq in sim.running if seq in members]
        if len(samplers) != len(members):
            raise SimulationError(f"vllm async: turn {k}: a request sampled in the batch in flight is not running")
        inflight.samplers = samplers
        inflight.merged = False
        self.finishes.clear()
