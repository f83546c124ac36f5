"""The tick engine on tiny hand-computed workloads (lab.md §3)."""

import unittest

from sched.core.config import Batching, Case, EngineConfig
from sched.lab.engine import simulate
from sched.core.records import Status
from sched.workload.specs import RequestSpec, scenario

TINY = [
    #           name arrival key  prefix suffix output
    RequestSpec("A", 0, "K", 10, 10, 2),
    RequestSpec("B", 1, "K", 10, 6, 2),
    RequestSpec("C", 2, "K", 10, 2, 1),
]
TINY_CONFIG = EngineConfig(budget=16, decode_cost=4, max_active=2, chunk_tokens=8)
APC = Case("continuous+APC", Batching.CONTINUOUS, apc=True, chunk_tokens=None)
STATIC = Case("static", Batching.STATIC, apc=False, chunk_tokens=None)
CONTINUOUS = Case("continuous", Batching.CONTINUOUS, apc=False, chunk_tokens=None)


def by_name(result):
    return {r.name: r for r in result.requests}


class TinyWorkloadTest(unittest.TestCase):
    def test_continuous_apc_tick_by_tick(self):
        """Budget 16, decode cost 4, max_active 2, APC on, no chunk cap.

        tick 0: A arrives, admitted (cache cold: miss); A prefills 16 of 20.        used 16
        tick 1: B arrives, admitted (A's prefill not complete: miss); A prefills 4 -> complete,
                K enters the cache; B prefills 12 of 16.                             used 16
        tick 2: C arrives, no free slot. A decodes (token @3); B prefills 4 -> done.  used 8
        tick 3: A decodes (@4, 2nd of 2 -> done at 4); B decodes (@4).              used 8
        tick 4: C admitted: hit, 10 of its 12 tokens cached. B decodes (@5, done 5);
                C prefills 2 -> done.                                                used 6
        tick 5: C decodes (@6, its only token, done 6).                             used 4
        """
        result = simulate(TINY, TINY_CONFIG, APC)
        r = by_name(result)
        self.assertEqual([(k.tick, k.budget_used) for k in result.ticks],
                         [(0, 16), (1, 16), (2, 8), (3, 8), (4, 6), (5, 4)])
        self.assertEqual([k.prefilled for k in result.ticks],
                         [[("A", 16)], [("A", 4), ("B", 12)], [("B", 4)], [], [("C", 2)], []])
        self.assertEqual([k.decoded for k in result.ticks],
                         [[], [], ["A"], ["A", "B"], ["B"], ["C"]])
        self.assertEqual(result.ticks[2].waiting, ["C"])
        self.assertEqual(result.ticks[4].admitted, ["C"])
        self.assertEqual(result.ticks[4].cache_hits, ["C"])
        self.assertEqual((r["A"].admitted_at, r["A"].token_times, r["A"].done_at, r["A"].hit_tokens), (0, [3, 4], 4, 0))
        self.assertEqual((r["B"].admitted_at, r["B"].token_times, r["B"].done_at, r["B"].hit_tokens), (1, [4, 5], 5, 0))
        self.assertEqual((r["C"].admitted_at, r["C"].token_times, r["C"].done_at, r["C"].hit_tokens), (4, [6], 6, 10))
        self.assertTrue(all(x.status is Status.DONE for x in result.requests))
        self.assertEqual((result.budget_spent, result.busy_ticks), (16 + 16 + 8 + 8 + 6 + 4, 6))

    def test_static_admits_only_after_the_batch_ended(self):
        """Same workload, static batching, no APC.

        tick 0: A admitted alone (the only one waiting). ticks 1-3: B and C wait although a slot
        is free, because A's batch has not ended; A prefills 16+4, decodes @3 and @4, ends at 4.
        tick 4: B and C admitted together; B prefills 16 (the whole budget), C gets nothing.
        tick 5: B decodes (@6); C prefills 12 -> done.  tick 6: B decodes (@7, done), C (@7, done).
        """
        r = by_name(simulate(TINY, TINY_CONFIG, STATIC))
        self.assertEqual({n: r[n].admitted_at for n in "ABC"}, {"A": 0, "B": 4, "C": 4})
        self.assertEqual({n: r[n].token_times for n in "ABC"}, {"A": [3, 4], "B": [6, 7], "C": [7]})
        self.assertEqual(sum(x.hit_tokens for x in r.values()), 0)

    def test_at_least_one_prompt_token_is_computed(self):
        """A prompt that is all shared prefix hits only prefix_tokens − 1 tokens."""
        workload = [RequestSpec("P", 0, "K", 8, 0, 1), RequestSpec("Q", 5, "K", 8, 0, 1)]
        r = by_name(simulate(workload, TINY_CONFIG, APC))
        self.assertEqual(r["Q"].hit_tokens, 7)
        self.assertEqual(r["Q"].token_times, [7])  # prefill 1 token at 5, decode at 6, stamped 7

    def test_apc_hit_only_after_the_producer_finished_prefill(self):
        """The producer P (prompt 40, budget 16) finishes prefill in tick 2; Q admitted in tick 2
        misses, R admitted in tick 3 hits."""
        workload = [RequestSpec("P", 0, "K", 30, 10, 1), RequestSpec("Q", 2, "K", 30, 2, 1),
                    RequestSpec("R", 3, "K", 30, 2, 1)]
        config = EngineConfig(budget=16, decode_cost=4, max_active=3)
        result = simulate(workload, config, APC)
        r = by_name(result)
        self.assertEqual(r["P"].prefill_done_at, 2)
        self.assertEqual((r["Q"].admitted_at, r["Q"].hit_tokens), (2, 0))
        self.assertEqual((r["R"].admitted_at, r["R"].hit_tokens), (3, 30))

    def test_decode_skipped_for_lack_of_budget_emits_nothing(self):
        """Budget 8, decode cost 8: two decoding requests share one decode per tick, in active order."""
        workload = [RequestSpec("A", 0, None, 0, 1, 3), RequestSpec("B", 0, None, 0, 1, 3)]
        config = EngineConfig(budget=8, decode_cost=8, max_active=2)
        r = by_name(simulate(workload, config, CONTINUOUS))
        # tick 0: A and B prefill 1 each. From tick 1 only A decodes until done, then B.
        self.assertEqual(r["A"].token_times, [2, 3, 4])
        self.assertEqual(r["B"].token_times, [5, 6, 7])

    def test_idle_ticks_are_skipped_with_the_same_result(self):
        late = [RequestSpec("A", 100, None, 0, 4, 2)]
        result = simulate(late, TINY_CONFIG, CONTINUOUS)
        self.assertEqual(result.requests[0].token_times, [102, 103])
        self.assertEqual(result.ticks[0].tick, 100)


