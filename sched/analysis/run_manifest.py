"""One reader of a run's ``manifest.json`` for every tool that reads it back (explain, diff,
compare, check): each value is input, checked for type, range and consistency before it is told
to a learner (formats.md; the fields as :mod:`sched.output.artifacts` and
:mod:`sched.timing.msrun` write them).

A simulated run's manifest (no ``kind``) is checked whole:

- ``tool`` ``infer-sched-lab``; ``version`` and ``source`` one line of text; ``workload_sha256``
  64 hex digits; ``num_requests`` a whole number >= 1; ``policy`` one the engines know;
- ``engine`` absent (the lab's tick engine) or ``vllm``; ``config`` the knobs of that engine
  (lab: ``budget``, ``decode_cost``, ``prefill_cost`` 1, ``max_active``, ``chunk_tokens``;
  vllm: vLLM's names, with ``max_num_batched_tokens >= max_num_seqs`` as vLLM requires);
- ``timeout_ticks`` null or a whole number >= 1; ``cases`` a non-empty list of distinct cases;
  ``timeline`` one of full, counts, off; ``tick_ms`` and ``workload_tick_ms`` finite and > 0;
- ``time_unit`` absent (ticks) or ``ms``: a step-model run (vllm-engine.md §6), which must be a
  vllm run with ``tick_ms`` 0.001 (its clock is µs) and a ``step_model`` whose coefficients are
  finite, ``a`` in [0.001, 60000] ms, ``b``, ``c`` and (when present) ``d`` in [0, 60000] ms per token, and whose
  provenance is one line of text per value.

The JSON itself goes through :func:`sched.base.strict_json.strict_json` (a key written twice, NaN,
Infinity refused). A manifest with a ``kind`` (an imported real run, a sweep, the serving-bench
chapter) is returned after checking that ``kind`` is one line of text: its own reader checks the
rest (e.g. :mod:`sched.analysis.compare_sides` for a real run).
"""

from __future__ import annotations

import json
import os
import re

from ..base.cmdline import InputError, need, number_or_none
from ..base.files import read_regular_text
from ..base.strict_json import check_provenance, printable_text, strict_json, whole_number

__all__ = ["read_manifest", "check_manifest", "POLICIES", "BATCHING", "MAX_COEFFICIENT_MS", "MIN_STEP_MS"]

#: Every admission policy an engine knows (the lab's ``sched.lab.policy.POLICIES``; vLLM's fcfs, priority).
POLICIES = ("fcfs", "shortest", "priority")
VLLM_POLICIES = ("fcfs", "priority")
BATCHING = ("static", "continuous")
_TIMELINES = ("full", "counts", "off")
#: The step model's bounds (``sched.timing.stepmodel``): a step takes 1 µs to a minute.
MAX_COEFFICIENT_MS, MIN_STEP_MS = 60_000.0, 0.001
#: Largest knob value (the command line's bound for every knob).
_MAX_KNOB = 10**9
_SHA256 = re.compile(r"[0-9a-f]{64}")

_LAB_CONFIG = {"budget": 1, "decode_cost": 1, "max_active": 1}
_VLLM_CONFIG = {"max_num_batched_tokens": 1, "max_num_seqs": 1, "long_prefill_token_threshold": 0,
                "block_size": 1, "num_gpu_blocks": 2}
_VLLM_FLAGS = ("enable_prefix_caching", "num_gpu_blocks_ample", "async_scheduling")
_SETTINGS_INT = {"num_gpu_blocks": 2, "block_size": 1, "max_num_batched_tokens": 1, "max_num_seqs": 1,
                 "long_prefill_token_threshold": 0}


def read_manifest(directory: str, error: type = InputError) -> dict:
    """``DIR/manifest.json`` read and checked (:func:`check_manifest`); returns the decoded object.

    Raises ``error`` (an :class:`InputError` unless the caller names its own ``ValueError``
    subclass) with one line naming the file and the field: missing file, not UTF-8, bad JSON, or
    any value the module docstring rules out.
    """
    path = os.path.join(directory, "manifest.json")
    try:
        text = read_regular_text(path)
    except FileNotFoundError:
        raise error(f"{path}: missing (is {directory or '.'} a run's --artifacts directory?)") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return check_manifest(strict_json(text, path), path)
    except InputError as exc:
        raise error(str(exc)) from None


