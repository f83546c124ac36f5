"""What the course asks a learner to hand in (README's course list, §2 and §8; lab.md §8).

Each run of the course is a :class:`CourseRun`: the directory ``runs/<name>`` the handbook's
command writes, whether the hand-in needs it, and how its reference is made: the golden directory
``expected/<reference>`` when the lab ships one, otherwise the same simulation built here from the
scenario, its edits and its flags (exercise 6's ``u6-640``, §11.2's ``pm-fcfs``, §17.5's vLLM runs).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..core.config import EngineConfig
from ..vllm.config import VllmKnobs
from ..workload.specs import RequestSpec, scenario

__all__ = ["CourseRun", "COURSE_RUNS", "NOTES", "EXERCISE_FILES", "HANDIN_MANIFEST", "course_run",
           "reference_workload", "reference_config"]

#: The learner's two notes, written in the lab folder from the templates shipped there.
NOTES = ("prediction.md", "diagnosis.md")
#: Exercise files the handbook has the learner write (exercise 6); packed when present.
EXERCISE_FILES = ("my-workload.json",)
#: The hand-in's own record: lab version, runs, every packed file's sha256.
HANDIN_MANIFEST = "HANDIN.json"


@dataclass(frozen=True)
class CourseRun:
    """One run of the course.

    name: the run directory under ``runs/``; command: the handbook's command that makes it;
    exercise: where the handbook asks for it; required: a hand-in without it is refused;
    reference: the golden directory under ``expected/``, or ``None`` (then simulated from the
    fields below); scenario, edits (``(request, field, value)`` applied to the scenario's
    workload), source (the manifest's ``source`` of the handbook's command), policy,
    timeout_ticks, and vllm (the :class:`VllmKnobs` fields of an ``--engine vllm`` run, else ``None``).
    """

    name: str
    command: str
    exercise: str
    required: bool
    reference: str | None = None
    scenario: str = "baseline"
    edits: tuple = ()
    source: str | None = None
    policy: str = "fcfs"
    timeout_ticks: int | None = None
    vllm: tuple | None = None

    @property
    def directory(self) -> str:
        """``runs/<name>``, as the handbook's command writes it (``/``-separated)."""
        return f"runs/{self.name}"


_VLLM_64_4 = (("max_num_batched_tokens", 64), ("max_num_seqs", 4))
_VLLM_APC = _VLLM_64_4 + (("long_prefill_token_threshold", 32), ("enable_prefix_caching", True))

#: The course's runs in handbook order: the five of the core course are required.
COURSE_RUNS = (
    CourseRun("baseline", "python3 infer_sched_lab.py --artifacts runs/baseline", "course step 2, exercises 1-2",
              True, reference="baseline"),
    CourseRun("prefix-broken", "python3 infer_sched_lab.py --scenario prefix-broken --artifacts runs/prefix-broken",
              "exercise 3", True, reference="prefix-broken", scenario="prefix-broken"),
    CourseRun("deadline30", "python3 infer_sched_lab.py --timeout-ticks 30 --artifacts runs/deadline30",
              "exercise 4", True, reference="deadline30", timeout_ticks=30),
    CourseRun("output-heavy", "python3 infer_sched_lab.py --scenario output-heavy --artifacts runs/output-heavy",
              "exercise 5", True, reference="output-heavy", scenario="output-heavy"),
    CourseRun("u6-640", "python3 infer_sched_lab.py --workload my-workload.json --artifacts runs/u6-640",
              "exercise 6", True, edits=(("U6", "suffix_tokens", 640),), source="workload:my-workload.json"),
    CourseRun("pm-fcfs", "python3 infer_sched_lab.py --scenario priority-mix --artifacts runs/pm-fcfs",
              "section 11.2", False, scenario="priority-mix"),
    CourseRun("pm-priority",
              "python3 infer_sched_lab.py --scenario priority-mix --policy priority --artifacts runs/pm-priority",
              "section 11.2", False, reference="priority-mix", scenario="priority-mix", policy="priority"),
    CourseRun("lab", "python3 infer_sched_lab.py --artifacts runs/lab", "section 17.5", False, reference="baseline"),
    CourseRun("vllm", "python3 infer_sched_lab.py --engine vllm --max-num-batched-tokens 64 --max-num-seqs 4 "
              "--artifacts runs/vllm", "section 17.5", False, vllm=_VLLM_64_4),
    CourseRun("vllm-apc", "python3 infer_sched_lab.py --engine vllm --max-num-batched-tokens 64 --max-num-seqs 4 "
              "--long-prefill-token-threshold 32 --enable-prefix-caching --artifacts runs/vllm-apc",
              "section 17.5", False, vllm=_VLLM_APC),
    CourseRun("vllm41", "python3 infer_sched_lab.py --engine vllm --max-num-batched-tokens 64 --max-num-seqs 4 "
              "--long-prefill-token-threshold 32 --enable-prefix-caching --num-gpu-blocks 41 --artifacts runs/vllm41",
              "section 17.5", False, vllm=_VLLM_APC + (("num_gpu_blocks", 41),)),
)


def course_run(name: str) -> CourseRun | None:
    """The course run called ``name``, or ``None``."""
    return next((run for run in COURSE_RUNS if run.name == name), None)


def reference_workload(run: CourseRun) -> list[RequestSpec]:
    """The workload the handbook's command for ``run`` simulates: the scenario with ``run.edits``."""
    workload = scenario(run.scenario)
    for request, field, value in run.edits:
        workload = [dataclasses.replace(spec, **{field: value}) if spec.name == request else spec
                    for spec in workload]
    return workload


def reference_config(run: CourseRun) -> EngineConfig | VllmKnobs:
    """The engine configuration of the handbook's command for ``run`` (lab defaults, lab.md §3)."""
    if run.vllm is not None:
        return VllmKnobs(policy=run.policy, timeout_ticks=run.timeout_ticks, **dict(run.vllm))
    return EngineConfig(timeout_ticks=run.timeout_ticks)
