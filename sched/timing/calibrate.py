"""Calibrating the vLLM engine's step time on a real run and predicting what it never saw (vllm-engine.md §6).

``calibrate RUN.jsonl [--meta META.json] --train-first N --out DIR``:

1. **Read the run** with the importer of ``import-results`` (:mod:`sched.timing.realrun`): the
   ``request-jsonl`` format with its ``meta.json``, or a ``vllm bench serve --save-detailed``
   result whose metadata names the engine settings. Every request must have finished; the
   engine settings (KV blocks, block size, budget, slots, chunk threshold, prefix caching,
   policy) come from the meta file, and a meta file that contradicts itself or the run (another
   request count, two different block counts, a request that could never fit its KV cache) is
   refused.
2. **Turn it into a workload** (``DIR/workload.json``): request ``name`` = the run's
   ``request_id``, ``arrival`` in whole milliseconds of the run's own clock from its first
   request (header ``tick_ms: 1``), prompt and output lengths as measured; no shared prefix is
   known (the file has token counts, not text).
3. **Fit** ``step_ms = a + b·prompt + c·decode`` (:mod:`sched.timing.fit`) on the first N requests by
   arrival: the whole run is replayed through the vLLM engine with its own settings, and only
   the first N requests' TTFT and E2E enter the loss. ``DIR/step-model.json`` keeps the result
   with its settings and provenance (:mod:`sched.timing.stepmodel`).
4. **Judge** it on the other requests only (:mod:`sched.timing.calibration_report`): percentiles of
   TTFT, E2E, queue wait and TPOT, measured against predicted, beside a constant step (the
   median measured TPOT of the training requests) and the ablation of the KV-cache rules; the
   running and waiting counts against the run's ``timeseries.csv`` when it is beside the file.
   ``DIR/calibration.txt`` holds what is printed, ``DIR/calibration.json`` the same numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
from dataclasses import dataclass, field

from . import realrun
from ..base.safe_write import ArtifactError, check_target, write_artifacts
from .calibration_report import counts_error, percentile_table, render_calibration
from ..base.cmdline import EXIT_OK, InputError, LineParser, integer, parse_json, run_command
from .fit import fit_coefficients
from .replay import replay as replay_run
from .runmeta import (FLAT_PLACES, check_fits_cache, check_meta_against_run, identity_from_meta, read_timeseries,
                      settings_from)
from .stepmodel import MIN_STEP_MS, StepModel, limits_for, step_model_to_json
from ..workload.specs import RequestSpec, workload_to_json
from ..workload.validation import name_problem

__all__ = ["RealRun", "load_real_run", "run_workload", "training_split", "median_tpot", "calibrate", "render_files",
           "command", "ABLATION"]


@dataclass(frozen=True)
class RealRun:
    """A real run ready to replay.

    ``records``: the importer's normalised requests (ms from the first arrival), in arrival order;
    ``settings``: :data:`sched.timing.stepmodel.SETTINGS` keys; ``fitted_on``: identity (model, device,
    vLLM version, async scheduling, source file and sha256); ``timeseries``: ``(t in s, running,
    waiting)`` rows or ``None``; ``notes``: assumptions taken (defaults used), one sentence each.
    """

    records: list
    settings: dict
    fitted_on: dict
    timeseries: list | None = None
    notes: list = field(default_factory=list)


def _read(path: str, what: str) -> str:
    return realrun.read_result_text(path, what)  # the reader of import-results (a BOM is accepted)


def load_real_run(path: str, meta_path: str | None = None) -> RealRun:
    """Read a real run (module docstring, step 1); raises :class:`~sched.base.cmdline.InputError`.

    ``meta_path`` defaults to ``meta.json`` beside ``path`` (request-jsonl); ``timeseries.csv``
    beside it is read when present.
    """
    text = _read(path, "result file")
    fmt = realrun._detect(text, path)
    directory = os.path.dirname(path)  # messages name meta.json as the user gave the run
    if meta_path is not None and not os.path.lexists(meta_path):
        raise InputError(f"{meta_path}: no such meta file (--meta)")
    meta_path = meta_path or os.path.join(directory, "meta.json")
    if fmt == "request-jsonl":
        if not os.path.exists(meta_path):
            raise InputError(f"{path}: the engine settings are unknown: no meta.json beside the file (pass --meta)")
        meta = parse_json(_read(meta_path, "meta.json"), meta_path, non_finite_as_none=True)
        _, records, _ = realrun.import_request_jsonl(text, path, meta=meta, meta_source=meta_path)
        settings, notes = settings_from(meta, meta_path)
        check_meta_against_run(meta, meta_path, records, path)
        identity = identity_from_meta(meta)
    else:
        manifest, records, _ = realrun.import_vllm_bench(text, path)
        run = realrun._vllm_runs(text, path)[0]
        settings, notes = settings_from(run, path, places=FLAT_PLACES)
        identity = {"model": run.get("model_id"), "device": run.get("device") or run.get("gpu"),
                    "vllm_version": run.get("vllm_version"), "async_scheduling": run.get("async_scheduling")}
    seen: dict = {}
    for index, record in enumerate(records):
        problem = name_problem(record["name"])
        if problem:  # the id becomes the workload's request name: refuse what the run would refuse
            raise InputError(f"{path}: request {index}: field 'request_id': {problem} (it becomes the request's "
                             "name in workload.json)")
        where = f"{path}: request {index} ({record['name']})"
        if record["name"] in seen:
            raise InputError(f"{where}: field 'request_id': {record['name']!r} already names request "
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
        check_fits_cache(record, settings, where)
    order = sorted(range(len(records)), key=lambda i: (records[i]["arrival"], i))
    records = [records[i] for i in order]
    fitted_on = dict(identity, format=fmt, source=os.path.basename(path),
                     source_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), num_requests=len(records))
    return RealRun(records, settings, fitted_on, read_timeseries(os.path.join(directory, "timeseries.csv")), notes)


def run_workload(run: RealRun) -> list[RequestSpec]:
    """The run's requests as a workload (module docstring, step 2), in arrival order."""
    return [RequestSpec(name=record["name"], arrival=round(record["arrival"]), prefix_key=None, prefix_tokens=0,
                        suffix_tokens=record["prompt_tokens"], output_tokens=record["output_tokens_emitted"],
                        tick_ms=1.0)
            for record in run.records]


