"""Decode jumps of the async vLLM engine (``sched.vllm.async_step.AsyncVllmSimulation.jump``) and,
with prefix caching, its open decode runs (``sched.vllm.async_runs``): a run with them gives
exactly the records of the same run walked batch by batch (``DECODE_JUMPS`` off), every request
record and every step record, in all three timeline details.

The reference is the walk itself, which the 30 async oracle cases pin to vLLM 0.33.0
(``tests/test_vllm_oracle_async.py``); the workloads here are random, drawn so that runs have long
decode stretches (jumps happen) as well as preemption (tiny KV), chunked prefill, priority, prefix
caching (open runs there, with timeline ``counts`` and ``off``) and step models with and without
the KV term; the prefix-cached workloads share prefixes, workload blocks and whole prompts, on small
KV pools and small budgets, and crowded ones (heads of queue held while open runs decode) exercise
the open runs' decode jumps (``sched.vllm.async_open_jump``). ``ISL_FULL=1`` runs 120 seeds of
each instead of 8, 12 and 10.
"""

from __future__ import annotations

import random
import unittest
from unittest import mock

from sched.vllm import async_open_jump, async_runs, async_step
from sched.vllm.async_step import simulate
from sched.vllm.config import VllmKnobs
from sched.workload.specs import RequestSpec
from tests.helpers import FULL


