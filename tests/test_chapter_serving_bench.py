"""The serving-bench chapter's window model and helpers (serving-bench.md §1–3): every §3 fact, typed from the spec.

Requests of §3: r1 (arrival 0, service 10, 20 tokens, priority 5), r2 (0, 2, 20, priority 0),
r3 (1, 3, 20, priority 2). Hand computation, fifo, batch 1, speed-up 1:
  now 0: queue [r1, r2]; window [r1] 0–10. now 10: r3 joins; [r2] 10–12; [r3] 12–15.
  waits 0, 10, 11 (mean 7); makespan 15 − 0 = 15 ms; 60 tokens / 0.015 s = 4000 tok/s; busy 15 → 1.0.
  fairness: max(0, 1 − (11 − 0) / max(7, 1)) = 0.
shortest, batch 1: [r2] 0–2; r3 joins at 2; (3 < 10) → [r3] 2–5; [r1] 5–15.
priority, batch 1: [r2] (priority 0) 0–2; then r3 (2) before r1 (5).
fifo, batch 2: [r1, r2] 0–10 (max service 10); [r3] 10–13: makespan 13.
"""

import doctest
import random
import unittest

from sched.chapter import window as serving_bench
from sched.serving_bench import (build_scheduler_trace_evidence, compare_scheduler_to_baseline,
                                 decide_scheduler_candidate, recommend_serving_scheduler_run, select_next_batch,
                                 simulate_serving_scheduler, summarize_serving_scheduler_runs,
                                 validate_scheduler_contract)


def requests():
    return [{"request_id": "r1", "arrival_ms": 0, "service_ms": 10, "output_tokens": 20, "priority": 5},
            {"request_id": "r2", "arrival_ms": 0, "service_ms": 2, "output_tokens": 20, "priority": 0},
            {"request_id": "r3", "arrival_ms": 1, "service_ms": 3, "output_tokens": 20, "priority": 2}]


def ids(result):
    return [r["request_id"] for r in result["requests"]]


