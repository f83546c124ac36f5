"""A learner's test file for the "Serving Scheduler Benchmark" chapter, as a learner writes it.

Six plain test functions with bare ``assert`` (the chapter's §3 facts, serving-bench.md), using
only the chapter's names through ``from sched.serving_bench import ...``. They run unchanged
under pytest, and under ``python3 -m unittest`` through the small ``load_tests`` hook at the end
(the only lab addition; it wraps each ``test_*`` function in a test case).
"""

import unittest

from sched.serving_bench import (build_scheduler_trace_evidence, decide_scheduler_candidate,
                                 compare_scheduler_to_baseline, recommend_serving_scheduler_run,
                                 simulate_serving_scheduler, summarize_serving_scheduler_runs,
                                 validate_scheduler_contract)


def sample_requests():
    return [
        {"request_id": "r1", "arrival_ms": 0, "service_ms": 10, "output_tokens": 20, "priority": 5},
        {"request_id": "r2", "arrival_ms": 0, "service_ms": 2, "output_tokens": 20, "priority": 0},
        {"request_id": "r3", "arrival_ms": 1, "service_ms": 3, "output_tokens": 20, "priority": 2},
    ]


def raises(error, function, *args, **kwargs):
    try:
        function(*args, **kwargs)
    except error:
        return True
    return False


def test_fifo_single_worker_metrics():
    result = simulate_serving_scheduler(sample_requests(), policy="fifo", batch_size=1)
    assert result["request_count"] == 3
    assert result["completed_count"] == 3
    assert result["makespan_ms"] == 15.0
    assert result["throughput_tps"] == 4000.0
    assert result["utilization"] == 1.0
    assert result["avg_queue_wait_ms"] == round((0 + 10 + 11) / 3, 4)
    assert result["requests"][0]["queue_wait_ms"] == 0.0
    assert result["requests"][1]["ttft_ms"] == 10.0
    assert [window["request_ids"] for window in result["batch_trace"]] == [["r1"], ["r2"], ["r3"]]
    assert 0.0 <= result["fairness"] <= 1.0


def test_shortest_and_priority_policies():
    shortest = simulate_serving_scheduler(sample_requests(), policy="shortest", batch_size=1)
    assert shortest["requests"][0]["request_id"] == "r2"
    assert shortest["requests"][-1]["request_id"] == "r1"
    priority = simulate_serving_scheduler(sample_requests(), policy="priority", batch_size=1)
    assert priority["requests"][0]["request_id"] == "r2"
    assert priority["batch_trace"][0]["request_ids"] == ["r2"]


def test_batching_window():
    result = simulate_serving_scheduler(sample_requests(), policy="fifo", batch_size=2, batch_speedup=1.0)
    assert result["completed_count"] == 3
    assert result["makespan_ms"] == 13.0


def test_empty_and_invalid_inputs():
    empty = simulate_serving_scheduler([])
    assert empty["request_count"] == 0
    assert empty["completed_count"] == 0
    assert raises(ValueError, simulate_serving_scheduler, sample_requests(), policy="random")
    assert raises(ValueError, simulate_serving_scheduler, sample_requests(), batch_size=0)
    assert raises(ValueError, simulate_serving_scheduler, sample_requests(), batch_speedup=0.0)


def test_run_summary_comparison_and_recommendation():
    baseline = {"name": "fifo", "ttft_ms": 220, "tpot_ms": 42, "throughput_tps": 180, "fairness": 0.78,
                "utilization": 0.70}
    candidate = {"name": "priority_scheduler", "ttft_ms": 180, "tpot_ms": 36, "throughput_tps": 205,
                 "fairness": 0.81, "utilization": 0.79}
    summary = summarize_serving_scheduler_runs([baseline, candidate])
    assert summary["run_count"] == 2
    assert summary["best_latency_run"] == "priority_scheduler"
    assert summary["avg_throughput_tps"] == 192.5
    empty = summarize_serving_scheduler_runs([])
    assert (empty["run_count"], empty["best_latency_run"], empty["avg_throughput_tps"]) == (0, None, 0.0)
    delta = compare_scheduler_to_baseline(baseline, candidate)
    assert delta["ttft_delta_ms"] == -40
    assert delta["tpot_delta_ms"] == -6
    assert delta["throughput_gain_tps"] == 25
    assert delta["fairness_delta"] == 0.03
    assert delta["utilization_delta"] == 0.09
    accept = recommend_serving_scheduler_run(baseline, candidate, min_throughput_gain=20, min_fairness=0.8)
    assert accept["decision"] == "accept"
    assert accept["next_action"] == "promote_to_serving_rollout"
    tune = dict(candidate, ttft_ms=195, tpot_ms=38, throughput_tps=202, fairness=0.76, utilization=0.82)
    assert recommend_serving_scheduler_run(baseline, tune, 20, 0.8)["decision"] == "tune"
    reject = dict(candidate, ttft_ms=260, tpot_ms=48, throughput_tps=170, fairness=0.60, utilization=0.66)
    assert recommend_serving_scheduler_run(baseline, reject, 20, 0.8)["decision"] == "reject"


def test_project_contract_trace_and_decision():
    shared = {"model_id": "qwen", "revision": "main", "backend": "vllm", "request_stream_id": "stream-1",
              "measurement_key": "bench-v1"}
    baseline = dict(shared, scheduler_policy="fifo", throughput_tps=180)
    candidate = dict(shared, scheduler_policy="priority", request_ids=["r1", "r2", "r3"],
                     completed_ids=["r1", "r2", "r3"], ttft_p95_ms=180, tpot_p95_ms=36, throughput_tps=205,
                     completion_rate=1.0, fairness=0.82, peak_memory_gb=7.0)
    assert validate_scheduler_contract(baseline, candidate)["contract_ok"] is True
    assert validate_scheduler_contract(baseline, dict(candidate, backend="other"))["contract_ok"] is False
    evidence = build_scheduler_trace_evidence(baseline, candidate)
    assert evidence["hard_failures"] == []
    assert evidence["missing_evidence"] == []
    limits = dict(max_ttft_p95_ms=200, max_tpot_p95_ms=40, min_throughput_gain=20, min_completion_rate=1.0,
                  min_fairness=0.8)
    assert decide_scheduler_candidate(evidence, **limits)["decision"] == "accept"
    broken = build_scheduler_trace_evidence(baseline, dict(candidate, completed_ids=["r1", "r1", "r3"]))
    assert decide_scheduler_candidate(broken, **limits)["decision"] == "tune"


def load_tests(loader, tests, pattern):
    """unittest's hook: each module-level ``test_*`` function becomes one test case."""
    suite = unittest.TestSuite()
    for name, function in sorted(globals().items()):
        if name.startswith("test_") and callable(function):
            suite.addTest(unittest.FunctionTestCase(function, description=name))
    return suite
