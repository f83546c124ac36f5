"""The chapter's evidence record and the printed view of a decided pair (serving-bench.md §4).

Input: the two views of :func:`sched.chapter.decide.read_group` and the decision of
:func:`sched.chapter.decide.decide_pair`. :func:`evidence_record` is the JSON-ready
``inference-benchmark/v1`` record ``serving-bench decide`` writes (never over a result file);
:func:`render_view` the text it prints. Times in ms, throughput in output tokens per second.
"""

from __future__ import annotations

import json

from .groups import GROUP_KEYS, ROLE_POLICY

__all__ = ["evidence_record", "render_view", "simulated", "EVIDENCE_SCHEMA"]

EVIDENCE_SCHEMA = "inference-benchmark/v1"

#: The record's ``metrics`` (the candidate's) under the chapter's names, from the view's fields.
_METRIC_NAMES = (("priority_first_token_order_score", "first_token_order_score"),
                 ("priority_first_token_order_scores_by_run", "first_token_order_scores"),
                 ("priority_order_score", "order_score"), ("output_token_throughput_per_s", "throughput_tps"),
                 ("ttft_p95_ms", "ttft_p95_ms"), ("tpot_p95_ms", "tpot_p95_ms"), ("low_priority", "low_priority"),
                 ("low_priority_e2e_p95_ms", "low_priority_e2e_p95_ms"),
                 ("low_priority_e2e_p95_ms_nearest_rank", "low_priority_e2e_p95_ms_nearest_rank"),
                 ("low_priority_e2e_p95_ms_by_run", "low_priority_e2e_p95_by_repeat"))
#: ``strategy_metrics``: both groups' order scores and low-priority P95s, prefixed g0_fcfs_ / g1_priority_.
_STRATEGY_METRICS = (("priority_first_token_order_score", "first_token_order_score"),
                     ("priority_first_token_order_scores_by_run", "first_token_order_scores"),
                     ("low_priority_e2e_p95_ms", "low_priority_e2e_p95_ms"),
                     ("low_priority_e2e_p95_ms_nearest_rank", "low_priority_e2e_p95_ms_nearest_rank"))


def _config_value(views, *keys):
    """The first value found under ``keys`` in the groups' identities, then normalised configs."""
    for view in views:
        for source in (view["identity"], (view.get("normalized_config") or {})):
            for key in keys:
                if source.get(key) is not None:
                    return source[key]
    return None


def simulated(view: dict) -> bool:
    """True when a group's file says it was written by the lab's stand-in, not a real engine."""
    return bool(view.get("simulated")) or str(view.get("evidence_level") or "").startswith("simulated")


def _failure(views, baseline_path, candidate_path) -> dict | None:
    failed = [v for v in views if v["status"] == "failed"]
    if not failed:
        return None
    f = failed[0]
    key = GROUP_KEYS[f["role"]]
    what = "has no result file" if f.get("missing") else "failed"
    return {"failure_reason": f"{key} ({f['role']}) {what}: {f['failure']['type']}: {f['failure']['message']}",
            "retest_path": f["source"],
            "retest": f"rerun group {key} on the same workload into {f['source']}, then run serving-bench decide "
                      f"{baseline_path} {candidate_path} again with --force",
            "failed_groups": [GROUP_KEYS[v["role"]] for v in failed]}


def evidence_record(baseline: dict, candidate: dict, decision: dict, notebook: dict | None = None) -> dict:
    """The ``inference-benchmark/v1`` record (§4, the chapter's 5.7 shape) of a decided pair; JSON-ready.

    ``notebook`` holds what the chapter takes from the learner's notebook: ``project``,
    ``run_label``, ``model``, ``dtype`` (from ``serving-bench decide`` flags); each absent one is
    ``None``, never invented. Backend, generated tokens, concurrency, ``max_num_seqs``, repeats
    and synchronised start come from the groups' identities or ``normalized_result.config``
    (candidate first), ``None`` when neither says. ``evidence_level`` is
    ``real_backend_scheduler_pair``, ``backend_failure_record`` (a failed or missing group), or
    ``simulated_scheduler_pair`` when a file says it was simulated (``serving-bench simulate``).
    """
    notebook = notebook or {}
    views = (candidate, baseline)
    pair = (baseline, candidate)
    failed = any(v["status"] == "failed" for v in pair)
    unpaired = decision.get("unpaired_repeats", 0)
    outputs = all(v["status"] == "ok" and v["outputs_complete"] for v in pair)
    complete = not unpaired and not failed and all(
        v["successful"] == v.get("expected") and not v["failed"] and v["outputs_complete"]
        and v.get("trace_complete", True) for v in pair)
    sim = any(simulated(v) for v in pair)
    level = "backend_failure_record" if failed else ("simulated_scheduler_pair" if sim else "real_backend_scheduler_pair")
    metrics = {"successful_requests": candidate.get("successful"), "failed_requests": candidate.get("failed"),
               **{key: candidate.get(field) for key, field in _METRIC_NAMES}}
    return {
        "schema_version": EVIDENCE_SCHEMA, "project": notebook.get("project"), "run_label": notebook.get("run_label"),
        "strategy": "priority_scheduler", "role": "candidate",
        "config": {
            "model": notebook.get("model"),
            "backend": _config_value(views, "backend"),
            "dtype": notebook.get("dtype"),
            "generated_tokens": _config_value(views, "generated_tokens", "max_tokens", "output_tokens"),
            "concurrency": _config_value(views, "concurrency"), "workload": _config_value(views, "workload"),
            "scheduler_policy": ROLE_POLICY["candidate"],            # check_roles made the files agree
            "baseline_scheduler_policy": ROLE_POLICY["baseline"],
            "max_num_seqs": _config_value(views, "max_num_seqs"),
            "repeats": _config_value(views, "repeats") or candidate.get("repeats") or baseline.get("repeats"),
            "synchronized_start": _config_value(views, "synchronized_start"),
            "model_path_in_files": _config_value(views, "model_path"),
            "send_priority": candidate["identity"].get("send_priority"),
        },
        "workload": candidate["workload"] if candidate["workload"] is not None else baseline["workload"],
        "metrics": metrics,
        "quality": {"status": "passed" if complete else "incomplete", "output_completeness": outputs,
                    "paired_runs": len(decision["comparison"]["priority_first_token_gains_by_run"]),
                    "unpaired_runs": unpaired},
        "status": "failed" if failed else "measured",
        "evidence_level": level,
        "simulated": sim,
        "failure": _failure(pair, baseline["source"], candidate["source"]),
        "decision": decision,
        "strategy_metrics": {f"{GROUP_KEYS[view['role']]}_{key}": view.get(field) for view in pair
                             for key, field in _STRATEGY_METRICS},
        "percentile_method": {"low_priority_e2e_p95_ms": "linear interpolation at (n - 1) x 0.95 (the chapter's)",
                              "low_priority_e2e_p95_ms_nearest_rank": "nearest rank (the lab's)"},
        "source_paths": {"g0_fcfs": baseline["source"], "g1_priority": candidate["source"]},
    }


