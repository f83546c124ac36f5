"""The chapter's real-engine decision on two groups' views (serving-bench.md §4; the chapter's 5.6 object).

Input: the two views of :func:`sched.chapter.groups.read_group` (or :func:`~sched.chapter.groups.missing_group`).
:func:`decide_pair` reaches the decision in the chapter's order and returns the chapter's decision
object: ``decision`` (``accept``/``tune``/``reject``), ``reason`` (one sentence), ``next_action``,
``gates`` (four named booleans) and ``comparison`` (``priority_first_token_order_gain``,
``priority_first_token_gains_by_run``, ``throughput_ratio``, ``ttft_p95_ratio``,
``low_priority_e2e_p95_ratio``); beside them the lab keeps ``reasons`` (every reason found),
``gate_checks`` (measured value, operator, threshold per gate) and ``unpaired_repeats``.
Gains and ratios are rounded to 4 decimals before the gates compare them. Times in ms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .groups import workload_identity

__all__ = ["Gates", "decide_pair", "GATE_NAMES", "NEXT_ACTIONS"]

#: The four gates' names in the decision's ``gates`` object, in the chapter's order.
GATE_NAMES = ("order_gain_ok", "throughput_ratio_ok", "ttft_p95_ratio_ok", "low_priority_e2e_p95_ratio_ok")
#: ``next_action`` by what decided: a failed or missing group, different workloads, incomplete
#: groups, missing evidence, a failed gate, every gate passed.
NEXT_ACTIONS = {"failed": "rerun_failed_group", "workload": "rerun_both_groups_on_one_workload",
                "incomplete": "fix_failed_requests_and_rerun", "missing": "collect_missing_metrics",
                "gates": "adjust_priority_classes_or_load", "accept": "promote_priority_scheduler"}


@dataclass(frozen=True, slots=True)
class Gates:
    """The chapter's four gates (§4): order-score gain (absolute), and three candidate/baseline ratios."""

    min_order_gain: float = 0.15
    min_throughput_ratio: float = 0.90
    max_ttft_ratio: float = 1.25
    max_low_e2e_ratio: float = 1.50


def _r4(value):
    return None if value is None else round(float(value), 4)


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _ratio(cand, base):
    return None if cand is None or base in (None, 0) else _r4(cand / base)


def _result(decision: str, why: str, reasons: list[str], comparison: dict) -> dict:
    reason = reasons[0] if len(reasons) == 1 else f"{reasons[0]} (and {len(reasons) - 1} more)"
    return {"decision": decision, "reason": reason, "next_action": NEXT_ACTIONS[why], **comparison,
            "reasons": reasons}


def _empty_comparison() -> dict:
    return {"gates": dict.fromkeys(GATE_NAMES, False),
            "comparison": {"priority_first_token_order_gain": None, "priority_first_token_gains_by_run": [],
                           "throughput_ratio": None, "ttft_p95_ratio": None, "low_priority_e2e_p95_ratio": None},
            "gate_checks": [], "unpaired_repeats": 0}


def decide_pair(baseline: dict, candidate: dict, gates: Gates = Gates()) -> dict:
    """The chapter's decision (§4) on two group views; a missing group's view has ``missing`` true.

    In this order: ``reject`` if either group failed or is missing; ``reject`` if the workloads'
    identities differ (:func:`~sched.chapter.groups.workload_identity`) or neither names one;
    ``reject`` if a group's ``metrics.successful_requests`` is not the workload's request count,
    it has a failed request, or an ok request with blank output (the chapter's three checks), or
    (the lab's, stricter) one of its repeats lacks requests, repeats differ in size, or request ids
    are not the workload's, each once; ``tune`` if the repeat counts differ (``unpaired_repeats``)
    or a first-token order score, throughput, P95 TTFT or low-priority E2E P95 is missing; else
    the four gates (order gain >= 0.15, throughput ratio >= 0.90, P95 TTFT ratio <= 1.25,
    low-priority E2E P95 ratio <= 1.50): ``accept`` when all pass, else ``tune``.
    Returns the decision object described in the module docstring. Fills each view's
    ``expected`` (the workload's count) and ``trace_complete``.
    """
    groups = (("baseline", baseline), ("candidate", candidate))
    reasons = [f"{role} group missing: {g['failure']['message']}" for role, g in groups if g.get("missing")]
    reasons += [f"{role} group failed: {g['failure']['type']}: {g['failure']['message']}"
                for role, g in groups if g["status"] == "failed" and not g.get("missing")]
    comparison = _empty_comparison()
    if reasons:
        return _result("reject", "failed", reasons, comparison)
    comparison = _comparison(baseline, candidate, gates)
    b_id, c_id = workload_identity(baseline["workload"]), workload_identity(candidate["workload"])
    if b_id is None and c_id is None:
        return _result("reject", "workload", ["neither group names its workload: the same workload cannot be shown"],
                       comparison)
    if _canonical(b_id) != _canonical(c_id):
        return _result("reject", "workload", ["the two groups used different workloads "
                                              f"(baseline {_canonical(b_id)}, candidate {_canonical(c_id)})"],
                       comparison)
    reasons = _incomplete(baseline, candidate)
    if reasons:
        return _result("reject", "incomplete", reasons, comparison)
    if baseline["repeats"] != candidate["repeats"]:
        paired = len(comparison["comparison"]["priority_first_token_gains_by_run"])
        reasons.append(f"repeat counts differ (baseline {baseline['repeats']}, candidate {candidate['repeats']}): "
                       f"only {paired} repeat(s) are paired, {comparison['unpaired_repeats']} unpaired; rerun the "
                       "short group to the same count")
    for role, g in groups:
        reasons += [f"{role}: {name} missing" for name in ("first_token_order_score", "throughput_tps", "ttft_p95_ms",
                                                            "low_priority_e2e_p95_ms") if g[name] is None]
    if reasons:
        return _result("tune", "missing", reasons, comparison)
    failed = [("gate failed: " if g["passed"] is False else "gate cannot be measured (a zero baseline): ")
              + f"{g['gate']} {g['measured']} {g['op']} {g['threshold']:g}"
              for g in comparison["gate_checks"] if not g["passed"]]
    if failed:
        return _result("tune", "gates", failed, comparison)
    return _result("accept", "accept", ["all four gates pass on complete groups of one workload"], comparison)


