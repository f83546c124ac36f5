"""``timeline.svg`` of a step-model run: one lane per request on a millisecond axis (vllm-engine.md §6).

A step has a duration here, so the lab's one-cell-per-tick picture (:mod:`sched.output.picture`) does
not apply; each lane shows the phases of a request's life as spans of time, in the colours of the
other two pictures (:mod:`sched.output.colours`):

- ``waiting``: arrival to admission (first scheduled step);
- ``prefill``: admission to the first token (the end of the step completing the prompt);
- ``decode``: first token to the last;
- ``preempted``: back in the queue, from a preemption to the next step that schedules the request,
  then ``recompute`` up to its next token (read from the step records when the timeline is
  ``full``; with ``counts`` or ``off`` one ``preempted`` span up to its next token, queue wait and
  recompute together).

Markers as in the tick picture: admission (triangle), first token (circle), done (bar), each
preemption (vermillion triangle above the lane); the case's P95 TTFT request has a pale band.

Which lanes: every request when there are at most :data:`MAX_LANES`; otherwise the congested
window (:func:`congested_window`: the :data:`MAX_LANES` consecutive requests, in workload order,
that waited longest in all), and always the P95 TTFT request, in a lane of its own below the
window when it is not in it. Pure rendering: the same run gives the same bytes.
"""

from __future__ import annotations

from html import escape
from .svg import quoteattr   # xml.sax.saxutils gives the same text but loads the URL library

from ..core.clock import RunClock
from .colours import BLACK, GREEN, P95_FILL, P95_STROKE, PHASE_COLOURS, VERMILLION
from .picture import MAX_LANES, axis_step, p95_ttft_request

__all__ = ["render_ms_timeline_svg", "congested_window"]

_LEFT, _PLOT_W, _RIGHT, _TOP, _LANE_H, _GAP = 90, 860, 130, 112, 12, 4
_EXTRA_GAP = 22   # above the P95 request's own lane, when it is outside the window
_PHASES = ("waiting", "prefill", "decode", "preempted", "recompute")
_LABELS = {"waiting": "waiting", "prefill": "prefill", "decode": "decode", "preempted": "preempted: back in the queue",
           "recompute": "recompute after preemption"}


