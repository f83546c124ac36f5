"""The chapter's real-engine experiment: read both groups' result files, decide, write evidence (serving-bench.md §4).

Two groups (FCFS baseline, priority candidate) ran the same frozen workload on one vLLM version;
each wrote one JSON result file in the course runner's shape:

- success: ``metrics`` (``successful_requests``, ``failed_requests``,
  ``priority_first_token_order_score``, ``priority_order_score``, ``output_token_throughput_per_s``,
  ``ttft_ms`` and ``tpot_ms`` as objects with ``p95``), ``runs`` (one per repeat, each with its own
  ``metrics`` and ``results``: per request ``ok``, ``priority``, ``e2e_ms``, ``output_text``),
  ``scheduler_identity``, optionally ``normalized_result`` and ``workload``. A file without
  ``runs`` is one run (its own ``metrics`` and ``results``).
- failure: ``schema_version`` ``serving-scheduler-run/v1``, ``scheduler_identity``, ``status``
  ``failed``, ``failure`` (``type``, ``message``).

:func:`read_group` checks a file at the boundary (one :class:`~sched.cmdline.InputError` naming
file and field) and returns its read-only *view*; :func:`decide_pair` reaches the chapter's
decision in the chapter's order (:mod:`sched.serving_evidence` prints the view and writes the
``inference-benchmark/v1`` record). Times in ms, throughput in output tokens per second. The low-priority class's E2E P95 is
computed per repeat by **linear interpolation** (position (n − 1) · 0.95, the chapter's method)
and, beside it, by nearest rank (the lab's), then averaged over repeats.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from .cmdline import InputError, need, number_or_none, parse_json, read_failure
from .files import open_regular
from .metrics import percentile

__all__ = ["Gates", "read_group", "decide_pair", "p95_linear", "FAILURE_SCHEMA"]

FAILURE_SCHEMA = "serving-scheduler-run/v1"


@dataclass(frozen=True, slots=True)
class Gates:
    """The chapter's four gates (§4): order-score gain (absolute), and three candidate/baseline ratios."""

    min_order_gain: float = 0.15
    min_throughput_ratio: float = 0.90
    max_ttft_ratio: float = 1.25
    max_low_e2e_ratio: float = 1.50


def p95_linear(values):
    """P95 by linear interpolation between closest ranks (position (n − 1) · 0.95), or ``None``.

    Example: [100, 200, 300, 400] → position 2.85 → 300 + 0.85 · 100 = 385.0 (nearest rank: 400).
    """
    ordered = sorted(values)
    if not ordered:
        return None
    position = (len(ordered) - 1) * 0.95
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _r4(value):
    return None if value is None else round(float(value), 4)


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


# --- reading one group ---------------------------------------------------------------------------

def _load(path: str):
    try:
        with open_regular(path) as handle:
            text = handle.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such result file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({read_failure(exc)})") from None
    return need(parse_json(text, path, non_finite_as_none=True), dict, path, "a JSON object (one group's result)")


def _metric(metrics: dict, key: str, where: str, low=None, high=None):
    value = metrics.get(key)
    if isinstance(value, dict):  # ttft_ms / tpot_ms: an object with at least p95
        return number_or_none(value.get("p95"), f"{where}: field '{key}.p95'", low=0)
    return number_or_none(value, f"{where}: field {key!r}", low, high)


def _check_metrics(metrics, where: str) -> dict:
    metrics = need(metrics, dict, f"{where}: field 'metrics'", "an object", nullable=True) or {}
    for key in ("ttft_ms", "tpot_ms"):
        need(metrics.get(key), dict, f"{where}: field 'metrics.{key}'", "an object with p95", nullable=True)
    return {
        "successful": _count(metrics, "successful_requests", where),
        "failed": _count(metrics, "failed_requests", where),
        "first_token_order_score": _metric(metrics, "priority_first_token_order_score", f"{where}: metrics", 0, 1),
        "order_score": _metric(metrics, "priority_order_score", f"{where}: metrics", 0, 1),
        "throughput_tps": _metric(metrics, "output_token_throughput_per_s", f"{where}: metrics", 0),
        "ttft_p95_ms": _metric(metrics, "ttft_ms", f"{where}: metrics"),
        "tpot_p95_ms": _metric(metrics, "tpot_ms", f"{where}: metrics"),
    }


