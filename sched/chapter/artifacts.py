"""Runs of the chapter's window model on a requests file, and their artifacts (serving-bench.md §1).

A *setting* is one arrival pattern × policy × batch size × batch speed-up; :func:`run_settings`
simulates every setting of the grid on the same requests (the chapter's Step 2 comparisons) and
:func:`render_files` turns the runs into the directory ``serving-bench run --artifacts`` writes:

- ``manifest.json`` (tool, version, the grid, the input's sha256, the replay command),
- ``requests.json`` (the exact input the model ran on, defaults filled in: replaying it with the
  same flags gives the same bytes in every file),
- ``summary.json`` (one row per setting: the chapter's metrics and units), ``table.txt`` (the
  same rows as a text table), ``requests.jsonl`` (per request and setting), ``batch_trace.jsonl``
  (per window and setting) and ``windows.svg`` (a picture of the windows).

Arrival patterns: ``given`` (the file's arrivals), ``burst`` (every request at 0 ms) and
``spaced:MS`` (request ``i`` of the input at ``i × MS`` ms). Times in ms, throughput in output
tokens per second. Rendering is pure; the engine never writes files.
"""

from __future__ import annotations

import difflib
import hashlib
import html
import json
import math
from dataclasses import dataclass

from .. import __version__
from ..base.cmdline import InputError, need, one_line
from .window import normalize_requests, simulate_serving_scheduler
from .json_files import decode, read_text

__all__ = ["Setting", "load_requests", "parse_pattern", "run_settings", "render_table", "render_files", "requests_text",
           "render_windows_svg", "urgent_wait",
           "SERVING_FILES", "UNITS_NOTE"]

SERVING_FILES = ("manifest.json", "requests.json", "summary.json", "table.txt", "requests.jsonl",
                 "batch_trace.jsonl", "windows.svg")
UNITS_NOTE = ("The chapter's CPU window model (serving-bench.md §1), not the lab's tick engine: times in "
              "milliseconds, throughput in output tokens per second; ttft_ms is the admission wait.")
#: Largest ``spaced:MS`` gap: 11.6 days between two requests (request times: serving_bench's bounds).
MAX_GAP_MS = 1e9
_SUMMARY_KEYS = ("request_count", "completed_count", "makespan_ms", "throughput_tps", "utilization",
                 "avg_queue_wait_ms", "fairness")


@dataclass(frozen=True, slots=True)
class Setting:
    """One point of the grid: arrival pattern, policy, batch size and batch speed-up."""

    arrivals: str
    policy: str
    batch_size: int
    batch_speedup: float

    @property
    def label(self) -> str:
        return f"{self.arrivals}/{self.policy}/b{self.batch_size}/x{exact(self.batch_speedup)}"


