"""Baseline versus candidate: contract, evidence, gates and a decision (compare.md §3).

A *side* is one case of one run directory: a simulated run (``manifest.json``, ``workload.json``,
``summary.json``, ``requests.jsonl`` in ticks) or a real run normalised by ``import-results``
(the same files in milliseconds, compare.md §4). :func:`compare` turns two sides into a decision
record; :func:`command` is the ``compare`` subcommand.

Decision (compare.md §3.3):

- ``reject`` on a hard failure: the contract is broken (the fixed conditions differ, or the
  scheduler settings differ in nothing or in more than one setting, or not in the declared one),
  a run failed, or arrived requests are lost on either side (absent from a trace, or never ended:
  the lab's reading of "requests lost twice over" is "any request lost"), or a real run's ok
  request produced no output text (``output_text_empty``). Sides whose times differ
  in unit or time base (ticks vs ms, client send time vs server queue time) are not comparable:
  no gate is evaluated and no delta computed;
- ``tune`` when evidence is missing or untrustworthy (a required metric is null, an id is
  duplicated or unknown, a gate cannot be measured) or when some gate fails;
- ``accept`` when none of that happens and every gate passes.

A candidate that looks faster only because it dropped requests fails the completion-rate gates
(its own floor, and a fixed gate: never below the baseline's completion rate) or, when its trace
lost them, is rejected: it is never accepted.

Every value read from a run directory is checked in :func:`load_side` (one
:class:`~sched.cmdline.InputError` line naming the file, case or line and field); a metric that is
NaN or infinite reads as missing. Impossible values (a negative latency, a rate outside [0, 1], a
fractional count) and a summary that its complete ``requests.jsonl`` contradicts are refused
(:mod:`sched.trace`), and ``requests.jsonl`` is read as a stream, never held whole. ``compare`` writes ``./decision.json`` by default, never into a
run directory unless ``--out`` names such a path.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .files import open_regular
from .cmdline import (EXIT_OK, InputError, LineParser, count_or_none, fraction_arg, need, number_or_none, parse_json,
                      one_line, run_command, write_text_atomically)
from .metrics import COMPARE_FIELDS, percentile_of_histogram
from .trace import Trace, case_rows, check_consistency, check_summary_row, read_trace

__all__ = ["Side", "Thresholds", "load_side", "check_contract", "check_evidence", "compare",
           "render_report", "command", "DECISIONS"]

DECISIONS = ("accept", "tune", "reject")
#: Where these rules differ from the serving-bench chapter's (serving-bench.md §2, §4); in every record and report.
CHAPTER_DIFFERENCES = (
    "a lost request: compare rejects; the chapter's trace evidence calls it missing evidence (tune)",
    "P95 TPOT: compare gates its growth; the chapter's real-engine decision has no TPOT gate",
    "completion: compare gates completion rate (floor, never below the baseline); the chapter rejects any "
    "failed request or successful count below the workload's",
)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Gate thresholds (compare.md §3.3, §3.4); growths and drops are fractions of the baseline.

    General gates: candidate P95 TTFT and P95 TPOT at most ``1 + max_*_growth`` times the
    baseline's; throughput at least ``1 + min_throughput_gain`` times; completion rate and fairness
    at least their floors. A priority experiment (policy fcfs → priority) replaces the TTFT cap and
    throughput floor by its own ratios and adds the order-score and low-class E2E gates.
    """

    max_ttft_growth: float = 0.10
    max_tpot_growth: float = 0.10
    min_throughput_gain: float = 0.0
    min_completion_rate: float = 0.99
    min_fairness: float = 0.0
    min_order_score_gain: float = 0.15
    max_throughput_drop: float = 0.10
    max_priority_ttft_growth: float = 0.25
    max_low_class_e2e_growth: float = 0.50


