"""The GPU-free stand-in for the chapter's real-engine experiment (serving-bench.md §4): ``serving-bench simulate``.

The chapter's experiment: one frozen workload of 8 requests at two priority levels (4 urgent at
priority 0, 4 low at the chapter's low class 5), a closed-loop client of concurrency 8 with a
synchronised start, the server at ``--max-num-seqs 2``, warm-up runs, then repeats; two groups
that differ only in ``--scheduling-policy`` (``fcfs`` → ``priority``) and whether the workload's
priorities are sent. Here the server is the lab's vLLM engine (vLLM 0.33.0's v1 scheduler rules,
vllm-engine.md) timed by a step model (``step_ms = a + b·prompt + c·decode``, vllm-engine.md §6),
on a clock of whole microseconds; every time written is in milliseconds.

:func:`simulate_pair` returns the two result files in the chapter runner's shape (see
:mod:`sched.chapter.groups`), each saying ``"simulated": true`` and ``"evidence_level":
"simulated_scheduler_run"``; ``serving-bench decide`` takes them and writes an evidence record
whose ``evidence_level`` is ``simulated_scheduler_pair``.

Per repeat and request: ``ttft_ms`` = first token − arrival at the engine, ``e2e_ms`` = last
token − arrival, ``tpot_ms`` = (e2e − ttft) / (output tokens − 1). Per repeat:
``output_token_throughput_per_s`` = output tokens / (last token − first arrival) in seconds;
``priority_first_token_order_score`` = over every pair of requests of different priority, the
fraction in which the more urgent one got its first token first (a tie counts one half: 0.5 is
no preference, 1.0 every urgent request before every less urgent one); ``priority_order_score``
the same over completion times. Top level: the means of the repeats' scores and throughputs,
and ``ttft_ms``/``tpot_ms`` (mean, p50, p95 by linear interpolation) over every repeat's
requests; ``successful_requests`` is the workload's count when every repeat completed it (the
runner's convention), else the smallest repeat's count.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, replace

from ..engines import check_cases
from ..timing.stepmodel import StepModel
from ..vllm.config import VllmKnobs, check_fits
from ..vllm.async_step import simulate
from ..workload.specs import RequestSpec
from .groups import FAILURE_SCHEMA, p95_linear

__all__ = ["Experiment", "DEFAULT_STEP_MODEL", "chapter_workload", "simulate_pair", "URGENT", "LOW_CLASS"]

URGENT, LOW_CLASS = 0, 5
#: The chapter's frozen workload: (name, prompt tokens, output tokens, priority), in sending order.
_CHAPTER_REQUESTS = (("h0", 32, 16, URGENT), ("l0", 256, 64, LOW_CLASS), ("h1", 48, 16, URGENT),
                     ("l1", 224, 64, LOW_CLASS), ("h2", 40, 16, URGENT), ("l2", 288, 64, LOW_CLASS),
                     ("h3", 36, 16, URGENT), ("l3", 240, 64, LOW_CLASS))
#: The step model used when none is given: fitted by ``calibrate`` on the course's real run
#: (meta-llama/Llama-3.1-8B on an RTX 4090, first 150 of 300 requests; docs/handbook/calibration.md §18). Its KV and
#: batching settings are kept; ``max_num_seqs`` and the policy are the experiment's.
DEFAULT_STEP_MODEL = StepModel(
    a_ms=24.527162, b_ms=0.086245136, c_ms=0.0,
    settings={"num_gpu_blocks": 2588, "block_size": 16, "max_num_batched_tokens": 2048, "max_num_seqs": 256,
              "long_prefill_token_threshold": 0, "enable_prefix_caching": True, "policy": "fcfs"},
    fitted_on={"model": "meta-llama/Llama-3.1-8B", "device": "NVIDIA GeForce RTX 4090", "vllm_version": "0.19.0",
               "source": "the course's llmservingsim vLLM RTX 4090 run, calibrate --train-first 150"})
GROUPS = (("g0_fcfs", "baseline", "fcfs", False), ("g1_priority", "candidate", "priority", True))


@dataclass(frozen=True)
class Experiment:
    """The experiment's settings (the chapter's defaults).

    ``max_num_seqs`` (vLLM's flag), ``warmup`` and ``repeats`` (runs), ``jitter_ms`` (each
    request reaches the engine a seeded uniform 0..jitter ms after the synchronised start, drawn
    per repeat, the same for both groups), ``early`` (request name → ms it reaches the engine
    before the others), ``urgent_stream`` (``(count, every_ms)``: that many more urgent requests
    ``u0, u1, ...`` arriving open-loop, one every ``every_ms`` ms from 0), ``seed``, and
    ``num_gpu_blocks`` (vLLM's KV blocks including the null block; ``None`` keeps the step model's).
    """

    max_num_seqs: int = 2
    warmup: int = 2
    repeats: int = 5
    concurrency: int = 8
    jitter_ms: float = 0.0
    early: tuple = ()
    urgent_stream: tuple | None = None
    seed: int = 0
    num_gpu_blocks: int | None = None


def chapter_workload(experiment: Experiment) -> list[RequestSpec]:
    """The workload's requests (arrival 0; ``arrival`` set per repeat by :func:`_arrivals_us`)."""
    specs = [RequestSpec(name, 0, None, 0, prompt, output, priority)
             for name, prompt, output, priority in _CHAPTER_REQUESTS]
    if experiment.urgent_stream:
        count, _ = experiment.urgent_stream
        specs += [RequestSpec(f"u{k}", 0, None, 0, 40, 16, URGENT) for k in range(count)]
    return specs


