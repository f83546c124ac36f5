"""Decode jumps of the async vLLM engine with prefix caching (``--async-scheduling
--enable-prefix-caching``; the results equal the batch-by-batch walk, which the tests check).

With prefix caching a decoding request runs open (:mod:`sched.vllm.async_runs`): its blocks are
private, its tokens are delivered by the run. When **every** running request is an open run and
the batch in flight samples no one else, each loop turn schedules the same batch (one decode token
per open run, no prompt token), takes the blocks due in the turn from the free queue (the same
evictions as the walk, in the same turn) and processes the batch before it, which delivers only open
runs' tokens. Only the clock, the blocks taken and the step log move, all known ahead: :func:`jump`
takes such turns at once and stops before any turn where something else could happen. Nothing in
the turns looks at the free queue, so their blocks are taken from its front in one go (the same
blocks, the same evictions, as turn by turn).

It stops before the turn

- whose batch skips an open run (its last token in flight: the turn closes it), or takes that turn
  as its last when nothing else happens there (a *finishing turn*, :func:`_closing`): the other runs
  still decode, their due blocks fit, and the head still fails the gate (nothing is freed before
  the turn's admission); processing the batch before it ends the closed runs, freeing their blocks,
  so the jump stops after it;
- whose blocks due would not fit the free blocks (a preemption);
- where an arrival that can matter joins (:meth:`sched.vllm.queue.Arrivals.jump_limit`).

It starts only when the head of the waiting queue cannot be admitted (or no admission can be tried:
no budget left, every slot taken, nobody waiting). The head then stays out in every turn of the
jump: its need (blocks of its whole sequence − hit blocks + idle hit blocks) can only shrink when a
block enters the cache, is freed or is touched, and none is in a jump; the blocks a turn takes leave
the free count one less each, and an evicted block can lower the need by at most one (the next copy
of its hash, held, found instead: :mod:`sched.vllm.free_queue`), so ``need > free`` holds on.
"""

from __future__ import annotations

import heapq

from ..core.records import Status
from .async_jump import take_turns
from .queue import running_order

__all__ = ["jump"]


