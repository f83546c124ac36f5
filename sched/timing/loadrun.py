# One piece (~410 lines): the three real-run formats become one RealRun here, with the settings each format states and those derived (vllm-engine.md §6); the format readers themselves are elsewhere.
"""Reading a real run for ``calibrate`` (vllm-engine.md §6; issue 18, item 1): three formats, one shape.

``load_real_run(RUN, meta, flags)`` accepts

- a ``request-jsonl`` file (LLMServingSim's ``requests.jsonl``) with its ``meta.json``;
- a ``vllm bench serve --save-result --save-detailed`` JSON file whose ``--metadata`` names the
  engine settings (formats.md);
- a vLLM OpenTelemetry run directory (``traces.json``, ``vllm.log``, optional ``profile.yaml``;
  :mod:`sched.timing.otel_run`).

Engine settings given as flags with vLLM's names (``--num-gpu-blocks``, ``--max-num-seqs``,
``--max-num-batched-tokens``, ``--block-size``, ``--enable-prefix-caching``) win over the files;
each one used is said in the run's notes (and, through the step model's ``settings``, applies to
the run that follows). A KV size no file states is taken from the log's KV tokens, or derived as
vLLM sizes it (:mod:`sched.timing.kvsize`) when ``--kv-bytes-per-token`` (and, without the log's
available KV memory, ``--run-gpu``) is given; either way it is said. Every request must have finished; a request is named by the run's own id,
verbatim. Problems are one :class:`~sched.base.cmdline.InputError` naming the file and field.
"""

from __future__ import annotations

import hashlib
import os
import statistics
from dataclasses import dataclass, field

from . import otel_run, read_vllm_bench, realrun
from ..base.cmdline import InputError
from ..base.strict_json import strict_json
from ..core.config import MAX_KNOB
from .kvsize import derive_from_log, derive_from_meta
from .run_settings import blocks_at_flag_size, default_async_scheduling, kv_source, rescaled_blocks, with_mode
from .runmeta import (FLAG_NAMES, FLAT_PLACES, SETTINGS_FROM_META, value_at, check_fits_cache, check_meta_against_run,
                      flag_note, identity_from_meta, identity_text, read_timeseries, settings_from)
from ..workload.specs import RequestSpec, workload_to_json
from ..workload.validation import WorkloadError, parse_workload
from ..workload.rules import name_problem

__all__ = ["RealRun", "load_real_run", "run_workload", "training_split", "median_tpot"]


@dataclass(frozen=True)
class RealRun:
    """A real run ready to replay.

    ``records``: the importer's normalised requests (ms from the first arrival), in arrival order;
    ``settings``: :data:`sched.timing.stepmodel.SETTINGS` keys; ``fitted_on``: identity (model, device,
    vLLM version, async scheduling, source file and sha256); ``timeseries``: ``(t in s, running,
    waiting)`` rows or ``None``; ``notes``: assumptions taken (defaults used, flags that won), one
    sentence each; ``prefix_tokens``: a shared prefix every prompt starts with (0: none known).
    """

    records: list
    settings: dict
    fitted_on: dict
    timeseries: list | None = None
    notes: list = field(default_factory=list)
    prefix_tokens: int = 0


def _read(path: str, what: str) -> str:
    return realrun.read_result_text(path, what)  # the reader of import-results (a BOM is accepted)


