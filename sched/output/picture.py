"""The time-line picture of one run (``timeline.svg``, lab.md §7–8): hand-written SVG, stdlib only.

One lane per request per case; the cases are stacked on one shared tick axis. Tick ``t`` is the
cell ``[t, t + 1)`` on the axis, so a token stamped ``t + 1`` (lab.md §3) sits on the right edge
of the decode cell that computed it. A lane is cut into *segments*, runs of ticks in one phase:

- ``waiting``: arrived, not admitted, ticks ``arrival … admitted_at − 1``: in a continuous case
  because every slot was taken (``max_active`` requests active), in the static case because the
  static batch was still running (a new batch starts only once the whole batch has ended, even
  with slots free); the segment's title says which;
- ``stalled``: admitted and still in prefill, but the tick's budget was spent by others;
- ``prefill``: prompt tokens computed this tick;
- ``chunked``: prefill tick where the chunk cap was the limit: the request computed exactly the
  cap and had more tokens left (drawn darker);
- ``decode``: an output token computed this tick (stamped at the cell's right edge);
- ``skipped``: decoding, but skipped for lack of budget (no token this tick).

Markers: admission (a triangle at ``admitted_at``, green when the admission was a cache hit),
first token (a circle at ``first_token_at``), end (a black bar at ``done_at`` for ``ok``, a
vermillion cross for ``timeout``). Every segment and marker carries an SVG ``<title>`` (request,
phase, ticks, tokens) and machine-readable ``data-*`` attributes: ``data-case`` and ``data-request``
on the groups, ``data-phase``, ``data-from``/``data-to`` (the segment's ticks as a half-open
interval ``[from, to)``) and, for prefill, ``data-tokens`` (tokens per tick) on segments,
``data-mark`` and ``data-tick`` on markers.

Bounded for huge workloads: at most :data:`MAX_LANES` requests per case are drawn (the first in
workload order; the picture says so), and a lane with more than :data:`MAX_SEGMENTS` segments is
drawn coarsely (stalled/chunked/skipped folded into prefill/decode). Without per-tick records
(``CaseResult.ticks`` empty, ``None`` or counts records) prefill is one segment from admission to the end of
prefill. Output is deterministic: no clock, no random ids, numbers with at most 2 decimals.
The segments are cut in :mod:`sched.output.lanes`, the SVG primitives are :mod:`sched.output.svg`'s.
"""

from __future__ import annotations

from ..core.clock import LAB_TICKS, RunClock
from ..core.config import Batching
from ..core.records import CaseResult, Request, Status
from .lanes import PHASES, end_of, lane_segments, p95_ttft_request, prefill_by_request, segment_title
from .svg import (BLACK, GREEN, ORANGE, P95_FILL, P95_STROKE, SKY, VERMILLION, Svg, axis_step, escape, quoteattr,
                  short_number)
from .vllm_picture import lane_view

__all__ = ["axis_step", "MAX_LANES", "PHASES", "lane_segments", "p95_ttft_request", "render_timeline_svg"]

#: Most request lanes drawn per case; the picture names how many were left out.
MAX_LANES = 40
#: Narrowest cache-hit strip, in pixels (a hit stays visible however long the axis).
_HIT_MIN_W = 8

# Geometry in pixels.
_LEFT, _PLOT_W, _RIGHT = 64, 860, 120
_LANE_H, _LANE_GAP = 14, 5
_HEAD_H, _AXIS_H, _CASE_GAP = 22, 18, 14
_EXTRA_H = 20 + _LANE_H + _LANE_GAP + _AXIS_H   # the P95 request's own lane below the others


