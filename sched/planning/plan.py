"""``plan``: every setting's capacity under an SLO, on local processes or a Dask cluster.

:func:`run_plan` sends one task per (step model, setting) to a ``concurrent.futures.Executor`` (the
sweep's code: a process pool over the cores by default, whose workers are ended on Ctrl-C or any
error; or a Dask cluster's executor, :mod:`sched.runs.cluster`): a task is the whole search of
:func:`sched.planning.search.find_capacity` for one setting, so settings spread over workers and the
time falls with their number. Settings whose runs are provably another's are not searched again
(:class:`sched.planning.same_runs.SharedSearches`): one search per group goes first, and a group's
next search is sent only when the one before did not settle it. :func:`plan_document` and :func:`plan_files` turn the results into the
table, ``plan.json``, ``pareto.svg`` and ``manifest.json`` (:mod:`sched.planning.report`).
"""

from __future__ import annotations

import math
import os
import signal
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait

from ..runs.worker_pool import mask_stop_signals, stop_workers, worker_signals
from ..timing.msrun import settle_knobs
from ..workload.specs import workload_sha256
from .grid import flag_words, setting_problem
from .pareto import render_pareto_svg
from .report import cell, recommend, render_plan_json, render_table, replicas_for, reproduce_command, sort_key
from .same_runs import SharedSearches
from .search import find_capacity

__all__ = ["PlanSpec", "settle_settings", "run_plan", "plan_document", "plan_files", "PLAN_FILES"]

#: The files a plan directory holds; ``--force`` replaces these and nothing else.
PLAN_FILES = ("plan.txt", "plan.json", "pareto.svg", "manifest.json")


class PlanSpec:
    """What a plan searches: the workload, step models (name, path, :class:`StepModel`, the ``--gpu``
    it was carried to or ``None``), the grid
    (list of dicts of searched knobs), the SLO (``goodput`` ms limits, ``target`` attainment) and the
    search's ``resolution``, ``burstiness``, ``seed``, ``min_rate``, ``max_rate`` (req/s) and the
    client's ``max_concurrency`` (``None``: no limit)."""

    def __init__(self, workload, workload_path, models, grid, goodput, target, resolution, burstiness, seed,
                 min_rate, max_rate, max_concurrency=None):
        self.workload, self.workload_path, self.models, self.grid = workload, workload_path, models, grid
        self.goodput, self.target, self.resolution = goodput, target, resolution
        self.burstiness, self.seed, self.min_rate, self.max_rate = burstiness, seed, min_rate, max_rate
        self.max_concurrency = max_concurrency


def blocks_for(model, carried, utilization: float, block_size: int, sizing: dict) -> int:
    """``num_gpu_blocks`` for ``--gpu-memory-utilization`` as vLLM sizes its KV cache
    (:func:`sched.timing.kvsize.derive_num_gpu_blocks`: the GPU's memory × utilization − the weights,
    over block size × KV bytes per token; activations not counted, so an upper bound). The GPU is the
    one the model was carried to, else the one it was fitted on; ``sizing``: ``kv_bytes_per_token``
    and ``weights_bytes`` (``None``: from the parameter count in the model's name). Raises ValueError."""
    from ..base.cmdline import InputError
    from ..timing.gpus import find_gpu
    from ..timing.kvsize import GIB, derive_num_gpu_blocks, weights_from_name
    try:
        gpu = find_gpu(carried or model.fitted_on.get("device") or "", "--gpu-memory-utilization: the step model's GPU")
        weights = sizing.get("weights_bytes") or weights_from_name(model.fitted_on.get("model"))
        if weights is None:
            raise ValueError("--gpu-memory-utilization: the weights' size is unknown (no parameter count in the "
                             "model's name); give --weights-gb")
        return derive_num_gpu_blocks(gpu.memory_gb * GIB, utilization, weights, sizing["kv_bytes_per_token"],
                                     block_size, "--gpu-memory-utilization")
    except InputError as exc:
        raise ValueError(str(exc)) from None