@dataclass(slots=True)
class Side:
    """One side of a comparison, read from a run directory.

    ``fixed``: conditions that must be equal (workload, engine, measurement settings);
    ``scheduler``: the settings of which exactly one may differ; ``trace``: the case's request
    lines reduced in one streaming pass (:class:`sched.trace.Trace`; :attr:`rows` reads the lines
    again); ``expected``: the ids that arrived (``None`` when only a count is known, then
    ``num_expected``); ``priorities``: the priority classes of the requests, or ``None`` when the
    run does not know them.
    """

    label: str
    units: str
    fixed: dict
    scheduler: dict
    summary: dict
    trace: Trace
    expected: list[str] | None
    num_expected: int | None
    priorities: set | None
    run_failed: bool = False
    has_trace: bool = True
    requests_path: str = ""
    case: str = ""

    @property
    def rows(self) -> list[dict]:
        """The case's request lines, read again from ``requests.jsonl`` (small runs, tests)."""
        return [row for _, row in case_rows(self.requests_path, self.case)] if self.requests_path else []


# --- reading a side ------------------------------------------------------------------------------

#: Summary columns a comparison reads: the required metrics and the ones gates and deltas use.
_METRICS = (*COMPARE_FIELDS, "budget_utilization", "priority_first_token_order_score")


def _read_text(path: str, hint: str) -> str:
    try:
        with open_regular(path) as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError(f"{path}: missing; {hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc})") from None


def _read_json(path: str):
    """A run file's JSON; NaN/Infinity decode as ``None`` (a metric that is not a number is missing evidence)."""
    text = _read_text(path, "is this a run directory (--artifacts or import-results)?")
    return parse_json(text, path, non_finite_as_none=True)


class _Request(tuple):
    """``(name, priority)`` of a workload request whose fields have the right types: a large
    workload.json is read without keeping a dict per request."""


def _compact_request(obj: dict):
    name, priority = obj.get("name"), obj.get("priority")
    if "arrival" in obj and isinstance(name, str) and (priority is None or type(priority) is int):
        return _Request((name, priority))
    return obj  # kept whole, so the check below names what is wrong with it


def load_side(directory: str, case: str | None = None) -> Side:
    """Read one case of a run directory (simulated or imported) as a :class:`Side`.

    ``case`` may be omitted when the run has a single case (an imported real run). Every value
    the comparison uses is checked here; a metric that is NaN or infinite reads as ``None``
    (missing evidence). Raises :class:`~sched.cmdline.InputError` naming the file, line or case
    and the field for unusable input.
    """
    if not os.path.isdir(directory):
        raise InputError(f"{directory}: not a run directory")
    manifest_path, summary_path = (os.path.join(directory, name) for name in ("manifest.json", "summary.json"))
    manifest = need(_read_json(manifest_path), dict, manifest_path, "a JSON object")
    if manifest.get("tool") != "infer-sched-lab":
        raise InputError(f"{manifest_path}: field 'tool': not an infer-sched-lab manifest")
    summary = need(_read_json(summary_path), dict, summary_path, "a JSON object")
    cases = need(summary.get("cases"), list, f"{summary_path}: field 'cases'", "a list of case rows")
    for index, row in enumerate(cases):
        need(row, dict, f"{summary_path}: cases[{index}]", "an object")
        need(row.get("case"), str, f"{summary_path}: cases[{index}]: field 'case'", "a string (the case name)")
    names = [c["case"] for c in cases]
    if case is None:
        if len(names) != 1:
            raise InputError(f"{directory}: holds cases {', '.join(names)}; choose one with --case "
                             "(or --baseline-case/--candidate-case)")
        case = names[0]
    if case not in names:
        raise InputError(f"{summary_path}: no case {case!r}; it holds {', '.join(names)}")
    row = cases[names.index(case)]
    where = f"{summary_path}: case {case!r}"
    for key in _METRICS:
        number_or_none(row.get(key), f"{where}: field {key!r}")
    check_summary_row(row, where)  # impossible values (a negative P95, a rate of 7.5) are refused
    label = f"{os.path.basename(os.path.normpath(directory))}#{case}"
    requests_path = os.path.join(directory, "requests.jsonl")
    if manifest.get("kind") == "real":
        side = _real_side(manifest_path, manifest, row, requests_path, label)
    else:
        side = _simulated_side(directory, manifest, row, requests_path, case, label)
    side.requests_path, side.case = requests_path, case
    evidence = check_evidence(side)
    if side.has_trace and not (evidence["num_lost"] or evidence["duplicated"] or evidence["unknown"]):
        # A complete trace must agree with the summary. An incomplete one is judged by the evidence
        # rules instead (lost: reject; duplicated or unknown ids: tune), so it never reaches accept.
        check_consistency(row, side.trace, where, requests_path, exact_arrivals=side.units == "ticks")
    return side


