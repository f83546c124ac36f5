"""Error tables of a calibration (vllm-engine.md §6): measured against predicted, in milliseconds.

Pure functions over plain numbers, no engine. Percentiles by nearest rank (:func:`sched.core.metrics.percentile`,
the lab's method), relative error ``(predicted − measured) / measured`` of each percentile: the
comparison is of the two distributions over the same requests, as a learner reads a benchmark.

- :func:`percentile_table`: P50/P90/P95/P99 of TTFT, E2E, queue wait and TPOT over some requests.
- :func:`counts_error`: running and waiting counts over time against the run's ``timeseries.csv``
  (row ``t`` read as ``t`` seconds after the first arrival; the replay's state at that instant is
  the step in progress then, its counts taken when it was scheduled).
- :func:`render_table` and friends: the text a learner reads.
"""

from __future__ import annotations

import bisect
import math
import random
import statistics

from ..core.metrics import percentile
from .stepmodel import limits_for
from .identify import TERM_UNITS

__all__ = ["METRICS", "PERCENTILES", "percentile_table", "percentile_noise", "repeat_noise", "with_noise", "relative_error", "counts_error", "render_percentile_table",
           "render_rows", "render_terms", "render_calibration"]

#: Metric name -> what it is (all in ms).
METRICS = {"ttft": "TTFT", "e2e": "E2E", "queue_wait": "queue wait", "tpot": "TPOT"}
PERCENTILES = (50, 90, 95, 99)
#: Fewest requests whose percentiles get a sampling noise (fewer: unknown, never "within noise").
MIN_NOISE_SAMPLE = 5


def relative_error(predicted, measured):
    """``(predicted − measured) / measured``, or ``None`` when either is unknown or measured is 0.

    Example: ``relative_error(110, 100) == 0.1``.
    """
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured


def percentile_table(measured: dict, predicted: dict, names) -> list[dict]:
    """One row per (metric, percentile) over ``names``.

    ``measured`` and ``predicted`` map a request name to ``{"ttft": ms, "e2e": ms, "queue_wait":
    ms or None, "tpot": ms or None}``. Returns ``{"metric", "p", "measured", "predicted",
    "error"}`` rows (ms; ``error`` relative, ``None`` when unknown), metrics in :data:`METRICS` order.
    """
    rows = []
    for metric in METRICS:
        real = [measured[n][metric] for n in names if measured[n][metric] is not None]
        simulated = [predicted[n][metric] for n in names if predicted[n][metric] is not None]
        for p in PERCENTILES:
            m, s = percentile(real, p), percentile(simulated, p)
            rows.append({"metric": metric, "p": p, "measured": m, "predicted": s, "error": relative_error(s, m)})
    return rows


def percentile_noise(measured: dict, names, rounds: int = 100, seed: int = 0) -> dict:
    """Sampling noise of each measured percentile over ``names``: ``{(metric, p): relative sd}``.

    A bootstrap (``rounds`` resamples of the requests with replacement, seeded): how far the
    percentile moves when another sample of the same kind of requests is measured, as a share of
    its value. It is a lower bound on run-to-run noise (a repeat run also varies in its timing).
    """
    generator = random.Random(seed)
    names = list(names)
    if len(names) < MIN_NOISE_SAMPLE:   # a handful of requests cannot say how a percentile varies
        return {(metric, p): None for metric in METRICS for p in PERCENTILES}
    draws = [[names[generator.randrange(len(names))] for _ in names] for _ in range(rounds)] if names else []
    noise = {}
    for metric in METRICS:
        for p in PERCENTILES:
            base = percentile([measured[n][metric] for n in names if measured[n][metric] is not None], p)
            values = []
            for draw in draws:
                sample = [measured[n][metric] for n in draw if measured[n][metric] is not None]
                if sample:
                    values.append(percentile(sample, p))
            noise[metric, p] = (statistics.pstdev(values) / base) if base and len(values) > 1 else None
    return noise


def repeat_noise(measured: dict, names, repeat: list) -> dict:
    """Run-to-run noise from a repeat of the run: ``{(metric, p): |P_repeat − P_run| / P_run}``.

    ``repeat``: the repeat run's ``{"ttft", "e2e", "queue_wait", "tpot"}`` rows in arrival order;
    request ``i`` of the run (in arrival order, over ``names``' positions) is paired with request
    ``i`` of the repeat (a repeat has its own request ids).
    """
    order = list(measured)
    positions = [order.index(n) for n in names]
    noise = {}
    for metric in METRICS:
        for p in PERCENTILES:
            one = percentile([measured[order[i]][metric] for i in positions if measured[order[i]][metric] is not None], p)
            two = percentile([repeat[i][metric] for i in positions if i < len(repeat) and repeat[i][metric] is not None],
                             p)
            noise[metric, p] = abs(relative_error(two, one)) if relative_error(two, one) is not None else None
    return noise