def settle_settings(spec: PlanSpec, sizing: dict | None = None) -> list[tuple]:
    """``[(model index, searched knobs, VllmKnobs)]`` for every model × setting; raises
    :class:`ValueError` with vLLM's reason for a combination it would refuse. A searched
    ``gpu_memory_utilization`` becomes the ``num_gpu_blocks`` it gives on each GPU (:func:`blocks_for`)."""
    tasks = []
    for index, (_, _, model, carried) in enumerate(spec.models):
        for searched in spec.grid:
            given = {k: v for k, v in searched.items() if k not in ("policy", "gpu_memory_utilization")}
            if "gpu_memory_utilization" in searched:
                block_size = given.get("block_size", model.settings["block_size"])
                given["num_gpu_blocks"] = blocks_for(model, carried, searched["gpu_memory_utilization"], block_size,
                                                     sizing or {})
            knobs, _ = settle_knobs(model, given, searched.get("policy"), None)
            problem = setting_problem(knobs)
            if problem:
                raise ValueError(problem)
            tasks.append((index, searched, knobs))
    return tasks


def _search_task(workload, knobs, model, goodput, target, resolution, burstiness, seed, min_rate, max_rate,
                 max_concurrency):
    """One setting's search (runs in a worker)."""
    return find_capacity(workload, knobs, model, goodput, target, resolution, burstiness, seed, min_rate, max_rate,
                         max_concurrency)


def run_plan(spec: PlanSpec, tasks: list[tuple], executor: Executor | None = None, max_workers: int | None = None,
             progress=None, shared: SharedSearches | None = None, spare: int = 0) -> list[dict]:
    """Search every task (:func:`settle_settings`) and return their results in task order.

    ``executor``: any executor (left running); ``None`` starts a process pool of ``max_workers``
    (default: all cores), ended on any exception (Ctrl-C and SIGTERM included) so no worker outlives
    the plan. ``progress(done, total)`` is called as searches finish (``done``: settings with a
    result). ``shared`` (made here when ``None``): which searches run, and which settings take the
    result of another's because their runs are provably the same
    (:class:`sched.planning.same_runs.SharedSearches`): each group's next search is sent when the
    one before did not settle it. While fewer searches than workers are in flight (the pool's
    workers, or ``spare`` for an executor), a group's next search starts at once instead
    (speculatively: the wall time stays that of one search per setting, the CPU may grow).
    """
    shared = shared or SharedSearches(spec.workload, tasks, spec.max_concurrency)
    own = executor is None
    workers = max_workers or os.cpu_count() or 1
    slots = workers if own else spare
    pool = ProcessPoolExecutor(max_workers=workers, initializer=worker_signals) if own else executor
    futures: dict = {}

    def submit(number: int) -> None:
        if own:
            mask_stop_signals(signal.SIG_BLOCK)   # a submit may fork a worker
        try:
            futures[pool.submit(_search_task, spec.workload, tasks[number][2], spec.models[tasks[number][0]][2],
                                spec.goodput, spec.target, spec.resolution, spec.burstiness, spec.seed,
                                spec.min_rate, spec.max_rate, spec.max_concurrency)] = number
        finally:
            if own:
                mask_stop_signals(signal.SIG_UNBLOCK)

    def fill() -> None:
        while (number := shared.take()) is not None:
            submit(number)
        while len(futures) < slots and (number := shared.take(speculate=True)) is not None:
            submit(number)

    try:
        fill()
        while futures and not shared.done:
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in done:
                shared.resolve(futures.pop(future), future.result())
            for future, number in list(futures.items()):
                if number in shared.results and future.cancel():   # settled before it started
                    del futures[future]
            fill()
            if progress is not None:
                progress(len(shared.results), len(tasks))
        for future in futures:   # speculative searches whose settings were settled meanwhile
            future.cancel()
        if own and futures:
            stop_workers(pool)   # one may be running: its result is not needed
        return shared.ordered_results()
    except BaseException:
        if own:
            stop_workers(pool)
        raise
    finally:
        if own:
            pool.shutdown()


