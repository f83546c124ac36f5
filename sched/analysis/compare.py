"""Baseline versus candidate: contract, evidence, gates and a decision (compare.md §3).

A *side* is one case of one run directory: a simulated run (``manifest.json``, ``workload.json``,
``summary.json``, ``requests.jsonl`` in ticks) or a real run normalised by ``import-results``
(the same files in milliseconds, compare.md §4), read by :mod:`sched.analysis.compare_sides`. :func:`compare`
turns two sides into a decision record; :mod:`sched.commands.compare` is the ``compare`` subcommand.

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

Every value read from a run directory is checked in :func:`~sched.analysis.compare_sides.load_side` (one
:class:`~sched.base.cmdline.InputError` line naming the file, case or line and field); a metric that is
NaN or infinite reads as missing. Impossible values (a negative latency, a rate outside [0, 1], a
fractional count) and a summary that its complete ``requests.jsonl`` contradicts are refused
(:mod:`sched.analysis.trace`), and ``requests.jsonl`` is read as a stream, never held whole. ``compare`` writes ``./decision.json`` by default, never into a
run directory unless ``--out`` names such a path (:mod:`sched.commands.compare`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.cmdline import one_line
from .compare_sides import Side, check_evidence
from .throughput_gate import throughput_gate
from ..core.metrics import percentile_of_histogram

__all__ = ["Thresholds", "check_contract", "compare", "render_report", "DECISIONS"]

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
    at least their floors. Below saturation (both sides' arrival span / makespan at least
    ``1 − saturation_margin``) a throughput change within ``± throughput_noise``, or any change
    with the same output tokens on both sides, passes the throughput floor
    (:mod:`sched.analysis.throughput_gate`). A priority experiment (policy fcfs → priority) replaces the TTFT cap and
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
    throughput_noise: float = 0.01
    saturation_margin: float = 0.05


# --- contract (compare.md §3.1) ------------------------------------------------------------------

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
        gates.append(throughput_gate(baseline, candidate, throughput_change, t.min_throughput_gain,
                                     t.throughput_noise, t.saturation_margin))
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
        empty = side.trace.empty_ok   # read in the side's one pass over requests.jsonl
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
        if g.get("rule"):
            lines.append(f"          ({g['rule']})")
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
