"""The chapter's evidence record and the printed view of a decided pair (serving-bench.md §4).

Input: the two views of :func:`sched.chapter.decide.read_group` and the decision of
:func:`sched.chapter.decide.decide_pair`. :func:`evidence_record` is the JSON-ready
``inference-benchmark/v1`` record ``serving-bench decide`` writes (never over a result file);
:func:`render_view` the text it prints. Times in ms, throughput in output tokens per second.
"""

from __future__ import annotations

import json

__all__ = ["evidence_record", "render_view", "EVIDENCE_SCHEMA"]

EVIDENCE_SCHEMA = "inference-benchmark/v1"

_VIEW_METRICS = ("successful", "failed", "first_token_order_score", "first_token_order_scores", "order_score",
                 "throughput_tps", "ttft_p95_ms", "tpot_p95_ms", "low_priority", "low_priority_e2e_p95_ms",
                 "low_priority_e2e_p95_ms_nearest_rank", "low_priority_e2e_p95_by_repeat")


def _config_value(views, *keys):
    """The first value found under ``keys`` in the groups' identities, then normalised configs."""
    for view in views:
        for source in (view["identity"], (view.get("normalized_config") or {})):
            for key in keys:
                if source.get(key) is not None:
                    return source[key]
    return None


def evidence_record(baseline: dict, candidate: dict, decision: dict, project: str = "infer-sched-lab") -> dict:
    """The ``inference-benchmark/v1`` record (§4) of a decided pair; JSON-ready.

    The config's model, backend, dtype and generated tokens come from the candidate's identity or
    ``normalized_result.config``, then the baseline's; ``None`` when nobody says (nothing is invented).
    """
    views = (candidate, baseline)
    failed = [v for v in (baseline, candidate) if v["status"] == "failed"]
    unpaired = decision.get("unpaired_repeats", 0)
    complete = not unpaired and all(v["status"] == "ok" and v["successful"] == v["expected"] and not v["failed"]
                                    and v["outputs_complete"] and v.get("trace_complete", True) for v in (baseline, candidate))
    failure = None
    if failed:
        f = failed[0]
        failure = {"reason": f"{f['role']} group failed: {f['failure']['type']}: {f['failure']['message']}",
                   "retest": f"rerun the {f['role']} group on the same workload, then run serving-bench decide again "
                             "with --force"}
    return {
        "schema_version": EVIDENCE_SCHEMA, "project": project, "strategy": "priority_scheduler", "role": "candidate",
        "config": {
            "model": _config_value(views, "model_path", "model"), "backend": _config_value(views, "backend"),
            "dtype": _config_value(views, "dtype"),
            "generated_tokens": _config_value(views, "generated_tokens", "max_tokens", "output_tokens"),
            "concurrency": _config_value(views, "concurrency"), "workload": _config_value(views, "workload"),
            "baseline_policy": baseline["identity"].get("scheduler_policy"),
            "candidate_policy": candidate["identity"].get("scheduler_policy"),
            "max_num_seqs": _config_value(views, "max_num_seqs"),
            "repeats": _config_value(views, "repeats") or candidate.get("repeats") or baseline.get("repeats"),
            "synchronized_start": _config_value(views, "synchronized_start"),
        },
        "workload": candidate["workload"],
        "metrics": {key: candidate.get(key) for key in _VIEW_METRICS},
        "quality": {"status": "passed" if complete else "incomplete",
                    "outputs_complete": bool(complete and candidate["outputs_complete"]),
                    "paired_repeats": len(decision["paired_gains"]), "unpaired_repeats": unpaired},
        "status": "failed" if failed else "measured",
        "evidence_level": "backend_failure_record" if failed else "real_backend_scheduler_pair",
        "failure": failure,
        "decision": decision,
        "strategy_metrics": {f"{view['role']}_{key}": view.get(key) for view in (baseline, candidate)
                             for key in ("first_token_order_score", "first_token_order_scores",
                                         "low_priority_e2e_p95_ms", "low_priority_e2e_p95_ms_nearest_rank")},
        "percentile_method": {"low_priority_e2e_p95_ms": "linear interpolation at (n - 1) x 0.95 (the chapter's)",
                              "low_priority_e2e_p95_ms_nearest_rank": "nearest rank (the lab's)"},
        "sources": {"baseline": baseline["source"], "candidate": candidate["source"]},
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
        if view["status"] == "failed":
            lines.append(head + f"status FAILED: {view['failure']['type']}: {view['failure']['message']}")
            continue
        outputs = {True: "all non-empty", False: f"{view['empty_outputs']} EMPTY",
                   None: "unknown"}[view["outputs_complete"]]
        lines.append(head + f"status ok, {view['repeats']} repeat(s), successful {_show(view['successful'])} of "
                     f"{_show(view['expected'])}, failed {_show(view['failed'])}, outputs {outputs}")
        scores = ", ".join(_show(s) for s in view["first_token_order_scores"])
        lines.append(f"          first-token order score {_show(view['first_token_order_score'])} (per repeat: "
                     f"{scores}); completion order score {_show(view['order_score'])} (diagnostic)")
        lines.append(f"          throughput {_show(view['throughput_tps'])} tok/s, P95 TTFT "
                     f"{_show(view['ttft_p95_ms'])} ms, P95 TPOT {_show(view['tpot_p95_ms'])} ms")
        lines.append(f"          low-priority (priority {_show(view['low_priority'])}) E2E P95, mean over repeats: "
                     f"{_show(view['low_priority_e2e_p95_ms'])} ms (linear interpolation, the chapter's); "
                     f"{_show(view['low_priority_e2e_p95_ms_nearest_rank'])} ms (nearest rank, the lab's)")
    lines.append(f"decision: {decision['decision'].upper()}")
    lines.extend(f"  because: {reason}" for reason in decision["reasons"])
    paired = ", ".join(_show(g) for g in decision["paired_gains"]) or "none"
    ratios = ", ".join(f"{k} {_show(v)}" for k, v in decision["ratios"].items()) or "not computed"
    unpaired = decision.get("unpaired_repeats", 0)
    lines.append(f"order gain {_show(decision['order_gain'])}; paired per-repeat gains: {paired}"
                 + (f"; UNPAIRED repeats: {unpaired} (baseline {baseline.get('repeats')}, candidate "
                    f"{candidate.get('repeats')})" if unpaired else ""))
    lines.append(f"ratios (candidate / baseline): {ratios}")
    for g in decision["gates"]:
        status = {True: "pass", False: "FAIL", None: "MISSING"}[g["passed"]]
        lines.append(f"  {status:7} {g['gate']:28} {_show(g['measured']):>8} {g['op']} {g['threshold']:g}")
    return "\n".join(lines) + "\n"
