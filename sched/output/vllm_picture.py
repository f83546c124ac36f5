"""How ``timeline.svg`` draws a vLLM-engine run (vllm-engine.md §5).

The frame, axis, markers and colours are :mod:`sched.output.picture`'s; this module only cuts each
request's life into the vLLM engine's phases and names its preemptions. A lane, from arrival to
end, is made of:

- ``waiting``: arrived, not yet scheduled (no slot, no budget left, or its whole prompt did not
  fit the free KV blocks);
- ``prefill`` / ``chunked``: prompt tokens computed in the step (chunked: the chunk cap was the
  limit); the step that completes the prompt also samples the first token;
- ``decode``: one output token computed in the step, stamped at the cell's right edge;
- ``preempted``: sent back to the waiting queue to free KV blocks (from the preempting step until
  it is scheduled again), drawn apart from the first wait;
- ``recompute``: the re-prefill after a preemption (prompt + tokens generated so far, minus any
  blocks still cached), up to and including the step that samples its next token;
- ``stalled`` / ``skipped``: running, but the step's budget ran out before its turn.

A vermillion triangle marks each preemption (``data-mark="preemption"``). Without per-step
records (timeline ``counts`` or ``off``) prefill is one segment from admission to the first token
(or to a preemption before it), and each preemption window up to the next token (queue wait and
recompute together) is one ``preempted`` segment.
"""

from __future__ import annotations

from .colours import BLUE, GREY, ORANGE, PINK, PURPLE, SKY
from .lanes import Segment, LaneBuilder

__all__ = ["VLLM_PHASES", "VllmLaneView", "lane_view"]

# The colour vocabulary every time line shares.
_GREY, _SKY, _BLUE, _ORANGE, _PINK, _PURPLE = GREY, SKY, BLUE, ORANGE, PINK, PURPLE

#: Phase -> (fill, legend label) for the vLLM engine's lanes.
VLLM_PHASES = {
    "waiting": (_GREY, "waiting: no slot, budget or KV room"),
    "prefill": (_SKY, "prefill"),
    "chunked": (_BLUE, "prefill, chunk cap reached"),
    "decode": (_ORANGE, "decode (one token per step)"),
    "preempted": (_PINK, "preempted: back in the queue"),
    "recompute": (_PURPLE, "recompute after preemption"),
    "stalled": ("url(#tl-stalled)", "running, no budget left"),
    "skipped": ("url(#tl-skipped)", "decode skipped, no budget"),
}


def lane_view(clock) -> VllmLaneView | None:
    """How ``timeline.svg`` cuts the lanes of a run on ``clock`` (a :class:`sched.core.clock.RunClock`):
    a :class:`VllmLaneView` for the vLLM engine, ``None`` (the picture's own lab phases) for the lab's."""
    return VllmLaneView() if clock.is_vllm else None


class VllmLaneView:
    """The lanes of a vLLM-engine case for :func:`sched.output.picture.render_timeline_svg`."""

    phases = VLLM_PHASES
    marks_legend = (("preemption", "preemption"),)

    def case_context(self, result, names: set) -> dict | None:
        """name -> {tick: tokens scheduled} from the case's full step records, else ``None``."""
        ticks = result.ticks
        if not ticks or not hasattr(ticks[0], "scheduled"):
            return None
        found: dict[str, dict] = {name: {} for name in names}
        for record in ticks:
            for name, tokens in record.scheduled:
                if name in found:
                    found[name][record.tick] = tokens
        return {"scheduled": found, "cap": result.case.chunk_tokens}

    def segments(self, context, request) -> list[Segment]:
        lane = LaneBuilder({})
        end = request.done_at if request.done_at is not None else request.spec.arrival
        admitted = request.admitted_at
        lane.add("waiting", request.spec.arrival, end if admitted is None else admitted)
        if admitted is None:
            return lane.segments()
        stamps = request.token_times
        if context is None:
            return self._coarse(lane, request, admitted, end, stamps)
        scheduled, cap = context["scheduled"][request.name], context["cap"]
        preempted = sorted(request.preempted_at)
        stamped = set(stamps)
        left = request.spec.prompt_tokens - request.hit_tokens
        state, tick, p = "prefill", admitted, 0
        while tick < end:
            if p < len(preempted) and preempted[p] == tick:   # back in the queue until scheduled again
                p += 1
                back = min([t for t in scheduled if t > tick] + [end])
                lane.add("preempted", tick, back)
                state, tick = "recompute", back
                continue
            tokens = scheduled.get(tick)
            if tokens is None:
                lane.add("skipped" if state == "decode" else "stalled", tick, tick + 1)
            elif state == "decode":
                lane.add("decode", tick, tick + 1, emitted=1)
            else:
                capped = state == "prefill" and cap is not None and tokens == cap and left > tokens
                lane.add("chunked" if capped else state, tick, tick + 1, (tokens,))
                if state == "prefill":
                    left -= tokens
                if tick + 1 in stamped:
                    state = "decode"
            tick += 1
        return lane.segments()

    @staticmethod
    def _coarse(lane: LaneBuilder, request, admitted, end, stamps) -> list[Segment]:
        """Segments from the request record alone (no per-step records)."""
        first = stamps[0] if stamps else end
        early = [t for t in request.preempted_at if t < first]   # preempted before its first token
        lane.add("prefill", admitted, min(early, default=first))
        lane.add("preempted", min(early, default=first), first)   # waited and recomputed (not told apart)
        windows = sorted(t for t in request.preempted_at if t >= first)
        cursor, i = first, 0
        for stamp in stamps[1:]:
            preempted = False
            while i < len(windows) and windows[i] < stamp - 1:
                i, preempted = i + 1, True
            if preempted:   # preempted, waited and recomputed in between (not told apart here)
                lane.add("preempted", cursor, stamp)
            else:
                lane.add("skipped", cursor, stamp - 1)
                lane.add("decode", stamp - 1, stamp, emitted=1)
            cursor = stamp
        lane.add("preempted" if i < len(windows) else "skipped", cursor, end)
        return lane.segments()

    def title(self, name: str, case: str, seg: Segment, request) -> str:
        where = f"{name} in {case}: "
        span = f"tick {seg.start}" if seg.end - seg.start == 1 else f"ticks {seg.start}–{seg.end - 1}"
        count = f"{seg.end - seg.start} step{'s' if seg.end - seg.start != 1 else ''}"
        tokens = f": {'+'.join(map(str, seg.tokens[:12]))}{'+…' if len(seg.tokens) > 12 else ''} = " \
                 f"{sum(seg.tokens)} tokens" if seg.tokens else ""
        text = {
            "waiting": "waiting (no slot, no budget or no KV room for its whole prompt)",
            "prefill": "prefill", "chunked": "prefill capped by the chunk size",
            "decode": f"decode, {seg.emitted} output token{'s' if seg.emitted != 1 else ''}",
            "preempted": "preempted: its KV blocks freed, back in the waiting queue until recomputed",
            "recompute": "recompute after preemption (prompt + generated tokens again)",
            "stalled": "running, but the budget ran out before its turn",
            "skipped": "decode skipped: the budget ran out before its turn",
        }[seg.phase]
        return f"{where}{text}, {span} ({count}){tokens}"

    def marks(self, request) -> list[tuple[int, str]]:
        """(tick, title) of each preemption."""
        return [(tick, f"{request.name}: preempted at tick {tick} (recompute)") for tick in request.preempted_at]
