"""A step-time model: how long one vLLM engine step takes, in milliseconds (vllm-engine.md §6).

``step_ms = a + b · (prompt tokens computed in the step) + c · (decoded sequences in the step)
+ d · (KV context tokens the step reads)``

with ``a`` in ms per step (the fixed per-step cost: host work, kernel launches, reading the
weights once), ``b`` in ms per prompt token, ``c`` in ms per decoded sequence (one decode token
each) and ``d`` in ms per token of KV context, all ``>= 0``, and ``a >= 0.001``
(:data:`MIN_STEP_MS`: a step takes at least the engine clock's 1 µs even with no tokens). The
KV context of a step is the KV blocks held by running requests during the step (after its
allocations; vLLM's "GPU KV cache usage") times ``block_size``: what attention reads, so decode
cost grows with batch *and* context as on a GPU. A file without ``d`` (the three-term model of
earlier versions) is the same model with ``d = 0``. The coefficients are fitted to one real run (:mod:`sched.timing.calibrate`) and only mean
something together with what they were fitted on, so ``step-model.json`` stores both:

- ``settings``: the engine settings of the replay (vLLM's names: ``num_gpu_blocks``,
  ``block_size``, ``max_num_batched_tokens``, ``max_num_seqs``, ``long_prefill_token_threshold``
  (0 = none), ``enable_prefix_caching``, ``policy``, and ``async_scheduling`` when the fit replayed
  the run's own mode; absent means off); a run given this file applies them;
- ``fitted_on``: provenance (model, GPU, vLLM version, async scheduling, source run and its
  sha256, training requests, loss, training error);
- ``limits``: what the fit cannot know, written out for whoever reads the file;
- ``uncertainty`` (optional): one standard deviation of each fitted coefficient (bootstrap over
  training requests, :mod:`sched.timing.identify`); ``unidentified`` (optional): coefficient ->
  why the training data could not tell it apart: held at 0 when the training window cannot
  separate it, or held at its fit when the fitted value is smaller than its uncertainty; either
  way it is not a measurement and is never shown as one (the formula prints ``?``);
  ``identified`` (optional, written with ``uncertainty``): ``{term: true/false}``, false exactly
  for the terms of ``unidentified``. ``step_ms`` always holds the value the engine uses.

The engine's clock under a step model is in whole **microseconds** (:meth:`StepModel.step_us`):
integer stamps keep the statistics exact, and a rounding of at most 0.5 µs per step is far below
anything a real run can resolve. Every time shown to a learner is in milliseconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..base.cmdline import InputError, need, number_or_none, read_failure
from ..base.files import read_regular_text
from ..base.strict_json import check_provenance, strict_json, whole_number
from ..workload.rules import closest_field

__all__ = ["StepModel", "SETTINGS", "OPTIONAL_SETTINGS", "STEP_MODEL_KIND", "load_step_model", "parse_step_model",
           "step_model_to_json", "limits_for", "MAX_COEFFICIENT_MS", "MIN_STEP_MS"]

STEP_MODEL_KIND = "step-model"
#: The engine settings a step model carries, in vLLM's names, with their JSON types.
SETTINGS = {"num_gpu_blocks": int, "block_size": int, "max_num_batched_tokens": int, "max_num_seqs": int,
            "long_prefill_token_threshold": int, "enable_prefix_caching": bool, "policy": str}
#: Settings a step model may carry besides :data:`SETTINGS` (absent in older files: then off).
OPTIONAL_SETTINGS = {"async_scheduling": bool}
#: Largest coefficient accepted from a file: one minute per step or per token is no GPU.
MAX_COEFFICIENT_MS = 60_000.0
#: Smallest ``a`` accepted: a step takes at least 1 µs (the engine clock's unit) even at zero tokens,
#: so no step rounds to the same stamp as the one before it and every step's time is ``step_ms`` itself.
MIN_STEP_MS = 0.001
_POLICIES = ("fcfs", "priority")


@dataclass(frozen=True, slots=True)
class StepModel:
    """Fitted step time plus the settings and provenance it holds for (module docstring).

    ``a_ms`` ms per step, ``b_ms`` ms per prompt token, ``c_ms`` ms per decode token (all >= 0);
    ``settings`` maps every key of :data:`SETTINGS` to its value; ``fitted_on`` is free provenance.
    """

    a_ms: float
    b_ms: float
    c_ms: float
    settings: dict
    fitted_on: dict
    d_ms: float = 0.0
    uncertainty: dict | None = None
    unidentified: dict | None = None

    @property
    def identified(self) -> dict:
        """``{term: bool}`` for ``a, b, c, d``: false for a term of :attr:`unidentified`."""
        unknown = self.unidentified or {}
        return {term: term not in unknown for term in ("a", "b", "c", "d")}

    def step_ms(self, prompt_tokens: int, decode_tokens: int, kv_blocks: int = 0) -> float:
        """Duration of a step computing ``prompt_tokens`` prompt and ``decode_tokens`` decode tokens
        while running requests hold ``kv_blocks`` KV blocks, ms."""
        return (self.a_ms + self.b_ms * prompt_tokens + self.c_ms * decode_tokens
                + self.d_ms * kv_blocks * self.settings["block_size"])

    def step_us(self, prompt_tokens: int, decode_tokens: int, kv_blocks: int = 0) -> int:
        """:meth:`step_ms` in whole microseconds, at least 1 (a step always takes time)."""
        return max(1, round(1000 * self.step_ms(prompt_tokens, decode_tokens, kv_blocks)))

    def step_time(self):
        """The engine's ``step_time`` in µs: :meth:`step_us`, asked for the KV blocks only when ``d > 0``
        (a three-term model keeps the engine's fast two-argument call)."""
        if not self.d_ms:
            return self.step_us
        a, b, c, per_block = self.a_ms, self.b_ms, self.c_ms, self.d_ms * self.settings["block_size"]

        def step_us(prompt_tokens: int, decode_tokens: int, kv_blocks: int) -> int:
            return max(1, round(1000 * (a + b * prompt_tokens + c * decode_tokens + per_block * kv_blocks)))
        step_us.reads_kv_blocks = True
        return step_us

    @property
    def formula(self) -> str:
        """The model as one line, e.g. ``step_ms = 12.3 + 0.0456·prompt + 0.0789·decode``; the KV term
        only when ``d > 0``; an unidentified coefficient is written as such, never as a number."""
        unknown = self.unidentified or {}
        text = f"step_ms = {self.a_ms:.4g}"
        for key, value, name in (("b", self.b_ms, "prompt"), ("c", self.c_ms, "decode"), ("d", self.d_ms, "kv_token")):
            if key in unknown:
                text += f" + ?·{name}"
            elif key != "d" or value:
                text += f" + {value:.4g}·{name}"
        return text


def limits_for(fitted_on: dict) -> list[str]:
    """The honest limits of a step model fitted on ``fitted_on`` (model, device, ... keys), one sentence each."""
    where = (f"{fitted_on.get('model') or 'an unknown model'} on {fitted_on.get('device') or 'an unknown GPU'}, "
             f"vLLM {fitted_on.get('vllm_version') or '?'}")
    runs = len(fitted_on["runs"]) if isinstance(fitted_on.get("runs"), list) else 1
    lines = [f"Fitted on {'one run' if runs == 1 else f'{runs} runs'} of {where} with the settings above"
             f"{'' if runs == 1 else ' (each run replayed under its own)'}: other GPUs, models, vLLM versions or "
             "settings are extrapolation, not prediction.",
             "One run says nothing about run-to-run variance: repeat the measurement to know the noise.",
             "Real prompt text may share prefixes the replay cannot see (it knows only token counts), so the "
             "real prefix cache may hit where the replay computes."]
    if fitted_on.get("async_scheduling") and fitted_on.get("replayed_async_scheduling"):
        lines.append("The run used async scheduling (vLLM's GPU default since 0.14): it plans step t+1 while step t "
                     "runs; the replay followed it (settings.async_scheduling, vllm-engine.md §7).")
    elif fitted_on.get("async_scheduling"):
        lines.append("The run used async scheduling (vLLM's GPU default): it plans step t+1 while step t runs, "
                     "which delays slot reuse by about one step; the replay schedules synchronously.")
    return lines


def step_model_to_json(model: StepModel) -> str:
    """The text of ``step-model.json`` (fixed key order, newline at the end)."""
    document = {
        "kind": STEP_MODEL_KIND, "engine": "vllm",
        "formula": "step_ms = a + b * prompt_tokens_computed + c * decode_tokens",
        "step_ms": {"a": round(model.a_ms, 6), "b": round(model.b_ms, 9), "c": round(model.c_ms, 9)},
        "units": {"a": "ms per step", "b": "ms per prompt token computed in the step",
                  "c": "ms per decode token in the step"},
        "settings": {key: model.settings[key] for key in SETTINGS} | {
            key: model.settings[key] for key in OPTIONAL_SETTINGS if key in model.settings},
        "fitted_on": model.fitted_on,
        "limits": limits_for(model.fitted_on),
    }
    if model.d_ms or model.uncertainty is not None or model.unidentified:
        document["formula"] += " + d * kv_context_tokens"
        document["step_ms"]["d"] = round(model.d_ms, 12)
        document["units"]["d"] = ("ms per token of KV context held by running requests during the step "
                                  "(KV blocks in use x block_size)")
    if model.uncertainty is not None:
        document["uncertainty"] = {key: (None if value is None else float(f"{value:.4g}"))
                                   for key, value in model.uncertainty.items()}
    if model.unidentified:
        document["unidentified"] = dict(model.unidentified)
    if model.uncertainty is not None:
        document["identified"] = model.identified
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def load_step_model(path: str) -> StepModel:
    """Read ``step-model.json``; raises :class:`~sched.base.cmdline.InputError` naming the file and field."""
    try:
        text = read_regular_text(path, encoding="utf-8-sig")  # a leading BOM is accepted, as for workloads
    except FileNotFoundError:
        raise InputError(f"{path}: no such step model file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({read_failure(exc)})") from None
    return parse_step_model(text, path)


def parse_step_model(text: str, source: str) -> StepModel:
    """A :class:`StepModel` from JSON ``text``: kind ``step-model``, engine ``vllm`` (a step model
    for another engine is refused), coefficients finite and in ``[0, MAX_COEFFICIENT_MS]``,
    every setting present with its type and written as one (``2588.0`` is no integer setting), and
    every provenance value one line of printable text, a finite number, true/false/null or a list
    of those; ``max_num_batched_tokens`` not below ``max_num_seqs``, as vLLM requires (``fitted_on.device`` and ``fitted_on.model``, which are looked up by name, text or
    null: :data:`NAMED_PROVENANCE`). The text is read by :func:`sched.base.strict_json.strict_json` (a key written twice,
    ``NaN`` or ``Infinity`` anywhere is refused)."""
    data = need(strict_json(text, source), dict, source, "a JSON object")
    if data.get("kind") != STEP_MODEL_KIND:
        raise InputError(f"{source}: field 'kind': must be {STEP_MODEL_KIND!r} (a file written by calibrate), "
                         f"got {data.get('kind')!r}")
    if data.get("engine") != "vllm":
        raise InputError(f"{source}: field 'engine': this step model is for the {data.get('engine')!r} engine; "
                         "only the vllm engine keeps time in ms (--engine vllm)")
    step = need(data.get("step_ms"), dict, f"{source}: field 'step_ms'", "an object with a, b, c (and d)")
    _known_keys(step, ("a", "b", "c", "d"), f"{source}: field 'step_ms.")
    coefficients = []
    for key in ("a", "b", "c", "d"):
        value = number_or_none(step.get(key), f"{source}: field 'step_ms.{key}'", 0, MAX_COEFFICIENT_MS)
        if value is None and key == "d":
            value = 0.0   # a three-term model: no KV-context term
        if value is None:
            raise InputError(f"{source}: field 'step_ms.{key}': missing")
        coefficients.append(float(value))
    if coefficients[0] < MIN_STEP_MS:
        raise InputError(f"{source}: field 'step_ms.a': must be at least {MIN_STEP_MS} ms (a step takes at least "
                         f"1 µs, the engine clock's unit, even with no tokens), got {step['a']!r}")
    settings = need(data.get("settings"), dict, f"{source}: field 'settings'", "an object")
    _known_keys(settings, tuple(SETTINGS) + tuple(OPTIONAL_SETTINGS), f"{source}: field 'settings.")
    checked = {key: _setting(settings.get(key), key, kind, source) for key, kind in SETTINGS.items()}
    checked.update({key: _setting(settings[key], key, kind, source) for key, kind in OPTIONAL_SETTINGS.items()
                    if key in settings})
    if checked["max_num_batched_tokens"] < checked["max_num_seqs"]:   # vLLM's SchedulerConfig refuses them
        raise InputError(f"{source}: field 'settings.max_num_batched_tokens': {checked['max_num_batched_tokens']} is "
                         f"below settings.max_num_seqs {checked['max_num_seqs']}; vLLM refuses such settings, "
                         "no run has them")
    fitted_on = need(data.get("fitted_on", {}), dict, f"{source}: field 'fitted_on'", "an object")
    unidentified = need(data.get("unidentified", {}), dict, f"{source}: field 'unidentified'", "an object")
    _known_keys(unidentified, ("a", "b", "c", "d"), f"{source}: field 'unidentified.")
    uncertainty = data.get("uncertainty")
    if uncertainty is not None:
        need(uncertainty, dict, f"{source}: field 'uncertainty'", "an object")
        _known_keys(uncertainty, ("a", "b", "c", "d"), f"{source}: field 'uncertainty.")
        for key, value in uncertainty.items():
            number_or_none(value, f"{source}: field 'uncertainty.{key}'", 0, MAX_COEFFICIENT_MS)
    identified = need(data.get("identified", {}), dict, f"{source}: field 'identified'", "an object")
    _known_keys(identified, ("a", "b", "c", "d"), f"{source}: field 'identified.")
    unidentified = dict(unidentified)
    for key, value in identified.items():
        need(value, bool, f"{source}: field 'identified.{key}'", "true or false")
        if value and key in unidentified:
            raise InputError(f"{source}: field 'identified.{key}': true, but 'unidentified.{key}' says why it is not; "
                             "one of them is wrong")
        if not value:
            unidentified.setdefault(key, "marked identified: false")
    check_provenance(fitted_on, source, "fitted_on")   # printed in tables: one line of text per value
    for key in NAMED_PROVENANCE:   # looked up by name (the GPU table, the weights' size): text or nothing
        need(fitted_on.get(key), str, f"{source}: field 'fitted_on.{key}'", "text or null", nullable=True)
    a, b, c, d = coefficients
    return StepModel(a, b, c, checked, fitted_on, d, uncertainty, unidentified or None)


#: ``fitted_on`` keys the lab reads as names (``device``: the GPU table of ``--gpu`` and ``plan``;
#: ``model``: the parameter count for ``--gpu-memory-utilization``): each text or null.
NAMED_PROVENANCE = ("device", "model")


def _known_keys(section: dict, known: tuple, where: str) -> None:
    """Refuse a key of ``section`` not in ``known`` (a misspelt coefficient is never silently 0)."""
    for key in section:
        if key not in known:
            close = closest_field(key, known)
            hint = f"did you mean {close!r}?" if close else "valid fields are " + ", ".join(known)
            raise InputError(f"{where}{key}': unknown field; {hint}")


def _setting(value, key: str, kind: type, source: str):
    where = f"{source}: field 'settings.{key}'"
    if kind is bool:
        return need(value, bool, where, "true or false")
    if kind is str:
        if value not in _POLICIES:
            raise InputError(f"{where}: must be one of {', '.join(_POLICIES)}, got {value!r}")
        return value
    low = 0 if key == "long_prefill_token_threshold" else (2 if key == "num_gpu_blocks" else 1)
    return whole_number(value, where, low, 10**9)
