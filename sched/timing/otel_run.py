"""Reading a vLLM OpenTelemetry run directory (BLIS / llm-d style) for ``calibrate`` (issue 18, item 1).

A run directory holds:

- ``traces.json``: OTLP JSON, one ``resourceSpans`` batch per line (or one document), vLLM's
  ``llm_request`` span per request. Per span: ``startTimeUnixNano`` (the engine's arrival),
  attributes ``gen_ai.request.id`` (the request's name, verbatim, suffix included),
  ``gen_ai.usage.prompt_tokens``, ``gen_ai.usage.completion_tokens``,
  ``gen_ai.latency.time_to_first_token`` and ``gen_ai.latency.e2e`` (seconds, from arrival), and
  ``gen_ai.latency.time_in_queue`` (seconds, optional). Spans of other names are ignored.
- ``vllm.log``: the server's log. Only its **last** server start counts (a log may hold several):
  the ``non-default args: {...}`` line (the flags given, vLLM's names), the ``Initializing a V1 LLM
  engine (vX) with config: ...`` line (model, ``enable_prefix_caching``, ``tensor_parallel_size``),
  ``num_gpu_blocks is: N``, ``GPU KV cache size: N tokens`` (with the blocks, the block size) and
  ``vLLM API server version X``. A setting vLLM chose by default is not in the log; the ones whose
  default depends on the GPU (``max_num_seqs``, ``max_num_batched_tokens``) must then be given as
  flags. ``async_scheduling`` absent from the flags means vLLM's default, off before 0.14.
- ``profile.yaml`` (optional): GuideLLM's declared data shape; ``data.prefix_tokens > 0`` means every
  prompt starts with the same prefix of that many tokens, which the workload then declares
  (``prefix_key``) so the replay's prefix cache sees it.

Bad input is one :class:`~sched.base.cmdline.InputError` naming the file, the span and the field.
"""

from __future__ import annotations

import ast
import json
import os
import re

from ..base.cmdline import InputError
from .real_record import request_record
from .realrun import read_result_text

__all__ = ["is_otel_run", "read_spans", "read_vllm_log", "read_profile", "PROFILE_PREFIX_KEY"]

#: The ``prefix_key`` of a prefix declared by ``profile.yaml``.
PROFILE_PREFIX_KEY = "profile-prefix"
_NEEDED = ("gen_ai.request.id", "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens",
           "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e")


def is_otel_run(path: str) -> bool:
    """Whether ``path`` is a directory holding ``traces.json`` (a run directory of this module)."""
    return os.path.isdir(path) and os.path.exists(os.path.join(path, "traces.json"))


def _value(raw):
    """An OTLP ``AnyValue`` (``{"intValue": "12"}``, ``{"doubleValue": 0.5}``, ...) as a Python value;
    ``None`` when absent or not an ``AnyValue``. Raises ``ValueError`` (with the reason) for an
    ``intValue``/``doubleValue`` that is not a number (``"NaN"``, a 5,000-digit text)."""
    if not isinstance(raw, dict) or len(raw) != 1:
        return None
    (kind, value), = raw.items()
    if kind == "intValue":
        try:
            if isinstance(value, (bool, float)):
                raise ValueError
            return int(value)
        except (TypeError, ValueError):
            raise ValueError(f"intValue {str(value)[:40]!r} is not a whole number") from None
    if kind == "doubleValue":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ValueError(f"doubleValue {str(value)[:40]!r} is not a number")
    return value