def counts_error(samples: list[tuple[float, int, int]], timeseries: list[tuple[float, int, int]]) -> dict | None:
    """Mean absolute error of the running and waiting counts against ``timeseries``.

    ``samples``: ``(start ms, end ms, running, waiting)`` per replayed step in time order;
    ``timeseries``: ``(t s, running, waiting)`` rows. A row outside every step (before the first,
    in an idle gap, after the last) compares with an idle engine (0 running, 0 waiting). Returns ``{"rows", "running_mae", "waiting_mae",
    "running_mean", "waiting_mean"}`` (the means are the measured averages, for scale), or
    ``None`` without a time series.
    """
    if not timeseries:
        return None
    starts = [start for start, _, _, _ in samples]
    running_error = waiting_error = 0.0
    for t, running, waiting in timeseries:
        index = bisect.bisect_right(starts, t * 1000) - 1
        in_step = index >= 0 and t * 1000 < samples[index][1]
        simulated = samples[index][2:] if in_step else (0, 0)  # between steps the engine is idle
        running_error += abs(simulated[0] - running)
        waiting_error += abs(simulated[1] - waiting)
    count = len(timeseries)
    return {"rows": count, "running_mae": running_error / count, "waiting_mae": waiting_error / count,
            "running_mean": sum(r for _, r, _ in timeseries) / count,
            "waiting_mean": sum(w for _, _, w in timeseries) / count}


def _ms(value) -> str:
    return "NA" if value is None else f"{value:.1f}"


def with_noise(rows: list[dict], noise: dict) -> list[dict]:
    """``rows`` of :func:`percentile_table` with ``noise`` (relative, or None) and ``within_noise``
    (``|error| <= noise``; None when either is unknown) added to each."""
    out = []
    for row in rows:
        level = noise.get((row["metric"], row["p"]))
        within = None if level is None or row["error"] is None else abs(row["error"]) <= level
        out.append(dict(row, noise=level, within_noise=within))
    return out


def _percent(value) -> str:
    if value is None:
        return "NA"
    return f"{100 * value:+.1f}%" if abs(value) < 100 else (">+9999%" if value > 0 else "<-9999%")


def _noise(level) -> str:
    """The noise cell: ``±3.6%``; ``±>999%`` past 999.9% (a measured percentile near 0 ms), so the
    column keeps its width."""
    if level is None:
        return "NA"
    return f"±{100 * level:.1f}%" if level < 9.9995 else "±>999%"


def render_percentile_table(rows: list[dict], baseline: list[dict] | None = None) -> list[str]:
    """Text lines of :func:`percentile_table` rows; with ``baseline`` (the same rows of another
    prediction) its predicted value and error are shown beside them; rows carrying ``noise``
    (:func:`with_noise`) show it and say "within noise" only where the error is inside it."""
    noisy = any("noise" in row for row in rows)
    head = f"  {'metric':<11}{'pct':>4}{'measured':>11}{'predicted':>11}{'error':>9}"
    if noisy:
        head += f"{'noise':>8}"
    if baseline is not None:
        head += f"{'const step':>12}{'error':>9}"
    lines = [head + "   (ms)"]
    for index, row in enumerate(rows):
        line = (f"  {METRICS[row['metric']]:<11}{'P' + str(row['p']):>4}{_ms(row['measured']):>11}"
                f"{_ms(row['predicted']):>11}{_percent(row['error']):>9}")
        if noisy:
            level = row.get("noise")
            line += f"{_noise(level):>8}"
        if baseline is not None:
            other = baseline[index]
            line += f"{_ms(other['predicted']):>12}{_percent(other['error']):>9}"
        if row.get("within_noise"):
            line += "  within noise"
        lines.append(line)
    return lines


def render_rows(rows: list[tuple[str, dict, int]]) -> list[str]:
    """The ablation: one line per ``(label, {metric: {p: error}}, preemptions)``: P50/P95 errors of TTFT and E2E."""
    lines = [f"  {'replay':<46}{'P50 TTFT':>9}{'P95 TTFT':>9}{'P50 E2E':>9}{'P95 E2E':>9}{'preempt':>9}"]
    for label, errors, preemptions in rows:
        cells = [_percent(errors[metric][p]) for metric in ("ttft", "e2e") for p in (50, 95)]
        lines.append(f"  {label:<46}" + "".join(f"{cell:>9}" for cell in cells) + f"{preemptions:>9}")
    return lines