def _count(metrics: dict, key: str, where: str):
    value = number_or_none(metrics.get(key), f"{where}: field 'metrics.{key}'", 0)
    if value is not None and value != int(value):
        raise InputError(f"{where}: field 'metrics.{key}': must be a whole number, got {value!r}")
    return None if value is None else int(value)


def _check_results(results, where: str):
    if results is None:
        return None
    need(results, list, f"{where}: field 'results'", "a list of per-request results")
    for index, row in enumerate(results):
        at = f"{where}: results[{index}]"
        need(row, dict, at, "an object")
        need(row.get("ok"), bool, f"{at}: field 'ok'", "true or false")
        number_or_none(row.get("priority"), f"{at}: field 'priority'")
        number_or_none(row.get("e2e_ms"), f"{at}: field 'e2e_ms'", low=0)
        need(row.get("output_text"), str, f"{at}: field 'output_text'", "text", nullable=True)
    return results


def _workload_count(data: dict, identity: dict):
    for value in (data.get("workload"), identity.get("workload")):
        if isinstance(value, list):
            return len(value)
        if isinstance(value, dict):
            if isinstance(value.get("requests"), list):
                return len(value["requests"])
            for key in ("request_count", "num_requests"):
                if isinstance(value.get(key), int) and not isinstance(value.get(key), bool):
                    return value[key]
    return None


def _repeat(run: dict, where: str, count) -> dict:
    metrics = _check_metrics(run.get("metrics"), where)
    results = _check_results(run.get("results"), where)
    if results is not None:
        successful = sum(1 for r in results if r["ok"])
        failed = len(results) - successful
        empty = sum(1 for r in results if r["ok"] and not r.get("output_text"))
    else:
        successful, failed, empty = metrics["successful"], metrics["failed"], None
    return {"metrics": metrics, "results": results, "successful": successful, "failed": failed,
            "expected": count if count is not None else (None if results is None else len(results)),
            "empty_outputs": empty}


def read_group(path: str, role: str) -> dict:
    """The read-only view of one group's result file (§4 "Reading them"); JSON-ready.

    Keys: ``role``, ``source`` (the path as given), ``status`` (``"ok"`` or ``"failed"``),
    ``identity``, ``failure``, ``workload`` (the file's workload, or its identity's), and for a
    success: ``repeats`` (count), ``workload_count`` (requests per repeat; from the workload, else
    each repeat's results), ``successful``/``failed``/``expected`` (summed over repeats; counted
    from the per-request results when a repeat has them, else taken from its ``metrics``),
    ``complete_repeats`` (repeats with every request ok), ``outputs_complete`` (every ok request
    has non-empty ``output_text``; ``None`` without per-request results), ``empty_outputs``,
    ``first_token_order_score`` (overall), ``first_token_order_scores`` (per repeat),
    ``order_score`` (completion order, diagnostic), ``throughput_tps``, ``ttft_p95_ms``,
    ``tpot_p95_ms``, ``low_priority`` (the least urgent priority value, the largest),
    ``low_priority_e2e_p95_ms`` (mean over repeats of the linear-interpolation P95),
    ``low_priority_e2e_p95_ms_nearest_rank`` and ``low_priority_e2e_p95_by_repeat``.
    Raises :class:`~sched.cmdline.InputError` naming the file and field for unusable input.
    """
    data = _load(path)
    identity = need(data.get("scheduler_identity"), dict, f"{path}: field 'scheduler_identity'", "an object")
    normalized = need(data.get("normalized_result"), dict, f"{path}: field 'normalized_result'", "an object",
                      nullable=True) or {}
    config = need(normalized.get("config"), dict, f"{path}: field 'normalized_result.config'", "an object",
                  nullable=True)
    workload = data.get("workload", identity.get("workload"))
    view = {"role": role, "source": path, "identity": identity, "workload": workload, "failure": None,
            "normalized_config": config}
    if data.get("status") == "failed":
        failure = need(data.get("failure"), dict, f"{path}: field 'failure'", "an object with type and message")
        for key in ("type", "message"):
            need(failure.get(key), str, f"{path}: field 'failure.{key}'", "text")
        return dict(view, status="failed", failure=failure, schema_version=data.get("schema_version"))
    need(data.get("status"), str, f"{path}: field 'status'", "text", nullable=True)
    count = _workload_count(data, identity)
    runs = data.get("runs")
    if runs is None:
        if data.get("metrics") is None and data.get("results") is None:
            raise InputError(f"{path}: field 'runs': missing (and no top-level metrics or results); not a result file")
        runs = [data]
    need(runs, list, f"{path}: field 'runs'", "a list of repeats")
    if not runs:
        raise InputError(f"{path}: field 'runs': empty; a success file holds at least one repeat")
    repeats = [_repeat(need(run, dict, f"{path}: runs[{i}]", "an object"), f"{path}: runs[{i}]", count)
               for i, run in enumerate(runs)]
    overall = _check_metrics(data.get("metrics"), path)
    return dict(view, status="ok", **_group_numbers(repeats, overall, count))