def _simulated_side(directory, manifest, row, requests_path, case, label) -> Side:
    where = os.path.join(directory, "manifest.json")
    entries = need(manifest.get("cases"), list, f"{where}: field 'cases'", "a list of case settings")
    settings = {c["case"]: c for c in entries if isinstance(c, dict) and isinstance(c.get("case"), str)}
    if case not in settings:
        raise InputError(f"{where}: field 'cases': no settings for case {case!r}")
    config = need(manifest.get("config"), dict, f"{where}: field 'config'", "an object", nullable=True) or {}
    workload_path = os.path.join(directory, "workload.json")
    text = _read_text(workload_path, "is this a run directory (--artifacts or import-results)?")
    try:
        workload = json.loads(text, object_hook=_compact_request)
    except (ValueError, RecursionError):
        workload = parse_json(text, workload_path)  # raises the one-line error
    del text
    need(workload, dict, workload_path, "a JSON object")
    requests = need(workload.get("requests"), list, f"{workload_path}: field 'requests'", "a list of requests")
    for index, request in enumerate(requests):
        if isinstance(request, _Request):
            continue
        at = f"{workload_path}: request {index}"
        need(request, dict, at, "an object")
        need(request.get("name"), str, f"{at}: field 'name'", "a string")
        need(request.get("priority"), int, f"{at} ({request['name']}): field 'priority'", "an integer", nullable=True)
    fixed = {
        "engine": f"{manifest.get('tool')} {manifest.get('version')}",
        "workload_sha256": manifest.get("workload_sha256"),
        "timeout_ticks": manifest.get("timeout_ticks"),
        "decode_cost": config.get("decode_cost"),
        "prefill_cost": config.get("prefill_cost"),
        "units": "ticks",
        "time_base": "simulated tick clock",
    }
    step_model = manifest.get("time_unit") == "ms"   # --step-model: ms from a fitted step time (vllm-engine.md §6)
    if step_model:
        fixed.update(_step_model_fixed(manifest))
    scheduler = {
        "policy": manifest.get("policy"),
        "max_active": config.get("max_active"),
        "budget": config.get("budget"),
        "batching": settings[case].get("batching"),
        "apc": settings[case].get("apc"),
        "chunk_tokens": settings[case].get("chunk_tokens"),
    }
    if manifest.get("engine") == "vllm":   # the vLLM engine's knobs, named as the real engine names them
        scheduler = {"policy": manifest.get("policy"), **{key: config.get(key) for key in _VLLM_KNOBS}}
    expected = [name for name, _ in requests]
    priorities = {name: priority or 0 for name, priority in requests}
    trace = read_trace(requests_path, case, priorities, suffix="_ms" if step_model else "")
    return Side(label, fixed["units"], fixed, scheduler, row, trace, expected, len(expected),
                set(priorities.values()))


#: A vLLM-engine run's scheduler settings (``manifest.json`` ``config``), vLLM's names.
_VLLM_KNOBS = ("max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold", "enable_prefix_caching",
               "block_size", "num_gpu_blocks")


def _step_model_fixed(manifest: dict) -> dict:
    """The fixed conditions of a ``--step-model`` run: times in ms, measured from the time base of the
    real run the model was fitted on (its workload's arrivals come from that run), so it compares with
    an imported real run of the same format; the step model itself is a fixed condition."""
    model = manifest.get("step_model") if isinstance(manifest.get("step_model"), dict) else {}
    fitted = model.get("fitted_on") if isinstance(model.get("fitted_on"), dict) else {}
    return {"units": "ms", "timeout_ticks": None, "decode_cost": None, "prefill_cost": None,
            "time_base": _TIME_BASES.get(str(fitted.get("format")), "step-model clock (ms from the workload's arrivals)"),
            "step_model": model.get("step_ms")}


#: Where an imported run's times start, by import format (older imports lack ``time_base``).
_TIME_BASES = {"vllm-bench": "client send time", "request-jsonl": "server queued_ts"}


