"""The statistics contract of lab.md §5 on hand values."""

import json
import os
import unittest
from fractions import Fraction

from sched.core.config import Batching, Case, EngineConfig, cases_for
from sched.lab.engine import simulate
from sched.core.records import CaseResult, Request, Status
import random

from sched.core.metrics import e2e, fairness, itls, mean, order_score, percentile, queue_wait, summarize, tpot, ttft
from sched.vllm.config import VllmKnobs
from sched.vllm.engine import simulate_vllm
from sched.workload.specs import RequestSpec, scenario
from tests.helpers import EXPECTED, read, run_cli, temp_dir

CASE = Case("continuous", Batching.CONTINUOUS, apc=False, chunk_tokens=None)


def finished(name, arrival, token_times, status=Status.DONE, admitted_at=None, done_at=None, output=None):
    spec = RequestSpec(name, arrival, None, 0, 1, output or max(len(token_times), 1))
    request = Request(spec, 0, status=status, admitted_at=admitted_at, token_times=list(token_times))
    request.done_at = done_at if done_at is not None else (token_times[-1] if token_times else arrival + 1)
    return request


class PercentileTest(unittest.TestCase):
    def test_nearest_rank(self):
        self.assertEqual(percentile(range(1, 21), 95), 19)    # ceil(0.95 * 20) = 19th value
        self.assertEqual(percentile(range(1, 9), 95), 8)      # with 8 values P95 is the maximum
        self.assertEqual(percentile([5, 1, 3], 50), 3)        # ceil(1.5) = 2nd of [1, 3, 5]
        self.assertEqual(percentile([7], 95), 7)

    def test_empty_sample_is_none_never_zero(self):
        self.assertIsNone(percentile([], 95))


class PerRequestTest(unittest.TestCase):
    def test_worked_example_2_3_4_14(self):
        request = finished("R", 0, [2, 3, 4, 14])
        self.assertEqual(itls(request), [1, 1, 10])
        self.assertEqual(tpot(request), 4)
        self.assertEqual(percentile(itls(request), 95), 10)

    def test_one_token_request_has_no_itl_or_tpot(self):
        request = finished("R", 0, [5])
        self.assertEqual(itls(request), [])
        self.assertIsNone(tpot(request))

    def test_tpot_is_exact(self):
        self.assertEqual(tpot(finished("R", 0, [2, 3, 5])), Fraction(3, 2))


