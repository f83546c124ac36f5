"""The event-driven engine equals the per-tick walk (lab.md §3: skipping must not change results).

Three walks of the same case are compared field by field: the lab core's literal engine
(``tests/reference_engine.py``), the new engine forced per tick, and the new engine with jumps;
on the golden scenarios and on seeded random workloads that mix starved decode, chunking,
deadlines, static batching, policies and shared prefixes.
"""

import random
import unittest
from unittest import mock

from sched.core.config import EngineConfig, cases_for
from sched.lab.engine import Simulation
from sched.core.metrics import summarize
from sched.core.records import CountsKeeper, TickCounts
from sched.workload.specs import RequestSpec, scenario
from tests.helpers import FULL
from tests.reference_engine import ReferenceSimulation

FIELDS = ("name", "index", "status", "admitted_at", "hit_tokens", "prefill_done_at", "token_times",
          "done_at", "first_token_at")


def _rows(result):
    return [tuple(getattr(r, f) for f in FIELDS) for r in result.requests]


def _random_workload(rng: random.Random, n: int) -> list[RequestSpec]:
    specs, arrival = [], 0
    for i in range(n):
        arrival += rng.choice((0, 0, 1, 2, 5, 30))
        key = rng.choice((None, "A", "B"))
        prefix = rng.randint(1, 40) if key else 0
        specs.append(RequestSpec(f"r{i}", arrival, key, prefix if key != "A" else 24, rng.randint(0 if key else 1, 60),
                                 rng.randint(1, 30), rng.choice((None, 0, 1, 2))))
    return specs


def _counts_row(k: TickCounts) -> tuple:
    return (k.tick, k.num_ticks, k.num_waiting, k.num_active, k.num_admitted, k.num_cache_hits, k.num_timeouts,
            k.num_decoded, k.num_prefill_tokens, k.budget_used, k.num_finished)


def _expected_counts(counts: list, walked: list) -> list[tuple]:
    """What each counts record must say, from the reference walk's per-tick records over the
    record's ticks: sums of the counts, the largest queue and active list (lab.md §7 field
    meanings). Also checks the records cover every walked tick once, in order."""
    rows, position = [], 0
    for k in counts:
        inside = [w for w in walked if k.tick <= w.tick < k.tick + k.num_ticks]
        rows.append((k.tick, k.num_ticks, max(len(w.waiting) for w in inside), max(len(w.active) for w in inside),
                     sum(len(w.admitted) for w in inside), sum(len(w.cache_hits) for w in inside),
                     sum(len(w.timeouts) for w in inside), sum(len(w.decoded) for w in inside),
                     sum(tokens for w in inside for _, tokens in w.prefilled), sum(w.budget_used for w in inside),
                     sum(len(w.finished) for w in inside)))
        assert walked[position:position + len(inside)] == inside, "counts records skip or repeat a walked tick"
        position += len(inside)
    assert position == len(walked), "counts records miss walked ticks"
    return rows


