"""The waiting side of the vLLM engine (vllm-engine.md §2 steps 1, 2 and 4, §4): arrivals join the
waiting queue, deadlines abort requests, the admission gate admits from the head of the queue,
recompute preemption sends a request back, and a request ends.

:class:`WaitingSide` holds no state of its own: :class:`sched.vllm.engine.VllmSimulation` (and the
async engine) inherit it, and every attribute it reads (``knobs``, ``kv``, ``waiting``, ``running``,
``arrivals``, ``runs``, ``_blocked``, ``_num_ended``, ``_gated``, ``_ended``) is the simulation's.
"""

from __future__ import annotations

from ..core.records import Status
from .queue import Seq

__all__ = ["WaitingSide", "never_blocked"]


class WaitingSide:
    """Arrivals, deadlines, admission, preemption and endings of one vLLM-engine simulation."""

    def admit(self, t, cap, budget, scheduled) -> tuple[list, list]:
        """Step 4: admit from the head of the waiting queue while budget, a slot and KV room for
        the whole sequence (minus its hit) remain; adds them to ``scheduled``. Returns (first
        admissions, those of them with a cache hit)."""
        knobs, kv, waiting = self.knobs, self.kv, self.waiting
        admitted, hits = [], []
        while waiting.size and budget > 0 and len(self.running) < knobs.max_num_seqs:
            seq = waiting.peek()
            if kv.caching:
                blocked = self._blocked   # blocked_head, inlined
                if blocked is not None:
                    if blocked[0] is seq and blocked[2] == kv.epoch and kv.num_free < blocked[1]:
                        break
                    self._blocked = None
                known, need = self._admissible, None
                if known is not None:   # looked up at this turn's top (head_admissible), nothing changed since
                    self._admissible = None
                    if known[0] is seq and known[3] is self.batches[0] and known[4] == kv.epoch \
                            and (not known[1] or known[5] == kv.num_free):
                        hit, need = known[1], known[2]
                if need is None:
                    if seq.first_private == 0 and not seq.hashes:
                        # Its first block is private and it has never held one: nothing of it is
                        # cached (no lookup); it needs the blocks of its whole sequence.
                        hit, need = (), -(-seq.num_tokens // knobs.block_size) - len(seq.blocks)
                    else:
                        hit = kv.find_hit(seq)
            else:
                hit, need = [], None
            computed = len(hit) * knobs.block_size
            n = min(seq.num_tokens - computed, cap or budget, budget)
            if need is None:
                need = kv.blocks_to_allocate(seq, seq.num_tokens, hit)
            if need > kv.num_free:
                if kv.caching and self.blocked_head is not never_blocked:   # remember what the gate saw
                    self._blocked = (seq, need, kv.epoch)                        # (blocked_head)
                break     # admission gate: a waiting request never preempts
            waiting.pop()
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
            self.running[seq] = None
            scheduled[seq] = n
            budget -= n
        return admitted, hits

    #: The async engine's answer of :meth:`head_admissible` at a loop turn's top when the head passes:
    #: ``(seq, hit, need, batch in flight, epoch, free blocks)``, reused by :meth:`admit` in the same
    #: turn (the same batch in flight) at the same epoch. Before admission a turn only takes blocks
    #: (a turn that frees, by preempting, admits no one), so no block has entered the cache or been
    #: touched: an empty hit stays empty (its need, the blocks of the whole sequence, with it); a
    #: hit with blocks is reused only while the free blocks are unchanged too (nothing taken, so
    #: nothing evicted), else looked up again.
    _admissible = None

    def head_admissible(self, seq, inflight=None) -> bool:
        """With prefix caching: whether ``seq``, the head of the queue, passes the admission gate now
        (its memo kept when it does not; see :meth:`blocked_head`). ``inflight``: the async engine's
        batch in flight at this loop turn's top; when given and the head passes, its hit and need
        are kept for :meth:`admit` in the same turn (:attr:`_admissible`)."""
        kv = self.kv
        if self.blocked_head(seq):
            return False
        hit = kv.find_hit(seq)
        need = kv.blocks_to_allocate(seq, seq.num_tokens, hit)
        if need > kv.num_free:
            self._blocked = (seq, need, kv.epoch)
            return False
        if inflight is not None:
            self._admissible = (seq, hit, need, inflight, kv.epoch, kv.num_free)
        return True

    def blocked_head(self, seq) -> bool:
        """With prefix caching: whether ``seq``, the head of the queue, is known to fail the admission
        gate without looking its prefix up again. It failed needing ``need`` blocks at cache epoch
        ``epoch``; its need (blocks of the whole sequence − hit blocks + idle hit blocks) can only
        shrink when a shared block enters the cache, an idle hit block is touched, or an evicted
        block leaves a copy of its hash cached (each bumps the epoch). Otherwise it only grows: an
        eviction cuts its hit (a block it counted as idle costs nothing once gone, one it counted
        as held costs one more), a free turns a held hit block idle (one more), blocks freed into
        a run or the free queue's front are nobody else's to hit, and a stale token delivered to a
        preempted head adds at most the block it completes to its hit and to its sequence alike.
        So at the same epoch, while fewer blocks than ``need`` are free, it fails again (frees
        that leave fewer than ``need`` free look nothing up)."""
        blocked = self._blocked
        if blocked is None:
            return False
        if blocked[0] is seq and blocked[2] == self.kv.epoch and self.kv.num_free < blocked[1]:
            return True
        self._blocked = None
        return False

    def arrive(self, t) -> None:
        """Requests with ``arrival <= t`` join the waiting queue (in arrival, then workload order)."""
        for seq in self.arrivals.due(t):
            seq.state = "waiting"
            self.waiting.push(seq)

    def _preempt_for(self, seq: Seq, need: int, running: list, i: int, scheduled: dict, preempted: list, t, ordinal,
                     opened: dict | None = None) -> tuple[int, int]:
        """Preempt (recompute) until ``need`` KV blocks are free for ``seq`` or ``seq`` itself was the
        victim (vllm-engine.md §2): fcfs the last request of ``running``, priority the one with the
        largest key, taken out of ``running`` (the pass's index ``i`` moves back when the victim stood
        before it). A victim already scheduled in this step gives its tokens back (``scheduled``: request
        -> tokens; ``opened``: open run -> the blocks it took, given back too). Each ``(victim, seq)``
        is appended to ``preempted``. Returns ``(i, tokens given back to the budget)``."""
        kv, back = self.kv, 0
        while need > kv.num_free:
            if self._priority:
                victim = max(running, key=lambda s: s.key)
                where = running.index(victim)
                del running[where]
                if where < i:
                    i -= 1
                if victim in scheduled:   # already scheduled in this step: its tokens return
                    back += scheduled.pop(victim)
                elif opened is not None and victim in opened:
                    back += 1
                    kv.num_free += opened.pop(victim)
            else:
                victim = running.pop()
            self._preempt(victim, t, ordinal)
            preempted.append((victim, seq))
            if victim is seq:
                break
        return i, back

    def _preempt(self, seq: Seq, t, ordinal) -> None:
        """Recompute preemption in the step ``ordinal`` starting at ``t``: free the blocks, forget
        the computed tokens, back to the queue (fcfs: its front; priority: its place by key)."""
        if seq.open_from is not None:
            self.runs.close(seq, ordinal)
        self.kv.free(seq)
        seq.computed = 0
        seq.state = "waiting"
        rec = seq.rec
        rec.num_preemptions += 1
        if not rec.preempted_at:
            rec.preempted_at = []
        rec.preempted_at.append(t)
        self.waiting.push_preempted(seq)

    def _expire(self, t, ordinal) -> list:
        """Abort every request whose deadline has come, blocks freed at once. It ends at ``t``, the start
        of the first step at or after its deadline: with unit steps that is the deadline itself; with a
        step time a step in flight is never interrupted, so a deadline inside it ends the request when
        that step ends (after any token the step gave it)."""
        expired = []
        for seq in self.arrivals.expired(t):
            if seq.state == "ended":
                continue
            if seq.state == "waiting":
                self.waiting.discard(seq)
                self.kv.forget(seq)   # a preempted request's run: nobody's now
            else:
                if seq.open_from is not None:
                    self.runs.close(seq, ordinal)
                del self.running[seq]
                if self.runs is not None:
                    self.runs.others.pop(seq, None)
                self.kv.free(seq)
                self.kv.forget(seq)   # freed as a preemption frees: the run it left is nobody's
            self.end(seq, Status.TIMEOUT, t)
            expired.append(seq)
        return expired

    def end(self, seq: Seq, status: Status, at) -> None:
        """``seq`` ends now with ``status`` at time ``at``."""
        seq.state = "ended"
        if seq.hashes:
            seq.hashes = []   # an ended request is never looked up again
        rec = seq.rec
        rec.status = status
        rec.done_at = at
        self._num_ended += 1
        if self._gated:
            self.arrivals.release(at)
        if self._ended is not None:   # packed into the run's columns; the record goes with its Seq
            self._ended.add(rec)
            return
        # Its token runs are final: kept as a tuple (a list holds a spare buffer; at 10^6 requests
        # the difference is about 60 MB). Every reader of an ended request's runs only reads them.
        # A count equal to a value of its spec holds the spec's int object (one per value, not one
        # per request: 32 bytes each above 256).
        spec, runs = rec.spec, rec._runs
        out = spec.output_tokens
        rec._runs = (runs[0], out) if len(runs) == 2 and runs[1] == out else tuple(runs)
        if rec._num_closed == out:
            rec._num_closed = out
        if rec.admitted_at == spec.arrival:
            rec.admitted_at = spec.arrival


def never_blocked(seq) -> bool:
    """The literal engine's answer to :meth:`VllmSimulation.blocked_head`: look the head up again."""
    return False