class WindowModelFactsTest(unittest.TestCase):
    def test_fifo_batch_1(self):
        run = simulate_serving_scheduler(requests(), policy="fifo", batch_size=1)
        self.assertEqual((run["request_count"], run["completed_count"]), (3, 3))
        self.assertEqual(run["makespan_ms"], 15.0)
        self.assertEqual(run["throughput_tps"], 4000.0)
        self.assertEqual(run["utilization"], 1.0)
        self.assertAlmostEqual(run["avg_queue_wait_ms"], (0 + 10 + 11) / 3, places=4)
        self.assertEqual(run["requests"][0]["request_id"], "r1")
        self.assertEqual(run["requests"][0]["queue_wait_ms"], 0.0)
        self.assertEqual(run["requests"][1]["ttft_ms"], 10.0)
        self.assertEqual([w["request_ids"] for w in run["batch_trace"]], [["r1"], ["r2"], ["r3"]])
        self.assertEqual([(w["start_ms"], w["duration_ms"]) for w in run["batch_trace"]],
                         [(0.0, 10.0), (10.0, 2.0), (12.0, 3.0)])
        self.assertTrue(0.0 <= run["fairness"] <= 1.0)
        self.assertEqual(run["fairness"], 0.0)
        self.assertEqual([r["e2e_ms"] for r in run["requests"]], [10.0, 12.0, 14.0])  # ends 10, 12, 15 − arrivals

    def test_shortest_and_priority_orders(self):
        shortest = simulate_serving_scheduler(requests(), policy="shortest", batch_size=1)
        self.assertEqual((ids(shortest)[0], ids(shortest)[-1]), ("r2", "r1"))
        self.assertEqual(ids(shortest), ["r2", "r3", "r1"])
        priority = simulate_serving_scheduler(requests(), policy="priority", batch_size=1)
        self.assertEqual(ids(priority)[0], "r2")
        self.assertEqual(priority["batch_trace"][0]["request_ids"], ["r2"])

    def test_fifo_batch_2(self):
        run = simulate_serving_scheduler(requests(), policy="fifo", batch_size=2, batch_speedup=1.0)
        self.assertEqual(run["completed_count"], 3)
        self.assertEqual(run["makespan_ms"], 13.0)
        self.assertEqual([w["request_ids"] for w in run["batch_trace"]], [["r1", "r2"], ["r3"]])

    def test_speedup_shortens_every_window(self):
        """batch 2, speed-up 2: [r1, r2] 0–5 (10 / 2); r3 arrived at 1 → [r3] 5–6.5: makespan 6.5 ms,
        busy 6.5 → utilization 1.0; 60 tokens / 0.0065 s = 9230.7692 tok/s."""
        run = simulate_serving_scheduler(requests(), "fifo", 2, 2.0)
        self.assertEqual(run["makespan_ms"], 6.5)
        self.assertEqual(run["throughput_tps"], 9230.7692)
        self.assertEqual(run["utilization"], 1.0)

    def test_idle_gap_jumps_the_clock(self):
        """A (0, 2 ms) then B (10, 3 ms): the worker idles 2–10; makespan 13, busy 5 → 0.3846."""
        run = simulate_serving_scheduler([{"request_id": "A", "service_ms": 2},
                                          {"request_id": "B", "arrival_ms": 10, "service_ms": 3}])
        self.assertEqual((run["makespan_ms"], run["utilization"]), (13.0, 0.3846))
        self.assertEqual(run["batch_trace"][1]["start_ms"], 10.0)
        self.assertEqual(run["throughput_tps"], 0.0)       # output_tokens default 0

    def test_empty_input(self):
        run = simulate_serving_scheduler([])
        self.assertEqual((run["request_count"], run["completed_count"]), (0, 0))
        self.assertEqual((run["makespan_ms"], run["throughput_tps"], run["utilization"], run["fairness"]),
                         (0.0, 0.0, 0.0, 1.0))
        self.assertEqual((run["requests"], run["batch_trace"]), ([], []))

    def test_defaults(self):
        run = simulate_serving_scheduler([{"service_ms": 1}, {"service_ms": 1}])
        self.assertEqual(ids(run), ["request-0", "request-1"])

    def test_bad_input(self):
        table = [
            ({"policy": "lifo"}, ValueError), ({"batch_size": 0}, ValueError), ({"batch_speedup": 0.0}, ValueError),
            ({"batch_speedup": -1.0}, ValueError), ({"requests": "r1"}, TypeError), ({"requests": None}, TypeError),
            ({"requests": [{"request_id": "x", "arrival_ms": -1, "service_ms": 1}]}, ValueError),
            ({"requests": [{"request_id": "x", "service_ms": 0}]}, ValueError),
            ({"requests": [{"request_id": "x", "service_ms": 1, "output_tokens": -1}]}, ValueError),
            ({"requests": [{"request_id": "x"}]}, ValueError),
            ({"requests": ["r1"]}, TypeError),
            ({"requests": [{"request_id": "x", "service_ms": "fast"}]}, TypeError),
        ]
        for overrides, error in table:
            with self.subTest(**{k: repr(v) for k, v in overrides.items()}):
                args = {"requests": requests(), "policy": "fifo", "batch_size": 1, "batch_speedup": 1.0, **overrides}
                with self.assertRaises(error):
                    simulate_serving_scheduler(**args)

    def test_errors_name_request_and_field(self):
        with self.assertRaises(ValueError) as caught:
            simulate_serving_scheduler([{"request_id": "a", "service_ms": 1}, {"request_id": "b", "service_ms": 0}])
        self.assertIn("request 1 (b): field 'service_ms'", str(caught.exception))


class SelectNextBatchTest(unittest.TestCase):
    def test_policies_and_rest(self):
        queue = [dict(r, position=i) for i, r in enumerate(requests())]
        for policy, batch, rest in (("fifo", ["r1", "r2"], ["r3"]), ("shortest", ["r2", "r3"], ["r1"]),
                                    ("priority", ["r2", "r3"], ["r1"])):
            with self.subTest(policy=policy):
                got_batch, got_rest = select_next_batch(queue, policy, 2)
                self.assertEqual(([r["request_id"] for r in got_batch], [r["request_id"] for r in got_rest]),
                                 (batch, rest))

    def test_ties_by_position(self):
        """Equal service times: input position decides (shortest); equal priority: arrival, then position."""
        queue = [{"request_id": "b", "service_ms": 5, "priority": 1, "arrival_ms": 3, "position": 1},
                 {"request_id": "a", "service_ms": 5, "priority": 1, "arrival_ms": 3, "position": 0}]
        self.assertEqual(select_next_batch(queue, "shortest", 1)[0][0]["request_id"], "a")
        self.assertEqual(select_next_batch(queue, "priority", 1)[0][0]["request_id"], "a")
        self.assertEqual(select_next_batch(queue, "fifo", 1)[0][0]["request_id"], "b")

    def test_errors(self):
        for policy, size in (("random", 1), ("fifo", 0)):
            with self.subTest(policy=policy, size=size), self.assertRaises(ValueError):
                select_next_batch([], policy, size)
        with self.assertRaises(ValueError):
            select_next_batch([{"request_id": "a"}], "shortest", 1)
        with self.assertRaises(TypeError):
            select_next_batch(["a"], "priority", 1)