def check_manifest(manifest, path: str) -> dict:
    """``manifest`` (decoded JSON of ``path``) if every value is possible; else :class:`InputError`."""
    need(manifest, dict, path, "a JSON object")
    if not isinstance(manifest.get("tool"), str) or not manifest["tool"].startswith("infer-sched-lab"):
        raise InputError(f"{path}: field 'tool': not an infer-sched-lab manifest")
    if "kind" in manifest:   # its own reader checks the rest (a sweep's tool is "infer-sched-lab sweep")
        printable_text(manifest["kind"], f"{path}: field 'kind'", 40)
        return manifest
    if manifest.get("tool") != "infer-sched-lab":
        raise InputError(f"{path}: field 'tool': not an infer-sched-lab manifest")
    field = lambda name: f"{path}: field {name!r}"   # noqa: E731
    for key in ("version", "source"):
        printable_text(manifest.get(key), field(key), 4096)
    sha = manifest.get("workload_sha256")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise InputError(f"{field('workload_sha256')}: must be 64 hex digits (the workload's sha256)")
    whole_number(manifest.get("num_requests"), field("num_requests"), 1)
    engine = manifest.get("engine", "lab")
    if engine not in ("lab", "vllm"):
        raise InputError(f"{field('engine')}: must be vllm (or absent: the lab engine), got {_text(engine)}")
    policies = VLLM_POLICIES if engine == "vllm" else POLICIES
    if manifest.get("policy") not in policies:
        raise InputError(f"{field('policy')}: must be one of {', '.join(policies)}, "
                         f"got {_text(manifest.get('policy'))}")
    config = need(manifest.get("config"), dict, field("config"), "an object")
    (_vllm_config if engine == "vllm" else _lab_config)(config, path)
    if manifest.get("timeout_ticks") is not None:
        whole_number(manifest["timeout_ticks"], field("timeout_ticks"), 1, _MAX_KNOB)
    _cases(manifest.get("cases"), path, engine)
    if manifest.get("timeline", "full") not in _TIMELINES:
        raise InputError(f"{field('timeline')} must be one of {', '.join(_TIMELINES)}, "
                         f"got {_text(manifest.get('timeline'))}")
    for key in ("tick_ms", "workload_tick_ms"):
        if key in manifest and not (number_or_none(manifest[key], field(key), 0, 3_600_000) or 0) > 0:
            raise InputError(f"{field(key)}: must be a number of ms > 0, got {_text(manifest[key])}")
    unit = manifest.get("time_unit", "ticks")
    if unit not in ("ticks", "ms"):
        raise InputError(f"{field('time_unit')}: must be ms (a --step-model run) or absent, got {_text(unit)}")
    if unit == "ms" or "step_model" in manifest:
        _step_model_run(manifest, path, engine)
    return manifest


def _text(value) -> str:
    return json.dumps(value, ensure_ascii=True)[:40]


def _lab_config(config: dict, path: str) -> None:
    for key, low in _LAB_CONFIG.items():
        whole_number(config.get(key), f"{path}: field 'config.{key}'", low, _MAX_KNOB)
    if config.get("prefill_cost", 1) != 1 or type(config.get("prefill_cost", 1)) is not int:
        raise InputError(f"{path}: field 'config.prefill_cost': a prefill token costs 1 (lab.md §3), "
                         f"got {_text(config.get('prefill_cost'))}")
    if config.get("chunk_tokens") is not None:
        whole_number(config["chunk_tokens"], f"{path}: field 'config.chunk_tokens'", 1, _MAX_KNOB)
    if config["budget"] < config["decode_cost"]:
        raise InputError(f"{path}: field 'config.budget': {config['budget']} is below decode_cost "
                         f"{config['decode_cost']}; no run has such knobs")


