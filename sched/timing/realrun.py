# One piece for now (~640 lines): other changes to its readers land this round; split planned after (a module per result format, the run writer apart).
"""Import of real measurements (compare.md §4, formats.md): a real engine's per-request results as a run.

Input: a result file (``import-results FILE``, formats below), optionally the exported
``workload.json`` (``--workload``; written by ``export``, :mod:`sched.timing.export`) and a ``meta.json``.
Output: a run directory in milliseconds. ``calibrate`` reads runs with the same readers.

**Import** (``import-results``): a real result file becomes a normalised run directory that
``compare`` accepts: ``manifest.json`` (``kind: real``, ``simulated: false``, ``time_unit: ms``,
``time_base``, backend identity, scheduler settings,
measurement settings, what is missing and why), ``requests.jsonl`` (per request: arrival,
admission, first token, token times, end, status, priority, in **milliseconds** from the earliest
arrival) and ``summary.json`` (one case, the lab's statistics contract in milliseconds, percentiles
by nearest rank; throughputs in output tokens per second; a ``field_units`` map like a simulated
run's, see :data:`REAL_SUMMARY_UNITS`). Values are checked where they are read: impossible ones
(a first token before the queue time, negative or fractional counts, times beyond
:data:`MAX_SECONDS`, NaN) are refused with one line naming the line or request and the field;
nothing is coerced. ``--force`` never writes over a directory holding another kind of run.
Formats read:

- ``vllm-bench``: ``vllm bench serve --save-result --save-detailed`` JSON (one object, or several
  lines with ``--append-result``; pick one with ``--run-index``). Per-request lists are seconds;
  ``start_times`` is a monotonic send time. TTFT = ``ttfts[i]``, token times = send + TTFT, then
  each of ``itls[i]`` added (a chunk may carry more than one token), end = the last chunk. A
  request with a non-empty ``errors[i]`` failed. The client cannot see admission: queue wait is
  missing. The file's own aggregates (linear interpolation) are kept under ``reported``. With
  ``generated_texts``, each request gets ``output_text_empty`` (an ok request that produced no
  text, which ``compare`` treats as a hard failure, as the serving-bench chapter does).
- ``request-jsonl``: per-request lines with ``request_id, input_toks, output_toks, arrival_time,
  queued_ts, scheduled_ts, first_token_ts, last_token_ts`` (LLMServingSim's vLLM harness), with
  an optional ``meta.json`` beside it (or ``--meta``) giving the engine. ``arrival_time`` is epoch
  seconds and the ``*_ts`` fields a different monotonic clock, so every time is taken on the
  monotonic clock from ``queued_ts``: TTFT = first_token_ts − queued_ts, queue wait =
  scheduled_ts − queued_ts, never against ``arrival_time``. There are no per-token times: ITL is
  missing, TPOT = (last − first) / (output − 1). A line without ``last_token_ts`` never ended.

With ``--workload FILE`` (the exported ``workload.json``), request ``i`` of the result is request
``i`` of the workload: its name and priority come from there and the run carries the workload's
sha256, which ``compare``'s contract needs. Anything a file lacks stays ``null`` and is listed in
``missing``; nothing is invented.
"""

from __future__ import annotations

import argparse
import json
import os

from .. import __version__
from ..base.safe_write import write_artifacts
from ..base.files import open_regular
from ..base.strict_json import strict_json, whole_number
from ..base.cmdline import (EXIT_OK, NON_FINITE_AS_NONE, InputError, LineParser, count_or_none, need, number_or_none,
                      read_failure, run_command)
from ..base.cmdline import integer
from ..core.metrics import fairness, mean, order_score, percentile
from ..workload.specs import workload_sha256
from ..core.bench_metrics import bench_units
from .bench_rows import BenchSettings, add_bench_flags, bench_header, bench_settings_from_args
from .real_bench import bench_of_request_lines, bench_of_vllm_result
from ..workload.validation import load_workload

