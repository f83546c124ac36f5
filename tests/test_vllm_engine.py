"""The vLLM engine on hand-computed workloads, its KV cache, its clock and its fast path
(vllm-engine.md §2–3, §5–6)."""

import random
import unittest
from fractions import Fraction

from sched.vllm.kv_cache import PrefixCachingKV
from sched.core.records import Status
from sched.vllm.config import VllmKnobs
from sched.vllm.engine import VllmSimulation, simulate_vllm
from sched.workload.specs import RequestSpec

# Budget 8 tokens, 2 seqs, blocks of 4 tokens, 4 blocks (3 usable).
TINY = [RequestSpec("A", 0, None, 0, 4, 6), RequestSpec("B", 0, None, 0, 4, 6)]
TINY_KNOBS = VllmKnobs(max_num_batched_tokens=8, max_num_seqs=2, block_size=4, num_gpu_blocks=4)


def by_name(result):
    return {r.name: r for r in result.requests}


class _Seq:
    """A stand-in request for the KV cache: its spec, prompt, token count and block table."""

    def __init__(self, spec: RequestSpec, kv) -> None:
        self.spec, self.prompt, self.num_tokens = spec, spec.prompt_tokens, spec.prompt_tokens
        self.blocks, self.num_cached, self.hashes, self.first_private = kv.new_table(), 0, [], None


class TinyRunTest(unittest.TestCase):
    def test_preemption_step_by_step(self):
        """Hand computation (vllm-engine.md §2):

        step 0: A admitted: 4 tokens, 1 block (2 free); B admitted: 4 tokens, 1 block (1 free).
                Both prompts complete: first tokens stamped 1. Each now holds 5 tokens.
        step 1: A decodes: 5 tokens need a 2nd block, takes the last free one. B needs one too:
                none free, the fcfs victim is the last running request, B itself: B preempted
                (its block freed, computed count 0), the pass stops, nobody is admitted. A @2.
        steps 2-4: A decodes @3 @4 @5 (6..8 tokens fit 2 blocks); B waits: its whole sequence
                (4 prompt + 1 output = 5 tokens) needs 2 blocks, 1 is free.
        step 5: A's 9th token needs a 3rd block (the free one): @6, its 6th token: done at 6,
                3 blocks freed.
        step 6: B admitted again: recomputes 5 tokens (2 blocks) and samples its 2nd token @7.
        steps 7-10: B @8 @9 @10 @11 (the 9th token takes a 3rd block in step 10): done at 11.
        """
        result = simulate_vllm(TINY, TINY_KNOBS, timeline="full")
        a, b = by_name(result)["A"], by_name(result)["B"]
        self.assertEqual((a.admitted_at, a.token_times, a.done_at, a.num_preemptions), (0, [1, 2, 3, 4, 5, 6], 6, 0))
        self.assertEqual((b.admitted_at, b.token_times, b.done_at, b.num_preemptions, b.preempted_at),
                         (0, [1, 7, 8, 9, 10, 11], 11, 1, [1]))
        steps = {k.step: k for k in result.ticks}
        self.assertEqual([(k.step, k.scheduled) for k in result.ticks][:3],
                         [(0, [("A", 4), ("B", 4)]), (1, [("A", 1)]), (2, [("A", 1)])])
        self.assertEqual((steps[1].preempted, steps[1].preempted_for), (["B"], [("B", "B")]))
        self.assertEqual(steps[6].scheduled, [("B", 5)])
        self.assertEqual([steps[s].kv_blocks_used for s in (0, 1, 5, 6, 10)], [2, 2, 3, 2, 3])
        # Prompt versus decode tokens: step 0 prefills 8, step 1 decodes 1, step 6 recomputes 5.
        self.assertEqual([(steps[s].num_prompt_tokens, steps[s].num_decode_tokens) for s in (0, 1, 6, 7)],
                         [(8, 0), (0, 1), (5, 0), (0, 1)])

    def test_timeout_frees_blocks_at_once(self):
        """Deadline 3: A and B expire at the start of step 3 (A, running, frees its 2 blocks) and C,
        arriving at 3 with 8 prompt tokens (2 blocks), is admitted in that very step: @4 @5."""
        workload = TINY + [RequestSpec("C", 3, None, 0, 8, 2)]
        knobs = VllmKnobs(max_num_batched_tokens=8, max_num_seqs=2, block_size=4, num_gpu_blocks=4, timeout_ticks=3)
        r = by_name(simulate_vllm(workload, knobs, timeline="full"))
        self.assertEqual((r["A"].status, r["A"].done_at, r["A"].token_times), (Status.TIMEOUT, 3, [1, 2, 3]))
        self.assertEqual((r["B"].status, r["B"].done_at), (Status.TIMEOUT, 3))
        self.assertEqual((r["C"].admitted_at, r["C"].token_times, r["C"].status), (3, [4, 5], Status.DONE))

    def test_lone_request_is_never_capped(self):
        """Chunk cap 32 applies only while more than one request is running or waiting: a lone
        100-token prompt is computed in one step (first token at 1), as in the corpus."""
        r = simulate_vllm([RequestSpec("X", 0, None, 0, 100, 2)], VllmKnobs(long_prefill_token_threshold=32))
        self.assertEqual(r.requests[0].token_times, [1, 2])