class EventEngineEqualsPerTickWalk(unittest.TestCase):
    def assert_same_walks(self, workload, config, policy="fcfs"):
        for case in cases_for(config):
            reference = ReferenceSimulation(workload, config, case, policy).run()
            per_tick = Simulation(workload, config, case, policy, per_tick=True).run()
            jumping = Simulation(workload, config, case, policy).run()
            counts = Simulation(workload, config, case, policy, timeline="counts").run()
            with self.subTest(case=case.name, config=config, policy=policy):
                expected = _rows(reference)
                self.assertEqual(_rows(per_tick), expected)
                self.assertEqual(_rows(jumping), expected)
                self.assertEqual(_rows(counts), expected)
                self.assertEqual(jumping.ticks, reference.ticks)      # full records, jumped ticks expanded
                self.assertEqual(per_tick.ticks, reference.ticks)
                self.assertEqual(summarize(jumping), summarize(reference))
                self.assertEqual((jumping.budget_spent, jumping.busy_ticks),
                                 (reference.budget_spent, reference.busy_ticks))
                self.assertTrue(all(isinstance(k, TickCounts) for k in counts.ticks))
                self.assertEqual(sum(k.budget_used for k in counts.ticks), reference.budget_spent)
                self.assertEqual(sum(k.num_ticks for k in counts.ticks if k.budget_used), reference.busy_ticks)
                self.assertEqual([_counts_row(k) for k in counts.ticks], _expected_counts(counts.ticks, reference.ticks))

    def test_golden_scenarios(self):
        for name in ("baseline", "prefix-broken", "output-heavy"):
            self.assert_same_walks(scenario(name), EngineConfig())
        self.assert_same_walks(scenario("baseline"), EngineConfig(timeout_ticks=30))

    def test_random_workloads(self):
        """Seeded: budgets that starve decode (budget < active × decode cost), deadlines, policies.
        15 trials in the learner's run, 40 with ISL_FULL=1 (the first 15 are the same)."""
        rng = random.Random(6)
        for trial in range(40 if FULL else 15):
            workload = _random_workload(rng, rng.randint(1, 25))
            config = EngineConfig(budget=rng.choice((8, 16, 40, 64, 200)), decode_cost=rng.choice((1, 4, 8)),
                                  max_active=rng.randint(1, 6), chunk_tokens=rng.choice((4, 16, 32)),
                                  timeout_ticks=rng.choice((None, None, 15, 60)))
            self.assert_same_walks(workload, config, rng.choice(("fcfs", "shortest", "priority")))

    def test_random_block_workloads(self):
        """Seeded workloads with block-level prefixes (block size 8, ids drawn from a small tree
        of shared beginnings), so hits of 0, 1, 2 or 3 leading blocks occur."""
        rng = random.Random(61)
        for trial in range(15):
            specs, arrival = [], 0
            for i in range(rng.randint(1, 20)):
                arrival += rng.choice((0, 1, 3, 10))
                depth = rng.randint(1, 3)
                blocks = tuple(f"b{rng.randint(0, 1)}" if d == 0 else f"b{d}-{rng.randint(0, 1)}"
                               for d in range(depth))
                specs.append(RequestSpec(f"r{i}", arrival, None, 0, rng.randint(1, 40), rng.randint(1, 12),
                                         prefix_blocks=blocks, block_size=8))
            config = EngineConfig(budget=rng.choice((16, 32, 64)), decode_cost=rng.choice((1, 4)),
                                  max_active=rng.randint(1, 4), chunk_tokens=8)
            self.assert_same_walks(specs, config)

    def test_completions_inside_steady_decoding_are_counted_where_they_happen(self):
        """Budget 64, decode cost 1, three requests admitted together at tick 0 (prompts 4):
        tick 0 prefills all, they decode from tick 1 (stamps 2..), outputs 10, 20 and 30 tokens end
        with stamps 11, 21 and 31, i.e. in ticks 10, 20 and 30. The jump over steady decoding
        simulates those ticks itself: records (0,1) prefill, (1,9) jump, (10,1) A ends, (11,9),
        (20,1) B ends, (21,9), (30,1) C ends."""
        workload = [RequestSpec("A", 0, None, 0, 4, 10), RequestSpec("B", 0, None, 0, 4, 20),
                    RequestSpec("C", 0, None, 0, 4, 30)]
        result = Simulation(workload, EngineConfig(), cases_for(EngineConfig())[1], timeline="counts").run()
        self.assertEqual([(k.tick, k.num_ticks, k.num_active, k.num_finished) for k in result.ticks],
                         [(0, 1, 3, 0), (1, 9, 3, 0), (10, 1, 3, 1), (11, 9, 2, 0), (20, 1, 2, 1), (21, 9, 1, 0),
                          (30, 1, 1, 1)])
        self.assertEqual([r.done_at for r in result.requests], [11, 21, 31])

    def test_counts_records_merge_in_pairs_past_the_bound(self):
        """With the bound set to 4 records: rows for ticks 0..5 (one tick each) give [0,1] [2,3]
        merged when the fourth arrives, then 4 and 5 fall into the span of 2 of the last record
        ([2..3] has span 2: 4 starts a new record, 5 merges into it)."""
        keeper = CountsKeeper()
        with mock.patch("sched.core.records.MAX_COUNTS_RECORDS", 4):
            for tick in range(6):
                keeper.add([tick, 1, tick, 1, 1, 0, 0, 2, 3, 5, 1])
        self.assertEqual([_counts_row(k) for k in keeper.records()],
                         [(0, 2, 1, 1, 2, 0, 0, 4, 6, 10, 2), (2, 2, 3, 1, 2, 0, 0, 4, 6, 10, 2),
                          (4, 2, 5, 1, 2, 0, 0, 4, 6, 10, 2)])

    def test_steady_decoding_is_one_jump(self):
        """One request, prompt 4, 1000 tokens, budget 64: tick 0 prefills, tick 1 starts decoding
        (stamp 2), the run ends with stamp 1001 emitted in tick 1000. After tick 0 the request is
        already decoding with nothing else due, so the timeline (counts) has the prefill tick, one
        jump over ticks 1..999 and the walked finishing tick 1000."""
        workload = [RequestSpec("A", 0, None, 0, 4, 1000)]
        result = Simulation(workload, EngineConfig(), cases_for(EngineConfig())[1], timeline="counts").run()
        self.assertEqual([(k.tick, k.num_ticks) for k in result.ticks], [(0, 1), (1, 999), (1000, 1)])
        self.assertEqual(result.requests[0].token_runs, [(2, 1000)])
        self.assertEqual(result.requests[0].done_at, 1001)


if __name__ == "__main__":
    unittest.main()
