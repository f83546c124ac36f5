"""A vLLM-engine run that keeps time in milliseconds, with a step model (vllm-engine.md §6).

``infer_sched_lab.py --engine vllm --workload W --step-model step-model.json``:

- **Settings**: the engine settings stored in the step model (the ones it was fitted with) are
  applied; a vLLM flag given explicitly overrides its setting, and the run says so (stderr,
  ``manifest.json`` ``step_model.overridden``, the table's header): the step time was not fitted
  for the new value, so the prediction becomes an extrapolation.
- **Clock**: arrivals are milliseconds (``arrival × tick_ms`` when the workload records a
  ``tick_ms`` header, as ``calibrate`` and ``import`` write; otherwise the arrival numbers are read
  as ms and the run says so). The engine runs on whole microseconds (``step_us``, see
  :mod:`sched.timing.stepmodel`): a request arriving at ``A`` joins the first step starting at or after
  ``A``; a step lasting ``a + b·prompt + c·decode`` ms stamps its tokens at its end.
- **Artifacts**: the usual files, with every time also in ms. ``requests.jsonl`` keeps the
  engine's clock (ticks of 1 µs) and adds ``arrival_ms, admitted_ms, first_token_ms, done_ms,
  ttft_ms, queue_wait_ms, e2e_ms, tpot_ms`` and ``token_times_ms``; ``timeline.jsonl`` adds
  ``start_ms`` and ``duration_ms`` per step; ``summary.json``/``summary.csv``, ``table.txt``,
  ``report.html`` and ``timeline.svg`` are in ms (throughput in output tokens per second).
Without ``--step-model`` nothing here runs and every file is as before.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from dataclasses import replace
from fractions import Fraction

from ..output.artifacts import LabRun, render_table, run_manifest
from ..output.jsonl_lines import jsonl_chunks
from ..base.cmdline import InputError
from ..core.clock import UNITS_NOTE_MS, VLLM_MS
from ..core.config import ConfigError
from ..engines import check_cases
from ..core.metrics import SUMMARY_FIELDS, summarize
from ..output.ms_picture import render_ms_timeline_svg
from ..output.report import render_report
from ..core.bench_metrics import bench_units
from .bench_rows import BenchSettings, bench_header, bench_row
from .ms_lines import request_lines_ms, timeline_lines_ms
from .step_ends import StepEnds
from .stepmodel import StepModel, limits_for, load_step_model
from ..vllm.config import VllmKnobs, check_fits
from ..vllm.async_step import simulate
from ..vllm.load_stats import LOAD_FIELDS, LOAD_UNITS, load_summary
from ..workload.specs import workload_tick_ms, workload_to_json

__all__ = ["settle_knobs", "knobs_for", "batch_cost_warning", "run_with_step_model", "replay_result", "render_ms_artifacts", "UNITS_NOTE_MS", "MS_FIELDS"]

#: Summary fields in time units (ticks of 1 µs -> ms) and in tokens per time (per µs -> per second).
_TIME_FIELDS = ("p50_ttft", "p95_ttft", "p95_itl", "p95_tpot", "p95_e2e", "p95_queue_wait", "makespan",
                "p50_queue_wait", "p99_queue_wait", "mean_queue_wait",
                # summary.json's detail columns (mean, median, P90, P99 of each latency)
                *(f"{stat}_{metric}" for metric in ("ttft", "tpot", "itl", "e2e") for stat in ("mean", "median", "p90", "p99")),
                "median_queue_wait", "p90_queue_wait")
_RATE_FIELDS = ("throughput", "completed_output_tps")
MS_FIELDS = {**{f: "ms per output token" if f.endswith("_tpot") else "ms" for f in _TIME_FIELDS},
             "throughput": "output tokens per second (all emitted tokens / makespan)",
             "completed_output_tps": "output tokens per second (successful requests only / makespan)",
             "busy_fraction": "fraction of the makespan spent in steps",
             "budget_utilization": "tokens scheduled / (budget x steps)"}
_KNOBS = ("max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold", "enable_prefix_caching",
          "block_size", "num_gpu_blocks")


def settle_knobs(model: StepModel, given: dict, policy: str | None, timeout_ticks) -> tuple[VllmKnobs, list[str]]:
    """The knobs of a step-model run: the model's settings, explicit flags overriding.

    ``given`` maps a :class:`VllmKnobs` field to the value of a flag given explicitly; ``policy``
    is ``--policy`` when given explicitly (else ``None``). Returns the knobs and one text per
    override, e.g. ``"--num-gpu-blocks 1000 (fitted with 2588)"``.
    """
    settings = model.settings
    values = {knob: given.get(knob, settings[knob]) for knob in _KNOBS}
    values["policy"] = policy or settings["policy"]
    overridden = [f"--{knob.replace('_', '-')} {values[knob]} (fitted with {settings[knob]})"
                  for knob in (*_KNOBS, "policy") if values[knob] != settings[knob]]
    # Async scheduling: the settings' own when they carry it (a calibrated async run), else off.
    fitted_async = bool(settings.get("async_scheduling", False))
    values["async_scheduling"] = given.get("async_scheduling", fitted_async)
    if values["async_scheduling"] != fitted_async:
        overridden.append(f"--{'' if values['async_scheduling'] else 'no-'}async-scheduling (fitted with "
                          f"{'async' if fitted_async else 'sync'} scheduling)")
    return VllmKnobs(timeout_ticks=timeout_ticks, **values), overridden


def batch_cost_warning(model: StepModel, knobs: VllmKnobs) -> str | None:
    """The warning of a run whose batch limits differ from the fitted ones while the step model cannot
    say what a batch costs; ``None`` when it does not apply.

    Applies when ``c`` (per decoded sequence) or ``d`` (per KV context token) is unidentified
    (``model.unidentified``, :mod:`sched.timing.identify`) and ``knobs.max_num_seqs`` or
    ``knobs.max_num_batched_tokens`` (vLLM's flags) differ from ``model.settings``, or
    ``knobs.num_gpu_blocks`` is larger (more KV blocks admit a bigger batch where the KV cache
    bounded it, as on an overloaded run): the times of a batch the fit never saw then carry the
    decode cost the fit held, near 0 or at 0, so a bigger batch looks free and a capacity search
    would always pick the largest one.
    """
    unknown = [term for term in ("c", "d") if term in (model.unidentified or {})]
    changed = [knob for knob in ("max_num_seqs", "max_num_batched_tokens")
               if getattr(knobs, knob) != model.settings[knob]]
    if knobs.num_gpu_blocks > model.settings["num_gpu_blocks"]:
        changed.append("num_gpu_blocks")
    if not unknown or not changed:
        return None
    larger = any(getattr(knobs, knob) > model.settings[knob] for knob in changed)
    names = {"c": "c (per decoded sequence)", "d": "d (per KV context token)"}
    flags = "; ".join(f"--{knob.replace('_', '-')} {getattr(knobs, knob)}, fitted with {model.settings[knob]}"
                      for knob in changed)
    return (f"{' and '.join(names[term] for term in unknown)} unidentified: the step model cannot tell what a "
            f"{'larger' if larger else 'smaller'} batch costs ({flags}); these times hold the decode cost at the "
            "fit's, so they cannot rank batch sizes")


def _kv_cache_note(blocks: int, given: bool) -> str:
    """The ``--gpu`` note's clause on the KV cache (docs/handbook/calibrate-your-gpu.md, "the KV cache
    keeps the fitted run's num_gpu_blocks"): ``blocks`` is the run's ``num_gpu_blocks``, ``given``
    whether ``--num-gpu-blocks`` set it."""
    if given:
        return f"KV cache: num-gpu-blocks {blocks} from --num-gpu-blocks"
    return (f"KV cache: num-gpu-blocks {blocks} kept from the fitted run (the step model's settings), not sized for the target: "
            "give --num-gpu-blocks, since a GPU with more memory holds more blocks and that changes queueing more "
            "than the step time does")


def _unidentified_note(model: StepModel) -> str:
    """``"; c, d unidentified: scaled, still not measured"`` for a model with unidentified terms, else ``""``."""
    unknown = sorted(model.unidentified or {})
    return f"; {', '.join(unknown)} unidentified: scaled, still not measured" if unknown else ""


def _arrival_us(spec, tick_ms: float) -> int:
    return round(spec.arrival * tick_ms * 1000)


def run_with_step_model(workload, knobs: VllmKnobs, model: StepModel, source: str, timeline: str,
                        progress=None, max_concurrency: int | None = None) -> LabRun:
    """Simulate ``workload`` (arrivals in ms, see the module docstring) with ``model``'s step time.

    Returns a :class:`LabRun` whose ``workload`` is the given one, whose results keep the
    engine's microsecond clock and whose ``clock`` says so (:data:`sched.core.clock.VLLM_MS`). A deadline
    (``knobs.timeout_ticks``, in µs: ``--timeout-ms``) ends a request at the end of the step in flight
    when it falls inside one (the engine never interrupts a step).
    Raises :class:`sched.core.config.ConfigError` when a request can never fit the KV cache.
    ``max_concurrency``: a benchmark client's ``--max-concurrency`` (:mod:`sched.vllm.client_gate`: a
    request starts, and its times count, when fewer than that many are in flight).
    """
    tick_ms = workload_tick_ms(workload) or 1.0
    clocked = [replace(spec, arrival=_arrival_us(spec, tick_ms)) for spec in workload]
    check_fits(clocked, knobs, source)
    result = simulate(clocked, knobs, progress, timeline=timeline, step_time=model.step_time(),
                      max_concurrency=max_concurrency)
    check_cases([result])
    return LabRun(workload, knobs, knobs.policy, source, [result], timeline, clock=VLLM_MS)


def replay_result(workload, knobs: VllmKnobs, source: str, max_concurrency: int | None = None):
    """``simulate_with(step_model)`` for :func:`sched.timing.gpu_band.band_text`: replays ``workload``
    under ``knobs`` with another step model (no timeline kept) and returns its CaseResult."""
    def simulate_with(model: StepModel):
        run = run_with_step_model(workload, knobs, model, source, "off", None, max_concurrency=max_concurrency)
        run.close()
        return run.results[0]
    return simulate_with


def _summary_ms(run: LabRun) -> list[dict]:
    rows = []
    for result, summary in zip(run.results, run.summaries):   # summarized once (the table reads them too)
        row = dict(summary)
        for key in _TIME_FIELDS:
            if row.get(key) is not None:
                row[key] = Fraction(row[key]) / 1000
        for key in _RATE_FIELDS:
            if row[key] is not None:
                row[key] = Fraction(row[key]) * 1_000_000
        durations = [record.duration for record in result.ticks]   # whole µs: one exact int sum
        busy = (Fraction(sum(durations)) if all(type(d) is int for d in durations)
                else sum(map(Fraction, durations), Fraction(0)))
        steps = sum(getattr(record, "num_steps", 1) for record in result.ticks)
        # no step records (--timeline off): the busy time is unknown, not zero
        row["busy_fraction"] = busy / row["makespan"] / 1000 if row["makespan"] and result.ticks else None
        row["budget_utilization"] = (Fraction(result.budget_spent, result.config.budget * steps) if steps else None)
        rows.append(row)
    return rows


def _number(value):
    if isinstance(value, Fraction):
        return int(value) if value.denominator == 1 else round(float(value), 6)
    return value


def _table(run: LabRun, rows: list[dict], overridden: list[str], model: StepModel) -> str:
    base = render_table(run).splitlines()[0]
    header = f"{base} | {model.formula}" + (f" | overridden: {'; '.join(overridden)}" if overridden else "")
    columns = ("case", "P50 TTFT", "P95 TTFT", "P95 TPOT", "P95 E2E", "P95 queue wait", "output tok/s", "ok/arrived",
               "makespan", "preemptions")
    lines = [columns]
    for result, s in zip(run.results, rows):
        cells = [s["case"]] + ["NA" if s[k] is None else f"{float(s[k]):.1f}"
                               for k in ("p50_ttft", "p95_ttft", "p95_tpot", "p95_e2e", "p95_queue_wait",
                                         "throughput")]
        cells += [f"{s['succeeded']}/{s['arrived']}", f"{float(s['makespan']):.1f}",
                  str(sum(r.num_preemptions for r in result.requests))]
        lines.append(cells)
    widths = [max(len(row[i]) for row in lines) for i in range(len(columns))]
    text = ["  ".join([row[0].ljust(widths[0])] + [c.rjust(widths[i]) for i, c in enumerate(row) if i])
            for row in lines]
    return "\n".join([header, *text, f"(times in ms; {_arrivals_note(run.workload)}; {_fitted_on_note(model)})",
                      run.clock.units_note]) + "\n"


def _arrivals_note(workload) -> str:
    tick_ms = workload_tick_ms(workload)
    if tick_ms is None:
        return "arrivals read as ms: the workload has no tick_ms header"
    return f"arrivals = arrival x {tick_ms:g} ms (the workload's tick_ms)"


def _fitted_on_note(model: StepModel) -> str:
    """Where the step model holds. Async scheduling is replayed (settings.async_scheduling), so only
    what the replay cannot see is named: the real prompts' text (prefixes they share)."""
    fitted = model.fitted_on
    runs = fitted.get("runs")
    count = f"{len(runs)} runs" if isinstance(runs, list) and len(runs) > 1 else "one run"
    return (f"step model fitted on {count} of {fitted.get('model') or 'an unknown model'} on "
            f"{fitted.get('device') or 'an unknown GPU'}, vLLM {fitted.get('vllm_version') or '?'}: valid there only; "
            "run-to-run variance unknown; real prompt text (prefixes it shares) can shift real results")