def exact(value: float) -> str:
    """``value`` as short as ``:g`` writes it when that reads back exactly, else its full ``repr``
    (labels and the replay command must tell 1.0000001 from 1.0000002)."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def parse_pattern(text: str) -> str:
    """``given``, ``burst`` or ``spaced:MS`` (MS a finite number >= 0), normalised; ``ValueError`` otherwise."""
    if text in ("given", "burst"):
        return text
    if text.startswith("spaced:"):
        try:
            gap = float(text[len("spaced:"):])
        except ValueError:
            gap = float("nan")
        if 0 <= gap <= MAX_GAP_MS:
            return f"spaced:{exact(gap)}"
    raise ValueError(f"unknown arrival pattern {text!r}; use given, burst or spaced:MS (0 <= MS <= {MAX_GAP_MS:g})")


def _with_pattern(requests: list[dict], pattern: str) -> list[dict]:
    if pattern == "given":
        return requests
    gap = 0.0 if pattern == "burst" else float(pattern.split(":", 1)[1])
    return [dict(r, arrival_ms=0 if pattern == "burst" else round(i * gap, 4)) for i, r in enumerate(requests)]


#: Fields a request of a requests file may have (serving-bench.md §1); anything else is refused.
REQUEST_FIELDS = ("request_id", "arrival_ms", "service_ms", "output_tokens", "priority")


def _unknown(keys, known, where: str) -> None:
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(str(key).lower(), known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "valid fields are " + ", ".join(known)
            raise InputError(f"{where}: field {key!r}: unknown field; {hint}")


def load_requests(path: str) -> list[dict]:
    """The requests of ``path`` in the chapter's shape, checked and with defaults filled in.

    The file is a JSON list, a JSON object with a ``requests`` list, or JSON lines (one request
    each; a ``.jsonl`` file always is, even with one line). A leading BOM is accepted; a key given
    twice, a field not in :data:`REQUEST_FIELDS` (with the closest valid name), NaN or Infinity
    are refused. Every request is checked by :func:`sched.chapter.window.normalize_requests`; ids
    must be unique and printable (the trace and the picture name requests by id). Raises
    :class:`~sched.base.cmdline.InputError` naming the file, the request and the field.
    """
    text = read_text(path, "requests file")
    stripped = text.strip()
    if not stripped:
        raise InputError(f"{path}: is empty; expected a JSON list of requests, {{\"requests\": [...]}} or JSON lines")
    if path.endswith(".jsonl") or (stripped.startswith("{") and "\n{" in stripped):   # JSON lines
        data = [decode(line, f"{path}: line {n}") for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    else:
        data = decode(text, path)
        if isinstance(data, dict):
            _unknown(data, ("requests",), path)
            data = need(data.get("requests"), list, f"{path}: field 'requests'", "a list of requests")
    need(data, list, path, "a list of requests (or an object with a 'requests' list, or JSON lines)")
    for index, raw in enumerate(data):
        if isinstance(raw, dict):
            _unknown(raw, REQUEST_FIELDS, f"{path}: request {index}")
    try:
        requests = normalize_requests(data)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{path}: {exc}") from None
    seen = set()
    for r in requests:
        where = f"{path}: request {r['position']}"
        try:
            r["request_id"].encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{where}: field 'request_id': not valid text (a lone "
                             f"surrogate such as {r['request_id']!a})") from None
        if not r["request_id"].isprintable():
            raise InputError(f"{where}: field 'request_id': must be printable (no tabs, line breaks or control "
                             f"characters), got {one_line(r['request_id'])}")
        if r["request_id"] in seen:
            raise InputError(f"{where} ({r['request_id']}): field 'request_id': duplicated; every request needs "
                             "its own id")
        seen.add(r["request_id"])
    return [{k: v for k, v in r.items() if k != "position"} for r in requests]


def run_settings(requests: list[dict], settings: list[Setting]) -> list[tuple[Setting, dict]]:
    """``(setting, result)`` for each setting: :func:`simulate_serving_scheduler` on the pattern's arrivals."""
    return [(s, simulate_serving_scheduler(_with_pattern(requests, s.arrivals), s.policy, s.batch_size,
                                           s.batch_speedup)) for s in settings]


def urgent_wait(result: dict):
    """Mean queue wait (ms) of the most urgent class (lowest ``priority`` value), or ``None`` without
    requests: a lab column beside the chapter's metrics, showing what a priority policy buys."""
    rows = result["requests"]
    if not rows:
        return None
    top = min(r["priority"] for r in rows)
    waits = [r["queue_wait_ms"] for r in rows if r["priority"] == top]
    return round(sum(waits) / len(waits), 4)


def _cell(value: float, decimals: int) -> str:
    """A table number: fixed decimals, or 4 significant digits beyond a billion (no 300-digit cells)."""
    return f"{value:.{decimals}f}" if abs(value) < 1e9 else f"{value:.4g}"


