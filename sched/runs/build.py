"""Building a plain run (lab.md §4; vllm-engine.md): the workload simulated under the four cases of
the lab engine, or the vLLM engine's one case, every case checked against its engine's invariants,
handed on as a :class:`sched.output.artifacts.LabRun` that carries its clock
(:class:`sched.core.clock.RunClock`); and how much timeline detail a run keeps by default.
A ``--step-model`` run is built by :mod:`sched.timing.msrun`.
"""

from __future__ import annotations

from ..core.clock import RunClock
from ..core.config import EngineConfig, cases_for
from ..engines import check_cases
from ..lab.engine import run_cases
from ..output.artifacts import LabRun
from ..vllm.config import VllmKnobs, check_fits

__all__ = ["run_lab", "default_timeline", "FULL_TIMELINE_MAX_REQUESTS", "FULL_TIMELINE_MAX_TOKENS",
           "FULL_TIMELINE_MAX_NAMES"]

#: Largest workload whose timeline is written in full by default: 1,000 requests keeps
#: ``timeline.jsonl`` readable by hand (tens of MB at most) while every lab scenario stays full.
FULL_TIMELINE_MAX_REQUESTS = 1000
#: ... and at most this many prompt + output tokens: every walked tick advances at least one
#: token, so this bounds the number of per-tick records (about 1 KB each in memory, per case).
FULL_TIMELINE_MAX_TOKENS = 50_000
#: ... and at most this many requests × tokens: a full record lists every waiting and active
#: request by name, so this bounds the names written (about 1 million names ~ 10 MB of JSON).
FULL_TIMELINE_MAX_NAMES = 1_000_000


def run_lab(workload, config: EngineConfig | VllmKnobs, policy: str = "fcfs", source: str = "scenario:baseline",
            progress=None, timeline: str | None = None, *, sections: bool = True) -> LabRun:
    """Simulate the four cases of lab.md §4 on ``workload``; returns the finished :class:`LabRun`.

    With a :class:`VllmKnobs` ``config`` the vLLM engine runs instead (vllm-engine.md): one case
    named ``vllm``, its policy the knobs' own (``policy`` is ignored); a request that could never
    fit the KV cache raises :class:`ConfigError` before anything runs.

    ``progress``: optional display hook, see :meth:`sched.lab.engine.Simulation.run`. ``timeline`` is
    the detail level (``None``: :func:`default_timeline` for the workload's size). Every case is
    checked against the model's invariants (:mod:`sched.engines`); a broken one raises
    :class:`sched.core.invariants.InvariantError` (a :class:`SimulationError`), as does a stalled
    simulation. A workload of :data:`sched.runs.parallel.MIN_REQUESTS_FOR_WORKERS` requests or more is
    simulated in worker processes, one case per core (:mod:`sched.runs.parallel`; same results), and
    unless ``sections`` is false (artifacts that will not be written) each case's
    ``requests.jsonl``/``timeline.jsonl`` lines are rendered there too (:mod:`sched.output.case_sections`;
    the run holds temporary files until :meth:`LabRun.close`).
    """
    timeline = timeline or default_timeline(workload)
    clock = RunClock(config.ENGINE)   # the run's engine and clock, made once: every renderer asks it
    if clock.is_vllm:
        check_fits(workload, config, source)
        from ..vllm.async_step import simulate   # only a vLLM-engine run needs it (start-up); sync or async
        results = [simulate(workload, config, progress, timeline=timeline)]
        check_cases(results)
        return LabRun(workload, config, config.policy, source, results, timeline, clock=clock)
    from ..output.case_sections import open_case_sections   # only a large lab-engine run needs these (start-up)
    from .parallel import run_cases_in_workers, worth_workers
    if worth_workers(workload):  # large: the cases side by side, one per core (same results)
        cases = cases_for(config)
        # Each case's requests.jsonl/timeline.jsonl lines rendered where it is simulated (same bytes).
        sections = open_case_sections(len(cases)) if sections and timeline != "full" else None
        render = None if sections is None else sections.renderer(workload, config, policy, source, timeline)
        prelude = None if sections is None else lambda: sections.write_workload(workload)   # workload.json
        results, summaries = run_cases_in_workers(workload, config, cases, policy, progress, timeline,
                                                  render=render, prelude=prelude)
        sha256 = None if sections is None else sections.workload_sha256()   # workload.json's text stays there
        return LabRun(workload, config, policy, source, results, timeline, clock=clock, _summaries=summaries,
                      _sections=sections, _sha256=[] if sha256 is None else [sha256])
    results = run_cases(workload, config, cases_for(config), policy, progress, timeline=timeline)
    check_cases(results)
    return LabRun(workload, config, policy, source, results, timeline, clock=clock)


def default_timeline(workload) -> str:
    """``full`` for a small workload, ``counts`` above the bounds.

    Small: at most :data:`FULL_TIMELINE_MAX_REQUESTS` requests, at most
    :data:`FULL_TIMELINE_MAX_TOKENS` prompt + output tokens in all (which bounds the ticks walked),
    and at most :data:`FULL_TIMELINE_MAX_NAMES` requests × tokens (which bounds the names listed).
    """
    if len(workload) > FULL_TIMELINE_MAX_REQUESTS:
        return "counts"
    tokens = sum(spec.prompt_tokens + spec.output_tokens for spec in workload)
    small = tokens <= FULL_TIMELINE_MAX_TOKENS and len(workload) * tokens <= FULL_TIMELINE_MAX_NAMES
    return "full" if small else "counts"
