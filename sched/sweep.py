"""Load sweep: one workload at several load factors, every case, in parallel (issue 6).

Load factor ``f`` divides every arrival time: ``arrival = floor(arrival / f)`` ticks (``f = 2`` sends
the same requests twice as fast; lengths unchanged). Each (factor, case) point is simulated with
timeline detail ``off`` and summarised by :func:`sched.metrics.summarize` (lab.md §5).

Points run on a ``concurrent.futures.Executor``: by default a process pool over all cores; any
executor works, e.g. a Dask cluster's (the lab does not depend on Dask)::

    from dask.distributed import Client
    client = Client("scheduler-address:8786")
    rows = run_sweep(workload, config, [0.5, 1, 2, 4], executor=client.get_executor())

Rendering (table text, CSV, SVG chart) is pure; the CLI writes the directory atomically.
"""

from __future__ import annotations

import csv
import io
import os
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import replace
from fractions import Fraction

from .config import EngineConfig, cases_for
from .engine import simulate
from .metrics import summarize
from .workload import RequestSpec

__all__ = ["SWEEP_FIELDS", "scale_arrivals", "run_sweep", "render_sweep_table", "render_sweep_csv",
           "render_sweep_svg"]

#: Columns of a sweep row (latencies in ticks, throughput in output tokens per tick).
SWEEP_FIELDS = ("load", "case", "p50_ttft", "p95_ttft", "p95_tpot", "throughput", "error_rate",
                "hit_tokens", "succeeded", "arrived")


def scale_arrivals(workload: list[RequestSpec], factor: Fraction) -> list[RequestSpec]:
    """The workload with each arrival divided by ``factor`` (> 0) and floored to a tick.

    Example: arrivals [0, 3, 10] at factor 2 become [0, 1, 5]; at factor 1/2, [0, 6, 20].
    """
    return [replace(spec, arrival=int(Fraction(spec.arrival) / factor)) for spec in workload]


def _point(workload: list[RequestSpec], config: EngineConfig, case, policy: str) -> dict:
    """One sweep point (runs in a worker): the case's summary row."""
    return summarize(simulate(workload, config, case, policy, timeline="off"))


def run_sweep(workload: list[RequestSpec], config: EngineConfig, loads, policy: str = "fcfs",
              executor: Executor | None = None, max_workers: int | None = None) -> list[dict]:
    """Simulate every case of lab.md §4 at every load factor in ``loads`` (positive numbers or
    strings like ``"0.5"``); returns one row per (load, case) in that order, keys
    :data:`SWEEP_FIELDS` with exact :class:`Fraction` ratios.

    ``executor``: any :class:`concurrent.futures.Executor` (left running); ``None`` creates a
    process pool of ``max_workers`` processes (default: all cores) and shuts it down.
    Raises ``ValueError`` for a non-positive factor.
    """
    factors = [Fraction(str(load)) for load in loads]
    if not factors or any(f <= 0 for f in factors):
        raise ValueError(f"load factors must be positive numbers, got {list(loads)!r}")
    own = executor is None
    pool = ProcessPoolExecutor(max_workers=max_workers or os.cpu_count()) if own else executor
    try:
        futures = []
        for factor in factors:
            scaled = scale_arrivals(workload, factor)
            futures += [(factor, pool.submit(_point, scaled, config, case, policy)) for case in cases_for(config)]
        rows = []
        for factor, future in futures:
            summary = future.result()
            row = {name: summary.get(name) for name in SWEEP_FIELDS if name != "load"}
            rows.append({"load": factor, **row})
        return rows
    finally:
        if own:
            pool.shutdown()


def _text(value, places: int = 2) -> str:
    if value is None:
        return "NA"
    if isinstance(value, Fraction) and value.denominator != 1:
        return f"{float(value):.{places}f}"
    return str(int(value)) if isinstance(value, Fraction) else str(value)