def random_case(seed: int):
    """A random workload (1-40 requests, outputs up to 200 tokens, bursts of arrivals) and async
    knobs: 4 or 16 tokens a block, tiny to ample KV, fcfs or priority, chunk caps, prefix caching
    on or off, and one of four clocks (unit steps, a step time, a step time reading the KV blocks)."""
    rng = random.Random(f"async-jump/{seed}")
    workload = []
    for i in range(rng.randint(1, 40)):
        key = rng.choice([None, None, "a", "b"])
        prefix = rng.randint(1, 40) if key else 0
        workload.append(RequestSpec(f"r{i}", rng.choice([0, rng.randint(0, 60), rng.randint(0, 400)]), key, prefix,
                                    rng.randint(1, 80), rng.randint(1, 200), rng.choice([None, 0, 1])))
    size = rng.choice([4, 16])
    need = max(-(-(s.prompt_tokens + s.output_tokens - 1) // size) for s in workload)
    tokens = rng.choice([8, 32, 128, 2048])
    knobs = VllmKnobs(tokens, rng.randint(1, min(12, tokens)), rng.choice([0, 8]), rng.random() < 0.3,
                      size, rng.choice([None, need + 1, need + 3, 2 * need + 1, 4 * need]),
                      rng.choice(["fcfs", "priority"]), async_scheduling=True)
    clock = rng.choice(["unit", "ms", "ms-kv", "float"])
    if clock == "unit":
        step_time = None
    elif clock == "ms":
        def step_time(p, d):
            return 20 + p // 3 + d
    elif clock == "float":
        def step_time(p, d):
            return 24.65 + 0.08477 * p + 0.013 * d
    else:
        def step_time(p, d, kv):
            return 10 + p + 2 * d + kv // 4
        step_time.reads_kv_blocks = True
    return workload, knobs, step_time


def random_cached_case(seed: int):
    """A random prefix-cached workload for the open runs (sched.vllm.async_runs): prompts sharing
    prefix keys of nested lengths, workload block chains, whole prompts repeated (shared output
    blocks) and own prompts; long outputs (runs open), KV from one request's need to twice it
    (preemption, eviction of cached blocks), budgets from 8 tokens (turns cut by the budget) to
    2048, chunk caps, both policies and the four clocks of :func:`random_case`."""
    rng = random.Random(f"async-open/{seed}")
    size = rng.choice([4, 16])
    workload = []
    for i in range(rng.randint(2, 30)):
        arrival, output, priority = rng.choice([0, rng.randint(0, 40), rng.randint(0, 300)]), rng.randint(1, 150), \
            rng.choice([None, 0, 1])
        kind = rng.choice(["key", "blocks", "own", "repeat"])
        if kind == "repeat" and workload:
            base = rng.choice(workload)
            workload.append(RequestSpec(f"r{i}", arrival, base.prefix_key, base.prefix_tokens, base.suffix_tokens,
                                        output, priority, base.prefix_blocks, base.block_size))
        elif kind == "key":
            key = rng.choice("AB")
            workload.append(RequestSpec(f"r{i}", arrival, key, rng.choice([5, 16, 33] if key == "A" else [40]),
                                        rng.choice([0, 0, 1, 7, 30]), output, priority))
        elif kind == "blocks":
            chain = rng.choice([(1,), (1, 2), (1, 2, 3), (1, 4), (5,)])
            workload.append(RequestSpec(f"r{i}", arrival, None, 0, len(chain) * size + rng.choice([0, 0, 3, 20]),
                                        output, priority, chain, size))
        else:
            workload.append(RequestSpec(f"r{i}", arrival, None, 0, rng.randint(1, 60), output, priority))
    need = max(-(-(s.prompt_tokens + s.output_tokens - 1) // size) for s in workload)
    tokens = rng.choice([8, 16, 32, 2048])
    knobs = VllmKnobs(tokens, rng.randint(1, min(12, tokens)), rng.choice([0, 0, 8]), True, size,
                      rng.choice([need + 1, need + 2, need + 5, 2 * need + 1, None]),
                      rng.choice(["fcfs", "priority"]), async_scheduling=True)
    _, _, step_time = random_case(seed)
    return workload, knobs, step_time


def random_crowded_case(seed: int):
    """A random prefix-cached workload for the decode jumps of open runs (sched.vllm.async_open_jump):
    bursts of arrivals onto a KV pool a little above one request's need, so heads of queue wait
    (their admission checked, then held) while the running requests decode open; long outputs,
    prompts sharing prefix keys, workload blocks and whole prompts, budgets from 8 tokens, both
    policies, a benchmark client's concurrency limit in some cases, and the four clocks of
    :func:`random_case`. Returns (workload, knobs, step_time, max_concurrency)."""
    rng = random.Random(f"async-crowded/{seed}")
    size = rng.choice([4, 16])
    workload = []
    for i in range(rng.randint(4, 30)):
        arrival = rng.choice([0, 0, rng.randint(0, 30), rng.randint(0, 600)])
        output, priority = rng.randint(20, 300), rng.choice([None, 0, 1])
        kind = rng.choice(["key", "blocks", "own", "own", "repeat"])
        if kind == "repeat" and workload:
            base = rng.choice(workload)
            workload.append(RequestSpec(f"r{i}", arrival, base.prefix_key, base.prefix_tokens, base.suffix_tokens,
                                        output, priority, base.prefix_blocks, base.block_size))
        elif kind == "key":
            workload.append(RequestSpec(f"r{i}", arrival, "A", rng.choice([5, 16, 40]), rng.choice([0, 3, 30]),
                                        output, priority))
        elif kind == "blocks":
            chain = rng.choice([(1,), (1, 2), (3,)])
            workload.append(RequestSpec(f"r{i}", arrival, None, 0, len(chain) * size + rng.choice([0, 5]),
                                        output, priority, chain, size))
        else:
            workload.append(RequestSpec(f"r{i}", arrival, None, 0, rng.randint(1, 90), output, priority))
    need = max(-(-(s.prompt_tokens + s.output_tokens - 1) // size) for s in workload)
    tokens = rng.choice([8, 64, 2048])
    knobs = VllmKnobs(tokens, rng.randint(2, min(16, tokens)), rng.choice([0, 0, 8]), True, size,
                      rng.choice([need + 1, need + 4, 2 * need, 3 * need]), rng.choice(["fcfs", "priority"]),
                      async_scheduling=True)
    _, _, step_time = random_case(seed)
    return workload, knobs, step_time, rng.choice([None, None, rng.randint(1, 6)])


def requests_of(result):
    return [(r.spec.name, r.admitted_at, r.token_times, r.done_at, r.status, r.num_preemptions,
             list(r.preempted_at), r.hit_tokens) for r in result.requests]


def run(workload, knobs, step_time, timeline, jumps, max_concurrency=None):
    with mock.patch.object(async_step, "DECODE_JUMPS", jumps):
        return simulate(workload, knobs, timeline=timeline, step_time=step_time, max_concurrency=max_concurrency)


def counting_open_jumps(taken: list):
    """A patch of AsyncDecodeRuns.jump appending the number of loop turns each jump took."""
    original = async_runs.AsyncDecodeRuns.jump

    def counting(runs, now):
        turn = runs.turn
        result = original(runs, now)
        if result is not None:
            taken.append(runs.turn - turn)
        return result
    return mock.patch.object(async_runs.AsyncDecodeRuns, "jump", counting)


def jumped_counts(workload, knobs):
    """``(result, turns taken by each open-run jump)`` of a ``counts`` run with decode jumps."""
    taken = []
    with counting_open_jumps(taken):
        return run(workload, knobs, None, "counts", True), taken


class AsyncDecodeJumpTest(unittest.TestCase):
    def assert_same_run(self, workload, knobs, step_time, max_concurrency=None):
        for timeline in ("full", "counts", "off"):
            walked = run(workload, knobs, step_time, timeline, False, max_concurrency)
            jumped = run(workload, knobs, step_time, timeline, True, max_concurrency)
            with self.subTest(timeline=timeline):
                self.assertEqual(requests_of(walked), requests_of(jumped))
                self.assertEqual(walked.ticks, jumped.ticks)
                self.assertEqual((walked.budget_spent, walked.busy_ticks), (jumped.budget_spent, jumped.busy_ticks))

    def test_random_workloads_jumped_equal_walked(self):
        for seed in range(120 if FULL else 8):
            workload, knobs, step_time = random_case(seed)
            with self.subTest(seed=seed, knobs=knobs):
                self.assert_same_run(workload, knobs, step_time)

    def test_random_prefix_cached_workloads_open_equal_walked(self):
        """With prefix caching decoding requests run open (sched.vllm.async_runs): the same records
        as the walk, on workloads where runs open, close for preemptions and budget cuts, and
        share blocks; open runs did happen over these seeds (a run closed after decoding in the open)."""
        closed_open = []
        original = async_runs.AsyncDecodeRuns.close

        def counting(runs, seq, turn):
            closed_open.append(turn - seq.open_from)
            original(runs, seq, turn)
        with mock.patch.object(async_runs.AsyncDecodeRuns, "close", counting):
            for seed in range(120 if FULL else 12):
                workload, knobs, step_time = random_cached_case(seed)
                with self.subTest(seed=seed, knobs=knobs):
                    self.assert_same_run(workload, knobs, step_time)
        self.assertGreater(sum(closed_open), 1000)

    def test_random_crowded_cached_workloads_jumped_equal_walked(self):
        """Open runs' decode jumps (sched.vllm.async_open_jump) on crowded prefix-cached workloads:
        the same records as the walk (every request, every step record of the three timeline
        details); jumps did happen over these seeds (more than 2,000 loop turns taken by jumps)."""
        taken = []
        with counting_open_jumps(taken):
            for seed in range(120 if FULL else 10):
                workload, knobs, step_time, concurrency = random_crowded_case(seed)
                with self.subTest(seed=seed, knobs=knobs, max_concurrency=concurrency):
                    self.assert_same_run(workload, knobs, step_time, concurrency)
        self.assertGreater(sum(taken), 2000)

    def test_open_runs_jump_only_while_the_head_waits(self):
        """Hand check (unit steps, block size 16, 2,048-token budget, 4 slots, prefix caching, 52
        usable blocks). ``a`` and ``b`` (100-token prompts, 300 output tokens) arrive at 0: batch 0
        (tick 0) prefills both and samples their first token, so both run open from turn 1, and turn
        300's batch skips them (their last token in flight). ``d`` (620-token prompt: 39 blocks, 2
        output tokens) arrives at 5 and waits: ``a`` and ``b`` hold at least 14 blocks, so at most 38
        are free until they end.

        - jump 1: turns 1..5 (loop tops at 0..4; an arrival that could be admitted at once stops it
          before the turn whose top is at 5);
        - jump 2: turns 6..299 (294 turns: ``d`` joins at 5 and its admission fails; nothing else
          can happen before turn 300);
        - turn 300 schedules nobody (an empty batch takes no time), processing batch 299 ends ``a``
          and ``b`` at 300; turn 301 admits ``d`` at 300 (batch 301 runs in tick 300, its first
          token stamped 301), which runs open from turn 302: jump 3 is turn 302 alone (turn 303
          skips it), its last token stamped 302.

        ``a``'s last token is stamped 300; every record equals the walk's."""
        workload = [RequestSpec("a", 0, None, 0, 100, 300), RequestSpec("b", 0, None, 0, 100, 300),
                    RequestSpec("d", 5, None, 0, 620, 2)]
        knobs = VllmKnobs(2048, 4, 0, True, 16, 53, async_scheduling=True)
        jumped, taken = jumped_counts(workload, knobs)
        self.assertEqual(taken, [5, 294, 1])
        self.assertEqual([r.token_times[-1] for r in jumped.requests], [300, 300, 302])
        self.assertEqual((jumped.requests[2].admitted_at, jumped.requests[2].token_times), (300, [301, 302]))
        walked = run(workload, knobs, None, "counts", False)
        self.assertEqual(requests_of(jumped), requests_of(walked))
        self.assertEqual(jumped.ticks, walked.ticks)

    def test_a_turn_that_only_ends_runs_ends_the_jump(self):
        """Hand check of the finishing turn taken by a jump (sched.vllm.async_open_jump._closing), as
        test_open_runs_jump_only_while_the_head_waits but ``b`` decodes 400 tokens. Turn 300's batch
        skips ``a`` (its last token in flight) while ``b`` decodes, and ``d`` still fails the gate (``a``
        and ``b`` hold 25 blocks each, 2 of 52 free): jump 2 takes turns 6..300 (295 turns), processing
        batch 299 in turn 300 ends ``a`` (last token stamped 300). ``d`` needs 39 blocks, 27 are free:
        jump 3 takes turns 301..399 (99; turn 400 ends ``b`` with nobody decoding: an empty batch, not
        taken by a jump); turn 401 admits ``d`` at 400 (first token stamped 401), jump 4 is turn 402
        alone. Every record equals the walk's."""
        workload = [RequestSpec("a", 0, None, 0, 100, 300), RequestSpec("b", 0, None, 0, 100, 400),
                    RequestSpec("d", 5, None, 0, 620, 2)]
        knobs = VllmKnobs(2048, 4, 0, True, 16, 53, async_scheduling=True)
        jumped, taken = jumped_counts(workload, knobs)
        self.assertEqual(taken, [5, 295, 99, 1])
        self.assertEqual([r.token_times[-1] for r in jumped.requests], [300, 400, 402])
        self.assertEqual([r.done_at for r in jumped.requests], [300, 400, 402])
        self.assertEqual((jumped.requests[2].admitted_at, jumped.requests[2].token_times), (400, [401, 402]))
        self.assert_same_run(workload, knobs, None)

    def test_a_finishing_turn_ends_two_runs_in_running_order(self):
        """As test_a_turn_that_only_ends_runs_ends_the_jump with three runs (``a``, ``b``: 300 output
        tokens, ``c``: 400; 77 usable blocks) and ``d`` a 1,000-token prompt (63 blocks): turn 300
        closes ``a`` and ``b`` while ``c`` decodes (one finishing turn ending two runs, freed in
        running order), ``d`` waits until ``c`` ends (52 blocks free after 300, 77 after 400).
        Jumps: 1..5, 6..300, 301..399, then turn 402 alone; the records equal the walk's."""
        workload = [RequestSpec("a", 0, None, 0, 100, 300), RequestSpec("b", 0, None, 0, 100, 300),
                    RequestSpec("c", 0, None, 0, 100, 400), RequestSpec("d", 5, None, 0, 1000, 2)]
        knobs = VllmKnobs(2048, 4, 0, True, 16, 78, async_scheduling=True)
        taken, ended = [], []
        original = async_open_jump._finish_turn

        def finishing(runs, now, batch, closing, num_waiting):
            ended.append(sorted(entry[3].spec.name for entry in closing))
            return original(runs, now, batch, closing, num_waiting)
        with counting_open_jumps(taken), mock.patch.object(async_open_jump, "_finish_turn", finishing):
            jumped = run(workload, knobs, None, "counts", True)
        self.assertEqual(taken, [5, 295, 99, 1])
        self.assertEqual(ended, [["a", "b"]])
        self.assertEqual([r.done_at for r in jumped.requests], [300, 300, 400, 402])
        self.assertEqual((jumped.requests[3].admitted_at, jumped.requests[3].token_times), (400, [401, 402]))
        self.assert_same_run(workload, knobs, None)

    def test_a_budget_cut_is_easy_only_behind_every_open_run(self):
        """The running pass of a turn whose demand exceeds the budget is taken without walking only
        when no open run comes after the first request the budget cuts (the literal pass would give
        that run nothing and close it): running order ``[o1, p, o2, q]`` with open runs ``o1``,
        ``o2``: cut from ``q`` on, it is easy; from ``p`` on, it is walked."""
        class Seq:
            def __init__(self, name, open_from):
                self.name, self.open_from = name, open_from
        o1, p, o2, q = Seq("o1", 3), Seq("p", None), Seq("o2", 5), Seq("q", None)
        runs = async_runs.AsyncDecodeRuns.__new__(async_runs.AsyncDecodeRuns)
        runs.sim = type("Sim", (), {"running": dict.fromkeys([o1, p, o2, q])})()
        self.assertTrue(runs._open_before([q]))
        self.assertFalse(runs._open_before([p, q]))
        self.assertFalse(runs._open_before([p]))

    def test_a_long_cached_decode_runs_open(self):
        """Two requests decoding 500 tokens each with prefix caching and ample KV: they run open (one
        close each, at the turn whose batch skips them, after 499 tokens delivered in the open) and
        the stamps are the walk's (hand check as in test_a_long_decode_is_jumped: last token at 500)."""
        workload = [RequestSpec("a", 0, None, 0, 10, 500), RequestSpec("b", 0, None, 0, 10, 500)]
        knobs = VllmKnobs(2048, 4, 0, True, 16, None, async_scheduling=True)
        counts = []
        original = async_runs.AsyncDecodeRuns.close

        def counting(runs, seq, turn):
            counts.append((seq.spec.name, turn - seq.open_from))
            original(runs, seq, turn)
        with mock.patch.object(async_runs.AsyncDecodeRuns, "close", counting):
            opened = run(workload, knobs, None, "counts", True)
        # Batch 0 prefills both and samples their first token: in flight, every known token computed,
        # so both run open from turn 1; the batches of turns 0..498 deliver tokens 1..499 in the open,
        # and turn 500 closes them (its batch skips them: token 500 is in flight).
        self.assertEqual(counts, [("a", 499), ("b", 499)])
        self.assertEqual([r.token_times[-1] for r in opened.requests], [500, 500])
        walked = run(workload, knobs, None, "counts", False)
        self.assertEqual(requests_of(opened), requests_of(walked))
        self.assertEqual(opened.ticks, walked.ticks)

    def test_a_long_decode_is_jumped(self):
        """Two requests decoding 500 tokens each with ample KV: the jump takes the stretch (fewer
        loop turns than batches), and the records stay the walk's (hand check: the last token of
        each is stamped at tick 500 with unit steps: the prefill batch runs in tick 0 and samples the
        first token, stamped 1, then one decode batch a tick samples tokens 2..500)."""
        workload = [RequestSpec("a", 0, None, 0, 10, 500), RequestSpec("b", 0, None, 0, 10, 500)]
        knobs = VllmKnobs(2048, 4, 0, False, 16, None, async_scheduling=True)
        calls = []
        original = async_step.AsyncVllmSimulation.jump

        def counting(sim, now):
            result = original(sim, now)
            calls.append(result is not None)
            return result
        with mock.patch.object(async_step.AsyncVllmSimulation, "jump", counting):
            jumped = run(workload, knobs, None, "full", True)
        self.assertTrue(any(calls))
        self.assertEqual([r.token_times[-1] for r in jumped.requests], [500, 500])
        self.assertEqual(requests_of(jumped), requests_of(run(workload, knobs, None, "full", False)))
        self.assertEqual(jumped.ticks, run(workload, knobs, None, "full", False).ticks)


if __name__ == "__main__":
    unittest.main()
