"""Load sweep: one workload at several load factors, every case, in parallel (docs/handbook/real-traffic.md §14).

Load factor ``f`` divides every arrival time: ``arrival = floor(arrival / f)`` ticks (``f = 2`` sends
the same requests twice as fast; lengths unchanged). Each (factor, case) point is simulated with
timeline detail ``off`` and summarised by :func:`sched.core.metrics.summarize` (lab.md §5).

Points run on a ``concurrent.futures.Executor``: by default a process pool over all cores; any
executor works, e.g. a Dask cluster's (the lab does not depend on Dask)::

    from dask.distributed import Client
    client = Client("scheduler-address:8786")
    rows = run_sweep(workload, config, [0.5, 1, 2, 4], executor=client.get_executor())

Load factors (:func:`parse_loads`): finite numbers in [:data:`MIN_LOAD`, :data:`MAX_LOAD`], each
given once (a repeated factor is refused: it would only repeat rows). Workers: at most
:data:`max_workers_allowed` (4 × CPU count, at most 64).

Rendering (table text, CSV, SVG chart, manifest) is pure; the CLI writes the directory atomically.
The deadline behind ``error_rate`` is end to end (lab.md §3): a request with thousands of output
tokens can miss it at any load, so the error rate need not fall to 0 at light load.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import signal
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import replace
from fractions import Fraction

from ..base.cmdline import plain_decimal
from ..core.config import EngineConfig, cases_for
from ..lab.engine import simulate
from ..core.metrics import summarize
from ..workload.specs import RequestSpec, workload_sha256, workload_tick_ms
from .worker_pool import mask_stop_signals, stop_workers, worker_signals

__all__ = ["SWEEP_FIELDS", "MIN_LOAD", "MAX_LOAD", "parse_loads", "max_workers_allowed", "scale_arrivals",
           "run_sweep", "render_sweep_table", "render_sweep_csv", "render_sweep_svg", "render_sweep_manifest",
           "linear_ticks", "log_ticks"]

#: Range of a load factor: 1/1000 stretches a workload a thousandfold, 1000 squeezes it as much.
MIN_LOAD, MAX_LOAD = 0.001, 1000.0


def parse_loads(text: str) -> list[Fraction]:
    """Load factors from ``"0.5,1,2"``: exact fractions of the decimal texts, in the order given.

    Raises ``ValueError`` (one line) for a factor that is not a plain decimal number (``1_0`` and
    ``0x1`` are refused, though Python reads them) or not a finite number in
    [:data:`MIN_LOAD`, :data:`MAX_LOAD`] or that is given twice (``1`` and ``1.0`` are the same).
    """
    factors = []
    for item in text.split(","):
        try:
            value = float(item) if plain_decimal(item) else float("not a plain decimal")
        except ValueError:
            raise ValueError(f"not a number: {item.strip()!r}") from None
        if not math.isfinite(value) or not MIN_LOAD <= value <= MAX_LOAD:
            raise ValueError(f"each factor must be a finite number from {MIN_LOAD:g} to {MAX_LOAD:g}, "
                             f"got {item.strip()!r}")
        factor = Fraction(item.strip())
        if factor in factors:
            raise ValueError(f"factor {item.strip()} is given twice")
        factors.append(factor)
    return factors


def max_workers_allowed() -> int:
    """The most worker processes a sweep may start: 4 × CPU count, at most 64."""
    return min(64, 4 * (os.cpu_count() or 1))

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
    process pool of ``max_workers`` processes (default: all cores) and shuts it down; on any
    exception, Ctrl-C and SIGTERM included, its workers are ended first (none is left running).
    Raises ``ValueError`` for a non-positive factor.
    """
    factors = [Fraction(str(load)) for load in loads]
    if not factors or any(f <= 0 for f in factors):
        raise ValueError(f"load factors must be positive numbers, got {list(loads)!r}")
    if max_workers is not None and not 1 <= max_workers <= max_workers_allowed():
        raise ValueError(f"workers must be from 1 to {max_workers_allowed()}, got {max_workers}")
    own = executor is None
    pool = (ProcessPoolExecutor(max_workers=max_workers or os.cpu_count(), initializer=worker_signals)
            if own else executor)
    try:
        futures = []
        if own:  # the workers are forked during the first submits
            mask_stop_signals(signal.SIG_BLOCK)
        try:
            for factor in factors:
                scaled = scale_arrivals(workload, factor)
                futures += [(factor, pool.submit(_point, scaled, config, case, policy)) for case in cases_for(config)]
        finally:
            if own:
                mask_stop_signals(signal.SIG_UNBLOCK)
        rows = []
        for factor, future in futures:
            summary = future.result()
            row = {name: summary.get(name) for name in SWEEP_FIELDS if name != "load"}
            rows.append({"load": factor, **row})
        return rows
    except BaseException:  # Ctrl-C, SIGTERM or a failed point: no worker may outlive the sweep
        if own:
            stop_workers(pool)
        raise
    finally:
        if own:
            pool.shutdown()