def load_real_run(path: str, meta_path: str | None = None, flags: dict | None = None, sizing: dict | None = None
                  ) -> RealRun:
    """Read a real run (module docstring); raises :class:`~sched.base.cmdline.InputError`.

    ``meta_path`` defaults to ``meta.json`` beside ``path`` (request-jsonl); ``timeseries.csv``
    beside it is read when present; ``flags``: setting -> value given on the command line;
    ``sizing``: ``{"gpu": GPU or None, "kv_bytes_per_token": int or None}`` to derive an unknown
    KV size as vLLM does (:mod:`sched.timing.kvsize`).
    """
    flags = given_flags = flags or {}
    sizing = sizing or {}
    if os.path.isdir(path):
        if not otel_run.is_otel_run(path):
            raise InputError(f"{path}: a directory without traces.json: not a vLLM OpenTelemetry run directory")
        _no_meta(meta_path, path, "a vLLM OpenTelemetry run directory, whose settings come from its vllm.log")
        return _load_otel(path, flags, sizing)
    text = _read(path, "result file")
    fmt = realrun.detect_format(text, path, advice="calibrate reads LLMServingSim's requests.jsonl (queued_ts), "
                                                   "vllm bench serve --save-detailed JSON (ttfts) or a vLLM "
                                                   "OpenTelemetry run directory (traces.json)")
    if fmt != "request-jsonl":
        _no_meta(meta_path, path, "a vllm bench serve result, whose settings come from its --metadata")
    directory = os.path.dirname(path)  # messages name meta.json as the user gave the run
    if meta_path is not None and not os.path.lexists(meta_path):
        raise InputError(f"{meta_path}: no such meta file (--meta)")
    meta_path = meta_path or os.path.join(directory, "meta.json")
    if fmt == "request-jsonl":
        if not os.path.exists(meta_path):
            raise InputError(f"{path}: the engine settings are unknown: no meta.json beside the file (pass --meta)")
        meta = strict_json(_read(meta_path, "meta.json"), meta_path, nan_as_null=True)   # a key twice: refused
        _, records, _ = realrun.import_request_jsonl(text, path, meta=meta, meta_source=meta_path)
        derived = None
        no_blocks = isinstance(meta, dict) and "num_gpu_blocks" not in flags and \
            not any(value_at(meta, place) is not None for place in SETTINGS_FROM_META["num_gpu_blocks"])
        tokens, size = (value_at(meta, ("kv_cache", "num_kv_tokens")), flags.get("block_size") or
                        value_at(meta, ("kv_cache", "block_size"))) if no_blocks else (None, None)
        if no_blocks and isinstance(tokens, int) and isinstance(size, int) and size > 0 and tokens >= 2 * size:
            derived = (tokens // size, f"num_gpu_blocks {tokens // size} from kv_cache.num_kv_tokens {tokens} / "
                                       f"block_size {size} ({os.path.basename(meta_path)} names no block count)")
            flags = dict(flags, num_gpu_blocks=derived[0])
        elif no_blocks and sizing.get("kv_bytes_per_token"):
            derived = derive_from_meta(meta, meta_path, flags, sizing)
            flags = dict(flags, num_gpu_blocks=derived[0])
        if derived is None:
            derived = rescaled_blocks(meta, SETTINGS_FROM_META, flags, meta_path,
                                       value_at(meta, ("kv_cache", "num_kv_tokens")))
            flags = flags if derived is None else dict(flags, num_gpu_blocks=derived[0])
        settings, notes = settings_from(meta, meta_path, flags=flags)
        if derived is not None:   # said as derived, not as a flag
            notes = [note for note in notes if not note.startswith("num_gpu_blocks ")] + [derived[1]]
        check_meta_against_run(meta, meta_path, records, path)
        identity = identity_from_meta(meta, meta_path)
    else:
        manifest, records, _ = realrun.import_vllm_bench(text, path)
        run = read_vllm_bench.vllm_runs(text, path)[0]
        absent = [key for key in read_vllm_bench.DETAILED if key not in run]
        if absent:
            raise InputError(f"{path}: run 0: field {absent[0]!r}: missing: calibrate needs per-request times "
                             "(vllm bench serve --save-result --save-detailed writes them)")
        derived = None
        if "num_gpu_blocks" not in flags and sizing.get("kv_bytes_per_token") and \
                run.get("num_gpu_blocks") is None:
            derived = derive_from_meta({"model": run.get("model_id"), "kv_cache": {
                "gpu_memory_utilization": run.get("gpu_memory_utilization"),
                "block_size": _number(run.get("block_size"))}}, path, flags, sizing)
            flags = dict(flags, num_gpu_blocks=derived[0])
        if derived is None:
            derived = rescaled_blocks(run, FLAT_PLACES, flags, path)
            flags = flags if derived is None else dict(flags, num_gpu_blocks=derived[0])
        settings, notes = settings_from(run, path, places=FLAT_PLACES, flags=flags)
        if derived is not None:   # said as derived, not as a flag
            notes = [note for note in notes if not note.startswith("num_gpu_blocks ")] + [derived[1]]
        identity = identity_text({"model": run.get("model_id"), "device": run.get("device") or run.get("gpu"),
                                  "vllm_version": run.get("vllm_version"), "async_scheduling": run.get("async_scheduling")},
                                 path, {"model": "model_id", "device": "device" if run.get("device") else "gpu",
                                        "vllm_version": "vllm_version"})
    memory = derived is not None and "derived as vLLM does" in derived[1]
    records = _checked(records, settings, path, kv_source=kv_source(
        given_flags, os.path.basename(meta_path if fmt == "request-jsonl" else path), memory))
    said_file = meta_path if fmt == "request-jsonl" else path
    settings, notes = with_mode(settings, notes, identity.get("async_scheduling"), flags,
                                 os.path.basename(said_file), said_file, identity.get("vllm_version"))
    fitted_on = dict(identity, format=fmt, source=os.path.basename(path),
                     source_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), num_requests=len(records))
    return _checked_as_workload(
        RealRun(records, settings, fitted_on, read_timeseries(os.path.join(directory, "timeseries.csv")), notes), path)