def literal_windows(requests, policy, batch_size, speedup):
    """§1 step by step, re-sorting the whole queue with select_next_batch every window (the
    chapter's literal reading); returns [(start, duration, ids)] unrounded."""
    pending = sorted([dict(r, position=i) for i, r in enumerate(requests)], key=lambda r: (r["arrival_ms"], r["position"]))
    queue, windows, now = [], [], 0.0
    while pending or queue:
        if not queue:
            now = max(now, pending[0]["arrival_ms"])
        while pending and pending[0]["arrival_ms"] <= now:
            queue.append(pending.pop(0))
        batch, queue = select_next_batch(queue, policy, batch_size)
        duration = max(r["service_ms"] for r in batch) / speedup
        windows.append((now, duration, [r["request_id"] for r in batch]))
        now += duration
    return windows


class LiteralReadingTest(unittest.TestCase):
    def test_simulation_equals_the_literal_reading(self):
        """The simulation keeps its queue in a heap; on 300 random workloads (ties in arrival, service
        and priority on purpose) it forms exactly the windows of the literal reading."""
        rng = random.Random(11)
        for case in range(300):
            requests = [{"request_id": f"q{i}", "arrival_ms": rng.choice([0, 1, 2, 5, 9]) * rng.choice([1, 3]),
                         "service_ms": rng.choice([1, 2, 3, 7]), "priority": rng.choice([0, 1, 2])}
                        for i in range(rng.randint(0, 9))]
            policy, size, speedup = rng.choice(["fifo", "shortest", "priority"]), rng.randint(1, 3), rng.choice([1.0, 2.0])
            with self.subTest(case=case, policy=policy, batch_size=size):
                run = simulate_serving_scheduler(requests, policy, size, speedup)
                expected = [(round(a, 4), round(b, 4), c) for a, b, c in literal_windows(requests, policy, size, speedup)]
                self.assertEqual([(w["start_ms"], w["duration_ms"], w["request_ids"]) for w in run["batch_trace"]], expected)


BASELINE = {"name": "fifo", "ttft_ms": 220, "tpot_ms": 42, "throughput_tps": 180, "fairness": 0.78, "utilization": 0.70}
CANDIDATE = {"name": "priority_scheduler", "ttft_ms": 180, "tpot_ms": 36, "throughput_tps": 205, "fairness": 0.81,
             "utilization": 0.79}


def metrics(ttft, tpot, tps, fairness, utilization):
    return {"ttft_ms": ttft, "tpot_ms": tpot, "throughput_tps": tps, "fairness": fairness, "utilization": utilization}


class RunRecordsTest(unittest.TestCase):
    def test_summary(self):
        summary = summarize_serving_scheduler_runs([BASELINE, CANDIDATE])
        self.assertEqual(summary, {"run_count": 2, "best_latency_run": "priority_scheduler", "avg_throughput_tps": 192.5})
        self.assertEqual(summarize_serving_scheduler_runs([]),
                         {"run_count": 0, "best_latency_run": None, "avg_throughput_tps": 0.0})

    def test_summary_errors(self):
        with self.assertRaises(TypeError):
            summarize_serving_scheduler_runs({"runs": []})
        with self.assertRaises(ValueError) as caught:
            summarize_serving_scheduler_runs([BASELINE, {"name": "x", "ttft_ms": 1}])
        self.assertIn("runs[1]", str(caught.exception))

    def test_deltas(self):
        self.assertEqual(compare_scheduler_to_baseline(BASELINE, CANDIDATE),
                         {"ttft_delta_ms": -40, "tpot_delta_ms": -6, "throughput_gain_tps": 25, "fairness_delta": 0.03,
                          "utilization_delta": 0.09})
        with self.assertRaises(ValueError):
            compare_scheduler_to_baseline(BASELINE, {"ttft_ms": 1})

    def test_recommendations(self):
        table = [(CANDIDATE, "accept", "promote_to_serving_rollout"),
                 (metrics(195, 38, 202, 0.76, 0.82), "tune", "refine_queue_rules_or_worker_split"),
                 (metrics(260, 48, 170, 0.60, 0.66), "reject", "fallback_to_scheduler_audit")]
        for candidate, decision, action in table:
            with self.subTest(decision=decision):
                got = recommend_serving_scheduler_run(BASELINE, candidate, min_throughput_gain=20, min_fairness=0.8)
                self.assertEqual((got["decision"], got["next_action"]), (decision, action))
                self.assertTrue(got["reason"].endswith("."))

    def test_recommendation_floors_are_checked(self):
        for gain, fairness in ((-1, 0.5), (10, 1.5), (10, -0.1)):
            with self.subTest(gain=gain, fairness=fairness), self.assertRaises(ValueError):
                recommend_serving_scheduler_run(BASELINE, CANDIDATE, gain, fairness)


