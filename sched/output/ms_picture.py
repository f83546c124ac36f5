"""``timeline.svg`` of a step-model run: one lane per request on a millisecond axis (vllm-engine.md §6).

A step has a duration here, so the lab's one-cell-per-tick picture (:mod:`sched.output.picture`) does
not apply; each lane shows the phases of a request's life as spans of time:

- ``waiting``: arrival to admission (first scheduled step), and again from each preemption to
  the next step that schedules it (read from the step records when the timeline is ``full``;
  with ``counts`` or ``off`` the window up to its next token, queue wait and recompute together);
- ``prefill``: admission to the first token (the end of the step completing the prompt);
- ``decode``: first token to the last.

Markers: admission (triangle), first token (circle), done (bar), each preemption (red cross).
The first :data:`MAX_LANES` requests in workload order are drawn; every request is in
``requests.jsonl``. Pure rendering: the same run gives the same bytes.
"""

from __future__ import annotations

from html import escape
from xml.sax.saxutils import quoteattr

from .picture import MAX_LANES, axis_step

__all__ = ["render_ms_timeline_svg"]

_LEFT, _PLOT_W, _RIGHT, _TOP, _LANE_H, _GAP = 90, 860, 130, 96, 12, 4
_COLOURS = {"waiting": "#d9d9d9", "prefill": "#56b4e9", "decode": "#e69f00"}


def _num(value: float) -> str:
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _label(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


def render_ms_timeline_svg(result, note: str, summary: dict) -> str:
    """The picture of one vLLM case whose clock is in µs, drawn in ms (module docstring).

    ``result``: the :class:`sched.core.records.CaseResult`; ``note``: units note under the title;
    ``summary``: its summary row in ms (P95 TTFT, makespan and successes are printed).
    """
    lanes = result.requests[:MAX_LANES]
    starts = [r.spec.arrival / 1000 for r in lanes]
    ends = [(r.done_at if r.done_at is not None else r.spec.arrival) / 1000 for r in lanes]
    first, last = min(starts, default=0.0), max(ends, default=1.0)
    step = axis_step(max(last - first, 1.0), most_lines=10)
    axis_start = first // step * step
    scale = _PLOT_W / max(last - axis_start, 1e-9)
    height = _TOP + len(lanes) * (_LANE_H + _GAP) + 40
    width = _LEFT + _PLOT_W + _RIGHT

    def x(ms: float) -> str:
        return _num(_LEFT + (ms - axis_start) * scale)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} '
           f'{height}" font-family="sans-serif" font-size="11">',
           "<title>Time line of every request (ms, from a step model)</title>",
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="{_LEFT}" y="18" font-size="14" font-weight="bold">Time line in milliseconds: one lane per '
           f'request ({escape(result.case.name)} engine, step model)</text>',
           f'<text x="{_LEFT}" y="34" fill="#444444">{escape(note)}</text>']
    p95 = summary.get("p95_ttft")
    facts = (f"P95 TTFT {'NA' if p95 is None else _num(p95)} ms · makespan {_num(summary['makespan'])} ms · "
             f"ok {summary['succeeded']}/{summary['arrived']}")
    if len(result.requests) > MAX_LANES:
        facts += f" · showing the first {MAX_LANES} of {len(result.requests)} requests (all in requests.jsonl)"
    out.append(f'<text x="{_LEFT}" y="50" fill="#444444">{escape(facts)}</text>')
    legend_x = _LEFT
    for phase, colour in _COLOURS.items():
        out.append(f'<rect x="{legend_x}" y="60" width="14" height="10" fill="{colour}"/>'
                   f'<text x="{legend_x + 18}" y="69">{phase}</text>')
        legend_x += 90
    out.append(f'<path d="M{legend_x} 60l8 10m0 -10l-8 10" stroke="#d55e00" stroke-width="2"/>'
               f'<text x="{legend_x + 14}" y="69">preemption</text>')
    bottom = _TOP + len(lanes) * (_LANE_H + _GAP)
    tick = axis_start
    while tick <= last + 1e-9:
        out.append(f'<line x1="{x(tick)}" y1="{_TOP - 4}" x2="{x(tick)}" y2="{bottom}" stroke="#dddddd"/>'
                   f'<text x="{x(tick)}" y="{bottom + 14}" text-anchor="middle" fill="#444444">{_label(tick)}</text>')
        tick += step
    resumed = _resumptions(result)
    for row, request in enumerate(lanes):
        out.extend(_lane(request, _TOP + row * (_LANE_H + _GAP), x,
                         None if resumed is None else resumed.get(request.name, [])))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _resumptions(result) -> dict:
    """name -> start times (µs) of the steps that schedule a request again after a preemption
    (``full`` step records only; ``None`` without them)."""
    found: dict = {}
    pending: set = set()
    for record in result.ticks:
        scheduled = getattr(record, "scheduled", None)
        if scheduled is None:
            return None
        for name, _ in scheduled:
            if name in pending:
                pending.discard(name)
                found.setdefault(name, []).append(record.tick)
        pending.update(record.preempted)
    return found