def _checked(records: list, settings: dict, path: str, id_field: str = "request_id",
             kv_source: str = "the meta file") -> list:
    """``records`` in arrival order after the checks every format shares (names, finished, fits);
    ``kv_source`` names what set the KV size when a request cannot fit it."""
    seen: dict = {}
    for index, record in enumerate(records):
        problem = name_problem(record["name"])
        if problem:  # the id becomes the workload's request name: refuse what the run would refuse
            raise InputError(f"{path}: request {index}: field {id_field!r}: {problem} (it becomes the request's "
                             "name in workload.json)")
        where = f"{path}: request {index} ({record['name']})"
        if record["name"] in seen:
            raise InputError(f"{where}: field {id_field!r}: {record['name']!r} already names request "
                             f"{seen[record['name']]}; each request needs its own id")
        seen[record["name"]] = index
        if record["status"] != "ok":
            raise InputError(f"{where}: did not finish (status {record['status']}): a calibration needs every "
                             "request's first and last token")
        for key, field_name in (("arrival", "arrival"), ("first_token_at", "first token"), ("done_at", "end")):
            if record[key] is None:
                raise InputError(f"{where}: field {key!r}: missing: a calibration needs every request's {field_name}")
        if not record["output_tokens_emitted"]:
            raise InputError(f"{where}: field 'output_toks': {record['output_tokens_emitted']!r}: a finished request "
                             "emits at least one output token (a workload request needs output_tokens >= 1)")
        check_fits_cache(record, settings, where, kv_source)
    order = sorted(range(len(records)), key=lambda i: (records[i]["arrival"], i))
    return [records[i] for i in order]


# --- a vLLM OpenTelemetry run directory ----------------------------------------------------------

#: Settings whose vLLM default is safe to assume when the log does not name them.
_LOG_DEFAULTS = {"long_prefill_token_threshold": 0, "policy": "fcfs"}