class KvCacheTest(unittest.TestCase):
    def test_hit_is_capped_below_the_prompt(self):
        """A 1,000-token shared prefix hits floor(999 / 16) = 62 blocks = 992 tokens; a prompt
        that is exactly the 64-token prefix recomputes its last block: 48 tokens (§3)."""
        kv = PrefixCachingKV(200, 16)
        first = _Seq(RequestSpec("a", 0, "K", 1000, 0, 1), kv)
        kv.allocate(first, 1000)
        second = _Seq(RequestSpec("b", 0, "K", 1000, 0, 1), kv)
        self.assertEqual(len(kv.find_hit(second)) * 16, 992)
        kv2 = PrefixCachingKV(20, 16)
        kv2.allocate(_Seq(RequestSpec("c", 0, "P", 64, 64, 1), kv2), 128)
        self.assertEqual(len(kv2.find_hit(_Seq(RequestSpec("d", 0, "P", 64, 0, 1), kv2))) * 16, 48)

    def test_freed_blocks_stay_hittable_until_evicted(self):
        """A finished request's cached blocks go to the back of the free queue: still hit; once
        new allocations take them from the front, they are evicted and miss."""
        kv = PrefixCachingKV(5, 4)                 # 4 usable blocks of 4 tokens
        a = _Seq(RequestSpec("a", 0, "K", 8, 0, 1), kv)
        kv.allocate(a, 8)
        kv.free(a)
        self.assertEqual(kv.num_free, 4)
        probe = _Seq(RequestSpec("p", 0, "K", 8, 1, 1), kv)
        self.assertEqual(len(kv.find_hit(probe)), 2)
        other = _Seq(RequestSpec("o", 0, None, 0, 16, 1), kv)
        kv.allocate(other, 16)                    # takes the 2 never-used blocks, then both cached ones
        self.assertEqual(kv.find_hit(probe), [])

    def test_prefix_hits_are_visible_in_the_step_they_are_allocated(self):
        """S2 admitted in the same step right after S1 hits S1's blocks (baseline case of the corpus:
        the hit appears at first scheduling, not at arrival)."""
        workload = [RequestSpec("S1", 0, "SYS", 128, 16, 2), RequestSpec("S2", 0, "SYS", 128, 16, 2)]
        r = simulate_vllm(workload, VllmKnobs(max_num_batched_tokens=512, enable_prefix_caching=True))
        self.assertEqual([x.hit_tokens for x in r.requests], [0, 128])