class DeadlineTest(unittest.TestCase):
    def test_finishing_exactly_at_the_deadline_succeeds_one_tick_later_times_out(self):
        """A: prompt 4, 2 tokens: prefill at 0, tokens @2 and @3, done at 3 (E2E 3)."""
        workload = [RequestSpec("A", 0, None, 0, 4, 2)]
        ok = simulate(workload, EngineConfig(timeout_ticks=3), CONTINUOUS).requests[0]
        self.assertEqual((ok.status, ok.done_at), (Status.DONE, 3))
        late = simulate(workload, EngineConfig(timeout_ticks=2), CONTINUOUS).requests[0]
        self.assertEqual((late.status, late.done_at, late.token_times), (Status.TIMEOUT, 2, [2]))

    def test_timeout_while_queued_is_never_admitted_and_ends_once(self):
        """With max_active 1, B waits behind A and times out in the queue, never admitted."""
        workload = [RequestSpec("A", 0, None, 0, 4, 5), RequestSpec("B", 0, None, 0, 4, 1)]
        result = simulate(workload, EngineConfig(max_active=1, timeout_ticks=4), CONTINUOUS)
        b = by_name(result)["B"]
        self.assertEqual((b.status, b.admitted_at, b.done_at, b.token_times), (Status.TIMEOUT, None, 4, []))
        self.assertEqual(sum(k.timeouts.count("B") for k in result.ticks), 1)

    def test_two_simulations_do_not_share_state(self):
        first = simulate(scenario("baseline"), EngineConfig(), APC)
        second = simulate(scenario("baseline"), EngineConfig(), APC)
        self.assertEqual([r.hit_tokens for r in first.requests], [r.hit_tokens for r in second.requests])
        self.assertEqual(sum(r.hit_tokens for r in second.requests), 384)


if __name__ == "__main__":
    unittest.main()
