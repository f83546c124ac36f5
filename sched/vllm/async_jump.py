"""Decode jumps of the async vLLM engine (``--async-scheduling`` without prefix caching).

In a stretch where every running request decodes, each turn of the async engine loop
(:mod:`sched.vllm.async_step`) schedules the same batch (one token for each running request) and
processes the batch before it; only the block count, the clock and the token stamps move, all
known ahead. :func:`jump` takes such turns at once and stops before any turn where something else
could happen: a request's last token in flight, a preemption, an admission, an arrival. Its
results equal the walk's, record for record (``tests/test_vllm_async_jumps.py``, against the walk that
the async oracle corpus pins). With prefix caching the engine walks: which block a decode takes
and which full block gets cached matter there.
"""

from __future__ import annotations

__all__ = ["jump", "take_turns"]


def take_turns(sim, now, gpu_free, free, due, offset, horizon, until, num_decode, head_need=None):
    """The clock of up to ``horizon`` decode-only loop turns from ``now`` (the part both async jumps
    share: this module's and :mod:`sched.vllm.async_open_jump`'s).

    Turn ``t`` (0, 1, ...) schedules ``num_decode`` decode tokens and takes ``due[(offset + t) %
    block_size]`` blocks of the ``free`` ones; it starts when the GPU is free of the batch before it
    (``gpu_free``, ticks or µs) and lasts the step time (1 tick without one; ``step_time(0,
    num_decode, kv_blocks)`` each turn when it reads the KV blocks, else ``step_time(0, num_decode)``
    once). Turns stop before one whose blocks do not fit (a preemption), one that would leave the
    waiting head's ``head_need`` blocks free (an admission), and, after the first, one whose start
    ``until`` has reached (an arrival that can matter). Returns ``(now, gpu_free, free, tops,
    starts, ends, used)``: the time at the top of the turn after the last one taken, when the GPU
    frees, the free blocks left, and per turn taken its loop-top time, start, end and KV blocks
    used. Raises ``ValueError`` for a step time that is not > 0, as the walk does.
    """
    step_time, reads_kv, unit, capacity = sim.step_time, sim.reads_kv, sim.stamp_times is None, sim.kv.capacity
    bs = len(due)
    tops, starts, ends, used = [], [], [], []
    duration = None   # asked once, at the first turn taken, when it does not read the KV blocks
    t = 0
    while t < horizon:
        if t and until is not None and until <= now:
            break                            # an arrival that can matter joins at this turn's start
        need = due[(offset + t) % bs]
        if need > free or (head_need is not None and head_need <= free - need):
            break                            # a preemption, or an admission
        free -= need
        start = now if now > gpu_free else gpu_free
        if unit:
            d = 1
        elif reads_kv:
            d = step_time(0, num_decode, capacity - free)
        else:
            if duration is None:
                duration = step_time(0, num_decode)
            d = duration
        if not d > 0:
            raise ValueError(f"step_time(0, {num_decode}) gave {d!r}: a step must last > 0")
        end = start + d
        tops.append(now)
        starts.append(start)
        ends.append(end)
        used.append(capacity - free)
        if gpu_free > now:                   # processing the batch before waits for its end
            now = gpu_free
        gpu_free = end
        t += 1
    return now, gpu_free, free, tops, starts, ends, used