def _real_side(where, manifest, row, requests_path, label) -> Side:
    fixed = {"units": "ms", "workload_sha256": manifest.get("workload_sha256"),
             "time_base": manifest.get("time_base") or _TIME_BASES.get(str(manifest.get("format")))}
    for group in ("engine", "measurement"):
        values = need(manifest.get(group), dict, f"{where}: field {group!r}", "an object", nullable=True) or {}
        for key, value in values.items():
            fixed[f"{group}.{key}"] = value
    scheduler = dict(need(manifest.get("scheduler"), dict, f"{where}: field 'scheduler'", "an object",
                          nullable=True) or {})
    expected = need(manifest.get("request_ids"), list, f"{where}: field 'request_ids'", "a list of ids",
                    nullable=True)
    for index, name in enumerate(expected or ()):
        need(name, str, f"{where}: field 'request_ids'[{index}]", "a string")
    num_expected = count_or_none(manifest.get("num_requests_expected"), f"{where}: field 'num_requests_expected'")
    for key in ("run_failed", "per_request"):
        need(manifest.get(key), bool, f"{where}: field {key!r}", "true or false", nullable=True)
    trace = read_trace(requests_path, row["case"])
    priorities = trace.row_priorities if trace.num_rows else None  # known only when every line has one
    return Side(label, "ms", fixed, scheduler, row, trace, expected, num_expected,
                priorities, run_failed=bool(manifest.get("run_failed")),
                has_trace=bool(manifest.get("per_request")))


# --- contract and evidence (compare.md §3.1, §3.2) -----------------------------------------------

def check_contract(baseline: Side, candidate: Side, declared: str | None = None) -> dict:
    """The contract of compare.md §3.1 as a record.

    Returns ``{"ok", "comparable", "declared_change", "change_inferred", "change", "changes",
    "num_scheduler_changes", "mismatches", "problems"}``:

    - ``changes``: every scheduler setting that differs (``{field, baseline, candidate}``);
      ``change`` is the single one when there is exactly one, else ``None``;
    - ``declared_change``: the ``--change`` given, or ``None``; then ``change_inferred`` is true
      (the change was read off the two sides, not declared);
    - ``mismatches``: every difference that breaks the contract, each with a ``kind``: a fixed
      condition that differs (``"fixed condition"``), or scheduler settings when more than one
      differs or the one that differs is not the declared one (``"scheduler setting"``). It is
      empty exactly when no difference breaks the contract;
    - ``comparable``: false when the sides measure time in different units or from different
      time bases (ticks versus ms, send time versus server queue time): no gate or delta can be
      formed then;
    - ``problems``: one line per reason the contract fails (``ok`` is true when there is none).
    """
    problems, mismatches, changes = [], [], []
    for key in sorted(set(baseline.fixed) | set(candidate.fixed)):
        a, b = baseline.fixed.get(key), candidate.fixed.get(key)
        if a != b:
            mismatches.append({"field": key, "kind": "fixed condition", "baseline": a, "candidate": b})
            problems.append(f"fixed condition {key} differs: {a!r} vs {b!r}")
    comparable = all(baseline.fixed.get(k) == candidate.fixed.get(k) for k in ("units", "time_base"))
    if not comparable:
        problems.append("the sides measure time differently (units or time base): not comparable; "
                        "no gate is evaluated and no delta computed")
    if baseline.fixed.get("workload_sha256") is None and not any(
            k.startswith("measurement.dataset") and baseline.fixed.get(k) is not None for k in baseline.fixed):
        problems.append("workload identity unknown (no workload_sha256): re-import with --workload")
    for key in sorted(set(baseline.scheduler) | set(candidate.scheduler)):
        a, b = baseline.scheduler.get(key), candidate.scheduler.get(key)
        if a != b:
            changes.append({"field": key, "baseline": a, "candidate": b})
    unknown = [key for key in baseline.scheduler if baseline.scheduler[key] is None and candidate.scheduler.get(key) is None]
    if "policy" in unknown:
        problems.append("scheduler setting policy unknown on both sides: re-import with --policy")
    extra = []
    if not changes:
        problems.append("the two sides differ in no scheduler setting: nothing to compare")
    elif len(changes) > 1:
        extra = changes
        problems.append(f"the two sides differ in more than one scheduler setting ({len(changes)}): "
                        + ", ".join(c["field"] for c in changes))
    elif declared is not None and changes[0]["field"] != declared:
        extra = changes
        problems.append(f"declared change {declared} but the sides differ in {changes[0]['field']}")
    mismatches.extend(dict(c, kind="scheduler setting") for c in extra)
    return {"ok": not problems, "comparable": comparable, "declared_change": declared,
            "change_inferred": declared is None, "change": changes[0] if len(changes) == 1 else None,
            "changes": changes, "num_scheduler_changes": len(changes), "mismatches": mismatches,
            "problems": problems}