def _text(value, places: int = 2) -> str:
    if value is None:
        return "NA"
    if isinstance(value, Fraction) and value.denominator != 1:
        return f"{float(value):.{places}f}"
    return str(int(value)) if isinstance(value, Fraction) else str(value)


#: The files a sweep directory holds; ``--force`` replaces these and nothing else.
SWEEP_FILES = ("sweep.txt", "sweep.csv", "sweep.svg", "manifest.json")


def render_sweep_table(rows: list[dict]) -> str:
    """The sweep as a text table (one line per load and case), ending with a newline."""
    header = ("load", "case", "P50 TTFT", "P95 TTFT", "P95 TPOT", "output/tick", "error rate", "hit tokens")
    lines = [header] + [(f"{float(r['load']):g}", r["case"], _text(r["p50_ttft"]), _text(r["p95_ttft"]),
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
_DASHES = ("", "7,3", "2,3", "9,3,2,3")  # one dash style per case: overlapping lines stay visible
_PANEL_WIDTH, _PANEL_HEIGHT = 600, 270      # one chart of the 2-column grid, pixels
_PAD_LEFT, _PAD_RIGHT, _PAD_TOP, _PAD_BOTTOM = 64, 24, 34, 46
_VALUES_TOP, _VALUE_ROW = 56, 13   # an annotated panel's value rows: first baseline below the axis, row step


def _marker(kind: int, cx: float, cy: float, colour: str) -> str:
    """A point marker: circle, square, triangle or diamond (one per case)."""
    if kind == 0:
        return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{colour}"/>'
    if kind == 1:
        return f'<rect x="{cx - 3.5:.1f}" y="{cy - 3.5:.1f}" width="7" height="7" fill="none" stroke="{colour}" stroke-width="1.5"/>'
    if kind == 2:
        return f'<path d="M{cx:.1f},{cy - 4.5:.1f} L{cx + 4:.1f},{cy + 3:.1f} L{cx - 4:.1f},{cy + 3:.1f} Z" fill="{colour}"/>'
    return (f'<path d="M{cx:.1f},{cy - 4.5:.1f} L{cx + 4.5:.1f},{cy:.1f} L{cx:.1f},{cy + 4.5:.1f} L{cx - 4.5:.1f},{cy:.1f} Z" '
            f'fill="none" stroke="{colour}" stroke-width="1.5"/>')


def linear_ticks(top: float) -> list[float]:
    """Labelled values of a linear axis from 0: a 1-2-5 step giving 4 to 8 labels, the last at or
    above ``top`` (so the labels span the data). Example: top 2.62 → 0, 0.5, 1, 1.5, 2, 2.5, 3."""
    if top <= 0:
        return [0.0, 1.0]
    step = 10.0 ** math.floor(math.log10(top / 4))
    for factor in (1, 2, 5, 10):
        if top / (step * factor) <= 7:
            step *= factor
            break
    count = math.ceil(top / step - 1e-9)
    return [round(k * step, 10) for k in range(count + 1)]


def log_ticks(top: float) -> list[float]:
    """Labelled values of a log axis from 1: every decade up to one at or above ``top``, with 2
    and 5 in between while there are at most two decades. Example: top 56 → 1, 2, 5, 10, 20, 50, 100."""
    decades = max(1, math.ceil(math.log10(max(top, 1.0)) - 1e-9))
    factors = (1, 2, 5) if decades <= 2 else (1,)
    return [f * 10.0 ** k for k in range(decades) for f in factors] + [10.0 ** decades]


def _label(value: float) -> str:
    return f"{value:g}" if value < 1e6 else f"{value:.0e}"


def _panel(rows: list[dict], value, title: str, left: float, top_y: float, log: bool = False,
           fixed_top: float | None = None, annotate=None) -> list[str]:
    """One line chart against load at (``left``, ``top_y``): x is the load factor on a log scale
    (factors are usually geometric), y linear from 0 or, with ``log``, log10 from 1 (values below
    1 drawn at 1); every axis labelled across the data. ``value(row)`` gives a point's value or
    None (no point); ``annotate(row)``, if given, is a short text per point, printed in a row of
    values per case under the x axis (each under its load, the case's marker at the row's start),
    so that no line crosses a label; such a panel is :func:`_values_height` pixels taller."""
    x0, x1 = left + _PAD_LEFT, left + _PANEL_WIDTH - _PAD_RIGHT
    y0, y1 = top_y + _PANEL_HEIGHT - _PAD_BOTTOM, top_y + _PAD_TOP   # y0: the bottom
    loads = sorted({float(r["load"]) for r in rows})
    values = [float(v) for v in map(value, rows) if v is not None]
    data_top = fixed_top if fixed_top is not None else max(values, default=1.0)
    ticks = log_ticks(data_top) if log else linear_ticks(data_top)
    if log:
        span_y = math.log10(ticks[-1])
        y = lambda v: y0 - math.log10(max(v, 1.0)) / span_y * (y0 - y1)
    else:
        y = lambda v: y0 - v / ticks[-1] * (y0 - y1)
    span = math.log10(loads[-1] / loads[0]) if len(loads) > 1 else 0.0
    inner = 0.06 * (x1 - x0)   # the first and last load sit a little inside the axis
    x = lambda load: (x0 + x1) / 2 if not span else x0 + inner + (x1 - x0 - 2 * inner) * math.log10(load / loads[0]) / span
    parts = [f'<text x="{left + _PANEL_WIDTH / 2:.0f}" y="{top_y + 20:.0f}" text-anchor="middle" '
             f'font-weight="bold">{title}</text>']
    for v in ticks:
        parts.append(f'<line x1="{x0}" y1="{y(v):.1f}" x2="{x1}" y2="{y(v):.1f}" stroke="#e4e4e4"/>')
        parts.append(f'<text x="{x0 - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">{_label(v)}</text>')
    for load in loads:
        parts.append(f'<line x1="{x(load):.1f}" y1="{y0}" x2="{x(load):.1f}" y2="{y0 + 4}" stroke="black"/>')
        parts.append(f'<text x="{x(load):.1f}" y="{y0 + 17}" text-anchor="middle" font-size="11">{load:g}</text>')
    parts += [f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="black"/>',
              f'<line x1="{x0}" y1="{y1}" x2="{x0}" y2="{y0}" stroke="black"/>',
              f'<text x="{(x0 + x1) / 2:.0f}" y="{y0 + 36}" text-anchor="middle" font-size="11">'
              f'load factor{" (log scale)" if span else ""}</text>']
    cases = list(dict.fromkeys(r["case"] for r in rows))
    for index, case in enumerate(cases[:len(_COLOURS)]):
        colour, dash = _COLOURS[index], _DASHES[index]
        mine = [r for r in rows if r["case"] == case and value(r) is not None]
        points = [(x(float(r["load"])), y(float(value(r)))) for r in mine]
        if points:
            path = " ".join(f"{a:.1f},{b:.1f}" for a, b in points)
            style = f' stroke-dasharray="{dash}"' if dash else ""
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{style} points="{path}"/>')
            parts += [_marker(index, a, b, colour) for a, b in points]
            if annotate is not None:
                # A row of values per case under the axis, each under its load: no line ever crosses them.
                row_y = y0 + _VALUES_TOP + _VALUE_ROW * index
                parts.append(_marker(index, x0 - 12, row_y - 4, colour))
                parts += [f'<text x="{a:.1f}" y="{row_y:.1f}" text-anchor="middle" font-size="10" '
                          f'fill="{colour}">{annotate(r)}</text>' for (a, _), r in zip(points, mine)]
    return parts


def _values_height(rows: list[dict]) -> int:
    """Pixels a panel with a row of values per case needs below its own height (:func:`_panel`)."""
    cases = len(dict.fromkeys(r["case"] for r in rows))
    return max(0, _VALUES_TOP + _VALUE_ROW * (min(cases, len(_COLOURS)) - 1) + 8 - _PAD_BOTTOM)


def render_sweep_svg(rows: list[dict], deadline: int | None = None) -> str:
    """The sweep as line charts against the load factor (log scale), two per row: P95 TTFT (ticks,
    log scale), throughput (output tokens per tick), requests succeeded (each point labelled
    ``succeeded/arrived`` in a row per case under the axis) and, only with a ``deadline`` (``--timeout-ticks``; without one every
    request succeeds), the error rate (0..1). One colour, dash style and marker per case, with a
    legend; every axis labelled across its data. Deterministic text."""
    arrived = max((int(r["arrived"]) for r in rows), default=0)
    panels = [
        (lambda r: r["p95_ttft"], "P95 TTFT (ticks, log scale)", dict(log=True)),
        (lambda r: r["throughput"], "throughput (output tokens per tick)", {}),
        (lambda r: r["succeeded"], f"requests succeeded (of {arrived} per point)",
         dict(fixed_top=max(arrived, 1), annotate=lambda r: f"{r['succeeded']}/{r['arrived']}")),
    ]
    if deadline is not None:
        panels.append((lambda r: r["error_rate"], f"error rate (deadline {deadline} ticks, 0..1)",
                       dict(fixed_top=1.0)))
    columns, legend_h = 2, 34
    width = columns * _PANEL_WIDTH + 20
    grid_rows = math.ceil(len(panels) / columns)
    extra = [max((_values_height(rows) for _, _, options in panels[r * columns:(r + 1) * columns]
                  if "annotate" in options), default=0) for r in range(grid_rows)]
    tops = [legend_h + r * _PANEL_HEIGHT + sum(extra[:r]) for r in range(grid_rows)]
    height = grid_rows * _PANEL_HEIGHT + sum(extra) + legend_h + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             'font-family="sans-serif" font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>']
    cases = list(dict.fromkeys(r["case"] for r in rows))
    for i, case in enumerate(cases[:len(_COLOURS)]):
        colour, dash = _COLOURS[i], _DASHES[i]
        style = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<line x1="{20 + 260 * i}" y1="20" x2="{50 + 260 * i}" y2="20" stroke="{colour}" '
                     f'stroke-width="2"{style}/>' + _marker(i, 35 + 260 * i, 20, colour)
                     + f'<text x="{56 + 260 * i}" y="24" font-size="12">{case}</text>')
    for k, (value, title, options) in enumerate(panels):
        parts += _panel(rows, value, title, 10 + (k % columns) * _PANEL_WIDTH, tops[k // columns], **options)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def render_sweep_manifest(workload: list[RequestSpec], config: EngineConfig, policy: str, factors) -> str:
    """``manifest.json`` of a sweep directory: workload sha256 and size, ``tick_ms`` when the
    workload records it (``null`` otherwise), policy, knobs, deadline and load factors (as given)."""
    tick_ms = workload_tick_ms(workload)
    manifest = {
        "tool": "infer-sched-lab sweep",
        "workload_sha256": workload_sha256(workload),
        "num_requests": len(workload),
        "tick_ms": tick_ms,
        "policy": policy,
        "config": {"budget": config.budget, "decode_cost": config.decode_cost, "max_active": config.max_active,
                   "chunk_tokens": config.chunk_tokens},
        "timeout_ticks": config.timeout_ticks,
        "loads": [int(f) if f.denominator == 1 else float(f) for f in map(Fraction, factors)],
        "units": "latencies in ticks, throughput in output tokens per tick; load divides every arrival tick",
    }
    return json.dumps(manifest, indent=2) + "\n"