__all__ = ["import_vllm_bench", "import_request_jsonl", "render_import", "import_command", "REAL_UNITS",
           "REAL_SUMMARY_UNITS", "MAX_SECONDS", "read_result_text"]

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

def _ms(seconds) -> float:
    return round(seconds * 1000, 3)


def _summary(records: list[dict], label: str, arrived: int, makespan, missing: dict) -> dict:
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


def _record(label, name, priority, arrival, admitted, first, done, status, prompt, emitted, token_times):
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


def _names_and_priorities(n: int, workload, source: str, default_names):
    """(names, priorities, request_ids, workload_sha256) for ``n`` requests, by position."""
    if workload is None:
        return default_names, [None] * n, None, None
    specs, path = workload
    if len(specs) != n:
        raise InputError(f"{source}: holds {n} requests but the workload {path} has {len(specs)}; "
                         "request i is mapped to workload request i, so the counts must match")
    return ([s.name for s in specs], [s.priority or 0 for s in specs], [s.name for s in specs],
            workload_sha256(specs))


def _seconds(value, where: str, low: float = -MAX_SECONDS, allow_none: bool = False):
    """A time in seconds from a result file: finite, within ``[low, MAX_SECONDS]``; ``None`` only if allowed."""
    if value is None and not allow_none:
        raise InputError(f"{where}: missing or not a finite number of seconds")
    return number_or_none(value, where, low, MAX_SECONDS)


def _count(value, where: str) -> int:
    """A whole token count from a result file (0..MAX_COUNT; 3.7, 3.0 and -1 are refused, never coerced)."""
    if value is None:
        raise InputError(f"{where}: missing or not a finite number")
    return whole_number(value, where)


def _not_before(later, earlier, where: str, field: str, other: str, meaning: str) -> None:
    """Refuse ``later < earlier`` (two times of one request on one clock), naming both fields."""
    if later is not None and earlier is not None and later < earlier:
        raise InputError(f"{where}: field {field!r}: {later!r} is before {other} {earlier!r} ({meaning})")


def _documents(text: str, source: str) -> list:
    """The JSON values of ``text``: one document, or one per non-empty line (JSON lines).

    NaN/Infinity decode as ``None`` (never a number); bad JSON, a key written twice
    (:func:`sched.base.strict_json.strict_json`) or absurd nesting is an :class:`InputError`.
    """
    try:
        json.loads(text, **NON_FINITE_AS_NONE)
    except ValueError:  # not one document (or a huge integer): parse line by line, naming the line
        return [strict_json(line, f"{source}: line {number}", nan_as_null=True)
                for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    except RecursionError:
        raise InputError(f"{source}: JSON nested too deeply") from None
    return [strict_json(text, source, nan_as_null=True)]   # one document: a key written twice is refused


# --- import: vLLM serving benchmark --------------------------------------------------------------

_DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "errors")
_SCHEDULER_METADATA = {"scheduling_policy": "policy", "policy": "policy", "max_num_seqs": "max_num_seqs",
                       "max_num_batched_tokens": "max_num_batched_tokens",
                       "enable_prefix_caching": "enable_prefix_caching",
                       "enable_chunked_prefill": "enable_chunked_prefill"}


def _vllm_runs(text: str, source: str) -> list[dict]:
    runs = _documents(text, source)
    if not runs or not all(isinstance(run, dict) for run in runs):
        raise InputError(f"{source}: expected one JSON object per benchmark run")
    return runs