def _incomplete(baseline: dict, candidate: dict) -> list[str]:
    """The reject reasons of incomplete groups: the chapter's three checks, then the lab's stricter ones."""
    sizes = [n for n in baseline["repeat_sizes"] if n is not None]
    count = baseline["workload_count"] or candidate["workload_count"] or (max(sizes) if sizes else None)
    reasons = []
    for role, g in (("baseline", baseline), ("candidate", candidate)):
        g["expected"] = count
        if g["successful"] is None:
            reasons.append(f"{role}: successful request count unknown (no metrics.successful_requests)")
        elif g["successful"] != count:
            reasons.append(f"{role}: metrics.successful_requests is {g['successful']}, the workload has {count} "
                           "requests")
        if g["failed"]:
            reasons.append(f"{role}: metrics.failed_requests is {g['failed']}")
        if g["empty_outputs"]:
            reasons.append(f"{role}: {g['empty_outputs']} ok request(s) with empty output text")
    return reasons + _settle_repeats(baseline, candidate, count)


def _settle_repeats(baseline: dict, candidate: dict, count) -> list[str]:
    """The lab's stricter per-repeat checks (reject reasons): every repeat holds the workload's
    count of ok requests and no failed one, the repeats of a group are of one size, and a repeat's
    request ids are the workload's (the baseline's first repeat), each once."""
    reference = next((ids for ids in baseline["repeat_ids"] if ids is not None), None)
    reasons = []
    for g in (baseline, candidate):
        role, before = g["role"], len(reasons)
        for k, (ok, failed) in enumerate(zip(g["repeat_successful"], g["repeat_failed"])):
            if ok is None:
                reasons.append(f"{role}: runs[{k}]: successful request count unknown (no results, no "
                               "metrics.successful_requests)")
                break
            if count is not None and (ok != count or failed):
                reasons.append(f"{role}: runs[{k}]: {ok} successful, {failed or 0} failed of the workload's {count} "
                               "requests")
                break
        known = [n for n in g["repeat_sizes"] if n is not None]
        if len(set(known)) > 1:
            reasons.append(f"{role}: its repeats hold different numbers of requests ({', '.join(map(str, known))})")
        for k, ids in enumerate(g["repeat_ids"]):
            if ids is None or reference is None:
                continue
            twice = sorted({i for i in ids if ids.count(i) > 1})
            lost, extra = sorted(set(reference) - set(ids)), sorted(set(ids) - set(reference))
            if twice or lost or extra:
                parts = [f"{label} {', '.join(found)}" for label, found in
                         (("more than once:", twice), ("missing:", lost), ("not in the workload:", extra)) if found]
                reasons.append(f"{role}: runs[{k}]: request ids are not the workload's, each once ({'; '.join(parts)})")
                break
        g["trace_complete"] = len(reasons) == before
    return reasons


def _comparison(baseline: dict, candidate: dict, t: Gates) -> dict:
    b, c = baseline, candidate
    gain = None if None in (b["first_token_order_score"], c["first_token_order_score"]) else _r4(
        c["first_token_order_score"] - b["first_token_order_score"])
    paired = [None if None in (x, y) else _r4(y - x)
              for x, y in zip(b["first_token_order_scores"], c["first_token_order_scores"])]
    ratios = {"throughput_ratio": _ratio(c["throughput_tps"], b["throughput_tps"]),
              "ttft_p95_ratio": _ratio(c["ttft_p95_ms"], b["ttft_p95_ms"]),
              "low_priority_e2e_p95_ratio": _ratio(c["low_priority_e2e_p95_ms"], b["low_priority_e2e_p95_ms"])}
    checks = []
    for name, label, measured, op, threshold in (
            (GATE_NAMES[0], "first-token order score gain", gain, ">=", t.min_order_gain),
            (GATE_NAMES[1], "throughput ratio", ratios["throughput_ratio"], ">=", t.min_throughput_ratio),
            (GATE_NAMES[2], "P95 TTFT ratio", ratios["ttft_p95_ratio"], "<=", t.max_ttft_ratio),
            (GATE_NAMES[3], "low-priority E2E P95 ratio", ratios["low_priority_e2e_p95_ratio"], "<=",
             t.max_low_e2e_ratio)):
        passed = None if measured is None else (measured >= threshold if op == ">=" else measured <= threshold)
        checks.append({"name": name, "gate": label, "measured": measured, "op": op, "threshold": threshold,
                       "passed": passed})
    return {"gates": {g["name"]: g["passed"] is True for g in checks},
            "comparison": {"priority_first_token_order_gain": gain, "priority_first_token_gains_by_run": paired,
                           **ratios},
            "gate_checks": checks, "unpaired_repeats": abs(b["repeats"] - c["repeats"])}