def _num(value: float) -> str:
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _label(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


def _queue_wait(request) -> int:
    """Arrival to admission (µs); a request never admitted waited until it ended (or not at all)."""
    end = request.admitted_at if request.admitted_at is not None else request.done_at
    return 0 if end is None else end - request.spec.arrival


def congested_window(requests, size: int = MAX_LANES) -> int:
    """The index of the first of the ``size`` consecutive requests (workload order) whose queue
    waits (arrival to admission) sum highest, the earliest such window on a tie; 0 when there are
    at most ``size`` requests. Example: waits ``[0, 5, 9, 1]`` and ``size`` 2 → 1 (5 + 9)."""
    if len(requests) <= size:
        return 0
    waits = [_queue_wait(r) for r in requests]
    total = best = sum(waits[:size])
    start = 0
    for first in range(1, len(waits) - size + 1):
        total += waits[first + size - 1] - waits[first - 1]
        if total > best:
            best, start = total, first
    return start


def render_ms_timeline_svg(result, clock: RunClock | str, summary: dict) -> str:
    """The picture of one vLLM case whose clock is in µs, drawn in ms (module docstring).

    ``result``: the :class:`sched.core.records.CaseResult`; ``clock``: the run's
    :class:`sched.core.clock.RunClock` (:data:`sched.core.clock.VLLM_MS`), whose
    :attr:`~sched.core.clock.RunClock.picture_note` is printed under the title (a note string is still
    accepted in its place, the older call); ``summary``: its summary row in ms (P95 TTFT, makespan and
    successes are printed).
    """
    note = clock if isinstance(clock, str) else clock.picture_note
    requests = result.requests
    start = congested_window(requests, MAX_LANES)
    lanes = requests[start:start + MAX_LANES]
    p95 = p95_ttft_request(result)
    extra = p95 if p95 is not None and p95 not in lanes else None
    drawn = lanes + ([extra] if extra is not None else [])
    starts = [r.spec.arrival / 1000 for r in drawn]
    ends = [(r.done_at if r.done_at is not None else r.spec.arrival) / 1000 for r in drawn]
    first, last = min(starts, default=0.0), max(ends, default=1.0)
    step = axis_step(max(last - first, 1.0), most_lines=10)
    axis_start = first // step * step
    scale = _PLOT_W / max(last - axis_start, 1e-9)
    bottom = _TOP + len(lanes) * (_LANE_H + _GAP)
    height = bottom + 40 + (_EXTRA_GAP + _LANE_H + _GAP if extra is not None else 0)
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
    p95_ms = summary.get("p95_ttft")
    facts = (f"P95 TTFT {'NA' if p95_ms is None else _num(p95_ms)} ms · makespan {_num(summary['makespan'])} ms · "
             f"ok {summary['succeeded']}/{summary['arrived']}")
    out.append(f'<text x="{_LEFT}" y="50" fill="#444444">{escape(facts)}</text>')
    if len(requests) > MAX_LANES:
        shown = (f"Showing requests {start + 1}–{start + len(lanes)} of {len(requests)} (workload order): the "
                 f"{MAX_LANES} in a row that waited longest in all" + (f", and the P95 TTFT request {extra.name} below"
                                                                      if extra is not None else "")
                 + "; every request is in requests.jsonl")
        out.append(f'<text x="{_LEFT}" y="66" fill="{VERMILLION}">{escape(shown)}</text>')
    out.extend(_legend(86))
    tick = axis_start
    while tick <= last + 1e-9:
        out.append(f'<line x1="{x(tick)}" y1="{_TOP - 4}" x2="{x(tick)}" y2="{bottom}" stroke="#dddddd"/>'
                   f'<text x="{x(tick)}" y="{bottom + 14}" text-anchor="middle" fill="#444444">{_label(tick)}</text>')
        tick += step
    resumed = _resumptions(result)
    rows = [(request, _TOP + row * (_LANE_H + _GAP)) for row, request in enumerate(lanes)]
    if extra is not None:
        top = bottom + 20 + _EXTRA_GAP
        out.append(f'<text x="{_LEFT}" y="{top - 6}" fill="#444444">the P95 TTFT request, outside the window '
                   f'(request {extra.index + 1} of the workload)</text>')
        rows.append((extra, top))
    for request, top in rows:
        if request is p95:
            out.append(f'<rect data-p95-request={quoteattr(request.name)} x="4" y="{top - 2}" width="{width - 8}" '
                       f'height="{_LANE_H + 4}" fill="{P95_FILL}" stroke="{P95_STROKE}"><title>'
                       f'{escape(request.name)}: the P95 TTFT request</title></rect>')
        out.extend(_lane(request, top, x, None if resumed is None else resumed.get(request.name, []),
                         request is p95))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _legend(y: int) -> list[str]:
    out, left = [], _LEFT
    for phase in _PHASES:
        out.append(f'<rect x="{left}" y="{y}" width="14" height="10" fill="{PHASE_COLOURS[phase]}"/>'
                   f'<text x="{left + 18}" y="{y + 9}">{_LABELS[phase]}</text>')
        left += 26 + 6 * len(_LABELS[phase])
    out.append(f'<path d="M{left} {y}h10l-5 8z" fill="{VERMILLION}"/><text x="{left + 14}" y="{y + 9}">preemption</text>')
    left += 90
    out.append(f'<rect x="{left}" y="{y}" width="14" height="10" fill="{P95_FILL}" stroke="{P95_STROKE}"/>'
               f'<text x="{left + 18}" y="{y + 9}">the P95 TTFT request</text>')
    return out


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


def _lane(request, top: int, x, resumed: list | None, p95: bool = False) -> list[str]:
    name, arrival = request.name, request.spec.arrival
    mid = top + _LANE_H / 2
    bold = ' font-weight="bold"' if p95 else ""
    lines = [f"<g data-request={quoteattr(name)}>",
             f'<text x="{_LEFT - 6}" y="{_num(mid + 4)}" text-anchor="end"{bold}>{escape(name)}</text>']

    def span(phase: str, start, end, title: str) -> None:
        if start is None or end is None or end <= start:
            return
        lines.append(f'<rect data-phase="{phase}" x="{x(start / 1000)}" y="{top}" '
                     f'width="{_num(float(x(end / 1000)) - float(x(start / 1000)))}" height="{_LANE_H}" '
                     f'fill="{PHASE_COLOURS[phase]}"><title>{escape(title)}</title></rect>')

    admitted, first, done = request.admitted_at, request.first_token_at, request.done_at
    span("waiting", arrival, admitted if admitted is not None else done,
         f"{name}: waiting {_ms_text(arrival)} to {_ms_text(admitted)}")
    span("prefill", admitted, first, f"{name}: prefill from admission at {_ms_text(admitted)} to the first token "
                                     f"at {_ms_text(first)} (TTFT {_ms_text(None if first is None else first - arrival)})")
    span("decode", first, done, f"{name}: decode {_ms_text(first)} to {_ms_text(done)}, "
                                f"{request.num_tokens} tokens")
    stamps = request.token_times
    end = done if done is not None else None

    def next_token(after):
        later = [t for t in stamps if t > after]
        return min(later) if later else end

    for number, at in enumerate(request.preempted_at):
        if resumed is None:   # no step records: the window up to the next token (queue wait and recompute)
            span("preempted", at, next_token(at), f"{name}: preempted at {_ms_text(at)}, back in the queue and "
                                                  "recomputed until its next token (per-step detail needs --timeline full)")
        else:
            back = resumed[number] if number < len(resumed) else None
            span("preempted", at, back, f"{name}: preempted at {_ms_text(at)}, back in the queue until "
                                        f"{_ms_text(back)}")
            if back is not None:
                span("recompute", back, next_token(back), f"{name}: recompute from {_ms_text(back)} to its next "
                                                          f"token at {_ms_text(next_token(back))}")
        lines.append(f'<path data-mark="preemption" d="M{_num(float(x(at / 1000)) - 5)} {top - 4}h10l-5 8z" '
                     f'fill="{VERMILLION}" stroke="#ffffff" stroke-width="0.5"><title>{escape(name)}: '
                     f'preempted at {_ms_text(at)}</title></path>')
    if admitted is not None:
        hit = request.hit_tokens > 0
        lines.append(f'<path data-mark="{"cache-hit" if hit else "admission"}" d="M{x(admitted / 1000)} {top - 2}'
                     f'l6 {_num(_LANE_H / 2 + 2)}l-6 {_num(_LANE_H / 2 + 2)}z" fill="{GREEN if hit else BLACK}" '
                     f'stroke="#ffffff" stroke-width="0.5"/>')
    if first is not None:
        lines.append(f'<circle data-mark="first-token" cx="{x(first / 1000)}" cy="{_num(mid)}" r="3" fill="#ffffff" '
                     f'stroke="{BLACK}"/>')
    if done is not None:
        label = f"TTFT {_ms_text(None if first is None else first - arrival)}" + (" · P95 TTFT" if p95 else "")
        lines.append(f'<rect data-mark="done" x="{_num(float(x(done / 1000)) - 1)}" y="{top - 1}" width="2" '
                     f'height="{_LANE_H + 2}" fill="{BLACK}"/>'
                     f'<text x="{_num(float(x(done / 1000)) + 5)}" y="{_num(mid + 4)}" fill="#444444" '
                     f'font-size="10"{bold}>{escape(label)}</text>')
    lines.append("</g>")
    return lines


def _ms_text(us) -> str:
    return "NA" if us is None else f"{us / 1000:.1f} ms"