def render_ms_artifacts(run: LabRun, model: StepModel, overridden: list[str],
                        bench: BenchSettings | None = None) -> dict:
    """Every artifact of a step-model run by file name (module docstring); same run, same bytes.
    Each value is its text, except ``requests.jsonl`` and ``timeline.jsonl``: iterables of text
    chunks, rendered as they are written (once; ``write_artifacts`` takes either form).

    ``bench``: ``--metric-percentiles`` and ``--goodput`` (default: vLLM's, no limits). Each case row of
    ``summary.json``/``summary.csv`` carries vLLM bench serve's keys after the lab's columns
    (:mod:`sched.timing.bench_rows`); ``table.txt`` gains a line of them when either flag was given.
    """
    given = bench is not None
    bench = bench or BenchSettings()
    ends = [StepEnds(result.requests) for result in run.results]   # the per-token work, once per step end
    histograms = [e.itl_histogram() for e in ends]
    if not run._summaries:   # summarized once (the table reads them too), the ITL histogram shared
        run._summaries.extend(summarize(result, gaps) for result, gaps in zip(run.results, histograms))
    rows = _summary_ms(run)
    summaries = [{k: _number(v) for k, v in s.items()} for s in rows]
    bench_rows = [{**load_summary(result), **bench_row(result, bench, e, gaps)}
                  for result, e, gaps in zip(run.results, ends, histograms)]
    fields = (*SUMMARY_FIELDS, *LOAD_FIELDS, *bench.fields())
    manifest = run_manifest(run)
    manifest.update(time_unit=run.clock.unit, tick_ms=0.001, workload_tick_ms=workload_tick_ms(run.workload) or 1.0,
                    units=run.clock.units_note, arrivals=_arrivals_note(run.workload), step_model={
        "step_ms": {"a": model.a_ms, "b": model.b_ms, "c": model.c_ms} | ({"d": model.d_ms} if model.d_ms else {}),
        "formula": model.formula,
        "fitted_with": model.settings, "fitted_on": model.fitted_on, "overridden": overridden,
        "limits": limits_for(model.fitted_on) + ([
            "Settings differ from the fit (overridden above): the step time is extrapolated."] if overridden else [])})
    if model.unidentified:   # only then: step models whose every term is known keep their manifest bytes
        manifest["step_model"]["identified"] = model.identified
    warning = batch_cost_warning(model, run.config)
    if warning:
        manifest["step_model"]["warnings"] = [warning]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields)
    for s, b in zip(summaries, bench_rows):
        s.update(b)
        writer.writerow(["NA" if s[f] is None else s[f] for f in fields])
    table = _table(run, rows, overridden, model)
    if given:
        table += _bench_line(bench_rows[0], bench)
    svg = render_ms_timeline_svg(run.results[0], run.clock, summaries[0])
    units = {**{f: MS_FIELDS.get(f, "") for f in SUMMARY_FIELDS if f in MS_FIELDS}, **LOAD_UNITS}
    report = render_report(table, summaries, (*SUMMARY_FIELDS, *LOAD_FIELDS), svg, units, time_unit=run.clock.unit)
    return {
        "manifest.json": json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
        "workload.json": workload_to_json(run.workload, units=True),
        "summary.json": json.dumps({"units": run.clock.units_note, "time_unit": run.clock.unit,
                                    "field_units": {**MS_FIELDS, **LOAD_UNITS, **bench_units(bench.percentiles)},
                                    "percentiles": "nearest rank", "vllm_bench": bench_header(bench),
                                    "cases": summaries},
                                   indent=2, ensure_ascii=False) + "\n",
        "summary.csv": out.getvalue(),
        "requests.jsonl": jsonl_chunks(request_lines_ms(run, ends)),   # streamed: text chunks, written as they come
        "timeline.jsonl": timeline_lines_ms(run),
        "table.txt": table,
        "timeline.svg": svg,
        "report.html": report,
    }