def check_evidence(side: Side) -> dict:
    """Trace completeness and required metrics of one side (compare.md §3.2).

    Returns ``{"arrived", "in_trace", "duplicated", "lost", "unknown", "missing_metrics",
    "num_lost"}``: ids listed twice, arrived ids absent or never ended, ids nobody sent, and
    :data:`~sched.metrics.COMPARE_FIELDS` that are null. ``num_lost`` also counts requests known
    only by number (a real file shorter than its run).
    """
    counts = side.trace.counts
    duplicated = sorted(name for name, count in counts.items() if count > 1)
    never_ended = sorted(side.trace.never_ended)
    if not side.has_trace:
        lost, unknown, num_lost = [], [], 0      # no trace at all: missing evidence, not lost requests
    elif side.expected is not None:
        expected = set(side.expected)
        lost = sorted((expected - set(counts)) | (set(never_ended) & expected))
        unknown = sorted(set(counts) - expected)
        num_lost = len(lost)
    else:
        lost, unknown = never_ended, []
        num_lost = len(lost) + max(0, (side.num_expected or 0) - len(counts))
    missing = [f for f in COMPARE_FIELDS if side.summary.get(f) is None]
    if not side.has_trace:
        missing.append("per-request trace")
    return {"arrived": len(side.expected) if side.expected is not None else side.num_expected,
            "in_trace": len(counts), "duplicated": duplicated, "lost": lost, "unknown": unknown,
            "num_lost": num_lost, "missing_metrics": missing}


# --- gates and decision (compare.md §3.3, §3.4) --------------------------------------------------

def _ratio_change(base, cand):
    """cand / base − 1 (a growth or gain as a fraction), or None when it cannot be formed."""
    if base is None or cand is None:
        return None
    if base == 0:
        return 0.0 if cand == 0 else float("inf")
    return cand / base - 1


def _low_class_p95_e2e(side: Side):
    """P95 E2E of the successful requests of the least urgent class (largest priority value)."""
    if side.priorities is None or len(side.priorities) < 2:
        return None
    return percentile_of_histogram(side.trace.e2e_by_priority.get(max(side.priorities), {}), 95)


def _gate(name, measured, op, threshold):
    passed = None if measured is None else (measured <= threshold if op == "<=" else measured >= threshold)
    return {"gate": name, "measured": _round(measured), "op": op, "threshold": threshold, "passed": passed}


def _round(value):
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return round(float(value), 6) if not isinstance(value, int) else value


def _gates(baseline: Side, candidate: Side, priority_experiment: bool, t: Thresholds) -> list[dict]:
    b, c = baseline.summary, candidate.summary
    ttft_growth = _ratio_change(b.get("p95_ttft"), c.get("p95_ttft"))
    throughput_change = _ratio_change(b.get("throughput"), c.get("throughput"))
    gates = []
    if priority_experiment:
        gates.append(_gate("P95 TTFT growth", ttft_growth, "<=", t.max_priority_ttft_growth))
    else:
        gates.append(_gate("P95 TTFT growth", ttft_growth, "<=", t.max_ttft_growth))
    gates.append(_gate("P95 TPOT growth", _ratio_change(b.get("p95_tpot"), c.get("p95_tpot")), "<=", t.max_tpot_growth))
    if priority_experiment:
        gates.append(_gate("throughput change", throughput_change, ">=", -t.max_throughput_drop))
    else:
        gates.append(_gate("throughput gain", throughput_change, ">=", t.min_throughput_gain))
    gates.append(_gate("completion rate", c.get("completion_rate"), ">=", t.min_completion_rate))
    # Not a flag: fewer completed requests can make success-only latencies look better.
    completion = (None if b.get("completion_rate") is None or c.get("completion_rate") is None
                  else c["completion_rate"] - b["completion_rate"])
    gates.append(_gate("completion rate change", completion, ">=", 0))
    gates.append(_gate("fairness", c.get("fairness"), ">=", t.min_fairness))
    if priority_experiment:
        before, after = (s.summary.get("priority_first_token_order_score") for s in (baseline, candidate))
        gain = None if before is None or after is None else after - before
        gates.append(_gate("first-token order score gain", gain, ">=", t.min_order_score_gain))
        gates.append(_gate("lowest-priority P95 E2E growth",
                           _ratio_change(_low_class_p95_e2e(baseline), _low_class_p95_e2e(candidate)),
                           "<=", t.max_low_class_e2e_growth))
    return gates