def training_split(run: RealRun, train_first: int, source: str) -> tuple[list, list]:
    """Names of the first ``train_first`` requests by arrival and of the others; N must be in [1, requests − 1]."""
    count = len(run.records)
    if not 1 <= train_first <= count - 1:
        raise InputError(f"{source}: --train-first {train_first}: must be between 1 and {count - 1} (the run holds "
                         f"{count} requests and at least one must be left to judge the fit)")
    names = [record["name"] for record in run.records]
    return names[:train_first], names[train_first:]


def median_tpot(run: RealRun, names) -> float:
    """Median measured TPOT (ms) of ``names``: the constant step of the baseline."""
    wanted = set(names)
    values = [r["tpot"] for r in run.records if r["name"] in wanted and r["tpot"] is not None]
    if not values:
        raise InputError("no training request has two or more output tokens: TPOT, and so a step, is unknown")
    return statistics.median(values)


# --- the calibration ------------------------------------------------------------------------------

#: The replays of the ablation, in order: label, replay variant, step (constant or fitted).
ABLATION = (("no KV limit (ample blocks), constant step", "no-kv-limit", "constant"),
            ("KV limit, no preemption (reserve at admission)", "kv-reserve", "constant"),
            ("KV limit + recompute preemption, constant step", "kv-preemption", "constant"),
            ("KV limit + preemption + fitted step time", "kv-preemption", "fitted"))