class SummaryTest(unittest.TestCase):
    def summary(self, requests):
        return summarize(CaseResult(CASE, EngineConfig(), requests, []))

    def test_error_rate_counts_requests_that_timed_out_while_queued(self):
        """4 arrived: 2 ok, 1 timed out after 3 tokens, 1 timed out in the queue -> error 2/4."""
        requests = [
            finished("A", 0, [2, 3], admitted_at=0),
            finished("B", 0, [4, 5], admitted_at=1),
            finished("C", 0, [6, 7, 8], status=Status.TIMEOUT, admitted_at=2, done_at=10, output=5),
            finished("D", 2, [], status=Status.TIMEOUT, done_at=12),
        ]
        s = self.summary(requests)
        self.assertEqual((s["arrived"], s["succeeded"], s["error_rate"]), (4, 2, Fraction(1, 2)))
        self.assertEqual(s["latency_samples"], 2)
        # Throughput counts all 7 emitted tokens over the makespan 12 - 0; completed only A's and B's 4.
        self.assertEqual(s["makespan"], 12)
        self.assertEqual(s["throughput"], Fraction(7, 12))
        self.assertEqual(s["completed_output_tps"], Fraction(4, 12))
        # Latencies are success-only: TTFTs 2 and 4, P95 = 4; the failed C is not a sample.
        self.assertEqual(s["p95_ttft"], 4)

    def test_distributions_with_their_own_sample_counts(self):
        """Mean, median (nearest-rank P50), P90, P99 and count of each latency, by hand.

        Successful A (arrival 0, admitted 0, tokens [2, 3, 4, 14]: lab.md §5's worked example),
        B (arrival 1, admitted 3, tokens [5, 6]), C (arrival 2, admitted 2, one token at 9); D timed
        out (no sample). TTFTs [2, 4, 7]: mean 13/3, median = 2nd of 3 = 4, P90 = ceil(2.7) = 3rd = 7.
        TPOT only for >= 2 tokens: A 4, B 1 -> mean 5/2, median 1st of 2 = 1, P90 = 2nd = 4, count 2.
        ITL gaps pooled: A [1, 1, 10], B [1] -> 4 gaps, mean 13/4, median 2nd = 1, P90 4th = 10.
        E2E [14, 5, 7]: mean 26/3, median 7, P99 14. Queue waits [0, 2, 0]: median 0, P90 2.
        """
        requests = [
            finished("A", 0, [2, 3, 4, 14], admitted_at=0),
            finished("B", 1, [5, 6], admitted_at=3),
            finished("C", 2, [9], admitted_at=2),
            finished("D", 0, [3], status=Status.TIMEOUT, admitted_at=1, done_at=20, output=4),
        ]
        s = self.summary(requests)
        expected = {
            "mean_ttft": Fraction(13, 3), "median_ttft": 4, "p90_ttft": 7, "p99_ttft": 7, "ttft_samples": 3,
            "mean_tpot": 2.5, "median_tpot": 1, "p90_tpot": 4, "p99_tpot": 4, "tpot_samples": 2,
            "mean_itl": Fraction(13, 4), "median_itl": 1, "p90_itl": 10, "p99_itl": 10, "itl_samples": 4,
            "mean_e2e": Fraction(26, 3), "median_e2e": 7, "p90_e2e": 14, "p99_e2e": 14, "e2e_samples": 3,
            "median_queue_wait": 0, "p90_queue_wait": 2, "queue_wait_samples": 3,
        }
        self.assertEqual({k: s[k] for k in expected}, expected)
        self.assertEqual((s["p95_ttft"], s["p95_tpot"], s["p95_itl"]), (7, 4, 10))  # unchanged columns

    def test_baseline_distributions_from_lab_md_section_6(self):
        """lab.md §6: the continuous+APC TTFTs are [9, 11, 13, 14, 20, 22, 26, 25]: mean 140/8 = 17.5,
        median = 4th of the sorted 8 = 14, P90 = ceil(7.2) = 8th = 26. 136 output tokens of 8 successful
        requests give 128 gaps, all of 1 tick (decode is never starved under the default knobs)."""
        cases = json.loads(read(os.path.join(EXPECTED, "baseline", "summary.json")))["cases"]
        apc = cases[2]
        self.assertEqual((apc["case"], apc["mean_ttft"], apc["median_ttft"], apc["p90_ttft"], apc["ttft_samples"]),
                         ("continuous+APC", 17.5, 14, 26, 8))
        self.assertEqual((apc["itl_samples"], apc["mean_itl"], apc["p99_itl"]), (128, 1, 1))
        summary_csv = read(os.path.join(EXPECTED, "baseline", "summary.csv")).splitlines()
        header = summary_csv[0].split(",")
        self.assertEqual(header[:3], ["case", "p50_ttft", "p95_ttft"])  # today's columns keep their place
        self.assertEqual(summary_csv[3].split(",")[header.index("median_ttft")], "14")

    def test_token_gaps_scenario_is_the_worked_example(self):
        """``--scenario token-gaps --decode-cost 40`` (derivation in sched.workload.specs._token_gaps): in
        chunk32 W1's tokens are [2, 3, 4, 14] and L0's nine are consecutive, so the pooled ITL has
        8 + 3 = 11 gaps, P95 = ceil(10.45) = 11th = 10; TPOT [1, 4] gives P95 4, mean 2.5."""
        out = os.path.join(temp_dir(self), "run")
        code, _, err = run_cli(["--scenario", "token-gaps", "--decode-cost", "40", "--artifacts", out])
        self.assertEqual(code, 0, err)
        rows = [json.loads(line) for line in read(os.path.join(out, "requests.jsonl")).splitlines()]
        w1 = [r for r in rows if r["name"] == "W1" and r["case"] == "continuous+APC+chunk32"][0]
        self.assertEqual(w1["token_times"], [2, 3, 4, 14])
        chunk = json.loads(read(os.path.join(out, "summary.json")))["cases"][3]
        self.assertEqual((chunk["p95_itl"], chunk["p95_tpot"], chunk["itl_samples"], chunk["mean_tpot"]),
                         (10, 4, 11, 2.5))

    def test_all_failed_gives_null_latencies_not_zero(self):
        s = self.summary([finished("D", 0, [], status=Status.TIMEOUT, done_at=3)])
        for field in ("p50_ttft", "p95_ttft", "p95_itl", "p95_tpot", "p95_e2e", "p95_queue_wait",
                      "mean_ttft", "median_tpot", "p90_itl", "p99_e2e", "mean_tpot", "p90_queue_wait"):
            self.assertIsNone(s[field], field)
        self.assertEqual((s["ttft_samples"], s["tpot_samples"], s["itl_samples"]), (0, 0, 0))
        self.assertEqual((s["latency_samples"], s["error_rate"]), (0, 1))

    def test_null_in_json_and_na_in_text(self):
        """With a 1-tick deadline nothing can succeed: every latency is null / NA."""
        out = os.path.join(temp_dir(self), "run")
        code, stdout, err = run_cli(["--timeout-ticks", "1", "--artifacts", out])
        self.assertEqual(code, 0, err)
        cases = json.loads(read(os.path.join(out, "summary.json")))["cases"]
        self.assertTrue(all(c["p95_ttft"] is None and c["succeeded"] == 0 for c in cases))
        self.assertIn('"p95_ttft": null', read(os.path.join(out, "summary.json")))
        row = read(os.path.join(out, "table.txt")).splitlines()[2].split()
        self.assertEqual(row[:4], ["static", "NA", "NA", "NA"])
        self.assertIn(",NA,", read(os.path.join(out, "summary.csv")))