def _load_otel(directory: str, flags: dict, sizing: dict) -> RealRun:
    traces = os.path.join(directory, "traces.json")
    log_path = os.path.join(directory, "vllm.log")
    if not os.path.exists(log_path):
        raise InputError(f"{directory}: no vllm.log beside traces.json: the engine settings are unknown")
    records = otel_run.read_spans(traces)
    # with --num-gpu-blocks the log's KV size is not needed: a line stating it unreadably is then passed over
    log = otel_run.read_vllm_log(log_path, tolerate=otel_run.KV_SIZE_KEYS if "num_gpu_blocks" in flags else ())
    given, config, notes = log["flags"], log["config"], []
    where = f"{os.path.basename(log_path)} line {log['line']}"
    in_log = {"max_num_seqs": given.get("max_num_seqs"), "max_num_batched_tokens": given.get("max_num_batched_tokens"),
              "num_gpu_blocks": given.get("num_gpu_blocks_override") or log["num_gpu_blocks"],
              "block_size": given.get("block_size"), "enable_prefix_caching": given.get("enable_prefix_caching"),
              "long_prefill_token_threshold": given.get("long_prefill_token_threshold"),
              "policy": given.get("scheduling_policy")}
    if in_log["enable_prefix_caching"] is None and config.get("enable_prefix_caching") in ("True", "False"):
        in_log["enable_prefix_caching"] = config["enable_prefix_caching"] == "True"
    if in_log["block_size"] is None and log["kv_tokens"] and log["num_gpu_blocks"]:
        if log["kv_tokens"] % log["num_gpu_blocks"] == 0:
            in_log["block_size"] = log["kv_tokens"] // log["num_gpu_blocks"]
        else:
            notes.append(f"vllm.log's KV cache size of {log['kv_tokens']} tokens is not a whole number of its "
                         f"{log['num_gpu_blocks']} blocks, so it does not say the block size; its num_gpu_blocks "
                         "line is used")
    if in_log["num_gpu_blocks"] is not None and "num_gpu_blocks" not in flags and "block_size" in flags:
        in_log["num_gpu_blocks"], note = blocks_at_flag_size(in_log, log, flags["block_size"], given)
        notes += [note] if note else []
    memory = False   # the KV size derived from the GPU's memory
    if in_log["num_gpu_blocks"] is None and "num_gpu_blocks" not in flags:
        block_size = flags.get("block_size") or in_log["block_size"] or 16
        if log["kv_tokens"]:
            in_log["num_gpu_blocks"] = log["kv_tokens"] // block_size
            notes.append(f"num_gpu_blocks {in_log['num_gpu_blocks']} from vllm.log's KV cache size of "
                         f"{log['kv_tokens']} tokens / block_size {block_size}")
        elif sizing.get("kv_bytes_per_token"):
            in_log["num_gpu_blocks"], note = derive_from_log(log, given, config, block_size, sizing, log_path)
            memory = True
            notes.append(note)
    settings = {}
    for key, value in in_log.items():
        if key in flags:
            notes.append(flag_note(key, flags[key], value, "vllm.log"))
            settings[key] = flags[key]
        elif value is not None:
            settings[key] = value
        elif key in _LOG_DEFAULTS:
            settings[key] = _LOG_DEFAULTS[key]
            notes.append(f"{key} not in vllm.log: vLLM's default {_LOG_DEFAULTS[key]!r} assumed")
        elif key == "block_size":
            settings[key] = 16
            notes.append("block_size not in vllm.log: vLLM's CUDA default 16 assumed")
        else:
            flag = FLAG_NAMES.get(key, key)
            why = (" and no 'num_gpu_blocks is' line (KV size unknown)" if key == "num_gpu_blocks"
                   else " (vLLM chose it by default, which depends on the GPU)")
            derive = (" (or --kv-bytes-per-token with --run-gpu to derive it from the GPU memory as vLLM does)"
                      if key == "num_gpu_blocks" else "")
            raise InputError(f"{log_path}: field {key!r}: not in the last server start ({where}){why}; "
                             f"give it with {flag}{derive}")
    for key in ("num_gpu_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens"):
        low = 2 if key == "num_gpu_blocks" else 1
        if not isinstance(settings[key], int) or isinstance(settings[key], bool) or not low <= settings[key] <= MAX_KNOB:
            source = f"{FLAG_NAMES[key]} {flags[key]!r}" if key in flags else f"{log_path}: field {key!r}"
            bound = f" and at most {MAX_KNOB:.0e}" if isinstance(settings[key], int) and settings[key] > MAX_KNOB else ""
            raise InputError(f"{source}: must be a whole number >= {low}{bound}, got {settings[key]!r}")
    if not isinstance(settings["enable_prefix_caching"], bool):
        raise InputError(f"{log_path}: field 'enable_prefix_caching': must be true or false, "
                         f"got {settings['enable_prefix_caching']!r}")
    if given.get("async_scheduling") is not None:
        async_scheduling = given["async_scheduling"]
        if not isinstance(async_scheduling, bool):
            raise InputError(f"{log_path}: line {log['line']}: field 'async_scheduling': must be True or False, "
                             f"got {str(async_scheduling)[:40]!r}")
    else:   # vLLM's default: off before 0.14, on since
        async_scheduling = default_async_scheduling(log["vllm_version"])
        if "async_scheduling" not in flags:
            notes.append(f"async_scheduling not among the server's non-default args: "
                         f"{'on' if async_scheduling else 'off'} (vLLM {log['vllm_version'] or '?'}'s default)")
    prefix = 0
    profile_path = os.path.join(directory, "profile.yaml")
    if os.path.exists(profile_path):
        data = otel_run.read_profile(profile_path).get("data") or {}
        if not isinstance(data, dict) and "prefix_tokens" in str(data):
            raise InputError(f"{profile_path}: field 'data': {str(data)[:60]!r}: the data shape given inline is not "
                             "read; write it as a section ('data:' with indented 'prefix_tokens: N')")
        declared = data.get("prefix_tokens", 0) if isinstance(data, dict) else 0
        if not isinstance(declared, int) or declared < 0:
            raise InputError(f"{profile_path}: field 'data.prefix_tokens': must be a whole number >= 0, "
                             f"got {declared!r}")
        prefix = declared
        if prefix:
            notes.append(f"profile.yaml declares a shared prefix of {prefix} tokens: every prompt starts with it "
                         f"(prefix_key {otel_run.PROFILE_PREFIX_KEY!r} in the workload)")
    model = config.get("served_model_name") or config.get("model") or given.get("model")
    tp = config.get("tensor_parallel_size")
    identity = {"model": model, "device": None, "vllm_version": log["vllm_version"],
                "async_scheduling": async_scheduling, "tensor_parallel_size": int(tp) if tp and tp.isdigit() else None,
                "weights_gib": log["weights_gib"]}
    records = _checked(records, settings, traces, id_field="gen_ai.request.id",
                       kv_source=kv_source(flags, "vllm.log", memory))
    settings, notes = with_mode(settings, notes, async_scheduling, flags, "vllm.log")
    digest = hashlib.sha256(_read(traces, "traces file").encode("utf-8")).hexdigest()
    fitted_on = dict(identity, format="vllm-otel", source=os.path.basename(os.path.normpath(directory)),
                     source_sha256=digest, num_requests=len(records))
    clipped = sum(1 for record in records if record["prompt_tokens"] - 1 < prefix)
    if clipped:
        notes.append(f"profile.yaml's prefix of {prefix} tokens is clipped to the prompt minus one token for {clipped} "
                     f"of {len(records)} requests whose prompt is not longer than it (a prompt keeps at least one own "
                     f"token); each clipped length L has its own prefix_key '{otel_run.PROFILE_PREFIX_KEY}-first-L' (an "
                     "exact shared prefix has one length), so those requests share no block with the full prefix")
    return _checked_as_workload(RealRun(records, settings, fitted_on, None, notes, prefix), traces)