_DELTA_FIELDS = (("p95_ttft", "p95_ttft"), ("p95_tpot", "p95_tpot"), ("throughput", "throughput"),
                 ("fairness", "fairness"), ("utilization", "budget_utilization"))


def compare(baseline: Side, candidate: Side, thresholds: Thresholds = Thresholds(),
            declared_change: str | None = None) -> dict:
    """The decision record of compare.md §3 for ``baseline`` versus ``candidate`` (JSON-ready dict).

    Keys: ``decision`` (one of :data:`DECISIONS`), ``baseline``/``candidate`` labels, ``units``,
    ``contract`` (see :func:`check_contract`), ``evidence`` per side (both sides are checked, not
    only the candidate's trace), ``hard_failures``, ``missing_evidence``, ``gates`` (each with
    measured value, comparison and threshold; ``passed`` null when unmeasurable), ``deltas``
    (candidate − baseline) and ``next_action``. When the sides are not comparable (different
    time units or time bases) ``gates`` is ``[]`` and ``deltas`` is ``{}``: nothing is computed.
    """
    contract = check_contract(baseline, candidate, declared_change)
    evidence = {"baseline": check_evidence(baseline), "candidate": check_evidence(candidate)}
    change = contract["change"]
    priority_experiment = bool(change and change["field"] == "policy"
                               and (change["baseline"], change["candidate"]) == ("fcfs", "priority"))
    hard = [f"contract: {p}" for p in contract["problems"]]
    missing = []
    for role, side in (("baseline", baseline), ("candidate", candidate)):
        ev = evidence[role]
        if side.run_failed:
            hard.append(f"{role}: the backend run failed")
        if ev["num_lost"]:
            shown = ", ".join(ev["lost"][:8]) or "ids unknown"
            hard.append(f"{role}: {ev['num_lost']} arrived request(s) lost ({shown})")
        empty = [r["name"] for r in side.rows if r.get("status") == "ok" and r.get("output_text_empty") is True]
        if empty:  # a real engine's "ok" that produced no text is not a served request
            hard.append(f"{role}: {len(empty)} ok request(s) with empty output text ({', '.join(empty[:8])})")
        if ev["duplicated"]:
            missing.append(f"{role}: duplicated id(s) {', '.join(ev['duplicated'][:8])}")
        if ev["unknown"]:
            missing.append(f"{role}: unknown id(s) {', '.join(ev['unknown'][:8])}")
        missing.extend(f"{role}: {m} missing" for m in ev["missing_metrics"])
    gates = _gates(baseline, candidate, priority_experiment, thresholds) if contract["comparable"] else []
    missing.extend(f"gate {g['gate']} cannot be measured" for g in gates if g["passed"] is None)
    failed = [g["gate"] for g in gates if g["passed"] is False]
    if hard:
        decision = "reject"
        action = "Fix the comparison before judging the candidate: " + "; ".join(hard[:3]) + "."
    elif missing:
        decision = "tune"
        action = "Collect the missing evidence and compare again: " + "; ".join(missing[:3]) + "."
    elif failed:
        decision = "tune"
        action = ("Keep the baseline; adjust the candidate until these gates pass: " + ", ".join(failed)
                  + ". Throughput alone never decides: read tail latency, completion and fairness.")
    else:
        decision = "accept"
        action = ("Adopt the candidate for this workload; confirm on a second workload (and on a real "
                  "engine for a simulated result) before rolling it out.")
    deltas = {}
    for name, key in _DELTA_FIELDS if contract["comparable"] else ():
        a, b = baseline.summary.get(key), candidate.summary.get(key)
        deltas[name] = None if a is None or b is None else _round(b - a)
    return {
        "decision": decision,
        "baseline": baseline.label,
        "candidate": candidate.label,
        "units": baseline.units if baseline.units == candidate.units else f"{baseline.units} vs {candidate.units}",
        "priority_experiment": priority_experiment,
        "contract": contract,
        "evidence": evidence,
        "hard_failures": hard,
        "missing_evidence": missing,
        "gates": gates,
        "deltas": deltas,
        "next_action": action,
        "chapter_differences": list(CHAPTER_DIFFERENCES),
    }