def workload_record(specs: list[RequestSpec], experiment: Experiment) -> dict:
    """The result files' ``workload`` object: id, request count, sha256 of the requests and arrivals."""
    rows = [[s.name, s.prompt_tokens, s.output_tokens, s.priority] for s in specs]
    text = json.dumps({"requests": rows, "early": sorted(experiment.early), "urgent_stream": experiment.urgent_stream},
                      separators=(",", ":"))
    name = "chapter-8-two-levels" + (f"+urgent-stream-{experiment.urgent_stream[0]}x{experiment.urgent_stream[1]:g}ms"
                                     if experiment.urgent_stream else "")
    return {"id": name, "request_count": len(specs), "priorities": sorted({s.priority for s in specs}),
            "workload_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def _arrivals_us(specs, experiment: Experiment, run: int) -> list[int]:
    """Each request's arrival at the engine in µs for run ``run`` (warm-ups first), earliest at 0."""
    rng = random.Random(f"{experiment.seed}:{run}")
    early = dict(experiment.early)
    stream = experiment.urgent_stream
    arrivals = []
    for spec in specs:
        ms = rng.uniform(0, experiment.jitter_ms) if experiment.jitter_ms else 0.0
        if stream and spec.name.startswith("u") and spec.name[1:].isdigit():
            ms += int(spec.name[1:]) * stream[1]
        arrivals.append(ms - early.get(spec.name, 0.0))
    first = min(arrivals)
    return [round((ms - first) * 1000) for ms in arrivals]


def _pair_score(specs, times) -> float | None:
    """Fraction of differently prioritised pairs in which the more urgent request came first (ties ½)."""
    total = won = 0.0
    for i, a in enumerate(specs):
        for b, tb in zip(specs[i + 1:], times[i + 1:]):
            if a.priority == b.priority or times[i] is None or tb is None:
                continue
            urgent, other = (times[i], tb) if a.priority < b.priority else (tb, times[i])
            total += 1
            won += 1.0 if urgent < other else 0.5 if urgent == other else 0.0
    return round(won / total, 4) if total else None


def _r3(us):
    return round(us / 1000, 3)


def _one_run(specs, knobs: VllmKnobs, model: StepModel, arrivals: list[int], send_priority: bool) -> dict:
    clocked = [replace(spec, arrival=at, priority=spec.priority if send_priority else 0)
               for spec, at in zip(specs, arrivals)]
    check_fits(clocked, knobs, "the chapter's workload")
    # Sync or async as the step model's settings say; its KV term too (step_time asks for the blocks when d > 0).
    result = simulate(clocked, knobs, timeline="off", step_time=model.step_time())
    check_cases([result])
    rows, firsts, lasts = [], [], []
    for spec, request in zip(specs, sorted(result.requests, key=lambda r: r.index)):
        times = request.token_times if request.done_at is not None else []
        first, last = (times[0], times[-1]) if times else (None, None)
        firsts.append(first)
        lasts.append(last)
        ttft = None if first is None else first - request.spec.arrival
        e2e = None if last is None else last - request.spec.arrival
        rows.append({"request_id": spec.name, "priority": spec.priority, "ok": last is not None,
                     "arrival_ms": _r3(request.spec.arrival), "ttft_ms": None if ttft is None else _r3(ttft),
                     "e2e_ms": None if e2e is None else _r3(e2e),
                     "tpot_ms": (_r3((e2e - ttft) / (len(times) - 1)) if len(times) > 1 else None),
                     "output_tokens": len(times), "num_preemptions": request.num_preemptions,
                     "output_text": f"(simulated: {len(times)} output tokens)"})
    done = [t for t in lasts if t is not None]
    span_us = (max(done) - min(arrivals)) if done else 0
    tokens = sum(r["output_tokens"] for r in rows)
    metrics = {"successful_requests": sum(r["ok"] for r in rows), "failed_requests": sum(not r["ok"] for r in rows),
               "priority_first_token_order_score": _pair_score(specs, firsts),
               "priority_order_score": _pair_score(specs, lasts),
               "output_token_throughput_per_s": round(tokens / (span_us / 1e6), 4) if span_us else None,
               **_latency([r for r in rows if r["ok"]])}
    return {"metrics": metrics, "results": rows}


def _latency(rows: list[dict]) -> dict:
    out = {}
    for key in ("ttft_ms", "tpot_ms"):
        values = [r[key] for r in rows if r[key] is not None]
        out[key] = ({"mean": round(sum(values) / len(values), 4), "p50": round(_p50(values), 4),
                     "p95": round(p95_linear(values), 4)} if values else None)
    return out


def _p50(values):
    ordered = sorted(values)
    mid = (len(ordered) - 1) / 2
    low = int(mid)
    return ordered[low] + (ordered[min(low + 1, len(ordered) - 1)] - ordered[low]) * (mid - low)


def _mean(values):
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values), 4) if values else None