def render_table(runs: list[tuple[Setting, dict]]) -> str:
    """One row per setting: windows, completed/requests, the chapter's run metrics and :func:`urgent_wait`."""
    header = ("arrivals", "policy", "batch", "speedup", "windows", "done/req", "makespan ms", "tok/s",
              "util", "avg wait ms", "urgent wait ms", "fairness")
    rows = [header]
    for s, r in runs:
        rows.append((s.arrivals, s.policy, str(s.batch_size), exact(s.batch_speedup), str(len(r["batch_trace"])),
                     f"{r['completed_count']}/{r['request_count']}", _cell(r['makespan_ms'], 1),
                     _cell(r['throughput_tps'], 1), f"{r['utilization']:.3f}", _cell(r['avg_queue_wait_ms'], 2),
                     "NA" if urgent_wait(r) is None else _cell(urgent_wait(r), 2), f"{r['fairness']:.3f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) if i < 2 else cell.rjust(widths[i]) for i, cell in enumerate(row))
             for row in rows]
    return "\n".join(lines + [UNITS_NOTE]) + "\n"


def _json(value, indent: int | None = None) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False, allow_nan=False) + "\n"


def requests_text(requests: list[dict]) -> str:
    """``requests.json``: the exact input, one request per line inside a ``requests`` list."""
    return '{"requests": [\n' + ",\n".join("  " + json.dumps(r, ensure_ascii=False) for r in requests) + "\n]}\n"


def render_files(requests: list[dict], runs: list[tuple[Setting, dict]], grid: dict) -> dict[str, str]:
    """Every artifact's text by name (:data:`SERVING_FILES`); same input and grid → same bytes.

    ``grid``: the flags as lists (``policies``, ``batch_sizes``, ``batch_speedups``, ``arrivals``).
    """
    text = requests_text(requests)
    flags = " ".join(f"--{key.replace('_', '-')} {','.join(exact(v) if isinstance(v, float) else str(v) for v in values)}"
                     for key, values in grid.items())
    manifest = {"tool": "infer-sched-lab", "version": __version__, "kind": "serving-bench",
                "model": "serving-bench window model (serving-bench.md §1)",
                "requests_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "num_requests": len(requests),
                "grid": grid, "runs": [s.label for s, _ in runs],
                "replay": f"python3 infer_sched_lab.py serving-bench run DIR/requests.json {flags}",
                "units": UNITS_NOTE}
    summary = {"units": UNITS_NOTE, "field_units": {"makespan_ms": "ms", "throughput_tps": "output tokens per second",
                                                     "utilization": "busy time / makespan", "avg_queue_wait_ms": "ms",
                                                     "fairness": "0 to 1 (1 = equal waits)",
                                                     "urgent_avg_queue_wait_ms": "ms, requests of the lowest "
                                                                                 "priority value only (a lab column)"},
               "runs": [{"run": s.label, "arrivals": s.arrivals, "policy": s.policy, "batch_size": s.batch_size,
                         "batch_speedup": s.batch_speedup, "windows": len(r["batch_trace"]),
                         **{k: r[k] for k in _SUMMARY_KEYS}, "urgent_avg_queue_wait_ms": urgent_wait(r)}
                        for s, r in runs]}
    per_request = "".join(_json({"run": s.label, **row}) for s, r in runs for row in r["requests"])
    trace = "".join(_json({"run": s.label, "window": i, **w}) for s, r in runs for i, w in enumerate(r["batch_trace"]))
    return {"manifest.json": _json(manifest, 2), "requests.json": text, "summary.json": _json(summary, 2),
            "table.txt": render_table(runs), "requests.jsonl": per_request, "batch_trace.jsonl": trace,
            "windows.svg": render_windows_svg(runs)}


# --- the picture ----------------------------------------------------------------------------------

_PALETTE = ("#c0392b", "#2e86c1", "#27ae60", "#8e44ad", "#d68910", "#7f8c8d")
_WIDTH, _LEFT, _RIGHT, _BAR, _GAP = 1100, 190, 70, 16, 28


def _xml(text: str) -> str:
    """``text`` safe inside SVG: markup escaped, control characters written as escapes (XML forbids them)."""
    return html.escape(one_line(text))