def _number(value):
    """A ``--metadata`` value as a number (they are strings), or None."""
    try:
        return float(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _checked_as_workload(run: RealRun, path: str) -> RealRun:
    """``run`` if its requests make a ``workload.json`` the lab accepts (the same validator as every
    run: a 0-token prompt, an arrival beyond :data:`sched.workload.validation.MAX_ARRIVAL` when one
    request was queued far earlier than the rest are refused), so calibrate never writes a workload
    its own "predict with" command cannot run. Raises :class:`InputError` naming the request."""
    try:
        parse_workload(workload_to_json(run_workload(run)), f"{path} (as calibrate's workload.json)")
    except WorkloadError as exc:
        raise InputError(str(exc).splitlines()[0]) from None
    return run


def _no_meta(meta_path, path: str, what: str) -> None:
    """``--meta`` names the meta.json of a request-jsonl run; given with another kind of run it would be ignored."""
    if meta_path is not None:
        raise InputError(f"--meta {meta_path}: {path} is {what}; --meta names the meta.json of a request-jsonl run "
                         "(give the settings as flags instead, e.g. --num-gpu-blocks)")


def run_workload(run: RealRun) -> list[RequestSpec]:
    """The run's requests as a workload, in arrival order: ``name`` = the run's request id,
    ``arrival`` in whole ms of the run's own clock from its first request (``tick_ms`` 1), prompt
    and output lengths as measured; a declared shared prefix (``run.prefix_tokens``) becomes
    ``prefix_key`` :data:`sched.timing.otel_run.PROFILE_PREFIX_KEY` over the first ``prefix``
    tokens. A prefix cannot be longer than the prompt minus one token: a shorter prompt's prefix is
    clipped to ``prompt - 1`` tokens, under the key ``PROFILE_PREFIX_KEY-first-L`` (L its length;
    the lab's exact prefix has one length per key), none when L is 0."""
    specs = []
    for record in run.records:
        prompt = record["prompt_tokens"]
        prefix = max(0, min(run.prefix_tokens, prompt - 1))
        key = None if not prefix else otel_run.PROFILE_PREFIX_KEY if prefix == run.prefix_tokens else \
            f"{otel_run.PROFILE_PREFIX_KEY}-first-{prefix}"
        specs.append(RequestSpec(name=record["name"], arrival=round(record["arrival"]),
                                 prefix_key=key, prefix_tokens=prefix,
                                 suffix_tokens=prompt - prefix, output_tokens=record["output_tokens_emitted"],
                                 tick_ms=1.0))
    return specs


def training_split(run: RealRun, train_first: int | None, source: str) -> tuple[list, list]:
    """Names of the first ``train_first`` requests by arrival and of the others (``None``: all of
    them, nothing held out); N must be in [1, requests]."""
    count = len(run.records)
    names = [record["name"] for record in run.records]
    if train_first is None:
        return names, []
    if not 1 <= train_first <= count:
        raise InputError(f"{source}: --train-first {train_first}: must be between 1 and {count} (the run holds "
                         f"{count} requests; {count} or 'all' fits on all of them and holds nothing out)")
    return names[:train_first], names[train_first:]


def median_tpot(runs, names_per_run, sources=None) -> float:
    """Median measured TPOT (ms) of the named requests of ``runs``: the constant step of the baseline.
    ``sources`` (the runs' paths) name the files when no training request has a TPOT (InputError)."""
    values = []
    for run, names in zip(runs, names_per_run):
        wanted = set(names)
        values += [r["tpot"] for r in run.records if r["name"] in wanted and r["tpot"] is not None]
    if not values:
        where = f"{', '.join(sources)}: " if sources else ""
        raise InputError(f"{where}every training request ({names_per_run[0][0]} .. {names_per_run[0][-1]}"
                         f"{' and the other runs' if len(runs) > 1 else ''}) emitted one output token, so none has "
                         "a TPOT: the step time is unknown; train on requests with two or more output tokens")
    return statistics.median(values)
