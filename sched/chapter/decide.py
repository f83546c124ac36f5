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

:func:`read_group` checks a file at the boundary (one :class:`~sched.base.cmdline.InputError` naming
file and field) and returns its read-only *view*; :func:`decide_pair` reaches the chapter's
decision in the chapter's order (:mod:`sched.chapter.evidence` prints the view and writes the
``inference-benchmark/v1`` record). Times in ms, throughput in output tokens per second. The low-priority class's E2E P95 is
computed per repeat by **linear interpolation** (position (n − 1) · 0.95, the chapter's method)
and, beside it, by nearest rank (the lab's), then averaged over repeats.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from ..base.cmdline import MAX_COUNT, InputError, need, number_or_none
from ..core.metrics import percentile
from .json_files import decode, finite_or_none, read_text

__all__ = ["Gates", "read_group", "decide_pair", "p95_linear", "FAILURE_SCHEMA"]

FAILURE_SCHEMA = "serving-scheduler-run/v1"
#: ``status`` values of a success file (absent is a success too); ``failed`` is a failure record.
SUCCESS_STATUSES = ("ok", "success")


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
    data = decode(read_text(path, "result file"), path)   # BOM accepted, NaN kept to be named, keys once
    return need(data, dict, path, "a JSON object (one group's result)")


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
    value = number_or_none(metrics.get(key), f"{where}: field 'metrics.{key}'", 0, MAX_COUNT)
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
        if row["ok"] and row.get("e2e_ms") is None:   # an ok request always has an end; never dropped silently
            raise InputError(f"{at}: field 'e2e_ms': missing or null in an ok request; it needs its E2E time (ms)")
        number_or_none(row.get("e2e_ms"), f"{at}: field 'e2e_ms'", low=0)
        need(row.get("output_text"), str, f"{at}: field 'output_text'", "text", nullable=True)
        need(row.get("request_id"), str, f"{at}: field 'request_id'", "text", nullable=True)
    return results


def _workload_count(data: dict, identity: dict, path: str):
    """Requests per repeat declared by the frozen workload (a list, its ``requests``, or its
    ``request_count``/``num_requests``: a whole number >= 1), or ``None`` when nobody says."""
    for field, value in (("workload", data.get("workload")), ("scheduler_identity.workload", identity.get("workload"))):
        if isinstance(value, list):
            return len(value)
        if isinstance(value, dict):
            if isinstance(value.get("requests"), list):
                return len(value["requests"])
            for key in ("request_count", "num_requests"):
                count = value.get(key)
                if count is None:
                    continue
                where = f"{path}: field '{field}.{key}'"
                if isinstance(count, bool) or not isinstance(count, int):
                    raise InputError(f"{where}: must be a whole number of requests, got {count!r}")
                if not 1 <= count <= MAX_COUNT:
                    raise InputError(f"{where}: must be between 1 and {MAX_COUNT}, got {count}")
                return count
    return None


def _repeat(run: dict, where: str, count) -> dict:
    metrics = _check_metrics(run.get("metrics"), where)
    results = _check_results(run.get("results"), where)
    if results is not None:
        successful = sum(1 for r in results if r["ok"])
        failed = len(results) - successful
        empty = sum(1 for r in results if r["ok"] and not r.get("output_text"))
        ids = [r.get("request_id") for r in results]
        ids = ids if all(isinstance(i, str) for i in ids) else None
    else:
        successful, failed, empty, ids = metrics["successful"], metrics["failed"], None, None
    size = len(results) if results is not None else (
        None if None in (successful, failed) else successful + failed)
    return {"metrics": metrics, "results": results, "successful": successful, "failed": failed,
            "expected": count if count is not None else size, "size": size, "ids": ids, "empty_outputs": empty}


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
    Raises :class:`~sched.base.cmdline.InputError` naming the file and field for unusable input: among
    others NaN/Infinity where a number is read, an ok request without a finite ``e2e_ms``, a
    ``status`` other than ``ok``/``success``/``failed``, a declared request count that is not a
    whole number 1..10^9, and overall counts beyond every request the repeats can hold.
    """
    data = _load(path)
    identity = need(data.get("scheduler_identity"), dict, f"{path}: field 'scheduler_identity'", "an object")
    normalized = need(data.get("normalized_result"), dict, f"{path}: field 'normalized_result'", "an object",
                      nullable=True) or {}
    config = need(normalized.get("config"), dict, f"{path}: field 'normalized_result.config'", "an object",
                  nullable=True)
    workload = data.get("workload", identity.get("workload"))
    view = {"role": role, "source": path, "identity": finite_or_none(identity), "workload": finite_or_none(workload),
            "failure": None, "normalized_config": finite_or_none(config)}
    if data.get("status") == "failed":
        failure = need(data.get("failure"), dict, f"{path}: field 'failure'", "an object with type and message")
        for key in ("type", "message"):
            need(failure.get(key), str, f"{path}: field 'failure.{key}'", "text")
        return dict(view, status="failed", failure=finite_or_none(failure),
                    schema_version=finite_or_none(data.get("schema_version")))
    status = data.get("status")
    if status is not None and status not in SUCCESS_STATUSES:
        raise InputError(f"{path}: field 'status': must be one of {', '.join(SUCCESS_STATUSES)} (a success file) "
                         f"or failed (a failure record), got {status!r}")
    count = _workload_count(data, identity, path)
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
    numbers = _group_numbers(repeats, overall, count)
    _cross_check(overall, numbers, config, identity, path)
    return dict(view, status="ok", **numbers)


def _cross_check(overall: dict, numbers: dict, config, identity: dict, path: str) -> None:
    """The overall counts cannot exceed every request the file says ran: requests per repeat times
    the repeats it holds or declares (``repeats`` in its config). A file whose ``runs`` keep fewer
    repeats than it ran is not a contradiction (the decision reports the unpaired repeats)."""
    sizes = [n for n in numbers["repeat_sizes"] if n is not None] + [numbers["workload_count"] or 0]
    if not any(sizes):
        return   # nothing says how many requests ran: nothing to contradict
    declared = [v for v in ((config or {}).get("repeats"), identity.get("repeats"))
                if isinstance(v, int) and not isinstance(v, bool)]
    most = max(sizes) * max([numbers["repeats"]] + declared)
    for key in ("successful", "failed"):
        if overall[key] is not None and overall[key] > most:
            raise InputError(f"{path}: field 'metrics.{key}_requests': says {overall[key]}, more than the "
                             f"{most} requests its repeats can hold; the file contradicts itself")


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
        "repeat_sizes": [r["size"] for r in repeats], "repeat_ids": [r["ids"] for r in repeats],
        "repeat_successful": [r["successful"] for r in repeats],
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
    the workload per repeat, any failed request, an ok request with empty output, repeats of
    different sizes or request ids that are not the workload's, each once (see
    :func:`_settle_counts`, which also fills each view's ``expected``); ``tune`` if the repeat
    counts differ (``unpaired_repeats``) or a first-token order score, throughput, P95 TTFT or
    low-priority E2E P95 is missing; else the
    four gates (order gain >= 0.15, throughput ratio >= 0.90, P95 TTFT ratio <= 1.25,
    low-priority E2E P95 ratio <= 1.50; gains and ratios rounded to 4 decimals): ``accept`` when
    all pass, else ``tune``. Returns ``{"decision", "reasons", "order_gain", "paired_gains",
    "unpaired_repeats", "ratios", "gates"}``.
    """
    groups = (("baseline", baseline), ("candidate", candidate))
    reasons = [f"{role} group missing" for role, g in groups if g is None]
    reasons += [f"{role} group failed: {g['failure']['type']}: {g['failure']['message']}"
                for role, g in groups if g is not None and g["status"] == "failed"]
    comparison = {"order_gain": None, "paired_gains": [], "unpaired_repeats": 0, "ratios": {}, "gates": []}
    if reasons:
        return {"decision": "reject", "reasons": reasons, **comparison}
    comparison.update(_comparison(baseline, candidate, gates))
    if _canonical(baseline["workload"]) != _canonical(candidate["workload"]) or baseline["workload"] is None:
        reasons.append("the two groups used different workloads" if baseline["workload"] != candidate["workload"]
                       else "neither group names its workload: the same workload cannot be shown")
        return {"decision": "reject", "reasons": reasons, **comparison}
    trace_problems = _settle_counts(baseline, candidate)
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
    reasons += trace_problems
    if reasons:
        return {"decision": "reject", "reasons": reasons, **comparison}
    if baseline["repeats"] != candidate["repeats"]:
        reasons.append(f"repeat counts differ (baseline {baseline['repeats']}, candidate {candidate['repeats']}): "
                       f"only {len(comparison['paired_gains'])} repeat(s) are paired, {comparison['unpaired_repeats']} "
                       "unpaired; rerun the short group to the same count")
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
    return {"order_gain": gain, "paired_gains": paired, "unpaired_repeats": abs(b["repeats"] - c["repeats"]),
            "ratios": ratios, "gates": gates}


def _settle_counts(baseline: dict, candidate: dict) -> list[str]:
    """Fix the workload's requests per repeat for both groups and list what breaks it (reject reasons).

    The count is the one the frozen workload declares (either file; both must agree, or the
    workloads already differ), else the baseline's per-repeat count. Each group's ``expected``
    becomes count × repeats. A group whose repeats hold different numbers of requests, or whose
    request ids are not the workload's (the baseline's first repeat), each once per repeat, is
    incomplete. Updates the two views in place.
    """
    sizes = [n for n in baseline["repeat_sizes"] if n is not None]
    count = baseline["workload_count"] or candidate["workload_count"] or (max(sizes) if sizes else None)
    reference = next((ids for ids in baseline["repeat_ids"] if ids is not None), None)
    reasons = []
    for g in (baseline, candidate):
        role, before = g["role"], len(reasons)
        if count is not None:
            g["workload_count"], g["expected"] = count, count * g["repeats"]
            g["complete_repeats"] = sum(1 for n in g["repeat_successful"] if n == count)
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