def _run_flags(searched: dict, knobs) -> dict:
    """The run's flags for a searched setting: a ``gpu_memory_utilization`` is the ``num_gpu_blocks`` it gave."""
    if "gpu_memory_utilization" not in searched:
        return searched
    flags = {k: v for k, v in searched.items() if k != "gpu_memory_utilization"}
    flags["num_gpu_blocks"] = knobs.num_gpu_blocks
    return flags


def _finite(value):
    """JSON-safe: ``inf`` as ``"inf"`` (plan.json is strict JSON), recursively."""
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _knob_settings(knobs) -> dict:
    return {"max_num_batched_tokens": knobs.max_num_batched_tokens, "max_num_seqs": knobs.max_num_seqs,
            "long_prefill_token_threshold": knobs.long_prefill_token_threshold,
            "enable_prefix_caching": knobs.enable_prefix_caching, "block_size": knobs.block_size,
            "num_gpu_blocks": knobs.num_gpu_blocks, "policy": knobs.policy,
            "async_scheduling": knobs.async_scheduling}


def plan_document(spec: PlanSpec, tasks: list[tuple], results: list[dict], target_rate: float | None) -> dict:
    """``plan.json``'s content (:mod:`sched.planning.report`)."""
    configs = []
    for (index, searched, knobs), result in zip(tasks, results):
        name, path, model, carried = spec.models[index]
        metrics = result["metrics"]
        check = result["check"]
        configs.append(_finite({
            "gpu": (model.fitted_on.get("carried_to") or {}).get("gpu") or model.fitted_on.get("device") or name,
            "carried_to_gpu": carried, "step_model": name, "settings": _knob_settings(knobs),
            "searched": searched, "max_request_rate": result["max_request_rate"], "resolution": spec.resolution,
            "metrics": metrics, "non_monotone": result["non_monotone"], "bound": result["bound"],
            "check": None if check is None else {"request_rate": check["request_rate"],
                                                 "slo_attainment": check["slo_attainment"]},
            "points": result["points"],
            "command": None if result["max_request_rate"] is None else reproduce_command(
                spec.workload_path, path, _run_flags(searched, knobs), result["max_request_rate"], spec.goodput,
                spec.burstiness,
                spec.seed, spec.max_concurrency, carried)}))
    return {"tool": "infer-sched-lab plan", "kind": "plan", "workload": os.path.basename(spec.workload_path),
            "workload_sha256": workload_sha256(spec.workload), "num_requests": len(spec.workload),
            "slo": {"goodput_ms": spec.goodput, "attainment": spec.target}, "resolution": spec.resolution,
            "burstiness": _finite(spec.burstiness), "seed": spec.seed, "max_concurrency": spec.max_concurrency,
            "rate_bounds": {"min_rate": spec.min_rate, "max_rate": spec.max_rate},
            "assumes": ["one replica per setting, on the GPU its step model was fitted on",
                        "arrivals as vllm bench serve sends them (gamma gaps, this seed and burstiness)",
                        "replicas: perfect balance (a lower bound)"],
            "configs": configs, "recommendation": recommend(configs), "replicas": replicas_for(configs, target_rate)}


def _chart_items(configs: list[dict]) -> list[dict]:
    """One chart item per setting, numbered as the table lists them (highest rate first)."""
    items = []
    for number, c in enumerate(sorted(configs, key=sort_key), 1):
        m = c["metrics"] or {}
        median_tpot = m.get("median_tpot_ms")
        label = " ".join(f"{k.replace('_', '-')}={v}" for k, v in c["searched"].items()) or "fitted settings"
        items.append({"number": number, "label": f"{c['gpu']}: {label}",
                      "goodput_per_gpu": m.get("request_goodput") if isinstance(m.get("request_goodput"), float) else None,
                      "p95_ttft_ms": m.get("p95_ttft_ms"),
                      "tokens_per_s_per_user": 1000 / median_tpot if median_tpot else None})
    return items