class CompareMetricsTest(unittest.TestCase):
    """compare.md §2 formulas on hand values."""

    def test_fairness(self):
        """max(0, 1 - (max - min) / max(mean, 1)) over successful TTFTs."""
        self.assertEqual(fairness([2, 4, 6]), 0)                   # 1 - 4/4
        self.assertEqual(fairness([10, 12]), Fraction(9, 11))      # 1 - 2/11
        self.assertEqual(fairness([5, 5, 5]), 1)                   # everyone waited the same
        self.assertEqual(fairness([1, 30]), 0)                     # clamped at 0, never negative
        self.assertEqual(fairness([0, Fraction(1, 2)]), Fraction(1, 2))  # mean 1/4 < 1: divide by 1
        self.assertEqual(fairness([]), 1)                          # no successful request
        # lab.md §6: continuous+APC TTFTs [9, 11, 13, 14, 20, 22, 26, 25]: mean 17.5, spread 17.
        self.assertEqual(fairness([9, 11, 13, 14, 20, 22, 26, 25]), Fraction(1, 35))

    def test_mean(self):
        self.assertEqual(mean([1, 2]), Fraction(3, 2))
        self.assertIsNone(mean([]))

    def test_order_score_hand_values(self):
        """(priority, time) pairs; lower priority value = more urgent."""
        self.assertEqual(order_score([(0, 1), (1, 2)]), 1)          # urgent first
        self.assertEqual(order_score([(1, 1), (0, 2)]), 0)          # urgent last
        self.assertEqual(order_score([(0, 3), (1, 3)]), Fraction(1, 2))  # tie in time: one half
        self.assertEqual(order_score([(0, 5), (1, 3), (1, 5)]), Fraction(1, 4))
        # Pairs with equal priority do not count: (0,1)-(0,9) is ignored; (0,1)<(2,4) yes, (0,9)>(2,4) no.
        self.assertEqual(order_score([(0, 1), (0, 9), (2, 4)]), Fraction(1, 2))
        self.assertIsNone(order_score([(0, 1), (0, 2)]))            # no pair of different priority
        self.assertIsNone(order_score([]))

    def test_order_score_matches_the_pairwise_definition(self):
        """The sweep equals the literal definition (every pair, one by one) on random samples."""
        rng = random.Random(4)
        for _ in range(50):
            pairs = [(rng.randint(-1, 2), rng.randint(0, 6)) for _ in range(rng.randint(0, 12))]
            total = count = 0
            for i, (p1, t1) in enumerate(pairs):
                for p2, t2 in pairs[i + 1:]:
                    if p1 == p2:
                        continue
                    urgent, other = (t1, t2) if p1 < p2 else (t2, t1)
                    count += 1
                    total += 1 if urgent < other else Fraction(1, 2) if urgent == other else 0
            self.assertEqual(order_score(pairs), Fraction(total, count) if count else None, pairs)

    def test_baseline_utilization_and_rates(self):
        """Baseline: every prompt token (512 + 5*144 + 96 + 160 = 1488) costs 1 unit and every
        output token (136) 8 units: 2576 units, minus APC's 384 hit tokens. The baseline never
        idles between its first arrival and last end, so busy_fraction is 1."""
        out = os.path.join(temp_dir(self), "run")
        self.assertEqual(run_cli(["--artifacts", out])[0], 0)
        cases = {c["case"]: c for c in json.loads(read(os.path.join(out, "summary.json")))["cases"]}
        self.assertEqual(cases["static"]["budget_utilization"], round(2576 / (64 * 83), 6))
        self.assertEqual(cases["continuous"]["budget_utilization"], round(2576 / (64 * 57), 6))
        self.assertEqual(cases["continuous+APC"]["budget_utilization"], round(2192 / (64 * 52), 6))
        self.assertEqual(cases["continuous+APC"]["fairness"], round(1 / 35, 6))
        for case in cases.values():
            self.assertEqual((case["busy_fraction"], case["completion_rate"]), (1, 1))
            self.assertIsNone(case["priority_first_token_order_score"])   # every priority is 0

    def test_queue_wait_statistics(self):
        """Waits 0, 1, 5 (ok) and one timed-out request that is not a sample."""
        requests = [
            finished("A", 0, [2, 3], admitted_at=0),
            finished("B", 0, [4, 5], admitted_at=1),
            finished("C", 1, [9, 10], admitted_at=6),
            finished("D", 0, [], status=Status.TIMEOUT, done_at=12),
        ]
        s = SummaryTest.summary(self, requests)
        self.assertEqual((s["p50_queue_wait"], s["p95_queue_wait"], s["p99_queue_wait"]), (1, 5, 5))
        self.assertEqual(s["mean_queue_wait"], 2)
        self.assertEqual(s["completion_rate"], Fraction(3, 4))


