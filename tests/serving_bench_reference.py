"""A test-side reference of the chapter's Step 5 (serving-bench.md §4), transcribed from its rules.

Deliberately plain and independent of ``sched``: it reads two result files the way the chapter's
Step 5 does and reaches its decision, so tests can check that ``serving-bench decide`` computes
the same values (``decision``, ``gates``, ``comparison``) from the same files. It follows the
chapter, not the lab: no stricter checks (those are listed in the handbook's 16.6).

- a group is failed when its file is missing, its ``status`` is ``failed`` or its ``failure`` is
  not empty;
- its counts are the file's top-level ``metrics.successful_requests`` / ``failed_requests``;
- outputs are complete when every ok request's ``output_text``, stripped, is not empty;
- the low class is the chapter's priority 5; its E2E P95 per run is by linear interpolation at
  (n − 1) · 0.95 over ok requests, then the mean over runs; a file without ``runs`` is one run;
- the workload is compared by identity (its id and sha256 and request count), and its request
  count is the workload's ``request_count``.
"""

import json
import math
import os

LOW_CLASS = 5
GATES = (0.15, 0.90, 1.25, 1.50)


def p95(values):
    values = sorted(values)
    if not values:
        return None
    pos = (len(values) - 1) * 0.95
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def load(path):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8-sig") as handle:
        return json.load(handle)


def summarize(data):
    if data is None:
        return {"status": "missing"}
    if data.get("status") == "failed" or data.get("failure"):
        return {"status": "failed"}
    metrics = data.get("metrics") or {}
    runs = data.get("runs") or [data]
    lows, scores, complete = [], [], True
    for run in runs:
        results = run.get("results") or []
        for row in results:
            if row.get("ok") and not (row.get("output_text") or "").strip():
                complete = False
        sample = [row["e2e_ms"] for row in results if row.get("ok") and row.get("priority") == LOW_CLASS]
        lows.append(p95(sample))
        scores.append((run.get("metrics") or {}).get("priority_first_token_order_score"))
    lows = [v for v in lows if v is not None]
    workload = data.get("workload") or {}
    return {
        "status": "ok",
        "workload": (workload.get("id"), workload.get("workload_sha256"), workload.get("request_count")),
        "workload_count": workload.get("request_count"),
        "successful": metrics.get("successful_requests"), "failed": metrics.get("failed_requests") or 0,
        "outputs_complete": complete,
        "order_score": metrics.get("priority_first_token_order_score"), "order_scores": scores,
        "throughput": metrics.get("output_token_throughput_per_s"),
        "ttft_p95": (metrics.get("ttft_ms") or {}).get("p95"),
        "low_e2e_p95": sum(lows) / len(lows) if lows else None,
    }


def ratio(a, b):
    return None if a is None or not b else round(a / b, 4)


def decide(g0, g1):
    """The chapter's decision on two summaries (FCFS g0, priority g1): decision, gates, comparison."""
    if g0["status"] != "ok" or g1["status"] != "ok":
        return {"decision": "reject", "gates": None, "comparison": None}
    gain = None if None in (g0["order_score"], g1["order_score"]) else round(g1["order_score"] - g0["order_score"], 4)
    comparison = {
        "priority_first_token_order_gain": gain,
        "priority_first_token_gains_by_run": [None if None in (a, b) else round(b - a, 4)
                                              for a, b in zip(g0["order_scores"], g1["order_scores"])],
        "throughput_ratio": ratio(g1["throughput"], g0["throughput"]),
        "ttft_p95_ratio": ratio(g1["ttft_p95"], g0["ttft_p95"]),
        "low_priority_e2e_p95_ratio": ratio(g1["low_e2e_p95"], g0["low_e2e_p95"]),
    }
    c = comparison
    gates = {"order_gain_ok": gain is not None and gain >= GATES[0],
             "throughput_ratio_ok": c["throughput_ratio"] is not None and c["throughput_ratio"] >= GATES[1],
             "ttft_p95_ratio_ok": c["ttft_p95_ratio"] is not None and c["ttft_p95_ratio"] <= GATES[2],
             "low_priority_e2e_p95_ratio_ok": (c["low_priority_e2e_p95_ratio"] is not None
                                               and c["low_priority_e2e_p95_ratio"] <= GATES[3])}
    if g0["workload"] != g1["workload"]:
        decision = "reject"
    elif any(g["successful"] != g["workload_count"] or g["failed"] or not g["outputs_complete"] for g in (g0, g1)):
        decision = "reject"
    elif any(g[k] is None for g in (g0, g1) for k in ("order_score", "throughput", "ttft_p95", "low_e2e_p95")):
        decision = "tune"
    else:
        decision = "accept" if all(gates.values()) else "tune"
    return {"decision": decision, "gates": gates, "comparison": comparison}


def step5(fcfs_path, priority_path):
    """The chapter's Step 5 on two result files: the decision object's chapter-computed parts."""
    return decide(summarize(load(fcfs_path)), summarize(load(priority_path)))
