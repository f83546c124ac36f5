"""The engine settings and identity of a real run, read from its meta file (vllm-engine.md §6).

LLMServingSim's ``meta.json`` names each setting in up to two places (``kv_cache`` and the
resolved ``cache_config``; ``engine_kwargs`` and the resolved ``scheduler_config``); every place
present must agree, and the meta file must agree with the run (request count, KV tokens, every
request able to fit the KV cache). A ``vllm bench serve`` result names them in its flat
``--metadata`` pairs (strings). Every problem is one :class:`~sched.base.cmdline.InputError` naming the
file and the field.
"""

from __future__ import annotations

import csv
import io
import json
import os

from ..base.cmdline import MAX_COUNT, InputError, count_or_none, decimal, integer
from ..base.files import read_regular_text
from .stepmodel import SETTINGS

__all__ = ["FLAG_NAMES", "flag_note", "SETTINGS_FROM_META", "FLAT_PLACES", "settings_from", "check_meta_against_run", "check_fits_cache",
           "identity_from_meta", "identity_text", "read_timeseries"]

#: Where each engine setting is read in LLMServingSim's ``meta.json``: every listed place that is
#: present must agree (a contradiction is refused).
SETTINGS_FROM_META = {
    "num_gpu_blocks": (("kv_cache", "num_gpu_blocks"), ("resolved_config", "cache_config", "num_gpu_blocks")),
    "block_size": (("kv_cache", "block_size"), ("resolved_config", "cache_config", "block_size")),
    "enable_prefix_caching": (("kv_cache", "enable_prefix_caching"),
                              ("resolved_config", "cache_config", "enable_prefix_caching")),
    "max_num_batched_tokens": (("engine_kwargs", "max_num_batched_tokens"),
                               ("resolved_config", "scheduler_config", "max_num_batched_tokens")),
    "max_num_seqs": (("engine_kwargs", "max_num_seqs"), ("resolved_config", "scheduler_config", "max_num_seqs")),
    "long_prefill_token_threshold": (("resolved_config", "scheduler_config", "long_prefill_token_threshold"),),
    "policy": (("resolved_config", "scheduler_config", "policy"),),
}
#: vLLM's defaults for the two settings a meta file may leave out (said in the output when used).
_DEFAULTS = {"long_prefill_token_threshold": 0, "policy": "fcfs"}


def value_at(document: dict, keys: tuple):
    """The value at the path ``keys`` in nested JSON objects, or None where the path breaks."""
    for key in keys:
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


#: Where a ``vllm bench serve`` result names the settings: its flat ``--metadata`` keys.
FLAT_PLACES = {key: ((key,),) for key in SETTINGS_FROM_META} | {"policy": (("scheduling_policy",), ("policy",))}


def settings_from(meta, source: str, places=SETTINGS_FROM_META, flags=None) -> tuple[dict, list]:
    """Engine settings from ``meta``, each read at every one of its ``places`` (key paths) present.

    ``flags`` (setting -> value given with vLLM's flag name on the command line) win over the file;
    each one used is said in the returned notes (and whether the file said otherwise)."""
    settings, notes, named = {}, [], {}
    flags = flags or {}
    for key, kind in SETTINGS.items():
        found = [(".".join(place), value_at(meta, place)) for place in places[key]]
        found = [(where, value) for where, value in found if value is not None]
        if key in flags:
            in_file = _unquoted(found[0][1], kind) if found else None
            notes.append(flag_note(key, flags[key], in_file, os.path.basename(source)))
            settings[key] = flags[key]
            named[key] = FLAG_NAMES.get(key, key)
            continue
        if not found:
            if key in _DEFAULTS:
                settings[key] = _DEFAULTS[key]
                notes.append(f"{key} not in {os.path.basename(source)}: vLLM's default {_DEFAULTS[key]!r} assumed")
                continue
            hint = f" (give it with {FLAG_NAMES[key]})" if key in FLAG_NAMES else ""
            if key == "num_gpu_blocks":
                hint = (" (give it with --num-gpu-blocks, or derive it as vLLM sizes it with --kv-bytes-per-token "
                        "and, without the GPU's memory in the file, --run-gpu)")
            raise InputError(f"{source}: field {key!r}: missing: the replay needs the engine's {key}{hint}")
        found = [(where, _unquoted(value, kind)) for where, value in found]
        (where, value), *others = found
        for other_where, other in others:
            if other != value:
                raise InputError(f"{source}: field {other_where!r}: {other!r} contradicts {where!r} = {value!r}")
        if kind is bool:
            if not isinstance(value, bool):
                raise InputError(f"{source}: field {where!r}: must be true or false, got {value!r}")
        elif kind is str:
            if value not in ("fcfs", "priority"):
                raise InputError(f"{source}: field {where!r}: must be fcfs or priority, got {value!r}")
        else:
            value = count_or_none(value, f"{source}: field {where!r}")
        settings[key] = value
        named[key] = where
    for key, low in (("num_gpu_blocks", 2), ("block_size", 1), ("max_num_seqs", 1), ("max_num_batched_tokens", 1)):
        if settings[key] < low:
            raise InputError(f"{source}: field {named.get(key, key)!r}: must be at least {low}, got {settings[key]}")
    return settings, notes