# --- the printed view --------------------------------------------------------------------------------

def _show(value, unit: str = "") -> str:
    if value is None:
        return "NA"
    if isinstance(value, float):  # 4 decimals at most, as the record rounds them
        return f"{value:.4f}".rstrip("0").rstrip(".") + unit
    return f"{value}{unit}"


def render_view(baseline: dict, candidate: dict, decision: dict) -> str:
    """The printed read-only view, then the decision, the gains, the ratios and the gates."""
    lines = []
    for view in (baseline, candidate):
        ident = view["identity"]
        head = (f"{view['role']:9} {ident.get('name', '?')} (policy {ident.get('scheduler_policy', '?')}, "
                f"send_priority {json.dumps(ident.get('send_priority'))}): ")
        if view.get("missing"):
            lines.append(f"{view['role']:9} MISSING: {view['failure']['message']}")
            continue
        if view["status"] == "failed":
            lines.append(head + f"status FAILED: {view['failure']['type']}: {view['failure']['message']}")
            continue
        outputs = {True: "all non-empty", False: f"{view['empty_outputs']} EMPTY",
                   None: "unknown"}[view["outputs_complete"]]
        lines.append(head + f"status ok, {view['repeats']} repeat(s) of {_show(view.get('expected') or view['workload_count'])} requests, successful "
                     f"{_show(view['successful'])}, failed {_show(view['failed'])}, outputs {outputs}")
        scores = ", ".join(_show(s) for s in view["first_token_order_scores"])
        lines.append(f"          first-token order score {_show(view['first_token_order_score'])} (per repeat: "
                     f"{scores}); completion order score {_show(view['order_score'])} (diagnostic)")
        lines.append(f"          throughput {_show(view['throughput_tps'])} tok/s, P95 TTFT "
                     f"{_show(view['ttft_p95_ms'])} ms, P95 TPOT {_show(view['tpot_p95_ms'])} ms")
        lines.append(f"          low-priority (priority {_show(view['low_priority'])}) E2E P95, mean over repeats: "
                     f"{_show(view['low_priority_e2e_p95_ms'])} ms (linear interpolation, the chapter's); "
                     f"{_show(view['low_priority_e2e_p95_ms_nearest_rank'])} ms (nearest rank, the lab's)")
    lines.append(f"decision: {decision['decision'].upper()} (next action: {decision['next_action']})")
    lines.extend(f"  because: {reason}" for reason in decision["reasons"])
    comparison = decision["comparison"]
    paired = ", ".join(_show(g) for g in comparison["priority_first_token_gains_by_run"]) or "none"
    ratios = ", ".join(f"{k} {_show(comparison[k])}" for k in ("throughput_ratio", "ttft_p95_ratio",
                                                                "low_priority_e2e_p95_ratio"))
    unpaired = decision.get("unpaired_repeats", 0)
    lines.append(f"order gain {_show(comparison['priority_first_token_order_gain'])}; paired per-repeat gains: {paired}"
                 + (f"; UNPAIRED repeats: {unpaired} (baseline {baseline.get('repeats')}, candidate "
                    f"{candidate.get('repeats')})" if unpaired else ""))
    lines.append(f"ratios (candidate / baseline): {ratios}")
    for g in decision["gate_checks"]:
        status = {True: "pass", False: "FAIL", None: "MISSING"}[g["passed"]]
        lines.append(f"  {status:7} {g['gate']:28} {_show(g['measured']):>8} {g['op']} {g['threshold']:g}")
    return "\n".join(lines) + "\n"
