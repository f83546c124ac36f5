"""Differential test of the vLLM engine's fast paths (vllm-engine.md §2–3): the same random workloads
run as the engine runs and with every fast path off (``sched.vllm.engine.FAST_PATHS = False``: every
step walked in running order, the admission gate's prefix lookup made at every step, every full block
interned from its tokens), and every request record and every step record must be equal.

The literal engine is the one the oracle corpus checks step by step against vLLM's scheduler
(tests/test_vllm_oracle*.py); this test carries that check to workloads the corpus does not hold.
The workloads mix what makes the fast paths delicate: prefix keys whose lengths nest (one key, odd
and even lengths), workload block ids whose chains share, nest and diverge (sometimes of two
workload block sizes), whole prompts repeated
(shared output blocks), own prompts, KV pools from one request's need to ample (eviction and
preemption), chunked prefill, both policies, deadlines, async scheduling on and off, and three
clocks (unit steps, a step time of the token counts, one that also reads the KV blocks held), and
sometimes a client's concurrency limit (``max_concurrency``: arrivals released as requests end).

Timeline ``full`` compares the records one by one. Timeline ``counts`` compares each record of the
fast run with the literal run's per-step records over the same steps merged (a jump is one record
without prefix caching; with it the records are the walk's, one per step, so spans are 1), also
when the fast run's records are merged in pairs as a run past ``MAX_COUNTS_RECORDS`` merges them.
``ISL_FULL=1`` runs 600 workloads instead of 24. Seed 34 is the third difference found (a jump of
one step under a KV-reading float step time logged ``end − start`` for its duration, not the duration
asked for); the other two have hand-made cases below.
"""

import os
import random
import unittest
from contextlib import contextmanager
from fractions import Fraction
from unittest import mock

from sched.vllm import engine as vllm_engine
from sched.vllm.async_step import simulate
from sched.vllm.config import VllmKnobs
from sched.vllm import records as vllm_records
from sched.vllm.records import StepCounts
from sched.workload.specs import RequestSpec

CASES = 600 if os.environ.get("ISL_FULL") == "1" else 24


def random_workload(rng: random.Random):
    """Requests of many sharing shapes (module docstring); returns (specs, engine block size)."""
    size = rng.choice([1, 2, 3, 4, 8, 16])
    workload_block = rng.choice([size, 2 * size, 3, 4, 8])
    style = rng.choice(["key", "blocks", "own", "key+own", "blocks+own", "repeat"])
    key_lengths = {"A": rng.choice([[7, 16], [5, 11, 32], [13]]), "B": [rng.randint(1, 40)], "C": [2, 3]}
    # A small tree of workload block chains: children share their parent's ids, then diverge.
    chains = [(1,), (1, 2), (1, 2, 3), (1, 4), (5,), (1, 2, 3, 6, 7), ("1", 2)]
    mixed = rng.random() < 0.2
    specs = []
    for i in range(rng.randint(1, 30)):
        arrival, output, priority = rng.randint(0, 40), rng.randint(1, 40), rng.choice([None, 0, 1, 2])
        kind = style if "+" not in style else rng.choice(style.split("+"))
        name = f"r{i}"
        if kind == "repeat" and specs and rng.random() < 0.6:
            base = rng.choice(specs)   # the same prompt again, another output
            specs.append(RequestSpec(name, arrival, base.prefix_key, base.prefix_tokens,
                                     base.suffix_tokens if base.prefix_key or base.prefix_blocks else 0,
                                     output, priority, base.prefix_blocks, base.block_size))
            if not specs[-1].prompt_tokens:
                specs[-1] = RequestSpec(name, arrival, None, 0, rng.randint(1, 30), output, priority)
        elif kind in ("key", "repeat"):
            key = rng.choice("ABC")
            specs.append(RequestSpec(name, arrival, key, rng.choice(key_lengths[key]),
                                     rng.choice([0, 0, 1, 3, 9, 30]), output, priority))
        elif kind == "blocks":
            chain = rng.choice(chains)
            if mixed:   # (a workload built in Python may mix workload block sizes; a file cannot)
                workload_block = rng.choice([size, 2 * size, 4])
            prompt = len(chain) * workload_block - rng.choice([0, 0, 1, workload_block - 1]) + \
                rng.choice([0, 0, 2, 11])
            specs.append(RequestSpec(name, arrival, None, 0, max(1, prompt), output, priority,
                                     prefix_blocks=chain, block_size=workload_block))
        else:
            specs.append(RequestSpec(name, arrival, None, 0, rng.randint(1, 60), output, priority))
    return specs, size