def simulate_pair(experiment: Experiment = Experiment(), model: StepModel = DEFAULT_STEP_MODEL,
                  model_source: str = "built-in") -> dict[str, dict]:
    """The two groups' result files (``{"g0_fcfs.json": {...}, "g1_priority.json": {...}}``, JSON-ready).

    Each group runs ``warmup`` discarded runs, then ``repeats`` recorded runs, on the same
    per-run arrivals. Raises :class:`sched.core.config.ConfigError` when a request can never fit
    the step model's KV cache.
    """
    specs = chapter_workload(experiment)
    workload = workload_record(specs, experiment)
    total = experiment.warmup + experiment.repeats
    arrivals = [_arrivals_us(specs, experiment, run) for run in range(total)]
    files = {}
    for key, role, policy, send in GROUPS:
        knobs = VllmKnobs(**_settings(model, experiment), policy=policy)
        runs = [_one_run(specs, knobs, model, arrivals[run], send) for run in range(total)][experiment.warmup:]
        runs = [dict(repeat=k, **run) for k, run in enumerate(runs)]
        files[f"{key}.json"] = _group_file(key, role, policy, send, runs, specs, workload, experiment, model,
                                           model_source)
    return files


def _settings(model: StepModel, experiment: Experiment) -> dict:
    """The engine settings of a group (vLLM's names, without the policy): the step model's, with the
    experiment's ``max_num_seqs`` and, when given, its ``num_gpu_blocks``."""
    settings = {k: v for k, v in model.settings.items() if k != "policy"}
    settings["max_num_seqs"] = experiment.max_num_seqs
    if experiment.num_gpu_blocks is not None:
        settings["num_gpu_blocks"] = experiment.num_gpu_blocks
    return settings


def _group_file(key, role, policy, send, runs, specs, workload, experiment: Experiment, model: StepModel,
                model_source: str) -> dict:
    ok_rows = [row for run in runs for row in run["results"] if row["ok"]]
    counts = [run["metrics"]["successful_requests"] for run in runs]
    metrics = {"successful_requests": len(specs) if min(counts) == len(specs) else min(counts),
               "failed_requests": max(run["metrics"]["failed_requests"] for run in runs),
               **{name: _mean([run["metrics"][name] for run in runs])
                  for name in ("priority_first_token_order_score", "priority_order_score",
                               "output_token_throughput_per_s")},
               **_latency(ok_rows)}
    config = {"backend": "infer-sched-lab vLLM engine (vLLM 0.33.0 v1 scheduler rules), simulated",
              "generated_tokens": max(s.output_tokens for s in specs), "warmup": experiment.warmup,
              "repeats": experiment.repeats, "jitter_ms": experiment.jitter_ms,
              "early_ms": dict(experiment.early), "urgent_stream": experiment.urgent_stream, "seed": experiment.seed,
              "step_model": {"formula": model.formula, "a_ms": model.a_ms, "b_ms": model.b_ms, "c_ms": model.c_ms,
                             "source": model_source, "fitted_on": model.fitted_on},
              "engine_settings": {**_settings(model, experiment), "scheduling_policy": policy}}
    return {
        "schema_version": FAILURE_SCHEMA, "status": "ok", "simulated": True,
        "evidence_level": "simulated_scheduler_run",
        "note": "SIMULATED by infer-sched-lab serving-bench simulate (the lab's vLLM engine with a step model): "
                "not a measurement on any GPU",
        "scheduler_identity": {"name": key, "role": role, "scheduler_policy": policy, "send_priority": send,
                               "model_path": None, "profile_id": "infer-sched-lab-simulated",
                               "workload": workload["id"], "concurrency": experiment.concurrency,
                               "max_num_seqs": experiment.max_num_seqs, "synchronized_start": True},
        "workload": workload,
        "metrics": metrics,
        "normalized_result": {"config": config, "metrics": {k: metrics[k] for k in (
            "successful_requests", "failed_requests", "output_token_throughput_per_s")}},
        "runs": runs,
    }