def render_timeline_svg(results: list[CaseResult], clock: RunClock = LAB_TICKS,
                        summaries: list[dict] | None = None) -> str:
    """The picture of every case of one run as SVG text (lab.md §7–8).

    ``results``: one :class:`CaseResult` per case, in table order, all on the same workload;
    ``clock``: the run's :class:`sched.core.clock.RunClock`, which gives the note printed under the
    title (:attr:`~sched.core.clock.RunClock.picture_note`) and how the engine cuts its lanes
    (:func:`sched.output.vllm_picture.lane_view`: a :class:`~sched.output.vllm_picture.VllmLaneView`
    for the vLLM engine, the lab's own phases otherwise); ``summaries``: optional, one
    :func:`sched.core.metrics.summarize` dict per case, whose P95 TTFT, makespan, hit tokens and
    successes are printed beside each case's name. Returns the whole ``timeline.svg`` text; the same
    inputs give the same bytes.
    """
    note, view = clock.picture_note, lane_view(clock)
    p95s = [p95_ttft_request(result) for result in results]
    shown = [result.requests[:MAX_LANES] for result in results]
    # A P95 request beyond the drawn lanes gets a lane of its own below them, on its own axis.
    extras = [p95 if p95 is not None and p95.index >= MAX_LANES else None for p95 in p95s]
    num_requests = len(results[0].requests) if results else 0
    axis_start, axis_end, step, scale, x = _axis([(r.spec.arrival, end_of(r)) for lanes in shown for r in lanes])

    width = _LEFT + _PLOT_W + _RIGHT
    legend_y = 64 if num_requests > MAX_LANES else 48
    rows = _legend_rows(PHASES if view is None else view.phases)
    marks = _marker_rows(() if view is None else view.marks_legend)
    header_h = legend_y + 34 + 16 * (len(rows) - 1) + 16 * (len(marks) - 1)
    heights = [_HEAD_H + len(lanes) * (_LANE_H + _LANE_GAP) + _AXIS_H + _CASE_GAP
               + (_EXTRA_H if extra is not None else 0) for lanes, extra in zip(shown, extras)]
    height = header_h + sum(heights)

    svg = Svg()
    svg.lines.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                     f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">')
    svg.element("title", text="Time line of every request in every case (ticks)")
    svg.lines.append("<defs>")
    for pattern_id, colour in (("tl-stalled", SKY), ("tl-skipped", ORANGE)):
        svg.lines.append(f'<pattern id="{pattern_id}" width="5" height="5" patternUnits="userSpaceOnUse" '
                         f'patternTransform="rotate(45)"><rect width="5" height="5" fill="#ffffff"/>'
                         f'<rect width="2" height="5" fill="{colour}"/></pattern>')
    svg.lines.append("</defs>")
    svg.element("rect", width=width, height=height, fill="#ffffff")
    svg.element("text", text="Time line: one lane per request, the cases on one shared tick axis",
                x=_LEFT, y=18, font_size=14, font_weight="bold")
    svg.element("text", text=note, x=_LEFT, y=34, fill="#444444")
    if num_requests > MAX_LANES:
        svg.element("text", text=f"Showing the first {MAX_LANES} of {num_requests} requests of each case "
                                 "(workload order), then the case's P95 TTFT request if it is not among them; "
                                 "every request is in requests.jsonl.",
                    x=_LEFT, y=50, fill=VERMILLION)
    _legend(svg, legend_y, rows, marks)

    y = header_h
    for index, (result, lanes) in enumerate(zip(results, shown)):
        case = result.case.name
        svg.lines.append(f"<g data-case={quoteattr(case)}>")
        facts = "" if summaries is None else (f'<tspan dx="12" font-weight="normal" fill="#444444">'
                                              f'{escape(_case_facts(summaries[index]))}</tspan>')
        svg.lines.append(f'<text x="{_LEFT}" y="{y + 15}" font-size="12" font-weight="bold">{escape(case)}{facts}</text>')
        top = y + _HEAD_H
        bottom = top + len(lanes) * (_LANE_H + _LANE_GAP)
        _grid(svg, axis_start, axis_end, step, scale, x, top - 4, bottom)
        names = {r.name for r in lanes}
        prefill = prefill_by_request(result, names) if view is None else None
        context = None if view is None else view.case_context(result, names)
        p95 = p95s[index]
        static = result.case.batching is Batching.STATIC
        for row, request in enumerate(lanes):
            lane_y = top + row * (_LANE_H + _LANE_GAP)
            # By index, not identity: packed requests are built anew on each access.
            is_p95 = p95 is not None and request.index == p95.index
            if is_p95:
                _p95_band(svg, case, request, lane_y, False)
            _lane(svg, case, request, prefill[request.name] if prefill is not None else None,
                  result.case.chunk_tokens, lane_y, x, static,
                  None if view is None else (view, context), is_p95)
        svg.element("text", text="tick", x=_LEFT - 12, y=bottom + 12, text_anchor="end", fill="#444444")
        extra = extras[index]
        if extra is not None:
            lane_y = bottom + _AXIS_H + 20
            svg.element("text", text=f"the P95 TTFT request, request {extra.index + 1} of the workload (its own tick axis):",
                        x=_LEFT, y=lane_y - 8, fill="#444444")
            start, end, own_step, own_scale, own_x = _axis([(extra.spec.arrival, end_of(extra))])
            _grid(svg, start, end, own_step, own_scale, own_x, lane_y - 4, lane_y + _LANE_H + _LANE_GAP)
            _p95_band(svg, case, extra, lane_y, True)
            ticks = prefill_by_request(result, {extra.name}) if view is None else None
            viewed = None if view is None else (view, view.case_context(result, {extra.name}))
            _lane(svg, case, extra, ticks[extra.name] if ticks is not None else None, result.case.chunk_tokens,
                  lane_y, own_x, static, viewed, True)
            svg.element("text", text="tick", x=_LEFT - 24, y=lane_y + _LANE_H + _LANE_GAP + 12, text_anchor="end",
                        fill="#444444")
            bottom += _EXTRA_H
        svg.lines.append("</g>")
        y = bottom + _AXIS_H + _CASE_GAP
    svg.lines.append("</svg>")
    return "\n".join(svg.lines) + "\n"