def project(policy, **extra):
    record = {"model_id": "m", "revision": "r", "backend": "vllm", "request_stream_id": "s", "measurement_key": "k",
              "scheduler_policy": policy, "throughput_tps": 180}
    record.update(extra)
    return record


CAND_FIELDS = {"request_ids": ["r1", "r2", "r3"], "completed_ids": ["r1", "r2", "r3"], "ttft_p95_ms": 180,
               "tpot_p95_ms": 36, "throughput_tps": 205, "completion_rate": 1.0, "fairness": 0.82, "peak_memory_gb": 7.0}
LIMITS = {"max_ttft_p95_ms": 200, "max_tpot_p95_ms": 40, "min_throughput_gain": 20, "min_completion_rate": 1.0,
          "min_fairness": 0.8}


class ProjectRecordsTest(unittest.TestCase):
    def test_contract(self):
        self.assertEqual(validate_scheduler_contract(project("fifo"), project("priority", **CAND_FIELDS)),
                         {"contract_ok": True, "issues": []})
        broken = validate_scheduler_contract(project("fifo"), project("priority", backend="sglang"))
        self.assertFalse(broken["contract_ok"])
        self.assertEqual(broken["issues"], ["backend"])
        self.assertEqual(validate_scheduler_contract(project("fifo"), project("fifo"))["issues"], ["scheduler_policy"])

    def test_evidence_and_accept(self):
        evidence = build_scheduler_trace_evidence(project("fifo"), project("priority", **CAND_FIELDS))
        self.assertEqual((evidence["hard_failures"], evidence["missing_evidence"]), ([], []))
        self.assertEqual((evidence["ttft_p95_ms"], evidence["tpot_p95_ms"], evidence["throughput_gain"],
                          evidence["completion_rate"], evidence["fairness"]), (180, 36, 25, 1.0, 0.82))
        decision = decide_scheduler_candidate(evidence, **LIMITS)
        self.assertEqual((decision["decision"], decision["next_action"]), ("accept", "promote_to_deployment_comparison"))

    def test_broken_trace_is_tune(self):
        """The chapter's reading: a duplicated or lost request is missing evidence (tune), not reject."""
        for completed in (["r1", "r1", "r3"], ["r1", "r2"], ["r1", "r2", "r3", "r4"]):
            with self.subTest(completed=completed):
                candidate = project("priority", **dict(CAND_FIELDS, completed_ids=completed))
                evidence = build_scheduler_trace_evidence(project("fifo"), candidate)
                self.assertEqual(evidence["missing_evidence"], ["request_trace"])
                decision = decide_scheduler_candidate(evidence, **LIMITS)
                self.assertEqual((decision["decision"], decision["next_action"]), ("tune", "collect_request_trace"))

    def test_hard_failures_and_missing_fields(self):
        failed = build_scheduler_trace_evidence(project("fifo", failure={"type": "OOM"}),
                                                project("priority", backend="x", **CAND_FIELDS))
        self.assertEqual(failed["hard_failures"], ["backend", "baseline"])
        decision = decide_scheduler_candidate(failed, **LIMITS)
        self.assertEqual((decision["decision"], decision["next_action"]), ("reject", "repair_contract_or_backend"))
        thin = build_scheduler_trace_evidence(project("fifo"), project("priority", **dict(CAND_FIELDS, fairness=None,
                                                                                           peak_memory_gb=None)))
        self.assertEqual(thin["missing_evidence"], ["fairness", "peak_memory_gb"])

    def test_limits_not_met_is_tune(self):
        evidence = build_scheduler_trace_evidence(project("fifo"), project("priority", **dict(CAND_FIELDS, tpot_p95_ms=41)))
        decision = decide_scheduler_candidate(evidence, **LIMITS)
        self.assertEqual((decision["decision"], decision["next_action"]), ("tune", "adjust_queue_or_batch_policy"))


def load_tests(loader, tests, pattern):
    """Also run the worked example in sched/chapter/window.py's docstring (§3's fifo numbers)."""
    tests.addTests(doctest.DocTestSuite(serving_bench))
    return tests


if __name__ == "__main__":
    unittest.main()