def _by_definition(result) -> dict:
    """The summary row computed literally from lab.md §5's per-request definitions."""
    requests = result.requests
    ok = [r for r in requests if r.succeeded]
    ttfts, e2es, waits = ([f(r) for r in ok] for f in (ttft, e2e, queue_wait))
    tpots = [tpot(r) for r in ok if tpot(r) is not None]
    gaps = [gap for r in ok for gap in itls(r)]
    makespan = max(r.done_at for r in requests) - min(r.spec.arrival for r in requests)
    emitted, completed = sum(r.num_tokens for r in requests), sum(r.num_tokens for r in ok)

    def rate(count, whole):
        return Fraction(count, whole) if whole else None

    row = {"case": result.case.name, "p50_ttft": percentile(ttfts, 50), "p95_ttft": percentile(ttfts, 95),
           "p95_itl": percentile(gaps, 95), "p95_tpot": percentile(tpots, 95), "p95_e2e": percentile(e2es, 95),
           "p95_queue_wait": percentile(waits, 95), "throughput": rate(emitted, makespan),
           "completed_output_tps": rate(completed, makespan), "output_tokens": emitted,
           "hit_tokens": sum(r.hit_tokens for r in requests), "succeeded": len(ok),
           "timed_out": len(requests) - len(ok), "arrived": len(requests),
           "error_rate": rate(len(requests) - len(ok), len(requests)), "makespan": makespan,
           "latency_samples": len(ok), "p50_queue_wait": percentile(waits, 50),
           "p99_queue_wait": percentile(waits, 99), "mean_queue_wait": mean(waits), "fairness": fairness(ttfts),
           "budget_utilization": rate(result.budget_spent, result.config.budget * makespan),
           "busy_fraction": rate(result.busy_ticks, makespan), "completion_rate": rate(len(ok), len(requests)),
           "priority_first_token_order_score": order_score((r.spec.priority or 0, r.first_token_at) for r in ok),
           "priority_order_score": order_score((r.spec.priority or 0, r.done_at) for r in ok)}
    for name, sample in (("ttft", ttfts), ("tpot", tpots), ("itl", gaps), ("e2e", e2es), ("queue_wait", waits)):
        row.update({f"mean_{name}": mean(sample), f"median_{name}": percentile(sample, 50),
                    f"p90_{name}": percentile(sample, 90), f"p99_{name}": percentile(sample, 99),
                    f"{name}_samples": len(sample)})
    return row


