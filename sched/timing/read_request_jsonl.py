"""Reader of per-request JSONL with two clocks (formats.md, compare.md §4): ``request-jsonl``.

LLMServingSim's vLLM harness lines (``request_id, input_toks, output_toks, queued_ts, ...``) and an
optional ``meta.json`` become ``(manifest, records, summary row)`` in ms on the monotonic ``*_ts``
clock, never against the epoch ``arrival_time`` (:func:`import_request_jsonl`).
"""

from __future__ import annotations

from ..base.cmdline import InputError, count_or_none, need
from ..base.strict_json import strict_json
from .bench_rows import BenchSettings
from .real_bench import bench_of_request_lines
from .real_record import (file_count, file_seconds, ms_of_seconds, names_and_priorities, not_before, real_manifest,
                          request_record, settle_policy, summary_row)

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
    names, priorities, request_ids, sha = names_and_priorities(len(lines), workload, source, ids)
    origin = min(raw["queued_ts"] for raw in lines)
    missing = {"p95_itl": "no per-token times in the file (only first and last token)"}
    records = []
    for raw, name, priority in zip(lines, names, priorities):
        times = {key: None if raw.get(key) is None else ms_of_seconds(raw[key] - origin)
                 for key in ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")}
        status = "ok" if times["first_token_ts"] is not None and times["last_token_ts"] is not None else "unfinished"
        emitted = raw["output_toks"] if status == "ok" else None
        record = request_record(label, name, priority, times["queued_ts"], times["scheduled_ts"], times["first_token_ts"],
                         times["last_token_ts"], status, raw["input_toks"], emitted, None)
        if name != str(raw["request_id"]):
            record["source_id"] = str(raw["request_id"])
        records.append(record)
    if any(r["admitted_at"] is None for r in records if r["status"] == "ok"):
        missing["queue_wait"] = "some requests lack scheduled_ts"
    arrived = max(len(lines), (meta or {}).get("num_requests") or 0)
    done = [r["done_at"] for r in records if r["done_at"] is not None]
    makespan = round(max(done) - min(r["arrival"] for r in records), 3) if done else None
    row, missing = summary_row(records, label, arrived, makespan, missing)
    engine, scheduler, measurement = _from_meta(meta, missing)
    scheduler = settle_policy(scheduler, policy, source)
    if scheduler.get("policy") is None:
        missing["scheduler.policy"] = "no meta.json policy: pass --policy"
    manifest = real_manifest("request-jsonl", source, label, sha, engine, measurement, scheduler, request_ids,
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
        line[key] = file_count(raw[key], f"{where}: field {key!r}")
    file_seconds(raw["queued_ts"], f"{where}: field 'queued_ts'")
    for key in ("scheduled_ts", "first_token_ts", "last_token_ts"):
        file_seconds(raw.get(key), f"{where}: field {key!r}", allow_none=True)
    queued, scheduled, first, last = (raw.get(k) for k in ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts"))
    not_before(scheduled, queued, where, "scheduled_ts", "queued_ts", "a negative queue wait")
    not_before(first, queued, where, "first_token_ts", "queued_ts", "a negative TTFT")
    not_before(first, scheduled, where, "first_token_ts", "scheduled_ts", "a first token before admission")
    not_before(last, first, where, "last_token_ts", "first_token_ts", "a request ending before its first token")
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