def _random_case(seed: int, timed: bool):
    rng = random.Random(seed)
    workload = [RequestSpec(f"r{i}", rng.randint(0, 40), None, 0, rng.randint(1, 70), rng.randint(1, 50),
                            rng.choice([None, 0, 1])) for i in range(rng.randint(1, 25))]
    size = rng.choice([1, 4, 16])
    need = max(-(-(s.prompt_tokens + s.output_tokens - 1) // size) for s in workload)
    knobs = VllmKnobs(rng.choice([8, 32, 128]), rng.randint(1, 6), rng.choice([0, 8]), False, size,
                      rng.choice([None, need + 1, 2 * need + 1]), rng.choice(["fcfs", "priority"]),
                      rng.choice([None, 25]) if timed else None)
    return workload, knobs


def _state(result):
    return [(r.admitted_at, r.token_times, r.done_at, r.status, r.num_preemptions, list(r.preempted_at))
            for r in result.requests]


class FastPathTest(unittest.TestCase):
    """The open runs and decode jumps (timeline counts/off) give exactly the reference walk's result."""

    def test_jumps_match_the_walk_on_random_workloads(self):
        for seed in range(40):
            workload, knobs = _random_case(seed, timed=True)
            with self.subTest(seed=seed, knobs=knobs):
                walk = simulate_vllm(workload, knobs, timeline="full")
                fast = simulate_vllm(workload, knobs, timeline="counts")
                self.assertEqual(_state(walk), _state(fast))
                self.assertEqual((walk.budget_spent, walk.busy_ticks), (fast.budget_spent, fast.busy_ticks))
                self.assertEqual(sum(k.num_decode_tokens for k in walk.ticks),
                                 sum(k.num_decode_tokens for k in fast.ticks))
                self.assertLess(len(fast.ticks), len(walk.ticks) + 1)

    def test_step_time_clock_is_exact(self):
        """With durations 3/2 + p/7 + d/11 (Fractions) and 0.37 + 0.01 p (floats) the jumping engine
        stamps exactly what the walk stamps; with durations of 1 the default tick stamps."""
        clocks = (lambda p, d: Fraction(3, 2) + Fraction(p, 7) + Fraction(d, 11), lambda p, d: 0.37 + 0.01 * p)
        for seed in range(12):
            workload, knobs = _random_case(seed, timed=False)
            for clock in clocks:
                with self.subTest(seed=seed):
                    walk = simulate_vllm(workload, knobs, timeline="full", step_time=clock)
                    fast = simulate_vllm(workload, knobs, timeline="off", step_time=clock)
                    self.assertEqual(_state(walk), _state(fast))
            self.assertEqual(_state(simulate_vllm(workload, knobs, step_time=lambda p, d: 1)),
                             _state(simulate_vllm(workload, knobs)))

    def test_step_records_carry_the_clock(self):
        """Step k starts when step k - 1 ends; a token is stamped at the end of its step."""
        sim = VllmSimulation(TINY, TINY_KNOBS, timeline="full", step_time=lambda p, d: Fraction(1, 2) + p)
        result = sim.run()
        starts = [k.tick for k in result.ticks]
        self.assertEqual(starts[:3], [0, Fraction(17, 2), 9])     # step 0 lasts 1/2 + 8
        self.assertEqual(by_name(result)["A"].token_times[:2], [Fraction(17, 2), 9])

    def test_a_deadline_inside_a_step_ends_the_request_when_the_step_ends(self):
        """One request (prompt 16, 10 output tokens, timeout 5), every step lasting 2 ticks: step 0
        computes the prompt (token at 2), steps at 2 and 4 decode (tokens at 4 and 6); the deadline 5
        falls inside the step 4..6, which is never interrupted, so the request is aborted at the start
        of the next step, 6: it ends at 6 with its three tokens, never before its last token."""
        workload = [RequestSpec("A", 0, None, 0, 16, 10)]
        result = simulate_vllm(workload, VllmKnobs(64, 4, timeout_ticks=5), timeline="full",
                               step_time=lambda p, d: 2)
        a = result.requests[0]
        self.assertEqual((a.status, a.token_times, a.done_at), (Status.TIMEOUT, [2, 4, 6], 6))
        # With unit steps the same request ends at its deadline: steps 0..4 give tokens 1..5, and it is
        # aborted at the start of step 5.
        a = simulate_vllm(workload, VllmKnobs(64, 4, timeout_ticks=5)).requests[0]
        self.assertEqual((a.status, a.token_times, a.done_at), (Status.TIMEOUT, [1, 2, 3, 4, 5], 5))


if __name__ == "__main__":
    unittest.main()


class VllmInvariantsTest(unittest.TestCase):
    """The vLLM engine's invariants (sched.vllm.invariants) catch a broken result."""

    def test_broken_results_are_caught(self):
        from sched.engines import InvariantError, check_case

        def broken(change):
            result = simulate_vllm(TINY, TINY_KNOBS, timeline="full")
            check_case(result)   # the real result holds
            result.requests = list(result.requests)   # records to change (packed ones are built on demand)
            change(result)
            return result

        cases = {
            "KV blocks": lambda r: setattr(r.ticks[0], "kv_blocks_used", 4),          # 3 usable
            "budget": lambda r: setattr(r.ticks[0], "num_prompt_tokens", 9),          # budget 8
            "preempted at": lambda r: setattr(by_name(r)["B"], "preempted_at", [2]),  # the timeline says 1
            "tokens": lambda r: setattr(by_name(r)["A"], "token_times", [0, 2, 3, 4, 5, 6]),
            "max_num_seqs": lambda r: setattr(r.ticks[0], "num_running", 3),
        }
        for what, change in cases.items():
            with self.subTest(what=what):
                with self.assertRaises(InvariantError):
                    check_case(broken(change))