#: vLLM's command-line flag of each setting calibrate accepts.
FLAG_NAMES = {"num_gpu_blocks": "--num-gpu-blocks", "max_num_seqs": "--max-num-seqs",
              "max_num_batched_tokens": "--max-num-batched-tokens", "block_size": "--block-size",
              "enable_prefix_caching": "--enable-prefix-caching"}


def flag_note(key: str, value, in_file, source: str) -> str:
    """The sentence saying a flag set ``key`` (and what the file said, if anything)."""
    flag = FLAG_NAMES.get(key, key)
    shown = (flag if value else "--no-enable-prefix-caching") if key == "enable_prefix_caching" else f"{flag} {value}"
    if in_file is None:
        return f"{key} {value!r} from {shown} ({source} does not say)"
    if in_file != value:
        return f"{key} {value!r} from {shown}, which wins over {source}'s {in_file!r}"
    return f"{key} {value!r} from {shown} (the same as {source})"


def _unquoted(value, kind: type):
    """``--metadata k=v`` pairs of a benchmark result are strings: "2588" -> 2588, "true" -> True."""
    if isinstance(value, str) and kind is bool and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, str) and kind is int and value.strip().isdigit():
        return int(value)
    return value


def check_meta_against_run(meta: dict, meta_path: str, records: list, path: str) -> None:
    """A meta file that contradicts the run (or itself beyond :func:`settings_from`) is refused."""
    expected = meta.get("num_requests")
    if expected is not None and expected != len(records):
        raise InputError(f"{meta_path}: field 'num_requests': says {expected} requests but {path} holds "
                         f"{len(records)}; a calibration replays the whole run (a missing request changes every queue)")
    kv = meta.get("kv_cache") or {}
    tokens, blocks, size = kv.get("num_kv_tokens"), kv.get("num_gpu_blocks"), kv.get("block_size")
    if None not in (tokens, blocks, size) and tokens != blocks * size:
        raise InputError(f"{meta_path}: field 'kv_cache.num_kv_tokens': {tokens} is not num_gpu_blocks x block_size "
                         f"({blocks} x {size})")
    limit = value_at(meta, ("engine_kwargs", "max_model_len"))
    for index, record in enumerate(records):
        total = record["prompt_tokens"] + (record["output_tokens_emitted"] or 0)
        if isinstance(limit, int) and total > limit:
            raise InputError(f"{path}: request {index} ({record['name']}): {total} tokens exceed max_model_len {limit} "
                             f"of {meta_path}")