def _measured(run: RealRun) -> dict:
    return {r["name"]: {"ttft": r["ttft"], "e2e": r["e2e"], "queue_wait": r["queue_wait"], "tpot": r["tpot"]}
            for r in run.records}


def calibrate(run: RealRun, train_first: int, source: str, replay) -> dict:
    """Fit and judge a step model on ``run`` (module docstring, steps 3-4); returns every number.

    ``replay(specs, settings, (a, b, c), variant)`` simulates the workload with the vLLM engine
    (:func:`sched.timing.replay.replay`); ``variant`` is one of the ablation's. Returns a dict with the
    :class:`~sched.timing.stepmodel.StepModel` (``model``), ``train``/``held_out`` names, the fit's
    ``history``, ``loss``, the tables (``held_out_table``, ``baseline_table``, ``training_table``),
    ``ablation`` rows, ``counts`` (or None) and the replays' preemption counts.
    """
    specs = run_workload(run)
    train, held_out = training_split(run, train_first, source)
    measured = _measured(run)
    arrival = {spec.name: spec.arrival for spec in specs}
    constant = median_tpot(run, train)

    # The search replays without prefix caching (the engine's fast path): the replayed workload
    # shares no prefix, so caching changes only a preempted request's re-prefill (a hit on its own
    # freed blocks). Every reported number comes from replays with the run's own settings.
    fast = dict(run.settings, enable_prefix_caching=False)

    def fit_replay(a, b, c):
        result = replay(specs, fast, (a, b, c), "kv-preemption")
        targets = [(arrival[name], result.first_step[name], result.done_step[name], measured[name]["ttft"],
                    measured[name]["e2e"]) for name in train]
        return result.steps, targets

    coefficients, loss, history = fit_coefficients(fit_replay, (constant, 0.0, 0.0))
    # Rounded as step-model.json stores them, so a run given that file replays exactly these numbers.
    # a >= MIN_STEP_MS as step-model.json requires (the fit keeps it there; the bound is only a guard).
    coefficients = (max(round(coefficients[0], 6), MIN_STEP_MS), round(coefficients[1], 9), round(coefficients[2], 9))
    fitted = replay(specs, run.settings, coefficients, "kv-preemption")
    baseline = replay(specs, run.settings, (constant, 0.0, 0.0), "kv-preemption")
    ablation = []
    for label, variant, step in ABLATION:
        if variant == "kv-preemption":
            result = fitted if step == "fitted" else baseline
        else:  # no preemption happens in these two, so prefix caching changes nothing: the fast path
            result = replay(specs, fast, (constant, 0.0, 0.0), variant)
        table = percentile_table(measured, result.predicted, held_out)
        errors = {m: {row["p"]: row["error"] for row in table if row["metric"] == m} for m in ("ttft", "e2e")}
        ablation.append((label, errors, result.preemptions))
    fitted_on = dict(run.fitted_on, train_first=train_first, train_names=[train[0], train[-1]],
                     loss="mean |ln(predicted/measured)| of TTFT and E2E of the training requests",
                     training_loss=round(loss, 6), constant_step_ms=round(constant, 6), replays=len(history))
    model = StepModel(*coefficients, dict(run.settings), fitted_on)
    return {"model": model, "train": train, "held_out": held_out, "history": history, "loss": loss,
            "constant_step_ms": constant, "notes": run.notes,
            "held_out_table": percentile_table(measured, fitted.predicted, held_out),
            "baseline_table": percentile_table(measured, baseline.predicted, held_out),
            "training_table": percentile_table(measured, fitted.predicted, train),
            "ablation": ablation, "counts": counts_error(fitted.samples, run.timeseries),
            "baseline_counts": counts_error(baseline.samples, run.timeseries),
            "preemptions": fitted.preemptions}


# --- the subcommand -------------------------------------------------------------------------------

