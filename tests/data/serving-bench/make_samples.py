"""Write the SYNTHETIC sample result files of this directory (run from the project root):

    python3 tests/data/serving-bench/make_samples.py

Nothing here was measured. The numbers are chosen so that every value the lab derives from them
can be checked by hand (see README.md beside this file and tests/test_chapter_serving_decide.py):
per repeat k (0..4), the low-priority class's E2E (ms) is [1000, 1100, 1200, 1300] + 10k for the
FCFS baseline and [1200, 1400, 1600, 1800] + 10k for the priority candidate. As in the chapter's
runner, the top-level ``metrics.successful_requests`` is the workload's count (8), and the two
priority levels are the chapter's 0 (urgent) and 5 (low).
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
LOW = 5                                                       # the chapter's low class (urgent: 0)
IDS = ("h0", "l0", "h1", "l1", "h2", "l2", "h3", "l3")       # workload.json order
WORKLOAD = {"id": "sb-8-two-levels", "request_count": 8,
            "source": "tests/data/serving-bench/workload.json, exported with infer_sched_lab.py export",
            "workload_sha256": "cbc008c3694a7dc2653a27494e7be1d05f9fa11ac08b1c46ec78a22261eb4450"}
GROUPS = {
    "baseline": {"policy": "fcfs", "send": False, "high": (400, 600, 800, 1000), "low": (1000, 1100, 1200, 1300),
                 "scores": (0.5, 0.55, 0.45, 0.5, 0.5), "score": 0.5, "order": 0.55, "tps": 400.0,
                 "ttft": 800.0, "tpot": 40.0},
    "candidate": {"policy": "priority", "send": True, "high": (300, 350, 400, 450), "low": (1200, 1400, 1600, 1800),
                  "scores": (0.9, 0.85, 0.95, 0.9, 0.9), "score": 0.9, "order": 0.8, "tps": 380.0,
                  "ttft": 900.0, "tpot": 41.0},
}


def identity(role, g):
    return {"name": f"{g['policy']}-{role}", "role": role, "scheduler_policy": g["policy"],
            "send_priority": g["send"], "model_path": "models/example-0.5b-instruct (synthetic)",
            "profile_id": "one-gpu-synthetic", "workload": WORKLOAD["id"], "concurrency": 8, "max_num_seqs": 2,
            "synchronized_start": True}


def metrics(g, successful, score, tps):
    return {"successful_requests": successful, "failed_requests": 0, "priority_first_token_order_score": score,
            "priority_order_score": g["order"], "output_token_throughput_per_s": tps,
            "ttft_ms": {"mean": g["ttft"] * 0.6, "p50": g["ttft"] * 0.55, "p95": g["ttft"]},
            "tpot_ms": {"mean": g["tpot"] * 0.9, "p50": g["tpot"] * 0.9, "p95": g["tpot"]}}


def results(g, k):
    rows = []
    high, low = iter(g["high"]), iter(g["low"])
    for rid in IDS:
        urgent = rid.startswith("h")
        e2e = next(high if urgent else low) + 10 * k
        tokens = 16 if urgent else 64
        rows.append({"request_id": rid, "priority": 0 if urgent else LOW, "ok": True,
                     "ttft_ms": float(e2e - tokens * 10), "e2e_ms": float(e2e), "output_tokens": tokens,
                     "output_text": f"(synthetic output of {rid}, repeat {k})"})
    return rows


def group(role):
    g = GROUPS[role]
    runs = [{"repeat": k, "metrics": metrics(g, 8, g["scores"][k], g["tps"] + 2 * (k - 2)), "results": results(g, k)}
            for k in range(5)]
    return {"schema_version": "serving-scheduler-run/v1", "note": "SYNTHETIC sample: not a measurement",
            "status": "ok", "scheduler_identity": identity(role, g), "workload": WORKLOAD,
            "metrics": metrics(g, 8, g["score"], g["tps"]),   # the runner's top level: requests per repeat
            "normalized_result": {"config": {"model": "models/example-0.5b-instruct (synthetic)", "backend": "vllm",
                                             "dtype": "bfloat16", "generated_tokens": 64, "warmup": 2, "repeats": 5},
                                  "metrics": {"output_token_throughput_per_s": g["tps"]}},
            "runs": runs}


def main():
    files = {"baseline.json": group("baseline"), "candidate.json": group("candidate"),
             "candidate-failed.json": {
                 "schema_version": "serving-scheduler-run/v1", "note": "SYNTHETIC sample: not a measurement",
                 "scheduler_identity": identity("candidate", GROUPS["candidate"]), "status": "failed",
                 "failure": {"type": "ServerNotReady",
                             "message": "the vLLM server did not answer /health within 600 s (synthetic)"}}}
    for name, data in files.items():
        with open(os.path.join(HERE, name), "w", encoding="utf-8", newline="\n") as handle:
            handle.write(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