def read_spans(path: str) -> list[dict]:
    """Normalised request records (ms from the first arrival, :func:`sched.timing.real_record.request_record`'s
    keys, ``case`` ``real``) of the ``llm_request`` spans of ``path`` (``traces.json``), in file order."""
    text = read_result_text(path, "traces file")
    batches = []
    try:   # one document (a pretty-printed export) ...
        whole = json.loads(text)
    except (ValueError, RecursionError):
        whole = None
    lines = [] if isinstance(whole, dict) else text.splitlines()
    if isinstance(whole, dict):
        batches.append((1, whole))
    for number, line in enumerate(lines, 1):   # ... or one resourceSpans batch per line
        if not line.strip():
            continue
        try:
            batches.append((number, json.loads(line)))
        except ValueError:
            raise InputError(f"{path}: line {number}: not JSON (one OTLP resourceSpans batch per line)") from None
        except RecursionError:
            raise InputError(f"{path}: line {number}: JSON nested too deeply") from None
    spans = []
    for number, batch in batches:
        resource_spans = batch.get("resourceSpans") if isinstance(batch, dict) else None
        if not isinstance(resource_spans, list):
            raise InputError(f"{path}: line {number}: field 'resourceSpans': missing (not an OTLP JSON trace export)")
        for resource in resource_spans:
            for scope in (resource.get("scopeSpans") or []) if isinstance(resource, dict) else []:
                for span in (scope.get("spans") or []) if isinstance(scope, dict) else []:
                    if isinstance(span, dict) and span.get("name") == "llm_request":
                        spans.append((number, span))
    if not spans:
        raise InputError(f"{path}: no 'llm_request' span (vLLM's per-request span; was --otlp-traces-endpoint on?)")
    rows = []
    for index, (number, span) in enumerate(spans):
        if span.get("attributes") is not None and not isinstance(span.get("attributes"), list):
            raise InputError(f"{path}: line {number}: span {index}: field 'attributes': must be a list of "
                             f"{{key, value}} objects (OTLP JSON), got {json.dumps(span.get('attributes'))[:40]}")
        raw = {item.get("key"): item.get("value") for item in span.get("attributes") or []
               if isinstance(item, dict)}
        name = raw.get("gen_ai.request.id", {})
        name = name.get("stringValue") if isinstance(name, dict) else None
        where = f"{path}: line {number}: span {index}" + (f" ({name})" if isinstance(name, str) else "")
        attributes = {}
        for key, value in raw.items():
            try:
                attributes[key] = _value(value)
            except ValueError as error:
                if key in _NEEDED or key == "gen_ai.latency.time_in_queue":
                    raise InputError(f"{where}: field {key!r}: {error}") from None
        for key in _NEEDED:
            if attributes.get(key) is None:
                raise InputError(f"{where}: field {key!r}: missing (calibrate needs the request id, token counts, "
                                 "TTFT and E2E of every request)")
        if not isinstance(name, str) or not name:
            raise InputError(f"{where}: field 'gen_ai.request.id': must be a non-empty string")
        start, end = (_unix_nano(span, key, where) for key in ("startTimeUnixNano", "endTimeUnixNano"))
        if start is None:
            raise InputError(f"{where}: field 'startTimeUnixNano': missing")
        if end is not None and end < start:
            raise InputError(f"{where}: field 'endTimeUnixNano': {end} ns is before the span's start "
                             f"(startTimeUnixNano {start})")
        numbers = {}
        for key in _NEEDED[1:] + ("gen_ai.latency.time_in_queue",):
            value = attributes.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value \
                    or value > 1e9:
                raise InputError(f"{where}: field {key!r}: must be a number from 0 to 1e9 (seconds or tokens), "
                                 f"got {value!r}")
            numbers[key] = value
        for key in ("gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"):
            if numbers[key] != int(numbers[key]):
                raise InputError(f"{where}: field {key!r}: must be a whole number of tokens, got {numbers[key]!r}")
        ttft, e2e = numbers["gen_ai.latency.time_to_first_token"], numbers["gen_ai.latency.e2e"]
        if e2e < ttft:
            raise InputError(f"{where}: field 'gen_ai.latency.e2e': {e2e!r} s is before the first token "
                             f"(time_to_first_token {ttft!r} s)")
        queue = numbers.get("gen_ai.latency.time_in_queue")
        if queue is not None and queue > ttft:
            raise InputError(f"{where}: field 'gen_ai.latency.time_in_queue': {queue!r} s is after the first token "
                             f"(time_to_first_token {ttft!r} s): a request leaves the queue before its first token")
        rows.append((start, name, numbers))
    first = min(start for start, _, _ in rows)
    records = []
    for start, name, numbers in rows:
        arrival = (start - first) / 1e6
        queue = numbers.get("gen_ai.latency.time_in_queue")
        records.append(request_record("real", name, None, arrival, None if queue is None else arrival + 1000 * queue,
                               arrival + 1000 * numbers["gen_ai.latency.time_to_first_token"],
                               arrival + 1000 * numbers["gen_ai.latency.e2e"], "ok",
                               int(numbers["gen_ai.usage.prompt_tokens"]),
                               int(numbers["gen_ai.usage.completion_tokens"]), []))
    return records