def _bench_line(row: dict, bench: BenchSettings) -> str:
    """One line of vLLM bench serve's headline numbers for ``table.txt``."""
    def show(key, digits=2):
        return "NA" if row.get(key) is None else f"{row[key]:.{digits}f}"
    parts = [f"request_throughput {show('request_throughput')} req/s",
             f"output_throughput {show('output_throughput', 1)} tok/s"]
    if bench.goodput is not None:
        limits = " ".join(f"{k}:{v:g}" for k, v in bench.goodput.items())
        parts.append(f"request_goodput {show('request_goodput')} req/s and slo_attainment "
                     f"{show('slo_attainment', 3)} under {limits} ms")
    parts += [f"{key} {show(key, 1)}" for key in bench.fields() if key.startswith("p") and key.endswith(("ttft_ms", "tpot_ms"))]
    return "vLLM bench serve: " + ", ".join(parts) + " (linear percentiles, ms)\n"


def knobs_for(path: str, args, argv: list[str], knobs: VllmKnobs,
              notices: list | None = None) -> tuple[StepModel, VllmKnobs, list[str]]:
    """Load the step model at ``path`` and settle the run's knobs (:func:`settle_knobs`).

    ``args``/``argv``: the parsed run flags and the raw ones (a flag counts as given when it was
    typed, ``--policy``/``--scheduling-policy`` included); ``knobs``: the :class:`VllmKnobs` the flags alone give. Prints
    one stderr line per override (the ``--gpu`` carry's note, the warnings), or, given a ``notices``
    list, appends them there for the caller to print once the run's other checks have passed (bad
    input is then one line, not warnings and an error). Raises :class:`sched.core.config.ConfigError`
    (bad file, another engine).
    """
    said = [] if notices is None else notices
    try:
        model = load_step_model(path)
        if getattr(args, "gpu", None) is not None:   # --gpu: the GPU-bound terms follow another GPU
            from .gpus import carry_to
            weights_gb = getattr(args, "weights_gb", None)
            model = carry_to(model, args.gpu, None if weights_gb is None else weights_gb * 1024 ** 3)
            carried = model.fitted_on["carried_to"]
            said.append(f"infer_sched_lab.py: note: step model carried from {carried['from']} to {carried['gpu']}: "
                        f"a kept, b and c {carried['b_and_c']}, d {carried['d']}{_unidentified_note(model)}; "
                        f"{carried['band']['weights']}; the band of two bounding carries is printed with the result")
            carry_line = len(said) - 1
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    given = {knob: getattr(knobs, knob) for knob in (*_KNOBS, "async_scheduling")
             if getattr(args, knob, None) is not None}
    typed = ("--policy", "--scheduling-policy")
    policy = knobs.policy if any(a in typed or a.startswith(tuple(f + "=" for f in typed)) for a in argv) else None
    settled, overridden = settle_knobs(model, given, policy, knobs.timeout_ticks)
    if getattr(args, "gpu", None) is not None:
        said[carry_line] += "; " + _kv_cache_note(settled.num_gpu_blocks, "num_gpu_blocks" in given)
    for text in overridden:
        said.append(f"infer_sched_lab.py: warning: {text}: the step model was not fitted with this setting; its times "
                    "are an extrapolation")
    warning = batch_cost_warning(model, settled)
    if warning:
        said.append(f"infer_sched_lab.py: warning: {warning}")
    if notices is None:
        for line in said:
            print(line, file=sys.stderr)
    return model, settled, overridden