def _lane(request, top: int, x, resumed: list | None) -> list[str]:
    name, arrival = request.name, request.spec.arrival
    mid = top + _LANE_H / 2
    lines = [f"<g data-request={quoteattr(name)}>",
             f'<text x="{_LEFT - 6}" y="{_num(mid + 4)}" text-anchor="end">{escape(name)}</text>']

    def span(phase: str, start, end, title: str) -> None:
        if start is None or end is None or end <= start:
            return
        lines.append(f'<rect data-phase="{phase}" x="{x(start / 1000)}" y="{top}" '
                     f'width="{_num(float(x(end / 1000)) - float(x(start / 1000)))}" height="{_LANE_H}" '
                     f'fill="{_COLOURS[phase]}"><title>{escape(title)}</title></rect>')

    admitted, first, done = request.admitted_at, request.first_token_at, request.done_at
    span("waiting", arrival, admitted if admitted is not None else done,
         f"{name}: waiting {_ms_text(arrival)} to {_ms_text(admitted)}")
    span("prefill", admitted, first, f"{name}: prefill from admission at {_ms_text(admitted)} to the first token "
                                     f"at {_ms_text(first)} (TTFT {_ms_text(None if first is None else first - arrival)})")
    span("decode", first, done, f"{name}: decode {_ms_text(first)} to {_ms_text(done)}, "
                                f"{request.num_tokens} tokens")
    if resumed is None:   # no step records: the window up to the next token (queue wait and recompute)
        stamps = request.token_times
        windows = [(at, min([t for t in stamps if t > at] + [done if done is not None else at]),
                    "back in the queue and recomputed until its next token (per-step detail needs --timeline full)")
                   for at in request.preempted_at]
    else:
        windows = [(at, back, "waiting to be recomputed")
                   for at, back in zip(request.preempted_at, resumed + [None] * len(request.preempted_at))]
    for at, back, what in windows:
        span("waiting", at, back, f"{name}: preempted at {_ms_text(at)}, {what}")
        lines.append(f'<path data-mark="preemption" d="M{_num(float(x(at / 1000)) - 4)} {top}l8 {_LANE_H}m0 '
                     f'-{_LANE_H}l-8 {_LANE_H}" stroke="#d55e00" stroke-width="2"><title>{escape(name)}: '
                     f'preempted at {_ms_text(at)}</title></path>')
    if first is not None:
        lines.append(f'<circle data-mark="first-token" cx="{x(first / 1000)}" cy="{_num(mid)}" r="3" fill="#ffffff" '
                     f'stroke="#000000"/>')
    if done is not None:
        lines.append(f'<rect data-mark="done" x="{_num(float(x(done / 1000)) - 1)}" y="{top - 1}" width="2" '
                     f'height="{_LANE_H + 2}" fill="#000000"/>'
                     f'<text x="{_num(float(x(done / 1000)) + 5)}" y="{_num(mid + 4)}" fill="#444444" '
                     f'font-size="10">TTFT {_ms_text(None if first is None else first - arrival)}</text>')
    lines.append("</g>")
    return lines


def _ms_text(us) -> str:
    return "NA" if us is None else f"{us / 1000:.1f} ms"
