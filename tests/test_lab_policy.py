"""Admission policies (compare.md §1) on hand-built queues, and the priority-mix scenario."""

import unittest

from sched.core.config import Batching, Case, EngineConfig, cases_for
from sched.lab.engine import run_cases, simulate
from sched.core.metrics import order_score, summarize
from sched.lab.policy import POLICIES
from sched.workload.specs import RequestSpec, scenario

CONTINUOUS = Case("continuous", Batching.CONTINUOUS, apc=False, chunk_tokens=None)
ONE_SLOT = EngineConfig(budget=16, decode_cost=4, max_active=1, chunk_tokens=8)


def spec(name, arrival, prompt, output, priority=None):
    return RequestSpec(name, arrival, None, 0, prompt, output, priority)


def queue_order(policy, specs, decode_cost=8):
    """Names of ``specs`` (all waiting at once) in the order ``policy`` admits them."""
    key = POLICIES[policy]
    return [s.name for _, s in sorted((key(s, i, decode_cost), s) for i, s in enumerate(specs))]


class PolicyKeyTest(unittest.TestCase):
    """The order of one waiting queue, compare.md §1's table row by row."""

    QUEUE = [
        #     name arrival prompt output priority
        spec("a", 2, 100, 10, 3),     # work 100 + 8*10 = 180
        spec("b", 0, 300, 1, None),   # work 308; no priority = 0
        spec("c", 2, 20, 20, 3),      # work 180: ties a on work and arrival -> workload order
        spec("d", 1, 50, 2, -1),      # work 66; most urgent
        spec("e", 0, 10, 1, 0),       # work 18
    ]

    def test_fcfs_is_arrival_then_workload_order(self):
        self.assertEqual(queue_order("fcfs", self.QUEUE), ["b", "e", "d", "a", "c"])

    def test_shortest_is_least_work_then_arrival_then_workload_order(self):
        self.assertEqual(queue_order("shortest", self.QUEUE), ["e", "d", "a", "c", "b"])

    def test_shortest_counts_decode_at_its_cost(self):
        """prompt 100 + 1 output vs prompt 10 + 20 outputs: decode cost 1 -> 101 vs 30; cost 8 -> 108 vs 170."""
        queue = [spec("long-prompt", 0, 100, 1), spec("long-output", 0, 10, 20)]
        self.assertEqual(queue_order("shortest", queue, decode_cost=1), ["long-output", "long-prompt"])
        self.assertEqual(queue_order("shortest", queue, decode_cost=8), ["long-prompt", "long-output"])

    def test_priority_is_smallest_value_then_arrival_then_workload_order(self):
        """d (-1) first; b and e (0, b's missing priority counts as 0) by arrival then order; a, c (3)."""
        self.assertEqual(queue_order("priority", self.QUEUE), ["d", "b", "e", "a", "c"])

    def test_fcfs_is_the_default_and_ignores_priority(self):
        queue = [spec("x", 0, 10, 1, 9), spec("y", 0, 10, 1, 0)]
        self.assertEqual(queue_order("fcfs", queue), ["x", "y"])
        result = simulate(queue, ONE_SLOT, CONTINUOUS)
        self.assertEqual([r.admitted_at for r in result.requests], [0, 2])