def _group_numbers(repeats: list[dict], overall: dict, count) -> dict:
    def total(key):
        values = [r[key] for r in repeats]
        return None if None in values else sum(values)
    all_results = [row for r in repeats for row in (r["results"] or [])]
    priorities = [row["priority"] for row in all_results if row.get("priority") is not None]
    low = max(priorities) if priorities else None
    linear, nearest = [], []
    for r in repeats:
        sample = [row["e2e_ms"] for row in r["results"] or () if row["ok"] and row.get("priority") == low
                  and row.get("e2e_ms") is not None] if low is not None else []
        linear.append(_r4(p95_linear(sample)))
        nearest.append(_r4(percentile(sample, 95)))
    empty = total("empty_outputs")
    return {
        "repeats": len(repeats), "workload_count": count,
        "successful": total("successful"), "failed": total("failed"), "expected": total("expected"),
        "complete_repeats": sum(1 for r in repeats if r["successful"] is not None and r["successful"] == r["expected"]
                                and r["failed"] == 0),
        "outputs_complete": None if empty is None else empty == 0, "empty_outputs": empty,
        "first_token_order_score": overall["first_token_order_score"],
        "first_token_order_scores": [r["metrics"]["first_token_order_score"] for r in repeats],
        "order_score": overall["order_score"],
        "throughput_tps": overall["throughput_tps"], "ttft_p95_ms": overall["ttft_p95_ms"],
        "tpot_p95_ms": overall["tpot_p95_ms"], "low_priority": low,
        "low_priority_e2e_p95_ms": _r4(_mean(linear)),
        "low_priority_e2e_p95_ms_nearest_rank": _r4(_mean(nearest)),
        "low_priority_e2e_p95_by_repeat": linear,
    }


# --- the decision ---------------------------------------------------------------------------------

def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _ratio(cand, base):
    return None if cand is None or base in (None, 0) else _r4(cand / base)


