"""What ``plan`` writes: the table sorted by rate, ``plan.json``, the recommendation and the replicas.

``plan.json``::

    {"tool": "infer-sched-lab plan", "kind": "plan", "workload": ..., "workload_sha256": ...,
     "slo": {"goodput_ms": {"ttft": 2000}, "attainment": 0.9}, "resolution": 0.01, "burstiness": 1.0,
     "seed": 0, "configs": [{"gpu": "...", "step_model": "...", "settings": {"max_num_seqs": 64, ...},
       "max_request_rate": 3.41, "resolution": 0.01, "metrics": {...vLLM's keys at that rate...},
       "check": {"request_rate": 3.5464, "slo_attainment": 0.87}, "non_monotone": false,
       "points": [[rate, attainment], ...], "command": "infer_sched_lab.py --engine vllm ..."}, ...],
     "recommendation": {...}, "replicas": {...}}

``settings`` holds every engine setting of the run under vLLM's names (the step model's, overridden
by the lists searched); ``command`` reruns the point through the normal run. Rates are requests per
second; ``"inf"`` when every request at once meets the SLO, ``null`` when no rate down to
``--min-rate`` does.

The recommendation is the monotone setting with the highest ``max_request_rate``; its margin is how
much more rate it sustains than the runner-up (a fraction). Replicas for ``--target-rate`` =
``ceil(target / max_request_rate)``: a lower bound, assuming perfect balance across replicas.
"""

from __future__ import annotations

import json
import math
import shlex

__all__ = ["cell", "render_table", "render_plan_json", "recommend", "replicas_for", "reproduce_command", "sort_key"]


def _rate_value(config: dict) -> float:
    rate = config["max_request_rate"]
    return math.inf if rate == "inf" else -1.0 if rate is None else rate


def sort_key(config: dict):
    """Highest rate first; ties by goodput, then the settings' text (a stable order)."""
    metrics = config.get("metrics") or {}
    return (-_rate_value(config), -(metrics.get("request_goodput") or 0.0), json.dumps(config["settings"], sort_keys=True))


def reproduce_command(workload_path: str, model_path: str, searched: dict, rate, goodput: dict, burstiness: float,
                      seed: int, max_concurrency: int | None = None, gpu: str | None = None) -> str:
    """The run command that reproduces one point (``searched``: the knobs the plan varied)."""
    from .grid import flag_words   # one module's words for both the table and the command
    words = ["infer_sched_lab.py", "--engine", "vllm", "--workload", workload_path, "--step-model", model_path,
             *(["--gpu", gpu] if gpu is not None else []), *flag_words(searched), "--request-rate", "inf" if rate in ("inf", math.inf) else repr(rate),
             "--burstiness", "inf" if burstiness == math.inf else repr(burstiness), "--seed", str(seed),
             *(["--max-concurrency", str(max_concurrency)] if max_concurrency is not None else []),
             "--metric-percentiles", "50,95,99", "--goodput", *(f"{k}:{v:g}" for k, v in goodput.items())]
    return " ".join(shlex.quote(w) for w in words)


def recommend(configs: list[dict]) -> dict | None:
    """The best monotone setting with evidence and margin, or ``None`` when none has a rate."""
    ranked = [c for c in sorted(configs, key=sort_key) if c["max_request_rate"] is not None and not c["non_monotone"]]
    if not ranked:
        return None
    best = ranked[0]
    ties = [c for c in ranked[1:] if _rate_value(c) == _rate_value(best)]
    runner = next((c for c in ranked if _rate_value(c) < _rate_value(best)), None)   # the first slower one
    margin = None
    if runner is not None and _rate_value(runner) > 0 and math.isfinite(_rate_value(best)):
        margin = _rate_value(best) / _rate_value(runner) - 1
    check = best.get("check") or {}
    return {"gpu": best["gpu"], "settings": best["settings"], "max_request_rate": best["max_request_rate"],
            "margin_over_runner_up": margin, "runner_up": None if runner is None else runner["settings"],
            "tied_with": [c["settings"] for c in ties],
            "evidence": {"slo_attainment_at_rate": (best["metrics"] or {}).get("slo_attainment"),
                         "slo_attainment_above": check.get("slo_attainment"),
                         "rate_above": check.get("request_rate")},
            "command": best["command"]}