def render_terms(result: dict) -> list[str]:
    """The fitted coefficients, one line each: ``value ± sd unit``, or, for a term the data cannot
    identify (:mod:`sched.timing.identify`), the word and never a number: ``c unidentified (held at
    0): why`` or ``c unidentified (|c| < 0.00026 ms per decoded sequence at 1 sd; held at its fit)``."""
    model, spread, unknown = result["model"], result["uncertainty"], result["unidentified"]
    held_at_zero = result.get("held_at_zero", unknown)
    rows = (("a", model.a_ms, "ms per step (fixed per-step cost: host work, launches, weights read once)"),
            ("b", model.b_ms, "ms per prompt token computed"),
            ("c", model.c_ms, "ms per decoded sequence"),
            ("d", model.d_ms, "ms per token of KV context read (KV blocks held × block_size)"))
    lines = []
    for key, value, unit in rows:
        if key in held_at_zero:
            lines.append(f"  {key} unidentified (held at 0): {unknown[key]}")
        elif key in unknown and spread.get(key) is None:   # too few requests (identify.too_few_to_bootstrap)
            lines.append(f"  {key} unidentified ({unknown[key]})")
        elif key in unknown:   # smaller than its own uncertainty (sched.timing.identify.unidentified_by_spread)
            lines.append(f"  {key} unidentified (|{key}| < {spread[key]:.2g} {TERM_UNITS[key]} at 1 sd; held at its fit)")
        else:
            sd = spread.get(key)
            lines.append(f"  {key} = {value:.4g}{f' ± {sd:.2g}' if sd is not None else ''} {unit}")
    return lines


def render_calibration(result: dict) -> str:
    """The text ``calibrate`` prints and writes to ``calibration.txt`` (``result`` from :func:`sched.timing.calibrate.calibrate`)."""
    model = result["model"]
    fitted_on = model.fitted_on
    runs = result["runs"]
    lines = []
    for run in runs:
        about = run["fitted_on"]
        lines += [f"Run {run['source']} ({about.get('num_requests')} requests, {about.get('format')}): "
                  f"{about.get('model') or 'an unknown model'} on {about.get('device') or 'an unknown GPU'}, "
                  f"vLLM {about.get('vllm_version') or '?'}, async scheduling "
                  f"{'on' if about.get('async_scheduling') else 'off'}.",
                  "  Settings replayed: " + ", ".join(f"{key} {value}" for key, value in run["settings"].items()) + "."]
        lines += [f"  Note: {note}." for note in run["notes"]]
    train_counts = ", ".join(str(len(run["train"])) for run in runs)
    converged = "coefficients settled" if result["converged"] else "stopped by --max-replays"
    lines += ["", f"Fit on the first {train_counts} requests by arrival of {'each run' if len(runs) > 1 else 'the run'}; "
              f"{len(result['history'])} replays ({converged}; frozen-schedule Nelder-Mead, see sched/timing/fit.py):",
              f"  {model.formula}"]
    lines += render_terms(result)
    lines += ["  (± one standard deviation over a bootstrap of the training requests, schedule held fixed; see "
              "sched/timing/identify.py)",
              f"  training error: mean |ln(predicted/measured)| of TTFT and E2E = {result['loss']:.4f} "
              f"(typical error {100 * (math.exp(result['loss']) - 1):.1f}%)",
              f"  constant-step baseline: step_ms = {result['constant_step_ms']:.2f} (median measured TPOT of the "
              "training requests)"]
    lines += [f"Warning: {warning}." for warning in result["warnings"]]
    for run in runs:
        lines += [""] + _run_section(run, len(runs) > 1)
    lines += ["", "Limits:"] + [f"- {line}" for line in limits_for(fitted_on)]
    return "\n".join(lines) + "\n"


def _run_section(run: dict, named: bool) -> list[str]:
    train, held_out = run["train"], run["held_out"]
    title = f"{run['source']}: " if named else ""
    lines = []
    if held_out:
        lines.append(f"{title}held-out requests ({len(held_out)}: {held_out[0]} .. {held_out[-1]}), never seen by the "
                     "fit; percentiles by nearest rank; noise of the measured percentile: "
                     f"{run['noise_kind']}; \"within noise\" only where the error is inside it:")
        lines += render_percentile_table(run["held_out_table"], run["baseline_table"])
        lines += ["", f"{title}training requests (what the fit saw), same columns:"]
        lines += render_percentile_table(run["training_table"])
    else:
        lines.append(f"{title}every request was a training request (--train-first all): nothing held out, so this "
                     f"says how well the model fits, not how well it predicts; noise: {run['noise_kind']}:")
        lines += render_percentile_table(run["training_table"], run["baseline_table"])
    judged = "held-out" if held_out else "training"
    lines += ["", f"What each ingredient buys ({judged} requests; error of each percentile):"]
    lines += render_rows(run["ablation"])
    counts, baseline_counts = run["counts"], run["baseline_counts"]
    lines.append("")
    if counts is None:
        lines.append("Running/waiting counts: no timeseries.csv beside the run, not compared.")
    else:
        lines.append(f"Running/waiting counts against timeseries.csv ({counts['rows']} rows, t = seconds after the "
                     f"first arrival): mean absolute error running {counts['running_mae']:.1f}, waiting "
                     f"{counts['waiting_mae']:.1f} (measured means {counts['running_mean']:.1f} and "
                     f"{counts['waiting_mean']:.1f}; constant step: {baseline_counts['running_mae']:.1f} and "
                     f"{baseline_counts['waiting_mae']:.1f}).")
    return lines
