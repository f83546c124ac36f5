"""The walked step of the vLLM engine: its running pass in order (vllm-engine.md §2, steps 3–5).

A step whose order matters (the budget or the free KV blocks run out before the running list
does, a preemption, a priority run, or ``per_step``) is walked: every running request in order
takes the tokens it still needs (a decode is 1 token), preempting the policy's victim (recompute)
when KV blocks run out; the waiting queue is admitted only if nothing was preempted; then the
step executes. Open decode runs (:mod:`sched.vllm.fastpath`) met on the way take their token
without being closed. The simulation's own state (running list, pool, runs) is what changes;
:func:`walk` returns what :meth:`sched.vllm.engine.VllmSimulation.end_step` returns.
"""

from __future__ import annotations

from .queue import Seq

__all__ = ["walk"]


def walk(sim, t, ordinal, cap, timeouts):
    """The literal step of ``sim`` (a :class:`sched.vllm.engine.VllmSimulation`) starting at ``t``
    (ticks or the step-time clock), step ``ordinal``, chunk cap ``cap`` (tokens, 0 = none), after the
    deadlines ``timeouts`` expired: the running list in order, preempting when KV blocks run out.

    An open run met on the way takes its 1 token and, every ``block_size`` steps, one block;
    it stays open unless it is preempted or the budget runs out before its turn."""
    knobs, kv, runs, bs = sim.knobs, sim.kv, sim.runs, sim.knobs.block_size
    due = ordinal % bs
    if runs is not None and kv.caching and sim._priority:
        # Prefix caching, priority: a victim may be preempted after taking its block in this
        # step; the literal step frees that block with its table, so open runs are walked closed.
        for seq in sim.running:
            if seq.open_from is not None:
                runs.close(seq, ordinal)
    running = list(sim.running)
    budget = knobs.max_num_batched_tokens
    scheduled: dict[Seq, int] = {}     # requests without an open run -> tokens
    opened: dict[Seq, int] = {}        # open runs scheduled in this step -> blocks they took
    preempted: list[tuple[Seq, Seq]] = []   # (victim, the request that needed its blocks)
    # 3. The running list, in order, while budget remains.
    i = bulk = 0
    if runs is not None and not sim._priority:
        # The open runs at the head of the list (the others, in running order, start at index k)
        # take 1 token each and together the blocks due now: when those fit, none of them can
        # preempt, and taking the blocks at once evicts what taking them one by one would.
        k = len(running) - len(runs.others)
        if k and k <= budget and (not runs.others or running[k] is next(iter(runs.others))) \
                and runs.due[due] <= kv.num_free:
            kv.reserve(runs.due[due])
            i = bulk = k
            budget -= k
    while i < len(running) and budget > 0:
        seq = running[i]
        if seq.open_from is None:
            n = min(seq.num_tokens - seq.computed, cap or budget, budget)
            need = kv.blocks_to_allocate(seq, seq.computed + n)
        else:
            n, need = 1, int((seq.open_from + 1 - seq.num_tokens) % bs == due)   # a new block?
        if need > kv.num_free:   # out of KV blocks: preempt the policy's victims (recompute)
            i, back = sim._preempt_for(seq, need, running, i, scheduled, preempted, t, ordinal, opened)
            budget += back
        if seq.state != "running":
            if sim._priority:
                continue      # the pass goes on with the next running request
            break             # fcfs: the request itself was the last one left to preempt
        if seq.open_from is None:
            kv.allocate(seq, seq.computed + n)
            scheduled[seq] = n
        else:
            if need:
                kv.reserve(need)
            opened[seq] = need
        budget -= n
        i += 1
    for seq in running[i:]:   # open runs the budget did not reach: no token in this step
        if seq.open_from is not None:
            runs.close(seq, ordinal)
            runs.open(seq, ordinal + 1)
    if preempted:   # the victims leave the running list (else it is unchanged)
        sim.running = dict.fromkeys(running)
    # 4. The waiting queue, only if nothing was preempted in this step.
    admitted, hits = ([], []) if preempted else sim.admit(t, cap, budget, scheduled)
    # 5. Execute.
    used = sum(scheduled.values()) + len(opened) + bulk
    num_decode = len(opened) + bulk + sum(1 for seq, n in scheduled.items()
                                   if n == 1 and seq.generated and seq.computed == seq.num_tokens - 1)
    kv_used = kv.num_used
    duration = sim.duration(used - num_decode, num_decode)
    end = t + duration
    if kv.caching:   # frees in running order (the free queue's order), open runs among the others
        finished = sim.execute(scheduled, ordinal, end, runs.finish(ordinal, end, False) if opened or bulk else ())
    else:
        finished = runs.finish(ordinal, end) if opened or bulk else []
        finished += sim.execute(scheduled, ordinal, end)
    if runs is not None:
        runs.reopen(ordinal, scheduled, kv.caching and sim._priority)
    return sim.end_step(t, ordinal, duration, used, num_decode, kv_used, scheduled.items(), preempted,
                         admitted, hits, finished, timeouts)