def _axis(lives: list[tuple[int, int]]):
    """A tick axis over ``lives`` ((arrival, end) pairs): ``(start, end, step, pixels per tick,
    x(tick) -> coordinate text)``."""
    first = min((a for a, _ in lives), default=0)
    last = max((e for _, e in lives), default=1)
    step = axis_step(max(last - first, 1))
    start = first // step * step
    end = max(last, start + 1)
    scale = _PLOT_W / (end - start)

    def x(tick: float) -> str:
        return short_number(_LEFT + (tick - start) * scale)

    return start, end, step, scale, x


def _grid(svg: Svg, start: int, end: int, step: int, scale: float, x, top: int, bottom: int) -> None:
    """Light per-tick lines when ticks are wide enough, labelled gridlines every ``step`` ticks."""
    if scale >= 6:
        path = "".join(f"M{x(t)} {top}V{bottom}" for t in range(start, end + 1) if t % step)
        if path:
            svg.element("path", d=path, stroke="#eeeeee", stroke_width=1)
    for t in range(start, end + 1, step):
        svg.element("line", x1=x(t), y1=top, x2=x(t), y2=bottom, stroke="#bbbbbb", stroke_width=1)
        svg.element("text", text=str(t), x=x(t), y=bottom + 12, text_anchor="middle", fill="#444444")


def _p95_band(svg: Svg, case: str, request: Request, lane_y: int, extra: bool) -> None:
    """A pale band behind the lane of the case's P95-TTFT request (outside its lane group)."""
    ttft_value = request.first_token_at - request.spec.arrival
    where = f" (request {request.index + 1} of the workload, drawn after the first {MAX_LANES})" if extra else ""
    svg.element("rect", title=f"{request.name} in {case}: the P95 TTFT request, TTFT {ttft_value}{where}",
                data_p95_request=request.name, x=4, y=lane_y - 2, width=_LEFT + _PLOT_W + _RIGHT - 8,
                height=_LANE_H + 4, fill=P95_FILL, stroke=P95_STROKE, stroke_width=1)