def replicas_for(configs: list[dict], target_rate: float | None) -> dict | None:
    """Replicas of the recommended setting needed for ``target_rate`` req/s (a lower bound)."""
    best = recommend(configs)
    if target_rate is None or best is None:
        return None
    rate = _rate_value(best)
    needed = 1 if math.isinf(rate) else math.ceil(target_rate / rate)
    return {"target_rate": target_rate, "replicas": needed, "per_replica_rate": best["max_request_rate"],
            "note": "a lower bound: assumes perfect balance across replicas, each behaving as the one simulated"}


def cell(value, digits: int = 1) -> str:
    """A table cell: ``value`` with ``digits`` decimals when a float, ``"NA"`` for ``None``, ``"inf"`` kept."""
    if value is None:
        return "NA"
    if value == "inf":
        return "inf"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def render_table(configs: list[dict], searched_fields: list[str], target: float, resolution: float,
                 same_runs: dict[int, tuple] | None = None) -> str:
    """The table: one line per setting, highest rate first, with the SLO metrics at that rate.
    ``same_runs``: ``{index in configs: (index of the setting searched whose runs it shares, why)}``
    (:class:`sched.planning.same_runs.SharedSearches`), said in the note."""
    head = ["#", "gpu", *(f.replace("_", "-") for f in searched_fields), "max req/s", "goodput", "attain",
            "P95 TTFT", "P95 TPOT", "P95 E2EL", "preempt", "peak KV", "note"]
    rows = [head]
    order = sorted(range(len(configs)), key=lambda i: sort_key(configs[i]))
    row_of = {index: number for number, index in enumerate(order, 1)}
    same_runs = same_runs or {}
    for number, index in enumerate(order, 1):
        c = configs[index]
        m = c["metrics"] or {}
        note = "NON-MONOTONE" if c["non_monotone"] else {"min_rate": "SLO missed at --min-rate",
                                                          "arrival_span": "SLO missed at lowest rate (1,000 s span)",
                                                          "max_rate": "SLO met at --max-rate"}.get(c["bound"], "")
        if index in same_runs:
            searched, why = same_runs[index]
            note = "; ".join(filter(None, [note, f"same runs as #{row_of[searched]} ({why})"]))
        rows.append([str(number), c["gpu"], *(str(c["searched"].get(f, c["settings"].get(f))) for f in searched_fields), cell(c["max_request_rate"], 3),
                     cell(m.get("request_goodput"), 3), cell(m.get("slo_attainment"), 3),
                     cell(m.get("p95_ttft_ms")), cell(m.get("p95_tpot_ms")), cell(m.get("p95_e2el_ms")),
                     cell(m.get("num_preemptions")), cell(m.get("peak_kv_blocks_used")), note])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(text.ljust(widths[i]) if i == 1 else text.rjust(widths[i]) for i, text in enumerate(r)).rstrip()
             for r in rows]
    lines.append(f"(rates in requests/s, the highest whose slo_attainment >= {target:g}, to {resolution:g} relative; "
                 "goodput in req/s; times in ms, vLLM bench serve's definitions; one replica on the step model's GPU)")
    if same_runs:
        from .same_runs import LEGEND
        lines.append(f"({LEGEND})")
    return "\n".join(lines) + "\n"


def render_plan_json(document: dict) -> str:
    """``plan.json``'s text (infinite rates written as ``"inf"``)."""
    return json.dumps(document, indent=2, allow_nan=False, default=str) + "\n"
