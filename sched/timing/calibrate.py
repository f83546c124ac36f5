# One piece (~400 lines): one command, the fit on training runs and the judgement of held-out runs it prints (vllm-engine.md §6); the readers are in loadrun, the fit in fit, identify and replay, the tables in calibration_report.
"""Calibrating the vLLM engine's step time on real runs and predicting what they never saw (vllm-engine.md §6).

``calibrate RUN [RUN ...] [--meta META.json] --train-first N --out DIR``:

1. **Read the runs** (:mod:`sched.timing.loadrun`): a ``request-jsonl`` file with its
   ``meta.json``, a ``vllm bench serve --save-detailed`` result naming its engine settings, or a
   vLLM OpenTelemetry run directory. Settings given as flags with vLLM's names win over the
   files and are said. Several runs must be of one model (and one GPU where the files name it).
2. **Turn each into a workload** (``DIR/workload.json``; ``workload-2.json`` ... for further runs):
   request ``name`` = the run's request id, ``arrival`` in whole ms of the run's own clock.
3. **Fit** ``step_ms = a + b·prompt + c·decode + d·kv_tokens`` (:mod:`sched.timing.stepmodel`,
   :mod:`sched.timing.fit`) on the first N requests by arrival of every run, each run replayed
   whole under its own settings; only the training requests' TTFT and E2E enter the loss. Terms
   the training data cannot tell apart are held at 0 and said (:mod:`sched.timing.identify`); each
   fitted coefficient gets a bootstrap uncertainty, and one smaller than it is said to be
   unidentified (held at its fit), never printed as a measured number; a high training loss is warned about; the
   search stops when the coefficients settle or after ``--max-replays`` replays, and says which.
   ``DIR/step-model.json`` keeps the result with the first run's settings and the provenance of all.
4. **Judge** it on the other requests of each run (:mod:`sched.timing.calibration_report`):
   percentiles of TTFT, E2E, queue wait and TPOT, measured against predicted, beside a constant
   step (the median measured TPOT of the training requests) and the ablation of the KV-cache
   rules; the running and waiting counts against the run's ``timeseries.csv`` when it is beside
   the file. ``DIR/calibration.txt`` holds what is printed, ``DIR/calibration.json`` the same
   numbers (its top-level tables are the first run's; ``runs`` holds every run's).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace

from . import realrun
from ..base.safe_write import ArtifactError, check_target, write_artifacts
from .calibration_report import (counts_error, percentile_noise, percentile_table, render_calibration, repeat_noise,
                                 with_noise)
from ..base.cmdline import EXIT_OK, InputError, LineParser, integer, run_command
from .fit import MAX_REPLAYS, TERMS, FrozenSchedule, fit_coefficients
from .gpus import find_gpu
from .identify import (MIN_BOOTSTRAP_REQUESTS, bootstrap_spread, identify_terms, too_few_to_bootstrap,
                       unidentified_by_spread)
from .loadrun import RealRun, load_real_run, median_tpot, run_workload, training_split
from .repeat_run import check_repeat, short_name as _short
from .replay import replay as replay_run
from .runmeta import FLAG_NAMES
from .stepmodel import MIN_STEP_MS, StepModel, limits_for, step_model_to_json
from ..workload.specs import workload_to_json

__all__ = ["RealRun", "load_real_run", "run_workload", "training_split", "median_tpot", "calibrate", "render_files",
           "command", "ABLATION", "HIGH_LOSS", "check_same_model"]

#: A training loss above this (a typical error above about 16%) is warned about: the fit itself failed.
HIGH_LOSS = 0.15


# --- the calibration ------------------------------------------------------------------------------

#: The replays of the ablation, in order: label, replay variant, step (constant or fitted).
ABLATION = (("no KV limit (ample blocks), constant step", "no-kv-limit", "constant"),
            ("KV limit, no preemption (reserve at admission)", "kv-reserve", "constant"),
            ("KV limit + recompute preemption, constant step", "kv-preemption", "constant"),
            ("KV limit + preemption + fitted step time", "kv-preemption", "fitted"))


def _measured(run: RealRun) -> dict:
    return {r["name"]: {"ttft": r["ttft"], "e2e": r["e2e"], "queue_wait": r["queue_wait"], "tpot": r["tpot"]}
            for r in run.records}


def check_same_model(runs, sources) -> None:
    """Several runs fitted together must be of one model, one GPU and one ``tensor_parallel_size``
    (each where both files name it: the four terms do not hold a split model's communication,
    handbook "calibrate your own GPU"), and distinct runs (the same file under the same settings
    twice would count its requests twice and shrink the bootstrap's uncertainty)."""
    first = runs[0].fitted_on
    for index, (run, source) in enumerate(zip(runs[1:], sources[1:]), 1):
        for key, what in (("model", "model"), ("device", "GPU"), ("tensor_parallel_size", "tensor parallel size")):
            mine, theirs = _short(first.get(key)), _short(run.fitted_on.get(key))
            if mine and theirs and mine != theirs:
                raise InputError(f"{source}: field {key!r}: {run.fitted_on.get(key)!r} but {sources[0]} is "
                                 f"{first.get(key)!r}: runs fitted together must be of one {what}")
        digest = run.fitted_on.get("source_sha256")
        for earlier, other in zip(runs[:index], sources[:index]):
            if digest and earlier.fitted_on.get("source_sha256") == digest and earlier.settings == run.settings:
                raise InputError(f"{source}: the same run as {other} (identical requests file and settings): "
                                 "give each run once")


def calibrate(runs, train_firsts, sources, replay, max_replays: int = MAX_REPLAYS, repeat=None) -> dict:
    """Fit and judge a step model on ``runs`` (module docstring, steps 3-4); returns every number.

    ``runs``: :class:`RealRun` list; ``train_firsts``: N per run (``None``: every request);
    ``sources``: how each run was named on the command line; ``replay(specs, settings,
    (a, b, c, d), variant)`` simulates a workload with the vLLM engine
    (:func:`sched.timing.replay.replay`); ``repeat``: a :class:`RealRun` repeating the first run
    (the same workload run again), whose difference is the run-to-run noise shown beside the first
    run's errors (without it, the bootstrap sampling noise of the measured percentiles is shown,
    a lower bound). Returns a dict with the
    :class:`~sched.timing.stepmodel.StepModel` (``model``), the fit's ``history``, ``loss``,
    ``converged``, ``unidentified`` (term -> reason: held at 0, the terms listed in ``held_at_zero``,
    or held at a fit smaller than its uncertainty) and ``uncertainty``, ``warnings``, and ``runs``: per run its
    ``train``/``held_out`` names, tables (``held_out_table`` or None, ``baseline_table``,
    ``training_table``), ``ablation`` rows, ``counts`` (or None) and preemption count.
    """
    check_same_model(runs, sources)
    specs = [run_workload(run) for run in runs]
    splits = [training_split(run, n, source) for run, n, source in zip(runs, train_firsts, sources)]
    measured = [_measured(run) for run in runs]
    constant = median_tpot(runs, [train for train, _ in splits], sources)
    # The search may replay without prefix caching (the engine's fast path) when no request declares
    # a shared prefix: caching then changes only a preempted request's re-prefill (a hit on its own
    # freed blocks). Every reported number comes from replays with the run's own settings.
    search_settings = [run.settings if any(spec.prefix_key for spec in workload)
                       else dict(run.settings, enable_prefix_caching=False) for run, workload in zip(runs, specs)]
    cache = {}

    def fit_replay(a, b, c, d):
        key = (a, b, c, d)
        if key not in cache:
            steps, targets, windows = [], [], []
            offset = 0.0
            for i, run in enumerate(runs):
                result = replay(specs[i], search_settings[i], key, "kv-preemption")
                base = len(steps)
                arrival = {spec.name: spec.arrival + offset for spec in specs[i]}
                # Runs follow each other on one time line, 1 s apart (each starts a busy period).
                steps += [type(step)(step.start + offset, step.duration, step.prompt_tokens, step.decode_tokens,
                                     step.kv_tokens) for step in result.steps]
                train = splits[i][0]
                targets += [(arrival[name], base + result.first_step[name], base + result.done_step[name],
                             measured[i][name]["ttft"], measured[i][name]["e2e"]) for name in train]
                windows.append((base, base + max(result.done_step[name] for name in train)))
                offset = steps[-1].end + 1000.0
            cache.clear()
            cache[key] = steps, targets, windows
        steps, targets, _ = cache[key]
        return steps, targets

    start = (constant, 0.0, 0.0, 0.0)
    steps, _ = fit_replay(*start)
    window = [step for first, last in cache[start][2] for step in steps[first:last + 1]]
    unidentified = identify_terms(window, len(window) - 1)
    free = tuple(term not in unidentified for term in TERMS)
    coefficients, loss, history, converged = fit_coefficients(fit_replay, start, max_replays, free)
    # Rounded as step-model.json stores them, so a run given that file replays exactly these numbers.
    # a >= MIN_STEP_MS as step-model.json requires (the fit keeps it there; the bound is only a guard).
    coefficients = (max(round(coefficients[0], 6), MIN_STEP_MS), round(coefficients[1], 9),
                    round(coefficients[2], 9), round(coefficients[3], 12))
    steps, targets = fit_replay(*coefficients)
    loss = FrozenSchedule(steps, targets).loss(coefficients)
    uncertainty = bootstrap_spread(steps, targets, coefficients, free)
    held_at_zero = unidentified
    trained = sum(len(split[0]) for split in splits)
    few = too_few_to_bootstrap(coefficients, free, trained)
    if trained < MIN_BOOTSTRAP_REQUESTS:   # a resample of one request is that request: a spread of 0 is no ±
        uncertainty = {term: None for term in TERMS}
    unidentified = held_at_zero | few | unidentified_by_spread(coefficients, uncertainty, held_at_zero)
    warnings = []
    if loss > HIGH_LOSS:
        warnings.append(f"the training loss stays high ({loss:.3f}, a typical error of "
                        f"{100 * (math.exp(loss) - 1):.0f}%): this step model does not describe the training "
                        "requests; do not trust its predictions")
    if not converged:
        warnings.append(f"the search stopped after --max-replays {max_replays} replays before the coefficients "
                        "settled; the best replay is kept (raise --max-replays to go on)")
    per_run = []
    for i, run in enumerate(runs):
        per_run.append(_judge(run, specs[i], splits[i], measured[i], coefficients, constant, replay, sources[i],
                              repeat if i == 0 else None))
    first = runs[0]
    fitted_on = dict(first.fitted_on, train_first=len(splits[0][0]), train_names=[splits[0][0][0], splits[0][0][-1]],
                     loss="mean |ln(predicted/measured)| of TTFT and E2E of the training requests",
                     training_loss=round(loss, 6), constant_step_ms=round(constant, 6), replays=len(history),
                     converged=converged, replayed_async_scheduling=bool(first.settings.get("async_scheduling")))
    if len(runs) > 1:
        fitted_on["runs"] = [dict(run.fitted_on, train_first=len(split[0]), settings=run.settings)
                             for run, split in zip(runs, splits)]
    flags = sorted({note for run in runs for note in run.notes if "--" in note})
    if flags:
        fitted_on["settings_from_flags"] = flags
    model = StepModel(coefficients[0], coefficients[1], coefficients[2], dict(first.settings), fitted_on,
                      coefficients[3], {k: v for k, v in uncertainty.items() if v is not None} | {
                          k: None for k in held_at_zero}, unidentified or None)
    return {"model": model, "history": history, "loss": loss, "converged": converged, "max_replays": max_replays,
            "unidentified": unidentified, "held_at_zero": sorted(held_at_zero), "uncertainty": uncertainty,
            "constant_step_ms": constant,
            "warnings": warnings, "runs": per_run}


def _judge(run, specs, split, measured, coefficients, constant, replay, source, repeat=None) -> dict:
    """The tables of one run under the fitted and the constant step (module docstring, step 4), with
    the noise of the measured percentiles beside the errors."""
    train, held_out = split
    judged = held_out or train
    if repeat is not None:
        if len(repeat.records) != len(run.records):
            raise InputError(f"--repeat: {repeat.fitted_on.get('source')} holds {len(repeat.records)} requests but "
                             f"{source} holds {len(run.records)}: a repeat runs the same workload again")
        noise = repeat_noise(measured, held_out or train, [_measured(repeat)[r["name"]] for r in repeat.records])
        noise_kind = f"run-to-run: |difference| from the repeat run {repeat.fitted_on.get('source')}"
    else:
        noise = percentile_noise(measured, judged)
        noise_kind = ("sampling only (bootstrap of the measured requests; a lower bound on run-to-run noise: "
                      "give --repeat RUN to measure that)")
    fitted = replay(specs, run.settings, coefficients, "kv-preemption")
    baseline = replay(specs, run.settings, (constant, 0.0, 0.0, 0.0), "kv-preemption")
    fast = dict(run.settings, enable_prefix_caching=False)
    ablation = []
    for label, variant, step in ABLATION:
        if variant == "kv-preemption":
            result = fitted if step == "fitted" else baseline
        else:  # no preemption happens in these two, so prefix caching changes nothing: the fast path
            result = replay(specs, fast if not any(s.prefix_key for s in specs) else run.settings,
                            (constant, 0.0, 0.0, 0.0), variant)
        table = percentile_table(measured, result.predicted, judged)
        errors = {m: {row["p"]: row["error"] for row in table if row["metric"] == m} for m in ("ttft", "e2e")}
        ablation.append((label, errors, result.preemptions))
    return {"source": source, "fitted_on": run.fitted_on, "settings": run.settings, "notes": run.notes,
            "train": train, "held_out": held_out,
            "held_out_table": with_noise(percentile_table(measured, fitted.predicted, held_out), noise)
            if held_out else None,
            "baseline_table": with_noise(percentile_table(measured, baseline.predicted, judged), noise),
            "training_table": (percentile_table(measured, fitted.predicted, train) if held_out
                               else with_noise(percentile_table(measured, fitted.predicted, train), noise)),
            "noise_kind": noise_kind,
            "ablation": ablation, "counts": counts_error(fitted.samples, run.timeseries),
            "baseline_counts": counts_error(baseline.samples, run.timeseries), "preemptions": fitted.preemptions}


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


def render_files(result: dict, workloads) -> dict[str, str]:
    """``workload.json`` (``workload-2.json`` ... for further runs), ``step-model.json``,
    ``calibration.txt`` and ``calibration.json`` by name."""
    model = result["model"]
    first = result["runs"][0]

    def run_numbers(run):
        return {"source": run["source"], "train": len(run["train"]), "held_out": len(run["held_out"]),
                "settings": run["settings"], "notes": run["notes"],
                "held_out_table": run["held_out_table"], "baseline_table": run["baseline_table"],
                "training_table": run["training_table"], "noise_kind": run["noise_kind"],
                "ablation": [{"replay": label, "errors": errors, "preemptions": count}
                             for label, errors, count in run["ablation"]],
                "counts": run["counts"], "baseline_counts": run["baseline_counts"]}
    numbers = {
        "step_ms": {"a": model.a_ms, "b": model.b_ms, "c": model.c_ms, "d": model.d_ms},
        "uncertainty": result["uncertainty"], "unidentified": result["unidentified"],
        "identified": model.identified,
        "training_loss": result["loss"], "converged": result["converged"], "warnings": result["warnings"],
        "constant_step_ms": result["constant_step_ms"], "percentiles": "nearest rank", "time_unit": "ms",
        "replays": [dict(zip(TERMS, coefficients), loss=loss) for coefficients, loss in result["history"]],
    }
    numbers.update({key: value for key, value in run_numbers(first).items() if key not in ("source", "settings")})
    numbers.update(runs=[run_numbers(run) for run in result["runs"]], fitted_on=model.fitted_on,
                   limits=limits_for(model.fitted_on))
    files = {"workload.json": workload_to_json(workloads[0], units=True)}
    for index, workload in enumerate(workloads[1:], 2):
        files[f"workload-{index}.json"] = workload_to_json(workload, units=True)
    files.update({"step-model.json": step_model_to_json(model), "calibration.txt": render_calibration(result),
                  "calibration.json": json.dumps(_rounded(numbers), indent=2, ensure_ascii=False,
                                                 allow_nan=False) + "\n"})
    return files


def _train_first(text: str):
    if text.strip().lower() == "all":
        return None
    try:
        return integer(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of requests or 'all', got {text!r}") from None


def _train_firsts(text: str) -> list:
    """``N`` or ``all`` for every run, or one per run separated by commas (``45,45,all``)."""
    return [_train_first(part) for part in text.split(",")]


def _setting_flags(args) -> dict:
    """The engine settings given as flags (vLLM's names), by setting name."""
    flags = {key: getattr(args, key) for key in FLAG_NAMES if getattr(args, key) is not None}
    if args.async_scheduling is not None:
        flags["async_scheduling"] = args.async_scheduling
    return flags


def _positive_count(text: str) -> int:
    try:
        value = integer(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _on_gpu(run: RealRun, name: str) -> RealRun:
    """``run`` with ``fitted_on.device`` set by ``--run-gpu`` (the table's name), said in its notes."""
    gpu = find_gpu(name, "--run-gpu")
    said = run.fitted_on.get("device")
    if said and said != gpu.name:
        note = f"GPU {gpu.name!r} from --run-gpu, which wins over the files' {said!r}"
    else:
        note = f"GPU {gpu.name!r} from --run-gpu" + ("" if said else " (the files do not say)")
    return replace(run, fitted_on=dict(run.fitted_on, device=gpu.name), notes=run.notes + [note])


def _calibrate(argv: list[str]) -> int:
    parser = LineParser(prog="infer_sched_lab.py calibrate",
                        description="Fit the vLLM engine's step time (step_ms = a + b*prompt + c*decode + "
                                    "d*kv_tokens) to real runs, on the first N requests by arrival of each, and judge "
                                    "it on the others (vllm-engine.md §6). Writes workload.json, step-model.json, "
                                    "calibration.txt and calibration.json into DIR. Times in ms.")
    parser.add_argument("runs", metavar="RUN", nargs="+",
                        help="a real run: per-request results (request-jsonl with meta.json, or vllm bench serve "
                             "--save-result --save-detailed JSON naming its engine settings), or a vLLM "
                             "OpenTelemetry run directory (traces.json, vllm.log, profile.yaml)")
    parser.add_argument("--meta", metavar="META.json", help="the engine's meta.json (default: beside RUN.jsonl)")
    parser.add_argument("--train-first", type=_train_firsts, required=True, metavar="N",
                        help="fit on the first N requests by arrival (1 .. requests; 'all' = every request, nothing "
                             "held out); one value for every run, or one per run separated by commas")
    parser.add_argument("--out", metavar="DIR", required=True, type=realrun.directory_arg,
                        help="directory to write (new or empty unless --force)")
    parser.add_argument("--force", action="store_true", help="replace the calibration's own files in DIR")
    parser.add_argument("--repeat", metavar="RUN",
                        help="a repeat of the first RUN (the same workload run again, same format): the difference "
                             "of its percentiles is the run-to-run noise shown beside the errors")
    parser.add_argument("--run-gpu", metavar="NAME",
                        help="the GPU the runs were made on, from the lab's table (help gpus), when the files do not "
                             "say (or say wrong); recorded in step-model.json so --gpu can carry the model")
    parser.add_argument("--kv-bytes-per-token", type=_positive_count, metavar="N",
                        help="KV cache bytes per token of the model (2 x layers x KV heads x head size x element "
                             "bytes): derives an unknown KV size from the GPU memory as vLLM does (with --run-gpu)")
    parser.add_argument("--max-replays", type=_positive_count, default=MAX_REPLAYS, metavar="N",
                        help=f"most replays of the search (default {MAX_REPLAYS}; the output says when it stopped "
                             "the search)")
    settings = parser.add_argument_group("engine settings (vLLM's flags; they win over the run's files and are "
                                         "recorded in step-model.json)")
    for key, flag in FLAG_NAMES.items():
        if key == "enable_prefix_caching":
            settings.add_argument(flag, dest=key, action=argparse.BooleanOptionalAction, default=None,
                                  help="prefix caching on (or --no-enable-prefix-caching: off)")
        else:
            settings.add_argument(flag, dest=key, type=_positive_count, metavar="N")
    settings.add_argument("--async-scheduling", dest="async_scheduling", action=argparse.BooleanOptionalAction,
                          default=None, help="the run used vLLM's async scheduling (or --no-async-scheduling: not); "
                                             "default: what the run's files say, else off")
    args = parser.parse_args(argv)
    if args.meta is not None and len(args.runs) > 1:
        raise InputError("--meta names the meta file of one run; with several runs keep each meta.json beside its run")
    firsts = args.train_first
    if len(firsts) == 1:
        firsts = firsts * len(args.runs)
    if len(firsts) != len(args.runs):
        raise InputError(f"--train-first: {len(firsts)} values for {len(args.runs)} runs; give one, or one per run")
    flags = _setting_flags(args)
    sizing = {"gpu": find_gpu(args.run_gpu, "--run-gpu") if args.run_gpu is not None else None,
              "kv_bytes_per_token": args.kv_bytes_per_token}
    runs = [load_real_run(path, args.meta, flags, sizing) for path in args.runs]
    if args.run_gpu is not None:
        runs = [_on_gpu(run, args.run_gpu) for run in runs]
    repeat = load_real_run(args.repeat, None, flags, sizing) if args.repeat is not None else None
    if repeat is not None:
        check_repeat(runs[0], repeat, args.runs[0], args.repeat)  # before any replay
    for run, n, path in zip(runs, firsts, args.runs):
        training_split(run, n, path)  # refuse a bad N before replaying anything
    workloads = [run_workload(run) for run in runs]
    names = ("workload.json", "step-model.json", "calibration.txt", "calibration.json") + tuple(
        f"workload-{i}.json" for i in range(2, len(runs) + 1))
    check_target(args.out, force=args.force, names=names, kind="calibrate")
    result = calibrate(runs, firsts, args.runs, replay_run, args.max_replays, repeat)
    files = render_files(result, workloads)
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