def _lane(svg: Svg, case: str, request: Request, prefill_ticks, chunk_tokens, lane_y: int, x,
          static: bool = False, viewed=None, p95: bool = False) -> None:
    name = request.name
    mid = lane_y + _LANE_H / 2
    svg.lines.append(f"<g data-request={quoteattr(name)}>")
    svg.element("text", text=name, x=_LEFT - 6, y=short_number(mid + 4), text_anchor="end",
                **({"font_weight": "bold"} if p95 else {}))
    view, context = viewed if viewed is not None else (None, None)
    segments = (lane_segments(request, prefill_ticks, chunk_tokens) if view is None
                else view.segments(context, request))
    for seg in segments:
        tokens = {"data_tokens": " ".join(map(str, seg.tokens))} if seg.tokens else {}
        title = (segment_title(name, case, seg, request.spec.prompt_tokens, static) if view is None
                 else view.title(name, case, seg, request))
        svg.element("rect", title=title,
                    data_phase=seg.phase, data_from=seg.start, data_to=seg.end, **tokens,
                    x=x(seg.start), y=lane_y, width=short_number(float(x(seg.end)) - float(x(seg.start))),
                    height=_LANE_H, fill=(PHASES if view is None else view.phases)[seg.phase][0])
    for at, title in (() if view is None else view.marks(request)):
        svg.element("path", title=title, data_mark="preemption", data_tick=at,
                    d=f"M{short_number(float(x(at)) - 5)} {lane_y - 4}h10l-5 8z", fill=VERMILLION,
                    stroke="#ffffff", stroke_width=0.5)
    if request.admitted_at is not None and request.hit_tokens > 0:
        # The hit as a strip in the gap above the lane, at least _HIT_MIN_W pixels wide: visible
        # at any axis width, never hidden under the admission or first-token marker.
        at, end = request.admitted_at, request.prefill_done_at
        left = float(x(at))
        right = max(float(x(end + 1)) if end is not None else left, left + _HIT_MIN_W)
        svg.element("rect", x=short_number(left), y=lane_y - 4, width=short_number(right - left), height=3, fill=GREEN)
    if request.admitted_at is not None:
        at = request.admitted_at
        hit = request.hit_tokens > 0
        title = (f"{name} in {case}: admitted at tick {at} (queue wait {at - request.spec.arrival})"
                 + (f", cache hit: {request.hit_tokens} prefix tokens skipped" if hit else ", no cache hit"))
        svg.element("path", title=title, data_mark="cache-hit" if hit else "admission", data_tick=at,
                    d=f"M{x(at)} {lane_y - 2}l6 {short_number(_LANE_H / 2 + 2)}l-6 {short_number(_LANE_H / 2 + 2)}z",
                    fill=GREEN if hit else BLACK, stroke="#ffffff", stroke_width=0.5)
    if request.first_token_at is not None:
        at = request.first_token_at
        svg.element("circle", title=f"{name} in {case}: first token at tick {at} (TTFT {at - request.spec.arrival})",
                    data_mark="first-token", data_tick=at, cx=x(at), cy=short_number(mid), r=3.5,
                    fill="#ffffff", stroke=BLACK, stroke_width=1.5)
    if request.done_at is not None:
        at = request.done_at
        label = _lane_label(request) + (" · P95 TTFT" if p95 else "")
        if request.status is Status.TIMEOUT:
            svg.element("path", title=f"{name} in {case}: timed out at tick {at} with "
                                      f"{len(request.token_times)} of {request.spec.output_tokens} tokens",
                        data_mark="timeout", data_tick=at, d=_cross(float(x(at)), lane_y - 1, _LANE_H + 2),
                        stroke=VERMILLION, stroke_width=2.5)
        else:
            svg.element("rect", title=f"{name} in {case}: done at tick {at} (E2E {at - request.spec.arrival}, "
                                      f"{len(request.token_times)} tokens)",
                        data_mark="done", data_tick=at, x=short_number(float(x(at)) - 1), y=lane_y - 1,
                        width=2.5, height=_LANE_H + 2, fill=BLACK)
        svg.element("text", text=label, x=short_number(float(x(at)) + 6), y=short_number(mid + 4), fill="#444444", font_size=10,
                    **({"font_weight": "bold"} if p95 else {}))
    svg.lines.append("</g>")


def _cross(center: float, top: float, size: float) -> str:
    """Path data of an X ``size`` pixels high, 8 pixels wide, centred on ``center``."""
    return f"M{short_number(center - 4)} {short_number(top)}l8 {short_number(size)}m0 -{short_number(size)}l-8 {short_number(size)}"


def _case_facts(summary: dict) -> str:
    p95 = summary["p95_ttft"]
    p95_text = "NA" if p95 is None else short_number(float(p95))
    return (f"P95 TTFT {p95_text} · makespan {summary['makespan']} · hit tokens {summary['hit_tokens']} · "
            f"ok {summary['succeeded']}/{summary['arrived']}")