def _unix_nano(span: dict, key: str, where: str) -> int | None:
    """A span's ``key`` (``startTimeUnixNano``/``endTimeUnixNano``: ns since 1970 as text or a
    number) as an int, ``None`` when absent; InputError when not a whole number >= 0."""
    value = span.get(key)
    if value is None:
        return None
    try:
        if isinstance(value, bool) or isinstance(value, float):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: field {key!r}: must be a whole number of ns since 1970, got "
                         f"{str(value)[:40]!r}") from None
    if number < 0:
        raise InputError(f"{where}: field {key!r}: must be a whole number of ns since 1970, got {number} (negative)")
    return number


_CONFIG_KEYS = re.compile(r"(?:^|, )(model|served_model_name|enable_prefix_caching|tensor_parallel_size|dtype)="
                          r"('[^']*'|[^,]*)")


#: The log's numbers that only size the KV cache (not needed with ``--num-gpu-blocks``).
KV_SIZE_KEYS = ("num_gpu_blocks", "kv_tokens", "available_kv_gib")


def read_vllm_log(path: str, tolerate=()) -> dict:
    """What the last server start of ``vllm.log`` says (module docstring): ``flags`` (the
    non-default args, vLLM's names), ``config`` (model, served_model_name, enable_prefix_caching,
    tensor_parallel_size, dtype as text), ``num_gpu_blocks``, ``kv_tokens``, ``vllm_version``,
    ``weights_gib``, ``available_kv_gib`` (or ``None`` each when not logged). Raises :class:`InputError` when the log
    shows no server start, or one of these numbers unreadably or out of range (GiB, tokens, blocks; :data:`_LOG_RANGES`);
    a key in ``tolerate`` stated unreadably is ``None`` instead (the caller has it from elsewhere)."""
    text = read_result_text(path, "vLLM log")
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if "non-default args:" in line]
    if not starts:
        raise InputError(f"{path}: no 'non-default args:' line: not a vLLM server log (or its start is missing)")
    first = starts[-1]
    flags_text = lines[first].split("non-default args:", 1)[1].strip()
    try:
        flags = ast.literal_eval(flags_text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise InputError(f"{path}: line {first + 1}: the non-default args are not a readable dict") from None
    if not isinstance(flags, dict):
        raise InputError(f"{path}: line {first + 1}: the non-default args are not a dict")
    found = {"flags": flags, "config": {}, "num_gpu_blocks": None, "kv_tokens": None, "vllm_version": None,
             "weights_gib": None, "available_kv_gib": None, "line": first + 1}
    for number, line in enumerate(lines[max(0, first - 3):], max(0, first - 3) + 1):
        if "vLLM API server version" in line and found["vllm_version"] is None:
            found["vllm_version"] = line.rsplit("version", 1)[1].strip()
        if "LLM engine (v" in line and "with config:" in line:
            found["vllm_version"] = found["vllm_version"] or line.split("LLM engine (v", 1)[1].split(")", 1)[0]
            body = line.split("with config:", 1)[1].strip()
            found["config"] = {key: value.strip("'") for key, value in _CONFIG_KEYS.findall(body)}
        for key, pattern in _LOG_NUMBERS:
            match = pattern.search(line)
            if match:
                try:
                    found[key] = _log_number(path, number, key, match.group(1))
                except InputError:
                    if key not in tolerate:
                        raise
                    found[key] = None
    return found


#: The numbers read from a log line: key, the text before and after the value (vLLM's wording).
_LOG_NUMBERS = tuple((key, re.compile(before + r"(\S*)" + after)) for key, before, after in (
    ("num_gpu_blocks", r"num_gpu_blocks is: ", r""), ("kv_tokens", r"GPU KV cache size: ", r" tokens"),
    ("weights_gib", r"Model loading took ", r" GiB"), ("available_kv_gib", r"Available KV cache memory: ", r" GiB")))
#: What each logged number must be: its words in the log, whole, its least and largest value (blocks as the
#: step model's settings allow; KV tokens those blocks at block size 1024; GiB past any GPU).
_LOG_RANGES = {"num_gpu_blocks": ("num_gpu_blocks is", True, 0, 10**9),
               "kv_tokens": ("GPU KV cache size", True, 0, 10**12),
               "weights_gib": ("Model loading took", False, 0, 10**6),
               "available_kv_gib": ("Available KV cache memory", False, 0, 10**6)}


def _log_number(path: str, line: int, key: str, text: str):
    """The number ``text`` logged for ``key`` on line ``line`` (vLLM writes KV tokens with thousands
    commas), or an :class:`InputError` naming the file, line and field: a value the log states
    unreadably is not skipped in favour of another line, nor read as a guess."""
    words, whole, low, high = _LOG_RANGES[key]
    plain = text.replace(",", "") if key == "kv_tokens" and re.fullmatch(r"\d{1,3}(,\d{3})*", text) else text
    if re.fullmatch(r"\d+" if whole else r"\d+(\.\d+)?", plain) and low <= float(plain) <= high:
        return int(plain) if whole else float(plain)
    kind = "a whole number" if whole else "a number"
    advice = "; give it with --num-gpu-blocks" if key in KV_SIZE_KEYS else ""
    raise InputError(f"{path}: line {line}: field {words!r}: {text[:40]!r} is not {kind} from {low} to {high:g}{advice}")


def read_profile(path: str) -> dict:
    """The two-level ``key: value`` mapping of GuideLLM's ``profile.yaml`` (numbers as int/float,
    others as text). Only this plain block shape is read; raises :class:`InputError` naming the
    line for what it does not read rather than misreading it: flow style (``{...}``, ``[...]``),
    anchors and aliases (``&x``, ``*x``), lists, a third level of nesting, a key given twice in one
    mapping, several documents. A comment starts at ``#`` after a space or tab."""
    text = read_result_text(path, "GuideLLM profile")
    result: dict = {}
    section = None
    indent = None   # the indentation of the current section's keys
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.split(r"[ \t]#", raw, maxsplit=1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if ":" not in line:
            raise InputError(f"{path}: line {number}: expected 'key: value'")
        key, value = line.split(":", 1)
        indented = key.startswith((" ", "\t"))
        depth = len(key) - len(key.lstrip(" \t"))
        if "\t" in key[:depth]:
            raise InputError(f"{path}: line {number}: a tab in the indentation (YAML indents with spaces only)")
        key, value = key.strip(), value.strip()
        if value[:1] in ("{", "[", "&", "*", "|", ">"):
            raise InputError(f"{path}: line {number}: field {key!r}: {value[:20]!r}: flow style, anchors, aliases "
                             "and block scalars are not read; write plain 'key: value' lines, a section's keys "
                             "indented under it")
        value = value.strip('"').strip("'")
        if not indented:
            section, indent = None, None
            if key in result:
                raise InputError(f"{path}: line {number}: field {key!r}: given twice")
            if value == "":
                section = result[key] = {}
                continue
            result[key] = _scalar(value)
        elif section is not None:
            indent = depth if indent is None else indent
            if depth != indent or value == "":
                raise InputError(f"{path}: line {number}: field {key!r}: a third level of nesting is not read "
                                 "(only 'section:' with indented 'key: value' lines)")
            if key in section:
                raise InputError(f"{path}: line {number}: field {key!r}: given twice in its section")
            section[key] = _scalar(value)
        else:
            raise InputError(f"{path}: line {number}: indented key {key!r} outside a section")
    return result


def _scalar(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