def _tick_step(span: float) -> float:
    """A round axis step (1, 2 or 5 times a power of ten) giving about six ticks over ``span`` ms."""
    raw = span / 6
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if raw <= m * magnitude)


def render_windows_svg(runs: list[tuple[Setting, dict]]) -> str:
    """``windows.svg``: one lane per setting on a shared ms axis; each window a column of bars, one
    per request of its batch, coloured by priority (legend), labelled with the id when it fits;
    arrivals as ticks under the lane."""
    end = max([w["start_ms"] + w["duration_ms"] for _, r in runs for w in r["batch_trace"]] + [1.0])
    scale = (_WIDTH - _LEFT - _RIGHT) / end
    priorities = sorted({row["priority"] for _, r in runs for row in r["requests"]})
    colour = {p: _PALETTE[min(i, len(_PALETTE) - 1)] for i, p in enumerate(priorities)}
    out, y = [], 56
    for s, r in runs:
        lane = _BAR * s.batch_size
        out.append(f'<text x="{_LEFT - 8}" y="{y + lane / 2 + 4:.1f}" text-anchor="end">{_xml(s.label)}</text>')
        out.append(f'<rect x="{_LEFT}" y="{y}" width="{_WIDTH - _LEFT - _RIGHT}" height="{lane}" fill="#f4f6f7"/>')
        by_id = {row["request_id"]: row for row in r["requests"]}
        for w in r["batch_trace"]:
            x, width = _LEFT + w["start_ms"] * scale, max(w["duration_ms"] * scale, 1.0)
            for k, rid in enumerate(w["request_ids"]):
                row = by_id[rid]
                out.append(f'<rect x="{x:.1f}" y="{y + k * _BAR + 1}" width="{width:.1f}" height="{_BAR - 2}" '
                           f'fill="{colour[row["priority"]]}" stroke="#fff"><title>{_xml(rid)}: wait '
                           f'{row["queue_wait_ms"]:g} ms, e2e {row["e2e_ms"]:g} ms</title></rect>')
                if width >= 7 * len(rid) + 4:
                    out.append(f'<text x="{x + 3:.1f}" y="{y + k * _BAR + 12}" fill="#fff">{_xml(rid)}</text>')
        for row in r["requests"]:  # an arrival: a small triangle under the lane, in its priority's colour
            x, top = _LEFT + row["arrival_ms"] * scale, y + lane + 1
            out.append(f'<path d="M{x:.1f},{top} l-3.5,7 h7 z" fill="{colour[row["priority"]]}" opacity="0.8">'
                       f'<title>{_xml(row["request_id"])} arrives at {row["arrival_ms"]:g} ms</title></path>')
        if r["batch_trace"]:
            last = r["batch_trace"][-1]
            x = _LEFT + (last["start_ms"] + last["duration_ms"]) * scale
            out.append(f'<text x="{x + 4:.1f}" y="{y + 12}" fill="#555">{r["makespan_ms"]:g} ms</text>')
        y += lane + _GAP
    step = _tick_step(end)
    axis, t = [], 0.0
    while t <= end + 1e-9:
        x = _LEFT + t * scale
        axis.append(f'<line x1="{x:.1f}" y1="44" x2="{x:.1f}" y2="{y - _GAP + 6}" stroke="#ccc" stroke-dasharray="2,3"/>'
                    f'<text x="{x:.1f}" y="40" text-anchor="middle">{t:g}</text>')
        t += step
    legend = " ".join(f'<tspan fill="{colour[p]}">■ priority {p:g}</tspan>' for p in priorities) + " (lower = more urgent)"
    height = y + 20
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
            f'font-family="sans-serif" font-size="11">\n'
            f'<rect width="100%" height="100%" fill="#fff"/>\n'
            f'<text x="10" y="18" font-size="13">Batch windows: one bar per request of a window, all ending with it; '
            f'▲ = arrival; time in ms  {legend}</text>\n' + "\n".join(axis + out) + "\n</svg>\n")