def random_knobs(rng: random.Random, specs, size: int, caching: bool) -> VllmKnobs:
    need = max(-(-(s.prompt_tokens + s.output_tokens - 1) // size) for s in specs)
    asynchronous = rng.random() < 0.3   # deadlines are not modelled under async scheduling
    budget = rng.choice([4, 8, 16, 64, 512])   # vLLM refuses fewer batched tokens than sequences
    return VllmKnobs(budget, min(budget, rng.choice([1, 2, 3, 8, 64])), rng.choice([0, 0, 3, 8]),
                     caching, size, rng.choice([need + 1, need + 2, need + 5, 2 * need + 1, 4 * need, None]),
                     rng.choice(["fcfs", "priority"]), None if asynchronous else rng.choice([None, None, None, 15, 40]),
                     asynchronous)


def random_step_time(rng: random.Random):
    """None (unit steps), a pure function of the token counts, or one reading the KV blocks too."""
    choice = rng.choice(["unit", "unit", "tokens", "kv"])
    if choice == "unit":
        return None
    a, b, c = rng.choice([1, Fraction(1, 3), 2.5]), rng.choice([0, Fraction(1, 7)]), rng.choice([1, Fraction(1, 2)])
    if choice == "tokens":
        return lambda prompt, decode: a + b * prompt + c * decode
    def with_kv(prompt, decode, kv_blocks):
        return a + b * prompt + c * decode + Fraction(kv_blocks, 5)
    with_kv.reads_kv_blocks = True
    return with_kv


def random_case(seed: int):
    rng = random.Random(seed)
    specs, size = random_workload(rng)
    knobs = random_knobs(rng, specs, size, rng.random() < 0.8)
    return specs, knobs, random_step_time(rng)


def _bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


@contextmanager
def fast_paths(on: bool):
    with mock.patch.object(vllm_engine, "FAST_PATHS", on):
        yield


def request_rows(result):
    """Every field of every request record an artifact reads."""
    return [(r.name, r.status, r.admitted_at, r.hit_tokens, r.prefilled_tokens, r.prefill_done_at, r.done_at,
             r.num_preemptions, list(r.preempted_at or ()), r.token_times) for r in result.requests]


def counts_over(records, first: int, num_steps: int):
    """The per-step ``records`` of steps ``first .. first + num_steps − 1`` merged into one."""
    span = [r for r in records if first <= r.step < first + num_steps]
    if not span:
        return None
    merged = StepCounts(*(getattr(span[0], f) for f in StepCounts.__slots__))
    for later in span[1:]:
        merged.merge(later)
    return merged


def run(specs, knobs, step_time, timeline, fast, max_concurrency=None):
    with fast_paths(fast):
        return simulate(specs, knobs, timeline=timeline, step_time=step_time, max_concurrency=max_concurrency)


class Differences:
    """Counts of what was compared (printed by the heavy run)."""
    workloads = steps = requests = 0


class DifferentialTest(unittest.TestCase):

    def check(self, specs, knobs, step_time, gate=None):
        literal_counts = None
        for timeline in ("full", "counts", "merged counts"):
            if timeline == "merged counts":   # the fast run's records merged as a long run's are
                with mock.patch.object(vllm_records, "MAX_COUNTS_RECORDS", 8):
                    fast = run(specs, knobs, step_time, "counts", True, gate)
                literal = literal_counts   # the literal counts run of the line above: same arguments
            else:
                fast = run(specs, knobs, step_time, timeline, True, gate)
                literal = run(specs, knobs, step_time, timeline, False, gate)
                if timeline == "counts":
                    literal_counts = literal
            self.assertEqual(request_rows(fast), request_rows(literal), timeline)
            self.assertEqual((fast.budget_spent, fast.busy_ticks), (literal.budget_spent, literal.busy_ticks))
            if timeline == "full":
                self.assertEqual(fast.ticks, literal.ticks)
                Differences.steps += len(literal.ticks)
                continue
            # Every literal step lies in exactly one record (a merged record's span may hold idle ticks).
            self.assertEqual(sum(sum(1 for k in literal.ticks if r.step <= k.step < r.step + r.num_steps)
                                 for r in fast.ticks), len(literal.ticks))
            for record in fast.ticks:
                expected = counts_over(literal.ticks, record.step, record.num_steps)
                if timeline == "merged counts" and isinstance(record.duration, float):
                    # Merging merged records adds float durations in another order than step by
                    # step (the async engine, which has no fast path, shows it too): ulps apart.
                    self.assertAlmostEqual(record.duration, expected.duration, delta=1e-12 * expected.duration)
                    expected.duration = record.duration
                self.assertEqual(record, expected, f"counts record of step {record.step}")
        Differences.workloads += 1
        Differences.requests += len(specs)

    def test_fast_paths_equal_the_literal_engine_on_random_workloads(self):
        for seed in range(CASES):
            specs, knobs, step_time = random_case(seed)
            gate = random.Random(-1 - seed).choice([None, None, None, 1, 2, 5])   # a client's --max-concurrency
            with self.subTest(seed=seed, knobs=knobs, max_concurrency=gate):
                self.check(specs, knobs, step_time, gate)
        if os.environ.get("ISL_FULL") == "1":
            print(f"\ndifferential: {Differences.workloads} workloads, {Differences.requests} requests, "
                  f"{Differences.steps} full step records compared")

    def test_the_switch_turns_the_fast_paths_off(self):
        """The reference really is literal: no decode jump (one counts record per step without
        prefix caching) and a blocked head looked up at every step (the fast engine's memo is off)."""
        specs = [RequestSpec("A", 0, None, 0, 4, 24), RequestSpec("B", 1, None, 0, 32, 2)]
        plain = VllmKnobs(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_gpu_blocks=10)
        self.assertLess(len(run(specs, plain, None, "counts", True).ticks), 26)   # jumps over A's decodes
        self.assertEqual(len(run(specs, plain, None, "counts", False).ticks), 26)  # A: 24 steps, B: 2
        cached = VllmKnobs(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_gpu_blocks=10,
                           enable_prefix_caching=True)
        # B's first 16 tokens are prefix K's (a hit could help it: its lookups are not skipped).
        specs = [specs[0], RequestSpec("B", 1, "K", 16, 16, 2)]
        from sched.vllm.kv_cache import PrefixCachingKV
        # Fast: B at tick 1 and 24 (A, its first block private and never held, is not looked up);
        # literal: A once, B at ticks 1..23 and 24.
        for fast, expected in ((True, 2), (False, 1 + 23 + 1)):
            lookups = []
            find_hit = PrefixCachingKV.find_hit
            with mock.patch.object(PrefixCachingKV, "find_hit",
                                   lambda kv, seq: lookups.append(seq.spec.name) or find_hit(kv, seq)):
                run(specs, cached, None, "counts", fast)
            self.assertEqual(len(lookups), expected, (fast, lookups))

    def test_every_artifact_byte_is_the_same_with_prefix_caching(self):
        """Through the command line: every file a prefix-cached run writes (timeline ``counts``,
        whose records the fast path keeps per step, and ``full``) is the same with the fast paths off."""
        from tests.helpers import run_cli, temp_dir
        from tests.test_analysis_streamed import one_block_size, vllm_flags, write_workload
        from sched.timing.stepmodel import StepModel, step_model_to_json
        settings = {"num_gpu_blocks": 2588, "block_size": 16, "max_num_batched_tokens": 2048, "max_num_seqs": 256,
                    "long_prefill_token_threshold": 0, "enable_prefix_caching": True, "policy": "fcfs"}
        model = os.path.join(temp_dir(self), "step-model.json")   # ms: 20 + 0.1 prompt + 0.05 decode + 0.01 KV
        with open(model, "w", encoding="utf-8") as handle:        # token (d > 0: it reads the KV blocks)
            handle.write(step_model_to_json(StepModel(20.0, 0.1, 0.05, settings, {"model": "m"}, d_ms=0.01)))
        for seed in range(CASES // 10):
            rng = random.Random(5000 + seed)
            specs, size = one_block_size(rng)
            flags = vllm_flags(random_knobs(rng, specs, size, True))
            workload = write_workload(self, specs)
            for timeline, more in (("counts", []), ("full", []), ("counts", ["--step-model", model])):   # (no deadlines in ms)
                if more and ("--async-scheduling" in flags or "--timeout-ticks" in flags):
                    continue
                with self.subTest(seed=seed, timeline=timeline, more=more):
                    files = []
                    for fast in (True, False):
                        directory = os.path.join(temp_dir(self), "run")
                        with fast_paths(fast):
                            code, _, err = run_cli(["--workload", workload, "--artifacts", directory,
                                                    "--timeline", timeline, *flags, *more])
                        self.assertEqual(code, 0, err)
                        files.append({name: _bytes(os.path.join(directory, name))
                                      for name in sorted(os.listdir(directory))})
                    self.assertIn("requests.jsonl", files[0])
                    self.assertEqual(files[0], files[1])

    def test_open_runs_at_the_head_of_a_walked_step_equal_the_literal_walk(self):
        """Block size 4, 6 tokens a step. A, B, C (3-token prompts, 20 tokens out) decode as open runs;
        D (a 40-token prompt) arrives at tick 3, so every step's demand (3 + D's rest) is over the
        budget and the step is walked: the open runs at the head of the list take their token and
        the blocks due at once when those fit. With 17 usable blocks their blocks due are once just
        as many as the free blocks and twice one more (C, an open run among them, is preempted, and
        D later); with 19 once just as many (D, after them, is preempted). Fast equals literal, with
        and without prefix caching."""
        specs = [RequestSpec(n, 0, None, 0, 3, 20) for n in "ABC"] + [RequestSpec("D", 3, None, 0, 40, 2)]
        walked_with_open_head = []
        walk = vllm_engine.walk   # the walked step (sched.vllm.walk), as the engine's step calls it

        def watched(sim, t, ordinal, cap, timeouts):
            head = next(iter(sim.running), None)
            if vllm_engine.FAST_PATHS and head is not None and head.open_from is not None:
                walked_with_open_head.append(sim.runs.due[ordinal % 4] <= sim.kv.num_free)
            return walk(sim, t, ordinal, cap, timeouts)

        for blocks, victims in ((18, ["C", "D"]), (20, ["D"])):
            for caching in (False, True):
                knobs = VllmKnobs(max_num_batched_tokens=6, max_num_seqs=4, block_size=4, num_gpu_blocks=blocks,
                                  enable_prefix_caching=caching)
                walked_with_open_head.clear()
                with self.subTest(blocks=blocks, caching=caching), \
                        mock.patch.object(vllm_engine, "walk", watched):
                    self.check(specs, knobs, None)
                    self.assertIn(True, walked_with_open_head)   # the open runs' blocks fit at once
                    preempted = [r.name for r in run(specs, knobs, None, "counts", True).requests
                                 if r.num_preemptions]
                    self.assertEqual(preempted, victims)


class FoundByTheDifferentialTest(unittest.TestCase):
    """The smallest cases of the differences the random workloads found, values by hand."""

    def test_a_jump_over_steps_of_a_kv_reading_step_time_logs_each_steps_own_duration(self):
        """Prefix caching, blocks of 2 tokens, step time 1 + KV blocks held. A (2 prompt + 8 output
        tokens, its own prompt) runs alone: step k holds ceil((2 + k) / 2) blocks after allocation
        (1, 2, 2, 3, 3, 4, 4, 5), so it lasts 2, 3, 3, 4, 4, 5, 5, 6 and starts at 0, 2, 5, 8, 12, 16,
        21, 26. Steps 1-6 are one jump; its counts records gave each step the last one's duration (5)."""
        def step_time(prompt, decode, kv_blocks):
            return 1 + kv_blocks
        step_time.reads_kv_blocks = True
        knobs = VllmKnobs(max_num_batched_tokens=64, max_num_seqs=4, block_size=2, num_gpu_blocks=10,
                          enable_prefix_caching=True)
        result = run([RequestSpec("A", 0, None, 0, 2, 8)], knobs, step_time, "counts", True)
        self.assertEqual([(r.step, r.tick, r.duration, r.kv_blocks_used) for r in result.ticks],
                         [(0, 0, 2, 1), (1, 2, 3, 2), (2, 5, 3, 2), (3, 8, 4, 3), (4, 12, 4, 3), (5, 16, 5, 4),
                          (6, 21, 5, 4), (7, 26, 6, 5)])
        self.assertEqual(result.requests[0].token_times, [2, 5, 8, 12, 16, 21, 26, 32])

    def test_a_jump_record_counts_no_arrival_of_the_step_after_it(self):
        """No prefix caching, one slot. A (4 + 10 tokens) decodes alone: its tokens at steps 0-9,
        steps 1-8 one jump (step 9 samples its last token). B arrives at tick 9, the step after the
        jump: the jump's steps saw an empty queue (num_waiting 0; it said 1), step 9 sees B."""
        knobs = VllmKnobs(max_num_batched_tokens=64, max_num_seqs=1, block_size=4, num_gpu_blocks=20)
        result = run([RequestSpec("A", 0, None, 0, 4, 10), RequestSpec("B", 9, None, 0, 4, 1)], knobs, None,
                     "counts", True)
        self.assertEqual([(r.step, r.num_steps, r.num_waiting) for r in result.ticks],
                         [(0, 1, 0), (1, 8, 0), (9, 1, 1), (10, 1, 0)])


    def test_workload_blocks_of_two_sizes_are_the_same_tokens(self):
        """Block size 2, 6 usable blocks. r0 and r1 both prompt the first 4 tokens of workload block
        1 (r0's workload blocks hold 4 tokens, r1's 8: the same tokens), then decode the same output
        token. r1 is preempted at step 10; at step 11 it has 4 + 3 = 7 tokens and hits
        floor(6 / 2) = 3 blocks of r0's (its prompt and two output tokens), so it computes 1 token
        and samples its 4th, stamped 12. The fast engine took the two prompts for different ones
        (their output blocks private, no hit) and, with both sizes, interned block ids of one size
        for the other's groups."""
        knobs = VllmKnobs(max_num_batched_tokens=64, max_num_seqs=8, block_size=2, num_gpu_blocks=7,
                          enable_prefix_caching=True)
        specs = [RequestSpec("r0", 6, None, 0, 4, 6, None, (1,), 4), RequestSpec("r1", 7, None, 0, 4, 4, None, (1,), 8)]
        for timeline in ("full", "counts"):
            result = run(specs, knobs, None, timeline, True)
            r0, r1 = result.requests
            self.assertEqual((r1.preempted_at, r1.token_times), ([10], [8, 9, 10, 12]))
            if timeline == "full":
                self.assertEqual(result.ticks[-1].scheduled, [("r0", 1), ("r1", 1)])


if __name__ == "__main__":
    unittest.main()