class PolicyEngineTest(unittest.TestCase):
    """One slot (max_active 1), budget 16, decode cost 4, so each request's life is easy to walk."""

    WORKLOAD = [
        spec("A", 0, 8, 2, 5),     # least urgent, arrives first
        spec("B", 1, 4, 1, 1),
        spec("C", 1, 4, 1, 0),     # arrives later than A but is more urgent
        spec("D", 2, 2, 1),        # no priority (= 0); the least work (2 + 4 = 6)
    ]

    def admissions(self, policy, workload=None):
        result = simulate(workload or self.WORKLOAD, ONE_SLOT, CONTINUOUS, policy)
        return {r.name: r.admitted_at for r in result.requests}, result

    def test_priority_never_preempts_an_active_request(self):
        """tick 0: A admitted, prefills 8 -> done. ticks 1, 2: A decodes @2, @3 (done 3) although
        the more urgent C waits from tick 1. tick 3: C (0, arrival 1) before D (0, arrival 2) and
        B (1); each then takes 2 ticks (prefill, one decode): D at 5, B at 7."""
        admitted, result = self.admissions("priority")
        self.assertEqual(admitted, {"A": 0, "C": 3, "D": 5, "B": 7})
        a = result.requests[0]
        self.assertEqual((a.token_times, a.done_at), ([2, 3], 3))
        self.assertEqual(result.ticks[1].waiting, ["C", "B"])          # queue shown in policy order
        self.assertEqual(result.ticks[2].active, ["A"])

    def test_fcfs_and_shortest_on_the_same_queue(self):
        """fcfs: B, C, D by arrival. shortest: at tick 3 D (work 6) before B and C (work 8, tie on
        arrival, workload order B before C)."""
        self.assertEqual(self.admissions("fcfs")[0], {"A": 0, "B": 3, "C": 5, "D": 7})
        self.assertEqual(self.admissions("shortest")[0], {"A": 0, "D": 3, "B": 5, "C": 7})

    def test_flipping_every_priority_reverses_the_order(self):
        """Four requests waiting together at tick 0 with priorities 0..3: admitted 0, 2, 4, 6 in
        priority order; with every priority p replaced by 3 - p the order is exactly reversed, and
        the order score against the original priorities goes from 1 to 0."""
        original = [spec(f"E{p}", 0, 4, 1, p) for p in (2, 0, 3, 1)]
        flipped = [RequestSpec(s.name, 0, None, 0, 4, 1, 3 - s.priority) for s in original]
        first, run1 = self.admissions("priority", original)
        second, run2 = self.admissions("priority", flipped)
        self.assertEqual(sorted(first, key=first.get), ["E0", "E1", "E2", "E3"])
        self.assertEqual(sorted(second, key=second.get), ["E3", "E2", "E1", "E0"])
        priorities = {s.name: s.priority for s in original}
        self.assertEqual(order_score((priorities[r.name], r.first_token_at) for r in run1.requests), 1)
        self.assertEqual(order_score((priorities[r.name], r.first_token_at) for r in run2.requests), 0)

    def test_every_request_admitted_once_and_never_before_arrival(self):
        for policy in POLICIES:
            with self.subTest(policy=policy):
                for result in run_cases(scenario("priority-mix"), EngineConfig(), cases_for(EngineConfig()), policy):
                    for r in result.requests:
                        self.assertGreaterEqual(r.admitted_at, r.spec.arrival)
                    admitted = [name for k in result.ticks for name in k.admitted]
                    self.assertEqual(sorted(admitted), sorted(r.name for r in result.requests))


class PriorityMixTest(unittest.TestCase):
    """The priority lesson's workload: 8 batch jobs (priority 1), 4 interactive turns (priority 0)."""

    def continuous(self, policy, workload=None):
        result = run_cases(workload or scenario("priority-mix"), EngineConfig(), cases_for(EngineConfig()), policy)[1]
        return result, summarize(result)

    def test_a_real_queue_forms_under_max_active_4(self):
        """Six batch jobs arrive in ticks 0-2 with 4 slots: at tick 2 two of them wait."""
        result, _ = self.continuous("fcfs")
        self.assertEqual(len(result.ticks[2].waiting), 2)

    def test_priority_helps_the_interactive_class(self):
        """Under FCFS the interactive turns wait behind every earlier batch job; under priority they
        jump the queue (but never an active request), so each one's TTFT drops."""
        fcfs, fcfs_summary = self.continuous("fcfs")
        prio, prio_summary = self.continuous("priority")
        for a, b in zip(fcfs.requests, prio.requests):
            if a.spec.priority == 0:
                self.assertLess(b.first_token_at - b.spec.arrival, a.first_token_at - a.spec.arrival, a.name)
        gain = prio_summary["priority_first_token_order_score"] - fcfs_summary["priority_first_token_order_score"]
        self.assertGreaterEqual(gain, 0.15)

    def test_flipped_priorities_hurt_the_interactive_class(self):
        """Swap the classes (interactive 1, batch 0): the interactive turns now wait longer than under FCFS."""
        flipped = [RequestSpec(s.name, s.arrival, s.prefix_key, s.prefix_tokens, s.suffix_tokens,
                               s.output_tokens, 1 - s.priority) for s in scenario("priority-mix")]
        fcfs, _ = self.continuous("fcfs")
        worse, _ = self.continuous("priority", flipped)
        interactive = [i for i, s in enumerate(flipped) if s.priority == 1]
        self.assertGreater(max(worse.requests[i].first_token_at for i in interactive),
                           max(fcfs.requests[i].first_token_at for i in interactive))


if __name__ == "__main__":
    unittest.main()
