"""What an imported real run is made of (compare.md §4, formats.md), whatever its result format.

Records (one dict per request, times in **ms** from the earliest arrival), the summary row (the lab's
statistics contract, lab.md §5, percentiles by nearest rank), the manifest, and the checks every
reader applies to a value from a result file (times in seconds within :data:`MAX_SECONDS`, whole
token counts, one request's times in order), each raising
:class:`~sched.base.cmdline.InputError` with one line naming the file, the request and the field.
The format readers are :mod:`sched.timing.read_vllm_bench` and :mod:`sched.timing.read_request_jsonl`;
:mod:`sched.timing.otel_run` builds its records here too.
"""

from __future__ import annotations

import os

from .. import __version__
from ..base.cmdline import InputError, number_or_none
from ..base.strict_json import whole_number
from ..core.metrics import fairness, mean, order_score, percentile
from ..workload.specs import workload_sha256

#: Largest time value (seconds) accepted from a result file: about 300 years, far beyond any clock.
MAX_SECONDS = 1e10
REAL_UNITS = ("Real measurements: times in milliseconds from the earliest arrival, throughput in output "
              "tokens per second; percentiles by nearest rank (the lab's method, lab.md §5).")
#: Unit of each summary column of an imported run (a simulated run's are in ticks: artifacts.SUMMARY_UNITS).
REAL_SUMMARY_UNITS = {
    "p50_ttft": "ms", "p95_ttft": "ms", "p95_itl": "ms", "p95_tpot": "ms per output token", "p95_e2e": "ms",
    "p95_queue_wait": "ms", "throughput": "output tokens per second (all emitted tokens / makespan)",
    "completed_output_tps": "output tokens per second (tokens of successful requests only / makespan)",
    "output_tokens": "tokens", "hit_tokens": "tokens", "error_rate": "fraction of arrived requests",
    "makespan": "ms", "latency_samples": "successful requests feeding the latency columns",
    "p50_queue_wait": "ms", "p99_queue_wait": "ms", "mean_queue_wait": "ms",
    "fairness": "fraction in [0, 1] (1 = equal TTFTs)", "budget_utilization": "not measured on a real engine",
    "busy_fraction": "not measured on a real engine", "completion_rate": "fraction of arrived requests",
    "priority_first_token_order_score": "share of different-priority pairs served in priority order",
    "priority_order_score": "share of different-priority pairs completed in priority order",
    "succeeded": "requests", "timed_out": "requests", "arrived": "requests", "failed": "requests",
}
#: Where an imported run's times are measured from, by format (compare refuses to mix them).
TIME_BASES = {"vllm-bench": "client send time", "request-jsonl": "server queued_ts"}


# --- import: shared normalisation ----------------------------------------------------------------

def ms_of_seconds(seconds) -> float:
    """A duration or time in seconds (float) as milliseconds rounded to the µs (3 decimals)."""
    return round(seconds * 1000, 3)


def summary_row(records: list[dict], label: str, arrived: int, makespan, missing: dict) -> dict:
    """The statistics contract (lab.md §5, compare.md §2) over normalised records, in ms.

    ``missing`` maps a field that cannot be computed from the file to the reason. Returns
    ``(row, missing)``: the summary row (``None`` for each field that cannot be computed, listed in
    its ``missing``) and the completed reasons.
    """
    ok = [r for r in records if r["status"] == "ok"]
    ttfts = [r["ttft"] for r in ok if r["ttft"] is not None]
    waits = [r["queue_wait"] for r in ok if r["queue_wait"] is not None]
    gaps = [gap for r in ok for gap in _gaps(r)]
    emitted = sum(r["output_tokens_emitted"] or 0 for r in records)
    completed = sum(r["output_tokens_emitted"] or 0 for r in ok)
    seconds = makespan / 1000 if makespan else None
    known_priority = all(r["priority"] is not None for r in records)
    row = {
        "case": label,
        "p50_ttft": percentile(ttfts, 50),
        "p95_ttft": percentile(ttfts, 95),
        "p95_itl": percentile(gaps, 95),
        "p95_tpot": percentile([r["tpot"] for r in ok if r["tpot"] is not None], 95),
        "p95_e2e": percentile([r["e2e"] for r in ok if r["e2e"] is not None], 95),
        "p95_queue_wait": percentile(waits, 95),
        "throughput": emitted / seconds if seconds else None,
        "completed_output_tps": completed / seconds if seconds else None,
        "output_tokens": emitted,
        "hit_tokens": None,
        "succeeded": len(ok),
        "timed_out": None,
        "arrived": arrived,
        "error_rate": (arrived - len(ok)) / arrived if arrived else None,
        "makespan": makespan,
        "latency_samples": len(ok),
        "p50_queue_wait": percentile(waits, 50),
        "p99_queue_wait": percentile(waits, 99),
        "mean_queue_wait": mean(waits),
        "fairness": float(fairness(ttfts)),
        "budget_utilization": None,
        "busy_fraction": None,
        "completion_rate": len(ok) / arrived if arrived else None,
        "priority_first_token_order_score": None,
        "priority_order_score": None,
        "failed": sum(1 for r in records if r["status"] == "error"),
    }
    if known_priority:
        for key, time in (("priority_first_token_order_score", "first_token_at"), ("priority_order_score", "done_at")):
            if all(r[time] is not None for r in ok):
                score = order_score((r["priority"], r[time]) for r in ok)
                row[key] = None if score is None else float(score)
    missing = dict(missing)
    missing.setdefault("hit_tokens", "a real engine's result file does not report prefix-cache hits per run")
    missing.setdefault("timed_out", "a real run has no lab deadline; see 'failed'")
    missing.setdefault("budget_utilization", "no budget units on a real engine")
    missing.setdefault("busy_fraction", "no per-step busy record in the file")
    if not known_priority:
        missing.setdefault("priority", "the file has no priorities; import with --workload")
    for key in ("priority_first_token_order_score", "priority_order_score"):
        if row[key] is None and not known_priority:
            missing.setdefault(key, "needs every request's priority (--workload)")
    for key, value in row.items():
        if value is None and key not in missing:
            missing[key] = "empty sample" if key.startswith(("p5", "p9", "mean")) else "not computable from the file"
    row["missing"] = sorted(missing)
    return row, missing