def decide_pair(baseline: dict, candidate: dict, gates: Gates = Gates()) -> dict:
    """The chapter's decision (§4) on two views of :func:`read_group` (``None`` = a missing group).

    In this order: ``reject`` if either group failed or is missing; ``reject`` if the workloads
    differ (or cannot be shown equal); ``reject`` if a group has fewer successful requests than
    the workload per repeat, any failed request, or an ok request with empty output; ``tune`` if
    a first-token order score, throughput, P95 TTFT or low-priority E2E P95 is missing; else the
    four gates (order gain >= 0.15, throughput ratio >= 0.90, P95 TTFT ratio <= 1.25,
    low-priority E2E P95 ratio <= 1.50; gains and ratios rounded to 4 decimals): ``accept`` when
    all pass, else ``tune``. Returns ``{"decision", "reasons", "order_gain", "paired_gains",
    "ratios", "gates"}``.
    """
    groups = (("baseline", baseline), ("candidate", candidate))
    reasons = [f"{role} group missing" for role, g in groups if g is None]
    reasons += [f"{role} group failed: {g['failure']['type']}: {g['failure']['message']}"
                for role, g in groups if g is not None and g["status"] == "failed"]
    comparison = {"order_gain": None, "paired_gains": [], "ratios": {}, "gates": []}
    if reasons:
        return {"decision": "reject", "reasons": reasons, **comparison}
    comparison.update(_comparison(baseline, candidate, gates))
    if _canonical(baseline["workload"]) != _canonical(candidate["workload"]) or baseline["workload"] is None:
        reasons.append("the two groups used different workloads" if baseline["workload"] != candidate["workload"]
                       else "neither group names its workload: the same workload cannot be shown")
        return {"decision": "reject", "reasons": reasons, **comparison}
    for role, g in groups:
        if g["successful"] is None:
            reasons.append(f"{role}: successful request count unknown (no results, no metrics.successful_requests)")
        elif g["successful"] != g["expected"]:
            reasons.append(f"{role}: {g['successful']} successful requests, the workload needs {g['expected']} "
                           f"({g['repeats']} repeat(s) x {g['workload_count'] or 'its results'})")
        if g["failed"]:
            reasons.append(f"{role}: {g['failed']} failed request(s)")
        if g["empty_outputs"]:
            reasons.append(f"{role}: {g['empty_outputs']} ok request(s) with empty output text")
    if reasons:
        return {"decision": "reject", "reasons": reasons, **comparison}
    for role, g in groups:
        reasons += [f"{role}: {name} missing" for name in ("first_token_order_score", "throughput_tps", "ttft_p95_ms",
                                                            "low_priority_e2e_p95_ms") if g[name] is None]
    if reasons:
        return {"decision": "tune", "reasons": reasons, **comparison}
    failed = [("gate failed: " if g["passed"] is False else "gate cannot be measured (a zero baseline): ") + g["gate"]
              for g in comparison["gates"] if not g["passed"]]
    if failed:
        return {"decision": "tune", "reasons": failed, **comparison}
    return {"decision": "accept", "reasons": ["all four gates pass on complete, comparable groups"], **comparison}


def _comparison(baseline: dict, candidate: dict, t: Gates) -> dict:
    b, c = baseline, candidate
    gain = None if None in (b["first_token_order_score"], c["first_token_order_score"]) else _r4(
        c["first_token_order_score"] - b["first_token_order_score"])
    paired = [None if None in (x, y) else _r4(y - x)
              for x, y in zip(b["first_token_order_scores"], c["first_token_order_scores"])]
    ratios = {"throughput_ratio": _ratio(c["throughput_tps"], b["throughput_tps"]),
              "ttft_p95_ratio": _ratio(c["ttft_p95_ms"], b["ttft_p95_ms"]),
              "low_priority_e2e_p95_ratio": _ratio(c["low_priority_e2e_p95_ms"], b["low_priority_e2e_p95_ms"])}
    gates = []
    for name, measured, op, threshold in (
            ("first-token order score gain", gain, ">=", t.min_order_gain),
            ("throughput ratio", ratios["throughput_ratio"], ">=", t.min_throughput_ratio),
            ("P95 TTFT ratio", ratios["ttft_p95_ratio"], "<=", t.max_ttft_ratio),
            ("low-priority E2E P95 ratio", ratios["low_priority_e2e_p95_ratio"], "<=", t.max_low_e2e_ratio)):
        passed = None if measured is None else (measured >= threshold if op == ">=" else measured <= threshold)
        gates.append({"gate": name, "measured": measured, "op": op, "threshold": threshold, "passed": passed})
    return {"order_gain": gain, "paired_gains": paired, "ratios": ratios, "gates": gates}