def jump(sim, now):
    """Run, at once, the loop turns in which nothing but decoding can happen (no prefix caching).

    ``sim``: an :class:`sched.vllm.async_step.AsyncVllmSimulation` whose pool has no prefix caching;
    called at the top of a loop turn at time ``now`` (arrivals due already joined) with one
    batch ``B`` in flight. Applies when every running request sampled in ``B`` and decodes
    (one placeholder, nothing stale, ``computed == num_tokens``, a block table of exactly its
    computed tokens): then each turn schedules one token for each of the N running requests
    (a batch of 0 prompt and N decode tokens) and processes the batch before it. Turns are
    taken while no request's last token would be in flight (``output − generated − 1`` turns
    at most: no skip, no finish), the blocks a turn's decodes need fit in the free blocks (no
    preemption), the head of the waiting queue stays out (vLLM's admission gate, which only
    free blocks can open here), and no arrival that could matter is due at a turn's start (one
    that joins behind a head the gate holds, or while every slot is taken, only adds to the
    batches' waiting counts; it joins the queue at the loop's next turn, in the same order).
    Each batch is logged as the walk logs it (every timeline detail) and each token stamped as
    the walk stamps it. Returns the time after the last turn taken, or ``None`` (state untouched)
    when no turn qualifies. The step time is asked once per turn taken when it reads the KV
    blocks, else once per jump (as the sync engine's jumps do). Raises ``ValueError`` for a step
    time that is not > 0, as the walk does.
    """
    batch0 = sim.batches[0]
    if batch0.end is None or sim._held is not None:
        return None
    running, knobs, kv = sim.running, sim.knobs, sim.kv
    n_run, bs = len(running), kv.block_size
    if not n_run or len(batch0.samplers) != n_run or n_run > knobs.max_num_batched_tokens:
        return None
    horizon = None
    due = [0] * bs   # due[r]: requests taking a new block in turns j ≡ r (mod block size)
    for seq in batch0.samplers:
        if seq.state != "running" or seq.placeholders != 1 or seq.stale or seq.computed != seq.num_tokens \
                or seq.num_tokens != seq.prompt + seq.generated or seq.blocks != -(-seq.computed // bs):
            return None
        left = seq.output - seq.generated - 1
        if horizon is None or left < horizon:
            horizon = left
        due[(1 - seq.computed) % bs] += 1
    if horizon < 1:
        return None
    waiting = sim.waiting.size
    # An arrival can matter only when it could be admitted at once or reorder the queue (priority):
    # behind a head the gate holds, or with every slot taken, it only joins the waiting count.
    until = sim.arrivals.jump_limit(knobs.policy == "priority", bool(waiting) or n_run >= knobs.max_num_seqs)
    head_need = None
    if waiting and knobs.max_num_batched_tokens > n_run and n_run < knobs.max_num_seqs:
        head = sim.waiting.peek()
        head_need = kv.blocks_to_allocate(head, head.num_tokens)
    unit = sim.stamp_times is None
    ordinal = None if unit else len(sim.stamp_times) - 1
    now, gpu_free, free, tops, starts, ends, used = take_turns(
        sim, now, batch0.end, kv.num_free, due, 1, horizon, until, n_run, head_need)
    turns = len(starts)
    if not turns:   # a step time is asked only for turns taken (a replay counts its calls)
        return None
    # Turn 1 processes the batch in flight (it finishes no one); then batches 1 .. turns - 1.
    sim.batches.pop()
    sim.process(batch0)
    pairs = [(seq, 1) for seq in running]
    samplers = list(running)
    first_step = starts[0] if unit else ordinal
    for seq in samplers:
        seq.computed += turns
        seq.blocks = -(-seq.computed // bs)
        seq.generated += turns - 1
        seq.num_tokens += turns - 1
        seq.placeholders = 1
        if turns > 1:
            seq.rec.emit(first_step + 1, turns - 1)
    kv.num_free = free
    sim.gpu_free = gpu_free
    if not unit:
        sim.stamp_times.extend(ends)
    sim.budget_spent += turns * n_run
    sim.busy_steps += turns
    sim.num_steps += turns
    sim._reported_finish = False
    joined = sim.arrivals.count_due(tops)   # arrivals joining the queue at each turn's start
    add = sim.log.add_step
    for k in range(turns - 1):
        add(starts[k] if unit else ordinal + k, starts[k], ends[k] - starts[k], pairs, 0, n_run, (), (), (), (),
            [], used[k], n_run, waiting + joined[k])
    last = turns - 1
    sim.batches.appendleft(type(batch0)(
        step=starts[last] if unit else ordinal + last, start=starts[last], end=ends[last], scheduled=pairs,
        samplers=samplers, num_prompt=0, num_decode=n_run, preempted=[], admitted=[], hits=[],
        kv_used=used[last], num_running=n_run, num_waiting=waiting + joined[last]))
    return now