def render_sweep_table(rows: list[dict]) -> str:
    """The sweep as a text table (one line per load and case), ending with a newline."""
    header = ("load", "case", "P50 TTFT", "P95 TTFT", "P95 TPOT", "output/tick", "error rate", "hit tokens")
    lines = [header] + [(_text(r["load"]), r["case"], _text(r["p50_ttft"]), _text(r["p95_ttft"]),
                         _text(r["p95_tpot"]), _text(r["throughput"]), _text(r["error_rate"], 3),
                         str(r["hit_tokens"])) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "".join("  ".join(cell.ljust(widths[i]) if i == 1 else cell.rjust(widths[i])
                             for i, cell in enumerate(line)).rstrip() + "\n" for line in lines)


def render_sweep_csv(rows: list[dict]) -> str:
    """The sweep as CSV (columns :data:`SWEEP_FIELDS`; ratios to 6 places, NA for empty samples)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(SWEEP_FIELDS)
    for r in rows:
        writer.writerow(["NA" if r[f] is None else (round(float(r[f]), 6) if isinstance(r[f], Fraction)
                                                    and r[f].denominator != 1 else
                                                    (int(r[f]) if isinstance(r[f], Fraction) else r[f]))
                         for f in SWEEP_FIELDS])
    return out.getvalue()


_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")


def _panel(rows: list[dict], metric: str, title: str, left: int) -> list[str]:
    """One line chart (metric against load, one line per case) at x offset ``left``."""
    width, height, pad = 360, 240, 40
    loads = sorted({float(r["load"]) for r in rows})
    values = [float(r[metric]) for r in rows if r[metric] is not None]
    top = max(values, default=1.0) or 1.0
    x = lambda load: left + pad + (0 if len(loads) == 1 else (load - loads[0]) / (loads[-1] - loads[0]) * (width - 2 * pad))
    y = lambda value: height - pad + 20 - value / top * (height - 2 * pad)
    parts = [f'<text x="{left + width / 2:.0f}" y="16" text-anchor="middle">{title}</text>',
             f'<line x1="{left + pad}" y1="{height - pad + 20}" x2="{left + width - pad}" y2="{height - pad + 20}" stroke="black"/>',
             f'<line x1="{left + pad}" y1="{pad - 20 + 20}" x2="{left + pad}" y2="{height - pad + 20}" stroke="black"/>',
             f'<text x="{left + pad - 4}" y="{pad + 4}" text-anchor="end" font-size="10">{top:.4g}</text>',
             f'<text x="{left + pad - 4}" y="{height - pad + 24}" text-anchor="end" font-size="10">0</text>']
    for load in loads:
        parts.append(f'<text x="{x(load):.1f}" y="{height - pad + 34}" text-anchor="middle" font-size="10">{load:g}</text>')
    parts.append(f'<text x="{left + width / 2:.0f}" y="{height + 8}" text-anchor="middle" font-size="11">load factor</text>')
    cases = list(dict.fromkeys(r["case"] for r in rows))
    for colour, case in zip(_COLOURS, cases):
        points = [(float(r["load"]), float(r[metric])) for r in rows if r["case"] == case and r[metric] is not None]
        if points:
            path = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in points)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
    return parts


def render_sweep_svg(rows: list[dict]) -> str:
    """An SVG with two line charts against load: P95 TTFT (ticks) and throughput (output tokens
    per tick), one coloured line per case, with a legend. Deterministic text."""
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="760" height="300" font-family="sans-serif" '
             'font-size="12">', '<rect width="760" height="300" fill="white"/>']
    parts += _panel(rows, "p95_ttft", "P95 TTFT (ticks)", 10)
    parts += _panel(rows, "throughput", "throughput (output tokens / tick)", 390)
    cases = list(dict.fromkeys(r["case"] for r in rows))
    for i, (colour, case) in enumerate(zip(_COLOURS, cases)):
        parts.append(f'<rect x="{20 + 185 * i}" y="278" width="12" height="4" fill="{colour}"/>'
                     f'<text x="{36 + 185 * i}" y="284" font-size="11">{case}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
