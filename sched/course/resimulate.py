"""Re-simulating a run from its own ``workload.json`` and ``manifest.json`` (lab.md §7: a replay of
``workload.json`` under the manifest's configuration is the same run, byte for byte).

A run whose every artifact equals its re-simulation is *authentic*: made by the lab from the
inputs it names. A result copied and edited, or written by hand, differs from its re-simulation
somewhere, and :func:`authenticity` names the first place (through :mod:`sched.analysis.check`).
Kinds the lab cannot re-run here (an imported real run, a millisecond run with a step model, a
workload far beyond the course's scale) are reported as not re-simulated, never guessed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from ..analysis.check import CheckError, compare_runs, first_line
from ..analysis.run_manifest import read_manifest
from ..base.cmdline import InputError
from ..core.config import ConfigError, EngineConfig, cases_for
from ..core.records import TIMELINE_DETAILS
from ..engines import check_cases
from ..lab.engine import run_cases
from ..lab.estimate import estimate_walked_ticks
from ..output.artifacts import LabRun, render_artifacts
from ..vllm.config import VllmKnobs
from ..workload.specs import WorkloadError
from ..workload.validation import load_workload

__all__ = ["ResimulationError", "Authenticity", "simulate_files", "run_inputs", "authenticity",
           "MAX_WALKED_TICKS", "MAX_TOKENS", "MAX_REQUEST_TICKS", "MAX_FULL_TIMELINE_TOKENS",
           "MAX_FULL_TIMELINE_NAMES"]

#: Largest lab-engine run re-simulated (estimated walked ticks, all cases): the course's runs walk
#: a few hundred; a hand-in cannot make the grader simulate for hours.
MAX_WALKED_TICKS = 2_000_000
#: Largest workload re-simulated, in prompt + output tokens (the course's biggest is under 10,000).
MAX_TOKENS = 200_000
#: Largest work re-simulated, in request-ticks: every walked tick visits each request active in it,
#: so the work is about the walked ticks (lab engine: estimated, all cases) times the requests active
#: at once (``min(max_active, N)``), or, for the vLLM engine, the tokens (each step schedules at least
#: one) times ``min(max_num_seqs, N)``. The course's runs need a few thousand; 2 × 10⁷ is seconds.
MAX_REQUEST_TICKS = 20_000_000
#: A ``full`` timeline keeps one record per tick, listing every waiting and active request by name:
#: re-simulated only up to these prompt + output tokens (which bound the records of a case) and
#: requests × tokens (which bound the names listed), the bounds within which the lab itself writes a
#: timeline in full by default (:data:`sched.runs.build.FULL_TIMELINE_MAX_TOKENS` and ``..._NAMES``).
MAX_FULL_TIMELINE_TOKENS = 50_000
MAX_FULL_TIMELINE_NAMES = 1_000_000
_LAB_KNOBS = ("budget", "decode_cost", "max_active", "chunk_tokens")
_VLLM_KNOBS = ("max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold",
               "enable_prefix_caching", "block_size")


class ResimulationError(InputError):
    """A run that cannot be re-simulated here (the message names the file and the field):
    ``not_checked`` when the run is of a kind, or a size, not re-simulated here (nothing wrong
    with it); otherwise an input the lab would never have written."""

    def __init__(self, message: str, not_checked: bool = False):
        super().__init__(message)
        self.not_checked = not_checked


@dataclass(frozen=True)
class Authenticity:
    """The answer of :func:`authenticity`: ``status`` is ``"yes"`` (every artifact equals the
    re-simulation), ``"no"`` (``detail``: the first difference) or ``"not checked"`` (``detail``: why)."""

    status: str
    detail: str = ""


def simulate_files(workload, config: EngineConfig | VllmKnobs, policy: str, source: str,
                   timeline: str = "full") -> dict[str, str]:
    """Every artifact's text (file name -> text) of one run, as ``--artifacts`` writes it for a
    course-sized workload: the four lab cases (lab.md §4) or the one ``vllm`` case. Raises
    :class:`sched.core.invariants.InvariantError` for a broken invariant (a simulator bug)."""
    if isinstance(config, VllmKnobs):
        from ..vllm.engine import simulate_vllm
        results = [simulate_vllm(workload, config, timeline=timeline)]
        policy = config.policy
    else:
        results = run_cases(workload, config, cases_for(config), policy, timeline=timeline)
    check_cases(results)
    return render_artifacts(LabRun(workload, config, policy, source, results, timeline))


def _field(manifest: dict, name: str, path: str, kind: type, nullable: bool = False):
    """``manifest[name]`` when it is a ``kind`` (never a bool for a number), or ``None`` if ``nullable``."""
    value = manifest.get(name)
    if (value is None and nullable) or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    raise ResimulationError(f"{path}: field '{name}': {value!r} is not what the lab writes there")


def _within_work(path: str, request_ticks: int) -> None:
    if request_ticks > MAX_REQUEST_TICKS:
        raise ResimulationError(f"{path}: about {request_ticks} request-ticks to simulate (ticks times requests active "
                                f"at once), beyond the {MAX_REQUEST_TICKS} a hand-in's run is re-simulated with",
                                not_checked=True)


def run_inputs(run_dir: str):
    """``(workload, config, policy, source, timeline)`` of the run in ``run_dir``, read from its
    ``workload.json`` and ``manifest.json``.

    Raises :class:`ResimulationError` when the run is of a kind not re-simulated here (imported
    real run, export, millisecond run) or beyond :data:`MAX_TOKENS`, :data:`MAX_WALKED_TICKS`,
    :data:`MAX_REQUEST_TICKS` or (``full`` timeline) :data:`MAX_FULL_TIMELINE_TOKENS` /
    :data:`MAX_FULL_TIMELINE_NAMES` (``not_checked``: a hand-in cannot keep the grader busy for
    minutes or fill its memory), and when a field the lab writes is missing or of the wrong type; a bad ``workload.json``
    raises :class:`ResimulationError` with the workload's first problem.
    """
    path = os.path.join(run_dir, "manifest.json")
    manifest = read_manifest(run_dir, ResimulationError)   # every value checked, as explain and diff read it
    if manifest.get("kind") is not None:
        raise ResimulationError(f"{path}: a run of kind {manifest.get('kind')!r} (not simulated by the lab)",
                                not_checked=True)
    if manifest.get("time_unit") == "ms":
        raise ResimulationError(f"{path}: a millisecond run (--step-model): its step model is not in the run",
                                not_checked=True)
    try:
        workload = load_workload(os.path.join(run_dir, "workload.json"))
    except WorkloadError as exc:
        raise ResimulationError(exc.problems[0]) from None
    tokens = sum(spec.prompt_tokens + spec.output_tokens for spec in workload)
    if tokens > MAX_TOKENS:
        raise ResimulationError(f"{run_dir}/workload.json: {tokens} prompt + output tokens, beyond the "
                                f"{MAX_TOKENS} a hand-in's run is re-simulated with", not_checked=True)
    config = _field(manifest, "config", path, dict)
    policy = _field(manifest, "policy", path, str)
    source = _field(manifest, "source", path, str)
    timeline = manifest.get("timeline", "full")
    if timeline not in TIMELINE_DETAILS:
        raise ResimulationError(f"{path}: field 'timeline': {timeline!r} is not one of {', '.join(TIMELINE_DETAILS)}")
    if timeline == "full" and (tokens > MAX_FULL_TIMELINE_TOKENS or len(workload) * tokens > MAX_FULL_TIMELINE_NAMES):
        raise ResimulationError(f"{path}: a full timeline of {len(workload)} requests and {tokens} prompt + output "
                                f"tokens, beyond the {MAX_FULL_TIMELINE_TOKENS} tokens and {MAX_FULL_TIMELINE_NAMES} "
                                "requests × tokens a hand-in's run is re-simulated with in full", not_checked=True)
    timeout = _field(manifest, "timeout_ticks", path, int, nullable=True)
    try:
        if manifest.get("engine") == "vllm":
            knobs = {k: config.get(k) for k in _VLLM_KNOBS}
            blocks = None if config.get("num_gpu_blocks_ample") is True else config.get("num_gpu_blocks")
            engine_config = VllmKnobs(policy=policy, timeout_ticks=timeout, num_gpu_blocks=blocks, **knobs)
            _within_work(path, tokens * min(engine_config.max_num_seqs, len(workload)))
        elif manifest.get("engine") is None:
            engine_config = EngineConfig(timeout_ticks=timeout, **{k: config.get(k) for k in _LAB_KNOBS})
            ticks = estimate_walked_ticks(workload, engine_config) * len(cases_for(engine_config))
            if ticks > MAX_WALKED_TICKS:
                raise ResimulationError(f"{path}: about {ticks} ticks to simulate, beyond the {MAX_WALKED_TICKS} "
                                        "a hand-in's run is re-simulated with", not_checked=True)
            _within_work(path, ticks * min(engine_config.max_active, len(workload)))
        else:
            raise ResimulationError(f"{path}: field 'engine': {manifest.get('engine')!r} is not an engine of the lab")
    except (ConfigError, TypeError) as exc:
        raise ResimulationError(f"{path}: field 'config': {exc}") from None
    return workload, engine_config, policy, source, timeline


def authenticity(run_dir: str) -> Authenticity:
    """Whether the run in ``run_dir`` is what the lab makes from its own ``workload.json`` and
    ``manifest.json``: the run is re-simulated into a temporary directory and compared with
    :func:`sched.analysis.check.compare_runs` (every artifact, field by field; the run's extra
    files are ignored). Never raises for a bad run: an unreadable one is ``"no"`` with the reason,
    one of a kind not re-simulated here is ``"not checked"``."""
    try:
        workload, config, policy, source, timeline = run_inputs(run_dir)
    except ResimulationError as exc:
        return Authenticity("not checked" if exc.not_checked else "no", str(exc))
    files = simulate_files(workload, config, policy, source, timeline)
    scratch = tempfile.mkdtemp(prefix="isl-resimulate-")
    try:
        for name, text in files.items():
            with open(os.path.join(scratch, name), "w", encoding="utf-8", newline="\n") as out:
                out.write(text)
        try:
            differences = compare_runs(run_dir, scratch)
        except CheckError as exc:
            return Authenticity("no", str(exc).replace(scratch, "re-simulation"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not differences:
        return Authenticity("yes")
    part, found = differences[0]
    first = first_line(found[0]) if found else ""
    return Authenticity("no", f"{part}: {first}".replace(scratch, "re-simulation"))