def render_report(record: dict) -> str:
    """The short text report printed by ``compare``: decision, gates, deltas, next action."""
    contract = record["contract"]
    change = contract["change"]
    lines = [f"decision: {record['decision'].upper()}"
             + ("  (priority experiment: fcfs -> priority)" if record["priority_experiment"] else ""),
             f"baseline {record['baseline']}  vs  candidate {record['candidate']}  ({record['units']})"]
    if contract["ok"]:
        how = "inferred, no --change given" if contract["change_inferred"] else "as declared"
        lines.append(f"contract: ok, one change ({how}): {change['field']} {change['baseline']} -> {change['candidate']}")
    else:
        lines.extend(f"contract: BROKEN: {p}" for p in contract["problems"])
    for role in ("baseline", "candidate"):
        ev = record["evidence"][role]
        lines.append(f"evidence {role}: {ev['in_trace']} ids in trace of {ev['arrived']} arrived; "
                     f"lost {len(ev['lost']) or ev['num_lost']}, duplicated {len(ev['duplicated'])}, "
                     f"unknown {len(ev['unknown'])}, missing metrics {', '.join(ev['missing_metrics']) or 'none'}")
    if not contract["comparable"]:
        lines.append("gates: not evaluated (not comparable: the sides measure time differently)")
    else:
        lines.append("gates:")
    for g in record["gates"]:
        status = {True: "pass", False: "FAIL", None: "MISSING"}[g["passed"]]
        measured = "NA" if g["measured"] is None else _fmt(g["measured"])
        lines.append(f"  {status:7} {g['gate']:32} {measured:>10} {g['op']} {_fmt(g['threshold'])}")
    deltas = ", ".join(f"{k} {'NA' if v is None else _fmt(v, signed=True)}" for k, v in record["deltas"].items())
    lines.append(f"deltas (candidate - baseline): {deltas or 'not computed'}")
    lines.append(f"next: {record['next_action']}")
    lines.append("rules differ from the serving-bench chapter (its rules: serving-bench decide): lost request "
                 "reject (chapter's helpers: tune); P95 TPOT gate (chapter: none); completion-rate gates (chapter: any "
                 "failed request rejects); see chapter_differences")
    return "\n".join(map(one_line, lines)) + "\n"  # an id holding a line break cannot forge a report line


def _fmt(value, signed: bool = False) -> str:
    if isinstance(value, str):
        return value
    text = f"{value:+.4g}" if signed else f"{value:.4g}"
    return text


# --- the subcommand ------------------------------------------------------------------------------