def jump(runs, now):
    """Run, at once, the loop turns from ``now`` in which only open runs decode (module docstring).

    ``runs``: the :class:`sched.vllm.async_runs.AsyncDecodeRuns` of an async simulation with
    prefix caching, called at the top of a loop turn at time ``now`` (ticks, or µs with a step
    time; arrivals due already joined) with one batch ``B`` in flight. Applies when every running
    request is an open run and ``B`` samples no one (all its tokens are the runs'). Each turn taken
    logs the batch before it as the walk logs it (step records with 0 prompt and ``num_open``
    decode tokens), takes its due blocks (:meth:`sched.vllm.kv_cache.PrefixCachingKV.reserve`) and
    asks the step time once (``step_time(0, num_open, kv_blocks)`` when it reads the KV blocks, else
    ``step_time(0, num_open)`` once per jump, a pure function). A finishing turn after them is
    taken too (:func:`_finish_turn`). Returns the time at the top of the loop turn after the last
    one taken (the walk's ``now`` there), the last turn's batch left in flight, or ``None`` (state
    untouched) when no turn qualifies. Raises ``ValueError`` for a step
    time that is not > 0, as the walk does.
    """
    sim = runs.sim
    batch0 = sim.batches[0]
    num_open = runs.num_open
    if runs.others or not num_open or batch0.samplers or batch0.end is None or sim._held is not None \
            or len(sim.running) != num_open:
        return None
    knobs, kv, k = sim.knobs, sim.kv, runs.turn
    if num_open > knobs.max_num_batched_tokens:
        return None
    heap = runs.finishes
    while heap and heap[0][3].open_from != heap[0][2]:   # closed since: no longer its run's last turn
        heapq.heappop(heap)
    horizon = heap[0][0] - k   # turns k .. k + horizon − 1 schedule every open run (each has an entry)
    if horizon < 0:
        return None
    waiting = sim.waiting.size
    tried = num_open < knobs.max_num_batched_tokens and num_open < knobs.max_num_seqs   # admission tried?
    if waiting and tried and sim.head_admissible(sim.waiting.peek(), batch0):
        return None
    until = sim.arrivals.jump_limit(sim._priority, bool(waiting) or not tried)
    unit = sim.stamp_times is None
    # The turns' clock (a turn whose due blocks do not fit stops it: the walk would preempt); their
    # blocks are taken below, all at once: the same blocks, in order.
    if horizon:
        now, gpu_free, free, tops, starts, ends, used = take_turns(sim, now, batch0.end, kv.num_free, runs.due, k,
                                                                   horizon, until, num_open)
    else:
        gpu_free, free, tops, starts, ends, used = batch0.end, kv.num_free, [], [], [], []
    j = len(starts)
    # The turn whose batch skips the runs closing (a finishing turn), taken too when nothing else
    # happens in it (_closing).
    closing = _closing(runs, k + j, free, num_open, tried, until, now) if j == horizon else None
    if not j and closing is None:
        return None
    if j:
        # The turns' blocks off the free queue's front in one take: taking a then b blocks from the
        # front takes (and evicts) the same blocks as taking a + b.
        kv.reserve(kv.num_free - free)
        # Turn 1 processes B (it samples no one: only its step is logged); then batches 1 .. j − 1.
        sim.batches.pop()
        sim.process(batch0)
        first = starts[0] if unit else len(sim.stamp_times) - 1
        steps = list(range(first, first + j))
        if closing is not None:
            tops.append(now)   # the finishing turn's top: its waiting count
        upcoming = sim.arrivals.upcoming
        if upcoming is None or upcoming > tops[-1]:   # nobody joins the queue in these turns
            num_waiting = [waiting] * len(tops)
        else:   # arrivals joining the queue at each turn's start
            num_waiting = [waiting + n for n in sim.arrivals.count_due(tops)]
        last = j - 1
        if last:
            sim.log.add_decode_steps(first, starts[:last], [ends[i] - starts[i] for i in range(last)], num_open,
                                     used[:last], num_open, num_waiting[:last])
        runs.steps += steps
        runs.turn = k + j
        if not unit:
            sim.stamp_times += ends
        sim.gpu_free = gpu_free
        sim.budget_spent += j * num_open
        sim.busy_steps += j
        sim.num_steps += j
        sim._reported_finish = False
        batch = type(batch0)(
            step=steps[last], start=starts[last], end=ends[last], scheduled=[], samplers=[], num_prompt=0,
            num_decode=num_open, preempted=[], admitted=[], hits=[], kv_used=used[last], num_running=num_open,
            num_waiting=num_waiting[last], num_open=num_open)
    else:
        sim.batches.pop()
        batch, num_waiting = batch0, [waiting]
    if closing is None:
        sim.batches.appendleft(batch)
        return now
    return _finish_turn(runs, now, batch, closing, num_waiting[-1])


def _closing(runs, turn, free, num_open, tried, until, now):
    """The open runs whose last token is in flight at ``turn`` (the turn's batch skips them), taken
    off the finish heap, when that turn can be taken at once: at least one open run still decodes
    in it (its batch has tokens), its due blocks fit the ``free`` ones, admission is tried in it
    exactly when it was in the turns before (so the head still fails the gate, or none is tried),
    and, after a turn taken, no arrival that can matter joins at its top (``until``, ``now``).
    ``None`` (the heap as it was) otherwise."""
    sim = runs.sim
    if turn > runs.turn and until is not None and until <= now:
        return None
    heap, closing = runs.finishes, []
    bs = runs.block_size
    slot = turn % bs
    need = runs.due[slot]   # the turn's due blocks, less those of the runs it closes
    pop = heapq.heappop
    while heap and heap[0][0] == turn:
        entry = pop(heap)
        seq = entry[3]
        if seq.open_from == entry[2]:
            closing.append(entry)
            if (entry[2] - seq.num_tokens) % bs == slot:
                need -= 1
    knobs = sim.knobs
    decoding = num_open - len(closing)
    if closing and decoding and need <= free and \
            (decoding < knobs.max_num_batched_tokens and num_open < knobs.max_num_seqs) == tried:
        return closing
    for entry in closing:
        heapq.heappush(heap, entry)
    return None