def _rounded(value):
    """``value`` with every float rounded to 6 places (JSON that reads cleanly), recursively."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {str(key): _rounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(item) for item in value]
    return value


def render_files(result: dict, specs) -> dict[str, str]:
    """``workload.json``, ``step-model.json``, ``calibration.txt`` and ``calibration.json`` by name."""
    model = result["model"]
    numbers = {
        "step_ms": {"a": model.a_ms, "b": model.b_ms, "c": model.c_ms}, "training_loss": result["loss"],
        "constant_step_ms": result["constant_step_ms"], "train": len(result["train"]),
        "held_out": len(result["held_out"]), "percentiles": "nearest rank", "time_unit": "ms",
        "replays": [{"a": a, "b": b, "c": c, "loss": loss} for (a, b, c), loss in result["history"]],
        "held_out_table": result["held_out_table"], "baseline_table": result["baseline_table"],
        "training_table": result["training_table"],
        "ablation": [{"replay": label, "errors": errors, "preemptions": count}
                     for label, errors, count in result["ablation"]],
        "counts": result["counts"], "baseline_counts": result["baseline_counts"],
        "fitted_on": model.fitted_on, "limits": limits_for(model.fitted_on),
    }
    return {"workload.json": workload_to_json(specs, units=True), "step-model.json": step_model_to_json(model),
            "calibration.txt": render_calibration(result),
            "calibration.json": json.dumps(_rounded(numbers), indent=2, ensure_ascii=False, allow_nan=False) + "\n"}


def _positive(text: str) -> int:
    try:
        return integer(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of requests, got {text!r}") from None


def _calibrate(argv: list[str]) -> int:
    parser = LineParser(prog="infer_sched_lab.py calibrate",
                        description="Fit the vLLM engine's step time (step_ms = a + b*prompt + c*decode) to a real "
                                    "run, on its first N requests by arrival, and judge it on the others "
                                    "(vllm-engine.md §6). Writes workload.json, step-model.json, calibration.txt "
                                    "and calibration.json into DIR. Times in ms.")
    parser.add_argument("run", metavar="RUN.jsonl", help="per-request results (request-jsonl, or vllm bench "
                                                           "--save-detailed JSON naming its engine settings)")
    parser.add_argument("--meta", metavar="META.json", help="the engine's meta.json (default: beside RUN.jsonl)")
    parser.add_argument("--train-first", type=_positive, required=True, metavar="N",
                        help="fit on the first N requests by arrival (1 .. requests - 1); judge on the rest")
    parser.add_argument("--out", metavar="DIR", required=True, type=realrun._directory_arg,
                        help="directory to write (new or empty unless --force)")
    parser.add_argument("--force", action="store_true", help="replace the calibration's own files in DIR")
    args = parser.parse_args(argv)
    run = load_real_run(args.run, args.meta)
    training_split(run, args.train_first, args.run)  # refuse a bad N before replaying anything
    names = ("workload.json", "step-model.json", "calibration.txt", "calibration.json")
    check_target(args.out, force=args.force, names=names, kind="calibrate")
    result = calibrate(run, args.train_first, args.run, replay_run)
    files = render_files(result, run_workload(run))
    write_artifacts(files, args.out, force=args.force)
    sys.stdout.write(files["calibration.txt"])
    print(f"wrote {', '.join(files)} to {args.out}/; predict with: infer_sched_lab.py --engine vllm --workload "
          f"{os.path.join(args.out, 'workload.json')} --step-model {os.path.join(args.out, 'step-model.json')}")
    return EXIT_OK


def command(argv: list[str]) -> int:
    """The ``calibrate`` subcommand; exit 0, or 2 for bad input or usage."""

    def body(arguments):
        try:
            return _calibrate(arguments)
        except ArtifactError as exc:
            raise InputError(str(exc)) from None
    return run_command("infer_sched_lab.py calibrate", body, argv)