def import_vllm_bench(text: str, source: str, label: str = "real", workload=None, policy: str | None = None,
                      run_index: int | None = None, bench: BenchSettings | None = None) -> tuple[dict, list[dict], dict]:
    """Normalise a vLLM serving-benchmark result (formats.md) to ``(manifest, records, summary row)``.

    ``workload`` is ``(specs, path)`` or None; ``policy`` fills the scheduler policy when the
    file's metadata lacks it; ``bench``: the percentiles and SLOs of vLLM bench serve's keys added to
    the row from the raw seconds (:mod:`sched.timing.real_bench`; default vLLM's, no SLO), their notes
    under the manifest's ``vllm_bench_notes``. Raises :class:`~sched.base.cmdline.InputError` for unusable input.
    """
    runs = _vllm_runs(text, source)
    if run_index is None and len(runs) > 1:
        raise InputError(f"{source}: holds {len(runs)} runs (--append-result); choose one with --run-index 0..{len(runs) - 1}")
    index = run_index or 0
    if not 0 <= index < len(runs):
        raise InputError(f"{source}: --run-index {index} out of range: the file holds {len(runs)} run(s)")
    run = runs[index]
    where = f"{source}: run {index}"
    missing: dict = {}
    present = [key for key in _DETAILED if key in run]
    detailed = len(present) == len(_DETAILED)
    records: list[dict] = []
    if detailed:
        n = len(run["input_lens"]) if isinstance(run["input_lens"], list) else -1
        for key in (*_DETAILED, "start_times"):
            if key in run and (not isinstance(run[key], list) or len(run[key]) != n):
                raise InputError(f"{where}: field {key!r}: must be a list as long as input_lens ({n})")
        names, priorities, request_ids, sha = _names_and_priorities(n, workload, where, [f"r{i}" for i in range(n)])
        starts = run.get("start_times")
        texts = run.get("generated_texts")
        if texts is not None and (not isinstance(texts, list) or len(texts) != n):
            raise InputError(f"{where}: field 'generated_texts': must be a list as long as input_lens ({n})")
        if starts is None:
            missing["arrival"] = "no start_times (older vLLM): arrivals, order scores and makespan unknown"
        origin = min((_seconds(s, f"{where}: field 'start_times'") for s in starts), default=0) if starts else None
        for i in range(n):
            at = f"{where}: request {i} ({names[i]})"
            error = need(run["errors"][i], str, f"{at}: field 'errors'", "a string (empty when it succeeded)",
                         nullable=True)
            status = "error" if error else "ok"
            emitted = _count(run["output_lens"][i], f"{at}: field 'output_lens'")
            prompt = _count(run["input_lens"][i], f"{at}: field 'input_lens'")
            arrival = _ms(starts[i] - origin) if starts else None
            token_times = None
            if status == "ok":
                gaps = need(run["itls"][i], list, f"{at}: field 'itls'", "a list of gaps in seconds")
                offsets = [_seconds(run["ttfts"][i], f"{at}: field 'ttfts'", low=0)]
                for gap in gaps:
                    offsets.append(offsets[-1] + _seconds(gap, f"{at}: field 'itls'", low=0))
                # Without start_times the durations are still known (relative to send at 0), the
                # absolute times are not.
                token_times = [round((arrival or 0.0) + _ms(offset), 3) for offset in offsets]
            record = _record(label, names[i], priorities[i], arrival if starts else 0.0, None,
                             token_times[0] if token_times else None, token_times[-1] if token_times else None,
                             status, prompt, emitted, token_times)
            if not starts:
                record.update(arrival=None, first_token_at=None, done_at=None, token_times=None,
                              itls=[round(b - a, 3) for a, b in zip(token_times or [], (token_times or [])[1:])])
            records.append(record)
            records[-1]["error"] = error or None
            if texts is not None:  # the chapter's completeness check: an ok request must have produced text
                records[-1]["output_text_empty"] = status == "ok" and not need(
                    texts[i], str, f"{at}: field 'generated_texts'", "text", nullable=True)
        missing["queue_wait"] = "a benchmark client cannot see admission"
        for key in ("p50_queue_wait", "p95_queue_wait", "p99_queue_wait", "mean_queue_wait"):
            missing[key] = missing["queue_wait"]
    else:
        n = 0
        names, priorities, request_ids, sha = _names_and_priorities(
            len(workload[0]) if workload else 0, workload, where, [])
        absent = ", ".join(key for key in _DETAILED if key not in run)
        missing["per_request"] = (f"no per-request lists ({absent}; run vllm bench serve with --save-detailed); "
                                  "only the file's aggregates are used")
    ok_done = [r["done_at"] for r in records if r["done_at"] is not None]
    arrivals = [r["arrival"] for r in records if r["arrival"] is not None]
    if ok_done and arrivals:
        makespan = round(max(ok_done) - min(arrivals), 3)
    else:
        duration = _seconds(run.get("duration"), f"{where}: field 'duration'", low=0, allow_none=True)
        makespan = None if duration is None else _ms(duration)
    expected = count_or_none(run.get("num_prompts"), f"{where}: field 'num_prompts'")
    arrived = max(n, expected or 0, len(request_ids or []))
    row, missing = _summary(records, label, arrived, makespan, missing)
    if not detailed:
        _from_aggregates(row, run, arrived, missing, where)
    metadata = {k: v for k, v in run.items() if k not in _DETAILED and not isinstance(v, (list, dict))
                and k not in ("date",)}
    scheduler = {"policy": None}
    for key, name in _SCHEDULER_METADATA.items():
        if key in run:
            scheduler[name] = run[key]
    scheduler = _settle_policy(scheduler, policy, where)
    if scheduler["policy"] is None:
        missing["scheduler.policy"] = "not in the file's metadata: pass --policy or --metadata scheduling_policy=..."
    engine = {"backend": run.get("backend"), "model": run.get("model_id"), "tokenizer": run.get("tokenizer_id"),
              "revision": run.get("revision"), "engine_version": run.get("vllm_version")}
    for key, value in engine.items():
        if value is None:
            missing[f"engine.{key}"] = "not in the file (add it with --metadata when running the benchmark)"
    measurement = {k: run.get(k) for k in ("endpoint_type", "request_rate", "burstiness", "max_concurrency")}
    manifest = _manifest("vllm-bench", source, label, sha, engine, measurement, scheduler, request_ids,
                         arrived, detailed, _run_failed(run, records), missing,
                         {k: v for k, v in metadata.items() if k.endswith(("_ms", "throughput", "goodput", "goodput:"))
                          or k in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens")})
    row["missing"] = sorted(set(row["missing"]) | set(missing))
    keys, manifest["vllm_bench_notes"] = bench_of_vllm_result(run, where, bench or BenchSettings())
    row.update({key: value for key, value in keys.items() if key not in row})   # the lab's 'failed' stays
    return manifest, records, row


def _from_aggregates(row: dict, run: dict, arrived: int, missing: dict, where: str) -> None:
    """Without per-request lists: counts and throughput from the file's aggregates, no latency.

    The file's percentiles use linear interpolation, not the lab's nearest rank: they stay under
    ``reported`` and every latency is null.
    """
    for key in ("p50_ttft", "p95_ttft", "p95_itl", "p95_tpot", "p95_e2e", "fairness",
                "priority_first_token_order_score", "priority_order_score"):
        row[key] = None
        missing[key] = "needs per-request lists (--save-detailed)"
    completed, failed = (count_or_none(run.get(key), f"{where}: field {key!r}") for key in ("completed", "failed"))
    if completed is not None and completed > arrived:
        raise InputError(f"{where}: field 'completed': {completed} requests completed but only {arrived} were sent")
    if completed is not None and arrived:
        row.update(succeeded=completed, completion_rate=completed / arrived,
                   error_rate=(arrived - completed) / arrived, failed=failed)
    else:
        for key in ("succeeded", "completion_rate", "error_rate", "failed"):
            row[key] = None
            missing[key] = "no 'completed' count in the file"
    tokens = count_or_none(run.get("total_output_tokens"), f"{where}: field 'total_output_tokens'")
    rate = number_or_none(run.get("output_throughput"), f"{where}: field 'output_throughput'", low=0)
    row.update(output_tokens=tokens, throughput=rate, completed_output_tps=rate)
    for key in ("output_tokens", "throughput", "completed_output_tps"):
        if row[key] is None:
            missing[key] = "not in the file"
    row["missing"] = sorted(missing)


def _run_failed(run: dict, records: list[dict]) -> bool:
    if run.get("completed") == 0:
        return True
    return bool(records) and all(r["status"] == "error" for r in records)


def _settle_policy(scheduler: dict, policy: str | None, where: str) -> dict:
    if policy is not None:
        if scheduler.get("policy") not in (None, policy):
            raise InputError(f"{where}: field 'policy': the file says {scheduler['policy']!r} but --policy says {policy!r}")
        scheduler["policy"] = policy
    return scheduler


def _manifest(fmt, source, label, sha, engine, measurement, scheduler, request_ids, arrived, per_request,
              run_failed, missing, reported) -> dict:
    return {
        "tool": "infer-sched-lab", "version": __version__, "kind": "real", "simulated": False, "format": fmt,
        "time_unit": "ms", "time_base": TIME_BASES[fmt],
        "source": f"{fmt}:{os.path.basename(source)}", "case": label, "workload_sha256": sha,
        "engine": engine, "measurement": measurement, "scheduler": scheduler,
        "request_ids": request_ids, "num_requests_expected": arrived, "per_request": per_request,
        "run_failed": run_failed, "missing": sorted(missing), "missing_reasons": dict(sorted(missing.items())),
        "reported": reported, "units": REAL_UNITS,
    }


# --- import: per-request JSONL with two clocks ----------------------------------------------------

_JSONL_REQUIRED = ("request_id", "input_toks", "output_toks", "queued_ts")


def import_request_jsonl(text: str, source: str, label: str = "real", workload=None, policy: str | None = None,
                         meta: dict | None = None, meta_source: str = "meta.json",
                         bench: BenchSettings | None = None) -> tuple[dict, list[dict], dict]:
    """Normalise per-request JSONL (formats.md, LLMServingSim's vLLM harness) to ``(manifest, records, row)``.

    Every time comes from the monotonic ``*_ts`` clock relative to the earliest ``queued_ts``;
    ``arrival_time`` (epoch) is never subtracted from it. ``meta`` is the decoded ``meta.json``
    (read from ``meta_source``). A line whose times are out of order (e.g. a first token before
    ``queued_ts``: a negative TTFT), whose counts are negative or fractional, or whose numbers are
    not finite is refused with :class:`~sched.base.cmdline.InputError` naming the line and field; so is a
    line with a first token but ``output_toks`` 0. A negative ``*_ts`` is accepted: the monotonic
    clock's origin is unspecified, so only the order of one request's times can be impossible.
    ``bench``: as for :func:`import_vllm_bench`.
    """
    meta = _check_meta(meta, meta_source)
    # NaN, a key written twice, 2358.0 tokens: named with the line, the request and the field
    lines = [_request_line(strict_json(line, f"{source}: line {number}", "request_id"), source, number)
             for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise InputError(f"{source}: no request lines")
    ids = [str(raw["request_id"]) for raw in lines]
    names, priorities, request_ids, sha = _names_and_priorities(len(lines), workload, source, ids)
    origin = min(raw["queued_ts"] for raw in lines)
    missing = {"p95_itl": "no per-token times in the file (only first and last token)"}
    records = []
    for raw, name, priority in zip(lines, names, priorities):
        times = {key: None if raw.get(key) is None else _ms(raw[key] - origin)
                 for key in ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")}
        status = "ok" if times["first_token_ts"] is not None and times["last_token_ts"] is not None else "unfinished"
        emitted = raw["output_toks"] if status == "ok" else None
        record = _record(label, name, priority, times["queued_ts"], times["scheduled_ts"], times["first_token_ts"],
                         times["last_token_ts"], status, raw["input_toks"], emitted, None)
        if name != str(raw["request_id"]):
            record["source_id"] = str(raw["request_id"])
        records.append(record)
    if any(r["admitted_at"] is None for r in records if r["status"] == "ok"):
        missing["queue_wait"] = "some requests lack scheduled_ts"
    arrived = max(len(lines), (meta or {}).get("num_requests") or 0)
    done = [r["done_at"] for r in records if r["done_at"] is not None]
    makespan = round(max(done) - min(r["arrival"] for r in records), 3) if done else None
    row, missing = _summary(records, label, arrived, makespan, missing)
    engine, scheduler, measurement = _from_meta(meta, missing)
    scheduler = _settle_policy(scheduler, policy, source)
    if scheduler.get("policy") is None:
        missing["scheduler.policy"] = "no meta.json policy: pass --policy"
    manifest = _manifest("request-jsonl", source, label, sha, engine, measurement, scheduler, request_ids,
                         arrived, True, False, missing, {})
    row["missing"] = sorted(set(row["missing"]) | set(missing))
    keys, manifest["vllm_bench_notes"] = bench_of_request_lines(lines, bench or BenchSettings())
    row.update({key: value for key, value in keys.items() if key not in row})   # the lab's 'failed' stays
    return manifest, records, row


def _request_line(raw, source: str, number: int) -> dict:
    """One checked line of request JSONL: counts whole and non-negative, times finite and in order
    (queued <= scheduled <= first token <= last token on the monotonic clock), with counts as ints."""
    need(raw, dict, f"{source}: line {number}", "a JSON object")
    for key in _JSONL_REQUIRED:
        if key not in raw:
            raise InputError(f"{source}: line {number}: field {key!r}: missing")
    need(raw["request_id"], (str, int), f"{source}: line {number}: field 'request_id'", "a string or an integer")
    where = f"{source}: line {number} ({raw['request_id']})"
    line = dict(raw)
    for key in ("input_toks", "output_toks"):
        line[key] = _count(raw[key], f"{where}: field {key!r}")
    _seconds(raw["queued_ts"], f"{where}: field 'queued_ts'")
    for key in ("scheduled_ts", "first_token_ts", "last_token_ts"):
        _seconds(raw.get(key), f"{where}: field {key!r}", allow_none=True)
    queued, scheduled, first, last = (raw.get(k) for k in ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts"))
    _not_before(scheduled, queued, where, "scheduled_ts", "queued_ts", "a negative queue wait")
    _not_before(first, queued, where, "first_token_ts", "queued_ts", "a negative TTFT")
    _not_before(first, scheduled, where, "first_token_ts", "scheduled_ts", "a first token before admission")
    _not_before(last, first, where, "last_token_ts", "first_token_ts", "a request ending before its first token")
    if line["output_toks"] == 0 and first is not None:
        raise InputError(f"{where}: field 'output_toks': 0, but the request has a first token (first_token_ts): "
                         "a request that emitted a token has output_toks >= 1")
    return line


_META_OBJECTS = ("resolved_config", "engine_kwargs", "kv_cache", "hardware")


def _check_meta(meta, source: str) -> dict | None:
    """``meta.json`` checked at the boundary: an object whose sections are objects (or absent) and
    whose ``num_requests`` is a whole count. Returns it with ``num_requests`` as an int."""
    if meta is None:
        return None
    need(meta, dict, source, "a JSON object")
    for key in _META_OBJECTS:
        need(meta.get(key), dict, f"{source}: field {key!r}", "an object", nullable=True)
    for key in ("model_config", "scheduler_config"):
        need((meta.get("resolved_config") or {}).get(key), dict, f"{source}: field 'resolved_config.{key}'",
             "an object", nullable=True)
    return dict(meta, num_requests=count_or_none(meta.get("num_requests"), f"{source}: field 'num_requests'"))


def _from_meta(meta: dict | None, missing: dict) -> tuple[dict, dict, dict]:
    """Engine identity, scheduler settings and measurement settings from LLMServingSim's meta.json."""
    if not meta:
        missing["engine"] = "no meta.json beside the file (pass --meta)"
        return ({"backend": None, "model": None, "revision": None, "engine_version": None},
                {"policy": None}, {"dataset_hash": None})
    resolved = meta.get("resolved_config") or {}
    model_config = resolved.get("model_config") or {}
    scheduler_config = resolved.get("scheduler_config") or {}
    kwargs, kv, hardware = (meta.get(key) or {} for key in ("engine_kwargs", "kv_cache", "hardware"))
    engine = {"backend": "vllm" if "vllm_version" in meta else None, "model": meta.get("model"),
              "revision": model_config.get("revision"), "engine_version": meta.get("vllm_version"),
              "device": hardware.get("device_name")}
    for key, value in engine.items():
        if value is None:
            missing[f"engine.{key}"] = "not in meta.json"
    scheduler = {"policy": scheduler_config.get("policy"),
                 "max_num_seqs": kwargs.get("max_num_seqs", scheduler_config.get("max_num_seqs")),
                 "max_num_batched_tokens": kwargs.get("max_num_batched_tokens",
                                                      scheduler_config.get("max_num_batched_tokens")),
                 "enable_prefix_caching": kv.get("enable_prefix_caching"),
                 "enable_chunked_prefill": scheduler_config.get("enable_chunked_prefill")}
    measurement = {"dataset_hash": meta.get("dataset_hash"), "num_requests": meta.get("num_requests")}
    return engine, scheduler, measurement


def _tidy(row: dict) -> dict:
    """The lab's columns' floats to 6 decimal places (sub-nanosecond in ms), so the files read cleanly;
    vLLM bench serve's keys keep full doubles, as vLLM writes them."""
    return {k: round(v, 6) if isinstance(v, float) and k in REAL_SUMMARY_UNITS else v for k, v in row.items()}


def render_import(manifest: dict, records: list[dict], row: dict, bench: BenchSettings | None = None) -> dict[str, str]:
    """The files of a normalised real run directory by name (``compare`` reads them); ``bench``: the
    settings the row's vLLM bench keys were computed with (default vLLM's)."""
    summary = {"units": REAL_UNITS, "time_unit": "ms",
               "field_units": {**REAL_SUMMARY_UNITS, **bench_units((bench or BenchSettings()).percentiles)},
               "percentiles": "nearest rank",
               "vllm_bench": dict(bench_header(bench or BenchSettings()), notes=manifest.get("vllm_bench_notes", [])),
               "cases": [_tidy(row)]}
    return {
        "manifest.json": _json_text(manifest, indent=2),
        "summary.json": _json_text(summary, indent=2),
        "requests.jsonl": "".join(_json_text(r) for r in records),
    }


def _json_text(value, indent: int | None = None) -> str:
    """One JSON document and a newline; never NaN or Infinity (strict JSON), never lone surrogates
    (ASCII escapes keep any text writable)."""
    return json.dumps(value, indent=indent, allow_nan=False) + "\n"


# --- subcommands ---------------------------------------------------------------------------------

def _workload_arg(path: str | None):
    if path is None:
        return None
    try:
        return load_workload(path), os.path.basename(path)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _directory_arg(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a directory, got an empty path")
    return text


def read_result_text(path: str, what: str) -> str:
    """The text of a result or meta file, as ``import-results`` and ``calibrate`` both read it: a
    regular UTF-8 file, a leading BOM dropped. Raises :class:`InputError` naming ``path`` and ``what``."""
    try:
        with open_regular(path, encoding="utf-8-sig") as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read {what} ({read_failure(exc)})") from None


def _import(argv: list[str]) -> int:
    parser = LineParser(prog="infer_sched_lab.py import-results",
                        description="Import a real engine's per-request results into a normalised run "
                                    "directory that compare accepts (compare.md §4). Times in ms.")
    parser.add_argument("file", metavar="FILE", help="the result file")
    parser.add_argument("--artifacts", metavar="DIR", required=True, type=_directory_arg,
                        help="directory to write (new or empty; with --force, an earlier import)")
    parser.add_argument("--format", choices=("auto", "vllm-bench", "request-jsonl"), default="auto",
                        help="input format (default auto: detected from the first record)")
    parser.add_argument("--workload", metavar="FILE",
                        help="the exported workload.json: names, priorities and workload sha256 by position")
    parser.add_argument("--policy", help="the server's scheduling policy when the file does not say (e.g. fcfs)")
    parser.add_argument("--meta", metavar="FILE", help="request-jsonl: the engine's meta.json (default: beside FILE)")
    parser.add_argument("--run-index", type=integer, metavar="N", help="vllm-bench with --append-result: which run")
    parser.add_argument("--label", default="real", help="case name of the imported run (default real)")
    parser.add_argument("--force", action="store_true", help="replace the import's own files in DIR")
    add_bench_flags(parser)
    args = parser.parse_args(argv)
    bench = bench_settings_from_args(args)
    text = read_result_text(args.file, "result file")
    _not_a_chapter_file(text, args.file)
    fmt = args.format if args.format != "auto" else _detect(text, args.file)
    workload = _workload_arg(args.workload)
    if fmt == "vllm-bench":
        result = import_vllm_bench(text, args.file, args.label, workload, args.policy, args.run_index, bench)
    else:
        meta_path = args.meta or os.path.join(os.path.dirname(args.file), "meta.json")
        meta = None
        if args.meta or os.path.exists(meta_path):
            meta = strict_json(read_result_text(meta_path, "meta.json"), meta_path, nan_as_null=True)
        result = import_request_jsonl(text, args.file, args.label, workload, args.policy, meta, meta_path, bench)
    manifest, records, row = result
    write_artifacts(render_import(*result, bench), args.artifacts, force=args.force)
    print(f"imported {len(records)} requests ({row['succeeded']} ok of {row['arrived']} arrived) from "
          f"{os.path.basename(args.file)} as {fmt} into {args.artifacts}/")
    print(f"P95 TTFT {_show(row['p95_ttft'])} ms, P95 TPOT {_show(row['p95_tpot'])} ms, throughput "
          f"{_show(row['throughput'])} output tokens/s (percentiles by nearest rank)")
    if bench is not None and bench.goodput is not None and row.get("request_goodput") is not None:
        print(f"request_goodput {row['request_goodput']:.3f} req/s, slo_attainment {row['slo_attainment']:.3f} "
              f"(vLLM bench serve's definition, from the file's raw seconds)")
    if manifest["missing"]:
        print(f"missing: {', '.join(manifest['missing'])}")
    return EXIT_OK


def _show(value) -> str:
    return "NA" if value is None else f"{value:.1f}"


def _json_or_none(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _not_a_chapter_file(text: str, source: str) -> None:
    """A group's result file of the serving-bench chapter (``scheduler_identity``, or the runner's
    ``serving-scheduler-run/v1`` schema) is not a per-request engine result: send the learner to
    ``serving-bench decide`` instead of importing nothing (serving-bench.md §4)."""
    head = _json_or_none(text)
    if isinstance(head, dict) and ("scheduler_identity" in head or head.get("schema_version") == "serving-scheduler-run/v1"):
        raise InputError(f"{source}: a serving-bench chapter group's result file (scheduler_identity), not a "
                         "per-request engine result; decide the FCFS and priority groups with: infer_sched_lab.py "
                         "serving-bench decide FCFS.json PRIORITY.json --out EVIDENCE.json")


def _detect(text: str, source: str) -> str:
    first = next((line for line in text.splitlines() if line.strip()), "")
    head = _json_or_none(first)
    if head is None:
        head = _json_or_none(text)
    if head is None:
        raise InputError(f"{source}: neither JSON nor JSON lines; cannot detect the format")
    if isinstance(head, dict) and "queued_ts" in head:
        return "request-jsonl"
    if isinstance(head, dict) and ("ttfts" in head or "backend" in head or "num_prompts" in head):
        return "vllm-bench"
    raise InputError(f"{source}: unknown result format; pass --format vllm-bench or request-jsonl")


def import_command(argv: list[str]) -> int:
    """The ``import-results`` subcommand; exit 0, or 2 for bad input or usage."""
    return run_command("infer_sched_lab.py import-results", _import, argv)