def _parser() -> LineParser:
    t = Thresholds()
    parser = LineParser(
        prog="infer_sched_lab.py compare",
        description="Decide whether a candidate should replace a baseline (compare.md §3): two cases "
                    "of one run (BASELINE only, with --baseline-case and --candidate-case), one case "
                    "of each of two runs, or two runs imported with import-results. Writes "
                    "the decision record (default ./decision.json) and prints a short report.",
        epilog="Exit codes: 0 a decision was made (accept, tune or reject), 2 unusable input. Learners of the "
               "serving-bench chapter deciding on its runner's result files (repeats, failure records): use "
               "'serving-bench decide BASELINE.json CANDIDATE.json --out EVIDENCE.json'. The chapter's rules "
               "differ: its helper functions call a lost request missing evidence (tune); its decision has no "
               "TPOT gate and rejects any failed request.",
    )
    parser.add_argument("baseline", metavar="BASELINE_DIR", help="run directory of the baseline")
    parser.add_argument("candidate", metavar="CANDIDATE_DIR", nargs="?",
                        help="run directory of the candidate (default: the baseline's directory)")
    parser.add_argument("--case", help="the case to compare on both sides, e.g. continuous")
    parser.add_argument("--baseline-case", help="the baseline's case (overrides --case)")
    parser.add_argument("--candidate-case", help="the candidate's case (overrides --case)")
    parser.add_argument("--change", metavar="SETTING",
                        help="the declared scheduler change (e.g. policy, apc); refused if the runs differ otherwise")
    parser.add_argument("--out", metavar="FILE",
                        help="where to write the decision record (default: decision.json in the current "
                             "directory, refused when that directory holds a run; any path you name is used)")
    parser.add_argument("--force", action="store_true", help="replace an existing decision record")
    gates = parser.add_argument_group("gates (fractions of the baseline unless said otherwise)")
    for flag, default, text in (
            ("--max-ttft-growth", t.max_ttft_growth, "largest P95 TTFT growth"),
            ("--max-tpot-growth", t.max_tpot_growth, "largest P95 TPOT growth"),
            ("--min-throughput-gain", t.min_throughput_gain, "smallest throughput gain"),
            ("--min-completion-rate", t.min_completion_rate, "smallest candidate completion rate (absolute)"),
            ("--min-fairness", t.min_fairness, "smallest candidate fairness (absolute, 0..1)"),
            ("--min-order-score-gain", t.min_order_score_gain,
             "priority experiment: smallest rise of the first-token order score (absolute)"),
            ("--max-throughput-drop", t.max_throughput_drop, "priority experiment: largest throughput drop"),
            ("--max-priority-ttft-growth", t.max_priority_ttft_growth,
             "priority experiment: largest overall P95 TTFT growth"),
            ("--max-low-class-e2e-growth", t.max_low_class_e2e_growth,
             "priority experiment: largest P95 E2E growth of the lowest-priority class")):
        gates.add_argument(flag, type=fraction_arg, default=default, metavar="X", help=f"{text} (default {default})")
    return parser


#: The files compare reads from a run directory; ``--out`` may never name one of them.
_RUN_INPUTS = ("manifest.json", "summary.json", "requests.jsonl", "workload.json")


def _refuse_input_file(out: str, run_dirs) -> None:
    """Refuse an ``--out`` that is one of the files the compared runs consist of (even with --force)."""
    target = os.path.realpath(out)
    for run_dir in run_dirs:
        inputs = {os.path.realpath(os.path.join(run_dir, name)) for name in _RUN_INPUTS}
        if target in inputs:
            raise InputError(f"--out {out}: is one of the compared run's own files; choose another path")


def _command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.candidate is None and (args.baseline_case or args.case) == (args.candidate_case or args.case):
        raise InputError("comparing two cases of one run needs --baseline-case and --candidate-case "
                         "naming different cases")
    candidate_dir = args.candidate or args.baseline
    baseline = load_side(args.baseline, args.baseline_case or args.case)
    candidate = load_side(candidate_dir, args.candidate_case or args.case)
    thresholds = Thresholds(**{name: getattr(args, name) for name in Thresholds.__dataclass_fields__})
    record = compare(baseline, candidate, thresholds, args.change)
    out = args.out
    if out is None:
        if os.path.exists("manifest.json"):
            raise InputError("the current directory holds a run (manifest.json): compare writes into a run "
                             "directory only when --out names the path; give --out FILE")
        out = "decision.json"
    _refuse_input_file(out, (args.baseline, candidate_dir))
    # ASCII escapes in the record and in the report: a directory or case name may hold bytes
    # that are not UTF-8 (Python keeps them as lone surrogates, which no UTF-8 file can hold).
    write_text_atomically(out, json.dumps(record, indent=2, allow_nan=False) + "\n", force=args.force)
    report = render_report(record) + f"wrote {out}\n"
    print(report.encode("utf-8", "backslashreplace").decode("utf-8"), end="")
    return EXIT_OK


def command(argv: list[str]) -> int:
    """The ``compare`` subcommand: exit 0 for any decision made, 2 for unusable input or usage."""
    return run_command("infer_sched_lab.py compare", _command, argv)