def _lane_label(request: Request) -> str:
    if request.status is Status.TIMEOUT:
        text = "timeout"
    else:
        text = f"TTFT {request.first_token_at - request.spec.arrival}" if request.first_token_at is not None else ""
    if request.hit_tokens:
        text += f" · hit {request.hit_tokens}"
    return text


def _swatch_width(label: str) -> int:
    """Pixels a phase swatch and its label take in the legend."""
    return 30 + int(len(label) * 5.6)


def _marker_width(mark: str | None, label: str) -> int:
    """Pixels a marker and its label take in the legend (a bare label has no marker)."""
    return 34 + int(len(label) * 5.6) - (14 if mark is None else 0)


def _wrap(entries, width) -> list[list]:
    """``entries`` cut into rows that fit the picture's width; ``width(entry)`` gives its pixels."""
    rows, x = [[]], _LEFT
    for entry in entries:
        advance = width(entry)
        if rows[-1] and x + advance > _LEFT + _PLOT_W + _RIGHT:
            rows.append([])
            x = _LEFT
        rows[-1].append(entry)
        x += advance
    return rows


def _legend_rows(phases: dict) -> list[list[tuple[str, str]]]:
    """The phase swatches ``(fill, label)`` cut into rows that fit the picture's width."""
    return _wrap(phases.values(), lambda swatch: _swatch_width(swatch[1]))


def _marker_rows(extra_marks=()) -> list[list[tuple[str | None, str]]]:
    """The markers ``(mark, label)`` of the legend cut into rows that fit the picture's width (one
    row for the lab engine; another engine's extra marks may need a second)."""
    marks = (("admission", "admission"), ("cache-hit", "admission with cache hit (green strip: hit)"),
             ("first-token", "first token"), ("done", "done (ok)"), ("timeout", "timeout"),
             ("p95", "the case's P95 TTFT request"), *extra_marks, (None, "lane label: TTFT · hit tokens"))
    return _wrap(marks, lambda entry: _marker_width(*entry))


def _legend(svg: Svg, y: int, rows=None, marks=None) -> None:
    """The phase swatches (one row for the lab engine), then the markers (:func:`_marker_rows`)."""
    for row in rows if rows is not None else _legend_rows(PHASES):
        x = _LEFT
        for fill, label in row:
            svg.element("rect", x=x, y=y, width=14, height=10, fill=fill, stroke="#888888", stroke_width=0.5)
            svg.element("text", text=label, x=x + 18, y=y + 9)
            x += _swatch_width(label)
        y += 16
    for row in marks if marks is not None else _marker_rows():
        x = _LEFT
        for mark, label in row:
            _marker(svg, mark, label, x, y)
            x += _marker_width(mark, label)
        y += 16


def _marker(svg: Svg, mark: str | None, label: str, x: int, y: int) -> None:
    """One legend entry: the marker as drawn on a lane, then its label."""
    if mark == "preemption":
        svg.element("path", d=f"M{x - 1} {y}h10l-5 8z", fill=VERMILLION)
    elif mark in ("admission", "cache-hit"):
        svg.element("path", d=f"M{x} {y - 1}l6 6l-6 6z", fill=BLACK if mark == "admission" else GREEN)
        if mark == "cache-hit":
            svg.element("rect", x=x, y=y - 4, width=_HIT_MIN_W, height=3, fill=GREEN)
    elif mark == "p95":
        svg.element("rect", x=x - 2, y=y - 1, width=14, height=12, fill=P95_FILL, stroke=P95_STROKE,
                    stroke_width=1)
    elif mark == "first-token":
        svg.element("circle", cx=x + 4, cy=y + 5, r=3.5, fill="#ffffff", stroke=BLACK, stroke_width=1.5)
    elif mark == "done":
        svg.element("rect", x=x + 2, y=y - 1, width=2.5, height=12, fill=BLACK)
    elif mark == "timeout":
        svg.element("path", d=_cross(x + 4, y - 1, 12), stroke=VERMILLION, stroke_width=2.5)
    else:
        x -= 14
    svg.element("text", text=label, x=x + 14, y=y + 9)