def _margin_text(margin: float | None, resolution: float) -> str:
    """The recommendation's margin over the next slower setting; each answer lies within ``resolution``
    below its true boundary, so a smaller margin ranks nothing and is said so (two decimals then)."""
    if margin is None:
        return ""
    if margin < resolution:
        return (f"; {margin:+.2%} over the next slower setting (below the {resolution:.2%} resolution: the "
                "search cannot tell them apart)")
    return f"; {margin:+.1%} over the next slower setting"


def _recommended_flags(configs: list[dict], rec: dict) -> str:
    """The recommended setting as the vLLM flags the plan searched (``--max-num-batched-tokens 2048
    --num-gpu-blocks 2588``; a ``--gpu-memory-utilization`` with the ``num_gpu_blocks`` it gave), or
    ``(the step model's settings)`` when no flag was searched. The full settings stay in ``plan.json``."""
    best = next((c for c in configs if c["command"] == rec["command"] and c["settings"] == rec["settings"]), None)
    searched = {} if best is None else dict(best["searched"])
    share = searched.pop("gpu_memory_utilization", None)
    words = flag_words(searched)
    if share is not None:
        words += ["--gpu-memory-utilization", f"{share:g}", f"(num-gpu-blocks {rec['settings']['num_gpu_blocks']})"]
    return " ".join(words) if words else "(the step model's settings)"


def plan_files(document: dict, searched_fields: list[str], same_runs: dict[int, tuple] | None = None) -> dict[str, str]:
    """Every file of a plan directory by name (:data:`PLAN_FILES`); ``same_runs``: settings not searched
    because their runs are another's (:attr:`sched.planning.same_runs.SharedSearches.same_as`), said
    in the table."""
    configs = document["configs"]
    table = render_table(configs, searched_fields, document["slo"]["attainment"], document["resolution"], same_runs)
    rec, replicas = document["recommendation"], document["replicas"]
    if rec is None:
        table += "recommendation: none (no monotone setting meets the SLO at any rate searched)\n"
    else:
        margin = rec["margin_over_runner_up"]
        evidence = rec["evidence"]
        table += (f"recommendation: {rec['gpu']} {_recommended_flags(configs, rec)} at up to "
                  f"{cell(rec['max_request_rate'], 3)} req/s (attainment {cell(evidence['slo_attainment_at_rate'], 3)}, "
                  f"and {cell(evidence['slo_attainment_above'], 3)} at {cell(evidence['rate_above'], 3)} req/s)"
                  + _margin_text(margin, document["resolution"])
                  + (f"; tied with {len(rec['tied_with'])} other setting(s) at this rate" if rec["tied_with"] else "")
                  + "\n")
        table += f"reproduce: {rec['command']}\n"
    if replicas is not None:
        table += (f"replicas for {replicas['target_rate']:g} req/s: at least {replicas['replicas']} "
                  f"(perfect balance assumed: a lower bound)\n")
    slo = " ".join(f"{k}:{v:g}" for k, v in document["slo"]["goodput_ms"].items())
    title = (f"goodput per GPU at each setting's highest rate with >= {document['slo']['attainment']:g} of requests "
             f"within {slo} ms ({document['workload']}, {document['num_requests']} requests)")
    manifest = {key: document[key] for key in ("tool", "kind", "workload", "workload_sha256", "num_requests", "slo",
                                               "resolution", "burstiness", "seed")}
    return {"plan.txt": table, "plan.json": render_plan_json(document),
            "pareto.svg": render_pareto_svg(_chart_items(configs), title),
            "manifest.json": render_plan_json(manifest)}