def _vllm_config(config: dict, path: str) -> None:
    for key, low in _VLLM_CONFIG.items():
        whole_number(config.get(key), f"{path}: field 'config.{key}'", low, _MAX_KNOB)
    for key in _VLLM_FLAGS:
        need(config.get(key), bool, f"{path}: field 'config.{key}'", "true or false", nullable=key != _VLLM_FLAGS[0])
    printable_text(config.get("vllm_version", ""), f"{path}: field 'config.vllm_version'", 40)
    if config["max_num_batched_tokens"] < config["max_num_seqs"]:
        raise InputError(f"{path}: field 'config.max_num_batched_tokens': {config['max_num_batched_tokens']} is "
                         f"below max_num_seqs {config['max_num_seqs']}; vLLM refuses such settings, no run has them")


def _cases(cases, path: str, engine: str) -> None:
    need(cases, list, f"{path}: field 'cases'", "a list of case settings")
    if not cases:
        raise InputError(f"{path}: field 'cases': empty; a run has at least one case")
    seen = set()
    for index, entry in enumerate(cases):
        where = f"{path}: field 'cases[{index}]"
        need(entry, dict, where + "'", "an object")
        name = printable_text(entry.get("case"), where + ".case'", 200)
        if name in seen:
            raise InputError(f"{where}.case': {name!r} is named twice")
        seen.add(name)
        if entry.get("batching") not in BATCHING:
            raise InputError(f"{where}.batching': must be one of {', '.join(BATCHING)}, "
                             f"got {_text(entry.get('batching'))}")
        need(entry.get("apc"), bool, where + ".apc'", "true or false")
        if entry.get("chunk_tokens") is not None:
            whole_number(entry["chunk_tokens"], where + ".chunk_tokens'", 1, _MAX_KNOB)


def _step_model_run(manifest: dict, path: str, engine: str) -> None:
    """A ``--step-model`` run's fields (vllm-engine.md §6): all of them, and consistent."""
    if manifest.get("time_unit") != "ms" or engine != "vllm" or "step_model" not in manifest:
        raise InputError(f"{path}: field 'time_unit': a --step-model run has time_unit ms, engine vllm and a "
                         "step_model together; this manifest has only some of them")
    if manifest.get("tick_ms") != 0.001:
        raise InputError(f"{path}: field 'tick_ms': a --step-model run's clock is µs (0.001 ms), "
                         f"got {_text(manifest.get('tick_ms'))}")
    model = need(manifest["step_model"], dict, f"{path}: field 'step_model'", "an object")
    step = need(model.get("step_ms"), dict, f"{path}: field 'step_model.step_ms'", "an object with a, b, c")
    for key in ("a", "b", "c", "d"):   # d (ms per KV token) is absent from a three-term model
        where = f"{path}: field 'step_model.step_ms.{key}'"
        value = number_or_none(step.get(key), where, MIN_STEP_MS if key == "a" else 0, MAX_COEFFICIENT_MS)
        if value is None and (key != "d" or "d" in step):
            raise InputError(f"{where}: missing")
    unknown = next((key for key in step if key not in ("a", "b", "c", "d")), None)
    if unknown is not None:
        raise InputError(f"{path}: field 'step_model.step_ms.{printable_text(unknown, path, 40)}': unknown coefficient")
    printable_text(model.get("formula"), f"{path}: field 'step_model.formula'", 200)
    fitted_with = need(model.get("fitted_with"), dict, f"{path}: field 'step_model.fitted_with'", "an object")
    for key, low in _SETTINGS_INT.items():
        whole_number(fitted_with.get(key), f"{path}: field 'step_model.fitted_with.{key}'", low, _MAX_KNOB)
    need(fitted_with.get("enable_prefix_caching"), bool,
         f"{path}: field 'step_model.fitted_with.enable_prefix_caching'", "true or false")
    if fitted_with.get("policy") not in VLLM_POLICIES:
        raise InputError(f"{path}: field 'step_model.fitted_with.policy': must be one of {', '.join(VLLM_POLICIES)}")
    fitted_on = need(model.get("fitted_on"), dict, f"{path}: field 'step_model.fitted_on'", "an object")
    check_provenance(fitted_on, path, "step_model.fitted_on")
    for key in ("overridden", "limits"):
        for index, item in enumerate(need(model.get(key), list, f"{path}: field 'step_model.{key}'", "a list of text")):
            printable_text(item, f"{path}: field 'step_model.{key}[{index}]'", 1000)
