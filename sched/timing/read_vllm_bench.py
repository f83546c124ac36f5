"""Reader of a vLLM serving-benchmark result (formats.md, compare.md §4): ``vllm-bench``.

``vllm bench serve --save-result --save-detailed`` JSON (one object, or one per line with
``--append-result``) becomes ``(manifest, records, summary row)`` in ms (see
:mod:`sched.timing.realrun` for the rules: TTFT from ``ttfts``, token times from ``itls``, errors).
Without the per-request lists only the file's aggregates are used (:func:`import_vllm_bench`).
"""

from __future__ import annotations

import json

from ..base.cmdline import NON_FINITE_AS_NONE, InputError, count_or_none, need, number_or_none
from ..base.strict_json import strict_json
from .bench_rows import BenchSettings
from .real_bench import bench_of_vllm_result
from .real_record import (file_count, file_seconds, ms_of_seconds, names_and_priorities, real_manifest, request_record,
                          settle_policy, summary_row)

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



#: The per-request lists of ``--save-detailed``; all five or the file has only aggregates.
DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "errors")
_SCHEDULER_METADATA = {"scheduling_policy": "policy", "policy": "policy", "max_num_seqs": "max_num_seqs",
                       "max_num_batched_tokens": "max_num_batched_tokens",
                       "enable_prefix_caching": "enable_prefix_caching",
                       "enable_chunked_prefill": "enable_chunked_prefill"}


def vllm_runs(text: str, source: str) -> list[dict]:
    """The benchmark runs (JSON objects) of a ``vllm-bench`` file, one or one per line; anything else
    raises :class:`InputError` naming ``source``."""
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
    runs = vllm_runs(text, source)
    if run_index is None and len(runs) > 1:
        raise InputError(f"{source}: holds {len(runs)} runs (--append-result); choose one with --run-index 0..{len(runs) - 1}")
    index = run_index or 0
    if not 0 <= index < len(runs):
        raise InputError(f"{source}: --run-index {index} out of range: the file holds {len(runs)} run(s)")
    run = runs[index]
    where = f"{source}: run {index}"
    missing: dict = {}
    present = [key for key in DETAILED if key in run]
    detailed = len(present) == len(DETAILED)
    records: list[dict] = []
    if detailed:
        n = len(run["input_lens"]) if isinstance(run["input_lens"], list) else -1
        for key in (*DETAILED, "start_times"):
            if key in run and (not isinstance(run[key], list) or len(run[key]) != n):
                raise InputError(f"{where}: field {key!r}: must be a list as long as input_lens ({n})")
        names, priorities, request_ids, sha = names_and_priorities(n, workload, where, [f"r{i}" for i in range(n)])
        starts = run.get("start_times")
        texts = run.get("generated_texts")
        if texts is not None and (not isinstance(texts, list) or len(texts) != n):
            raise InputError(f"{where}: field 'generated_texts': must be a list as long as input_lens ({n})")
        if starts is None:
            missing["arrival"] = "no start_times (older vLLM): arrivals, order scores and makespan unknown"
        origin = min((file_seconds(s, f"{where}: field 'start_times'") for s in starts), default=0) if starts else None
        for i in range(n):
            at = f"{where}: request {i} ({names[i]})"
            error = need(run["errors"][i], str, f"{at}: field 'errors'", "a string (empty when it succeeded)",
                         nullable=True)
            emitted = file_count(run["output_lens"][i], f"{at}: field 'output_lens'")
            # vLLM saves no success flag: a failure with an empty HTTP reason shows only as 0 output
            # tokens (a successful request counts at least 1), bench-metrics.md §2
            status = "error" if error or not emitted else "ok"
            prompt = file_count(run["input_lens"][i], f"{at}: field 'input_lens'")
            arrival = ms_of_seconds(starts[i] - origin) if starts else None
            token_times = None
            if status == "ok":
                gaps = need(run["itls"][i], list, f"{at}: field 'itls'", "a list of gaps in seconds")
                offsets = [file_seconds(run["ttfts"][i], f"{at}: field 'ttfts'", low=0)]
                for gap in gaps:
                    offsets.append(offsets[-1] + file_seconds(gap, f"{at}: field 'itls'", low=0))
                # Without start_times the durations are still known (relative to send at 0), the
                # absolute times are not.
                token_times = [round((arrival or 0.0) + ms_of_seconds(offset), 3) for offset in offsets]
            record = request_record(label, names[i], priorities[i], arrival if starts else 0.0, None,
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
        names, priorities, request_ids, sha = names_and_priorities(
            len(workload[0]) if workload else 0, workload, where, [])
        absent = ", ".join(key for key in DETAILED if key not in run)
        missing["per_request"] = (f"no per-request lists ({absent}; run vllm bench serve with --save-detailed); "
                                  "only the file's aggregates are used")
    ok_done = [r["done_at"] for r in records if r["done_at"] is not None]
    arrivals = [r["arrival"] for r in records if r["arrival"] is not None]
    if ok_done and arrivals:
        makespan = round(max(ok_done) - min(arrivals), 3)
    else:
        duration = file_seconds(run.get("duration"), f"{where}: field 'duration'", low=0, allow_none=True)
        makespan = None if duration is None else ms_of_seconds(duration)
    expected = count_or_none(run.get("num_prompts"), f"{where}: field 'num_prompts'")
    arrived = max(n, expected or 0, len(request_ids or []))
    row, missing = summary_row(records, label, arrived, makespan, missing)
    if not detailed:
        _from_aggregates(row, run, arrived, missing, where)
    metadata = {k: v for k, v in run.items() if k not in DETAILED and not isinstance(v, (list, dict))
                and k not in ("date",)}
    scheduler = {"policy": None}
    for key, name in _SCHEDULER_METADATA.items():
        if key in run:
            scheduler[name] = run[key]
    scheduler = settle_policy(scheduler, policy, where)
    if scheduler["policy"] is None:
        missing["scheduler.policy"] = "not in the file's metadata: pass --policy or --metadata scheduling_policy=..."
    engine = {"backend": run.get("backend"), "model": run.get("model_id"), "tokenizer": run.get("tokenizer_id"),
              "revision": run.get("revision"), "engine_version": run.get("vllm_version")}
    for key, value in engine.items():
        if value is None:
            missing[f"engine.{key}"] = "not in the file (add it with --metadata when running the benchmark)"
    measurement = {k: run.get(k) for k in ("endpoint_type", "request_rate", "burstiness", "max_concurrency")}
    manifest = real_manifest("vllm-bench", source, label, sha, engine, measurement, scheduler, request_ids,
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