class SummaryByDefinitionTest(unittest.TestCase):
    def test_summarize_equals_the_per_request_definitions(self):
        """Seeded random workloads (priorities, deadlines, decodes that pause for the budget, vLLM
        preemptions): every summary value equals its literal definition; the TPOT mean, a float
        summed per denominator, to 12 digits."""
        rng = random.Random(3)
        gaps = EngineConfig(decode_cost=40)   # lab.md §5's worked example: W1's decode pauses
        results = [simulate(scenario("token-gaps"), gaps, case) for case in cases_for(gaps)]
        for _ in range(6):
            workload = sorted((RequestSpec(f"R{i}", rng.randint(0, 60), *rng.choice(((None, 0), ("P", 32))),
                                           rng.randint(1, 120), rng.randint(1, 30), priority=rng.choice((None, 0, 1, 2)))
                               for i in range(rng.randint(1, 30))), key=lambda spec: spec.arrival)
            timeout = rng.choice((None, 60, 150))
            config = EngineConfig(decode_cost=rng.choice((8, 20, 40)), timeout_ticks=timeout)
            results += [simulate(workload, config, case, rng.choice(("fcfs", "priority"))) for case in cases_for(config)]
            results.append(simulate_vllm(workload, VllmKnobs(64, 4, num_gpu_blocks=14, timeout_ticks=timeout,
                                                             policy=rng.choice(("fcfs", "priority")))))
        for number, result in enumerate(results):
            with self.subTest(run=number, case=result.case.name):
                row, expected = summarize(result), _by_definition(result)
                mean_tpot, expected_mean_tpot = row.pop("mean_tpot"), expected.pop("mean_tpot")
                self.assertEqual(row, expected)
                if expected_mean_tpot is None:
                    self.assertIsNone(mean_tpot)
                else:
                    self.assertAlmostEqual(mean_tpot, float(expected_mean_tpot), delta=1e-12 * expected_mean_tpot)


if __name__ == "__main__":
    unittest.main()


class SummarizeChunksTest(unittest.TestCase):
    def test_rows_moved_into_columns_a_few_at_a_time_give_the_same_row(self):
        """summarize moves its per-request rows into columns every _ROWS_AT_ONCE rows: any count
        gives the same summary (priorities, a timeout and several cases exercise every column)."""
        from sched.core import metrics as metrics_module
        from sched.core.config import EngineConfig, cases_for
        from sched.lab.engine import simulate
        from sched.workload.specs import scenario
        results = [simulate(scenario("priority-mix"), EngineConfig(timeout_ticks=30), case)
                   for case in cases_for(EngineConfig(timeout_ticks=30))]
        whole = [metrics_module.summarize(result) for result in results]
        saved = metrics_module._ROWS_AT_ONCE
        try:
            for size in (1, 2, 5):
                metrics_module._ROWS_AT_ONCE = size
                self.assertEqual([metrics_module.summarize(result) for result in results], whole)
        finally:
            metrics_module._ROWS_AT_ONCE = saved
        self.assertTrue(any(row["timed_out"] for row in whole))