def _finish_turn(runs, now, batch, closing, num_waiting):
    """Take the finishing turn ``runs.turn`` at ``now`` (its top), ``batch`` the batch in flight
    (already off the queue, sampling no one else), ``closing`` the heap entries of the runs it closes
    (:func:`_closing`), as the walk takes it: the runs are closed
    (:meth:`sched.vllm.async_runs.AsyncDecodeRuns.close`) and the others decode (their due blocks
    taken), then ``batch`` is processed (:meth:`sched.vllm.async_outputs.AsyncOutputs.process`): it
    delivers the closed runs' last tokens and ends them, freed in running order, and is logged with
    them. Both steps are done here at once for these runs (each one's tokens stamped in one go, never
    listed among the others). Returns the time after the turn."""
    sim, k = runs.sim, runs.turn
    kv, bs, steps, due = sim.kv, runs.block_size, runs.steps, runs.due
    stamp = batch.step + 1   # the stamp of the last tokens (steps[k − 1] + 1)
    seqs = []
    for _, _, opened, seq in closing:   # close: brought up to the start of turn k
        due[(opened - seq.num_tokens) % bs] -= 1
        seq.open_from = None
        count = k - opened   # tokens of the batches opened − 1 .. k − 2, then the last one (batch k − 1)
        seq.generated += count + 1
        seq.num_tokens += count + 1
        seq.computed += count
        seq.placeholders = 0
        rec, first = seq.rec, steps[opened - 1]
        if stamp - 1 - first == count:
            rec.emit(first + 1, count + 1)
        else:
            for j in range(opened - 1, k - 1):
                rec.emit(steps[j] + 1)
            rec.emit(stamp)
        kv.settle(seq, seq.computed - 1)   # its table as the walk leaves it at the turn's start
        seqs.append(seq)
    runs.num_open -= len(seqs)
    decoding = runs.num_open
    kv.reserve(due[k % bs])
    start = now if now > sim.gpu_free else sim.gpu_free
    if sim.stamp_times is None:
        step, duration = start, 1
    else:
        step = len(sim.stamp_times) - 1
        duration = sim.step_time(0, decoding, kv.num_used) if sim.reads_kv else sim.step_time(0, decoding)
        if not duration > 0:
            raise ValueError(f"step_time(0, {decoding}) gave {duration!r}: a step must last > 0")
        sim.stamp_times.append(start + duration)
    end = start + duration
    sim.gpu_free = end
    sim.budget_spent += decoding
    sim.busy_steps += 1
    sim.num_steps += 1
    runs.steps.append(step)
    runs.turn = k + 1
    running = sim.running
    sim.batches.appendleft(type(batch)(
        step=step, start=start, end=end, scheduled=[], samplers=[], num_prompt=0, num_decode=decoding,
        preempted=[], admitted=[], hits=[], kv_used=kv.num_used, num_running=len(running),
        num_waiting=num_waiting, num_open=decoding))
    # Processing ``batch``: the blocks the last tokens complete cached, then the runs end.
    for seq in seqs:
        if seq.computed // bs > seq.num_cached:
            kv.cache_full(seq, seq.computed)
    if len(seqs) > 1:
        seqs = running_order(seqs, running)
    for seq in seqs:
        kv.free(seq)
        del running[seq]
        sim.end(seq, Status.DONE, batch.end)
    sim._reported_finish = True
    sim._add(batch, seqs)
    return batch.end if batch.end > now else now