def check_fits_cache(record: dict, settings: dict, where: str, source: str = "the meta file") -> None:
    """A request that could never fit the run's KV cache means the KV size is not this run's: a lone
    request holds prompt + output − 1 tokens (its last token is sampled, never computed) in at most
    ``num_gpu_blocks − 1`` blocks (block 0 is vLLM's null block). ``source`` names what set the KV
    size (a flag, vllm.log, the meta file); raises :class:`InputError`."""
    size, usable = settings["block_size"], settings["num_gpu_blocks"] - 1
    tokens = record["prompt_tokens"] + (record["output_tokens_emitted"] or 0) - 1
    if -(-tokens // size) > usable:
        raise InputError(f"{where}: {tokens + 1} prompt + output tokens cannot fit {settings['num_gpu_blocks']} KV "
                         f"blocks of {size} tokens: {source} contradicts the run")


def identity_from_meta(meta: dict, source: str = "meta.json") -> dict:
    """The run's model, GPU, vLLM version (each text or ``None``) and async scheduling as ``meta`` says them."""
    return identity_text({"model": meta.get("model"), "device": value_at(meta, ("hardware", "device_name")),
                          "vllm_version": meta.get("vllm_version"),
                          "async_scheduling": value_at(meta, ("resolved_config", "scheduler_config", "async_scheduling"))},
                         source, {"model": "model", "device": "hardware.device_name", "vllm_version": "vllm_version"})


def identity_text(identity: dict, source: str, fields: dict) -> dict:
    """``identity`` with its names checked: each key of ``fields`` (the file's field for it) must be
    text or absent. A number or a list where a model, GPU or vLLM version is named would be
    recorded in ``step-model.json`` and compared as a name: :class:`InputError` naming ``source``."""
    for key, field_name in fields.items():
        value = identity.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InputError(f"{source}: field {field_name!r}: must be a name (text), got {json.dumps(value)[:40]}")
    return identity


def read_timeseries(path: str) -> list | None:
    """``(t in s, running, waiting)`` rows of LLMServingSim's ``timeseries.csv``, or None when there is
    no such file beside the run.

    A file that is there is input like any other: empty, without the ``t``, ``running`` and
    ``waiting`` columns, not CSV (a quote never closed), or with a row whose ``t`` is not a finite
    number of seconds >= 0 or whose counts are not whole numbers >= 0 (``NaN``, ``-3``, ``2.5``)
    is refused with :class:`InputError` naming the file, the line and the column, never reported
    as absent.
    """
    if not os.path.lexists(path):
        return None
    try:
        text = read_regular_text(path, encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    reader = csv.DictReader(io.StringIO(text), strict=True)
    rows, end = [], 0
    try:
        missing = [name for name in ("t", "running", "waiting") if name not in (reader.fieldnames or ())]
        if not text.strip() or missing:
            raise InputError(f"{path}: line 1: " + ("empty" if not text.strip() else f"no column {missing[0]!r}")
                             + "; expected a header with t,running,waiting and one row per sample "
                               "(or no timeseries.csv beside the run)")
        end = 1
        for row in reader:
            start, end = end + 1, reader.line_num
            if None in row or any(value is None or "\n" in value for value in row.values()):
                raise InputError(f"{path}: line {start}: " + ("a quote opened here is never closed"
                                 if any(v and "\n" in v for v in row.values() if isinstance(v, str))
                                 else "not as many cells as the header has columns"))
            rows.append((_cell(row["t"], path, start, "t", float), _cell(row["running"], path, start, "running", int),
                         _cell(row["waiting"], path, start, "waiting", int)))
    except csv.Error as exc:
        raise InputError(f"{path}: line {end + 1}: not CSV ({exc}; a quote opened there is never closed?)") from None
    if not rows:
        raise InputError(f"{path}: no rows after the header; expected one row per sample")
    return rows


def _cell(text: str, path: str, line: int, column: str, kind: type):
    """One number of ``timeseries.csv``: seconds (finite, >= 0) or a count (ASCII digits, >= 0)."""
    where = f"{path}: line {line}: column {column!r}"
    try:
        value = (decimal if kind is float else integer)(text)
    except ValueError:
        value = None
    if value is None or value < 0 or (kind is int and value > MAX_COUNT) or (kind is float and value > 10**9):
        what = "a number of seconds >= 0" if kind is float else "a whole count >= 0"
        raise InputError(f"{where}: must be {what}, got {text[:30]!r}")
    return value
