"""The vLLM engine's fast path with prefix caching (vllm-engine.md §2–3): open decode runs, jumps,
private block ids and the memo of a blocked head give exactly the literal walk's results.

The walk (timeline ``full``) is the reference: it is the engine the oracle corpus checks step by
step (tests/test_vllm_oracle.py). The random workloads mix what makes prefix caching hard: shared
keys of odd and even length, workload block ids, requests repeating another's whole prompt (their
output blocks are shared), own prompt tokens, KV pools small enough to preempt and evict, both
policies, deadlines and a step-time clock. ``ISL_FULL=1`` runs ten times as many.
"""

import os
import random
import unittest
from fractions import Fraction

from sched.vllm import kv_cache
from sched.vllm.config import VllmKnobs
from sched.vllm.engine import VllmSimulation, simulate_vllm
from sched.vllm.queue import Arrivals, Seq
from sched.workload.specs import RequestSpec

CASES = 400 if os.environ.get("ISL_FULL") == "1" else 40


def _random_case(seed: int):
    rng = random.Random(seed)
    size = rng.choice([1, 2, 4, 16])
    workload_block = rng.choice([size, 2 * size, 3, 8])
    mode = rng.choice(["key", "blocks", "own", "mix"])
    keys = {"A": 7, "B": 32, "C": 13}
    workload = []
    for i in range(rng.randint(1, 40)):
        arrival, output, priority = rng.randint(0, 60), rng.randint(1, 60), rng.choice([None, 0, 1])
        kind = mode if mode != "mix" else rng.choice(["key", "own"])
        if kind == "key" and rng.random() < 0.8:
            key = rng.choice("ABC")
            workload.append(RequestSpec(f"r{i}", arrival, key, keys[key], rng.choice([0, 0, 1, 5, 20, 40]), output,
                                        priority))
        elif kind == "blocks":
            count = rng.randint(1, 5)
            ids = tuple(rng.choice([1, 2, 3, 4]) if j < 2 else rng.randint(1, 9) for j in range(count))
            prompt = max(1, count * workload_block - rng.choice([0, 0, 1, 2]) + rng.choice([0, 0, 5, 17]))
            workload.append(RequestSpec(f"r{i}", arrival, None, 0, prompt, output, priority,
                                        prefix_blocks=ids, block_size=workload_block))
        else:
            workload.append(RequestSpec(f"r{i}", arrival, None, 0, rng.randint(1, 70), output, priority))
    need = max(-(-(s.prompt_tokens + s.output_tokens - 1) // size) for s in workload)
    timed = rng.random() < 0.3
    knobs = VllmKnobs(rng.choice([8, 32, 128, 512]), rng.randint(1, 8), rng.choice([0, 8]), True, size,
                      rng.choice([need + 1, need + 3, 2 * need + 1, 4 * need, None]), rng.choice(["fcfs", "priority"]),
                      25 if timed else None)
    step_time = None
    if not timed and rng.random() < 0.3:
        a, b = rng.choice([1, Fraction(1, 3), 2.5]), rng.choice([0, Fraction(1, 7)])
        step_time = lambda prompt, decode: a + b * prompt + decode   # noqa: E731 (a pure function)
    return workload, knobs, step_time


def _state(result):
    return [(r.admitted_at, r.token_times, r.done_at, r.status, r.num_preemptions, list(r.preempted_at or []),
             r.hit_tokens) for r in result.requests]


def _step_sums(result):
    ticks = result.ticks
    return (sum(k.num_prompt_tokens for k in ticks), sum(k.num_decode_tokens for k in ticks),
            sum(len(k.preempted) if hasattr(k, "preempted") else k.num_preempted for k in ticks),
            sum(len(k.cache_hits) if hasattr(k, "cache_hits") else k.num_cache_hits for k in ticks))


class _PlainKV(kv_cache.PrefixCachingKV):
    """Every block interned from its tokens, nothing private: the cache as the spec words it."""

    def note_prompts(self, specs) -> None:
        pass

    def _private_from(self, seq) -> int:
        return kv_cache._NEVER


class PrefixFastPathTest(unittest.TestCase):
    """The fast engine's run of each random case (timeline ``counts``) is made once for the class and
    held against each reference below; the references are run by each test."""

    @classmethod
    def setUpClass(cls):
        cls.fast_runs = {}

    @classmethod
    def tearDownClass(cls):
        cls.fast_runs = {}   # not carried through the rest of the test run

    def fast(self, seed: int, workload, knobs, step_time):
        """``simulate_vllm(..., timeline="counts")`` of case ``seed``, the first time it is asked for."""
        if seed not in self.fast_runs:
            self.fast_runs[seed] = simulate_vllm(workload, knobs, timeline="counts", step_time=step_time)
        return self.fast_runs[seed]

    def test_fast_path_matches_the_walk_on_random_workloads(self):
        for seed in range(CASES):
            workload, knobs, step_time = _random_case(seed)
            with self.subTest(seed=seed, knobs=knobs):
                walk = simulate_vllm(workload, knobs, timeline="full", step_time=step_time)
                fast = self.fast(seed, workload, knobs, step_time)
                self.assertEqual(_state(walk), _state(fast))
                self.assertEqual((walk.budget_spent, walk.busy_ticks), (fast.budget_spent, fast.busy_ticks))
                self.assertEqual(_step_sums(walk), _step_sums(fast))
                # The largest KV use seen: a counts record keeps the maximum of the steps it covers.
                self.assertEqual(max(k.kv_blocks_used for k in walk.ticks), max(k.kv_blocks_used for k in fast.ticks))

    def test_the_counts_timeline_is_the_walks_step_by_step(self):
        """With prefix caching the counts timeline keeps the records a step-by-step walk logs (the
        artifact's bytes predate the fast path): a jump logs each of its steps, with the KV blocks
        used and the queue length of that step."""
        for seed in range(CASES):
            workload, knobs, step_time = _random_case(seed)
            with self.subTest(seed=seed):
                walked = simulate_vllm(workload, knobs, timeline="counts", step_time=step_time, per_step=True)
                fast = self.fast(seed, workload, knobs, step_time)
                self.assertEqual(fast.ticks, walked.ticks)

    def test_private_ids_and_the_blocked_head_memo_change_nothing(self):
        """Against a pool that interns every block from its tokens and an engine that looks the head
        up at every step (the literal rules), on the same random workloads."""
        def plain_run(workload, knobs, step_time):
            sim = VllmSimulation(workload, knobs, timeline="full", step_time=step_time, per_step=True)
            sim.kv = _PlainKV(knobs.gpu_blocks_for(workload), knobs.block_size)
            sim.arrivals = Arrivals([Seq(rec, sim.kv.new_table()) for rec in sim.requests], knobs.timeout_ticks)
            sim.blocked_head = lambda seq: False
            return sim.run()

        for seed in range(0, CASES, 2):
            workload, knobs, step_time = _random_case(seed)
            with self.subTest(seed=seed):
                plain = plain_run(workload, knobs, step_time)
                fast = self.fast(seed, workload, knobs, step_time)
                self.assertEqual(_state(plain), _state(fast))

    def test_a_blocked_head_is_looked_up_once_until_blocks_free(self):
        """Blocks of 4 tokens, 9 usable. A (4 prompt + 24 output tokens, its own prompt) runs alone
        from tick 0 and holds 2 blocks from step 1 on (7 blocks at its last step, 23). B (32 prompt
        tokens, the first 16 of prefix K, which a hit could find: the gate asks for ceil(32 / 4) = 8
        blocks) arrives at tick 1 and finds 7 free after A's step-1 block: blocked. Nothing B could
        hit enters the cache (A's blocks are its own) and free blocks only shrink until A finishes at
        the end of step 23 and frees its 7; B is looked up then and admitted at tick 24. By hand: 2
        lookups of B, not one per step, and none of A (its first block is private and it has never
        held one: nothing of it can be cached)."""
        workload = [RequestSpec("A", 0, None, 0, 4, 24), RequestSpec("B", 1, "K", 16, 16, 2)]
        knobs = VllmKnobs(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_gpu_blocks=10,
                          enable_prefix_caching=True)
        lookups = []
        sim = VllmSimulation(workload, knobs, timeline="counts")
        find_hit = sim.kv.find_hit
        sim.kv.find_hit = lambda seq: lookups.append(seq.spec.name) or find_hit(seq)
        result = sim.run()
        self.assertEqual(lookups, ["B", "B"])
        a, b = result.requests
        self.assertEqual((a.done_at, b.admitted_at), (24, 24))

    def test_a_head_no_hit_can_help_is_gated_without_a_lookup(self):
        """As above with B's prompt its own 32 tokens: its first block is private and it has never
        held one, so nothing of it can be cached and the gate counts its whole sequence as without
        prefix caching: B is never looked up (nor A, for the same reason), and is admitted at tick 24."""
        workload = [RequestSpec("A", 0, None, 0, 4, 24), RequestSpec("B", 1, None, 0, 32, 2)]
        knobs = VllmKnobs(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_gpu_blocks=10,
                          enable_prefix_caching=True)
        lookups = []
        sim = VllmSimulation(workload, knobs, timeline="counts")
        find_hit = sim.kv.find_hit
        sim.kv.find_hit = lambda seq: lookups.append((seq.spec.name, sim.now)) or find_hit(seq)
        result = sim.run()
        self.assertEqual(lookups, [])
        self.assertEqual([r.admitted_at for r in result.requests], [0, 24])

    def test_requests_sharing_nothing_take_no_hash_table_entries(self):
        """Prompts of their own tokens only: no block is interned (private ids), at any size."""
        workload = [RequestSpec(f"q{i}", i, None, 0, 40 + i, 30) for i in range(30)]
        sim = VllmSimulation(workload, VllmKnobs(block_size=4, num_gpu_blocks=200, enable_prefix_caching=True),
                             timeline="counts")
        sim.run()
        self.assertEqual(sim.kv._hash_ids, {})
        self.assertEqual(sim.kv._workload_ids, {})


if __name__ == "__main__":
    unittest.main()