def _gaps(record: dict) -> list:
    """A successful record's ITLs in ms: from its token times, or kept as ``itls`` when only those are known."""
    times = record["token_times"]
    if times:
        return [round(b - a, 3) for a, b in zip(times, times[1:])]
    return record.get("itls") or []


def request_record(label, name, priority, arrival, admitted, first, done, status, prompt, emitted, token_times):
    """One normalised request in ms; derived durations are None when a time is unknown."""
    ok = status == "ok"
    ttft = round(first - arrival, 3) if ok and None not in (first, arrival) else None
    e2e = round(done - arrival, 3) if ok and None not in (done, arrival) else None
    wait = round(admitted - arrival, 3) if ok and None not in (admitted, arrival) else None
    tpot = (round((done - first) / (emitted - 1), 3)
            if ok and None not in (first, done) and emitted and emitted > 1 else None)
    return {"case": label, "name": name, "priority": priority, "arrival": arrival, "admitted_at": admitted,
            "first_token_at": first, "done_at": done, "status": status, "prompt_tokens": prompt,
            "output_tokens_emitted": emitted, "token_times": token_times, "ttft": ttft,
            "queue_wait": wait, "e2e": e2e, "tpot": tpot}


def names_and_priorities(n: int, workload, source: str, default_names):
    """(names, priorities, request_ids, workload_sha256) for ``n`` requests, by position."""
    if workload is None:
        return default_names, [None] * n, None, None
    specs, path = workload
    if len(specs) != n:
        raise InputError(f"{source}: holds {n} requests but the workload {path} has {len(specs)}; "
                         "request i is mapped to workload request i, so the counts must match")
    return ([s.name for s in specs], [s.priority or 0 for s in specs], [s.name for s in specs],
            workload_sha256(specs))


def file_seconds(value, where: str, low: float = -MAX_SECONDS, allow_none: bool = False):
    """A time in seconds from a result file: finite, within ``[low, MAX_SECONDS]``; ``None`` only if allowed."""
    if value is None and not allow_none:
        raise InputError(f"{where}: missing or not a finite number of seconds")
    return number_or_none(value, where, low, MAX_SECONDS)


def file_count(value, where: str) -> int:
    """A whole token count from a result file (0..MAX_COUNT; 3.7, 3.0 and -1 are refused, never coerced)."""
    if value is None:
        raise InputError(f"{where}: missing or not a finite number")
    return whole_number(value, where)


def not_before(later, earlier, where: str, field: str, other: str, meaning: str) -> None:
    """Refuse ``later < earlier`` (two times of one request on one clock), naming both fields."""
    if later is not None and earlier is not None and later < earlier:
        raise InputError(f"{where}: field {field!r}: {later!r} is before {other} {earlier!r} ({meaning})")




def settle_policy(scheduler: dict, policy: str | None, where: str) -> dict:
    """``scheduler`` with its ``policy`` filled from ``--policy``; a file and a flag that disagree raise
    :class:`InputError` naming ``where`` and the field."""
    if policy is not None:
        if scheduler.get("policy") not in (None, policy):
            raise InputError(f"{where}: field 'policy': the file says {scheduler['policy']!r} but --policy says {policy!r}")
        scheduler["policy"] = policy
    return scheduler


def real_manifest(fmt, source, label, sha, engine, measurement, scheduler, request_ids, arrived, per_request,
              run_failed, missing, reported) -> dict:
    """The ``manifest.json`` of an imported run (compare.md §4): ``kind: real``, times in ms from
    :data:`TIME_BASES` of ``fmt``, ``missing`` (field -> reason) listed and kept with its reasons."""
    return {
        "tool": "infer-sched-lab", "version": __version__, "kind": "real", "simulated": False, "format": fmt,
        "time_unit": "ms", "time_base": TIME_BASES[fmt],
        "source": f"{fmt}:{os.path.basename(source)}", "case": label, "workload_sha256": sha,
        "engine": engine, "measurement": measurement, "scheduler": scheduler,
        "request_ids": request_ids, "num_requests_expected": arrived, "per_request": per_request,
        "run_failed": run_failed, "missing": sorted(missing), "missing_reasons": dict(sorted(missing.items())),
        "reported": reported, "units": REAL_UNITS,
    }
