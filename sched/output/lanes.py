"""A request's life cut into *segments* for ``timeline.svg`` (lab.md §7–8): the lab engine's
phases (``waiting``, ``stalled``, ``prefill``, ``chunked``, ``decode``, ``skipped``; their meaning is
in :mod:`sched.output.picture`'s docstring), the titles a segment carries, and which request is a
case's P95 TTFT request. The vLLM engine's phases (:mod:`sched.output.vllm_picture`) build on the
same :class:`Segment` and lane builder. Pure functions of the engine's records; no drawing here.
"""

from __future__ import annotations

from dataclasses import dataclass
from heapq import nlargest
from operator import attrgetter, sub

from ..core.packed_requests import ColumnRequests
from ..core.records import CaseResult, Request, Status
from .svg import BLUE, GREY, ORANGE, SKY

__all__ = ["MAX_SEGMENTS", "PHASES", "WAIT_REASONS", "Segment", "lane_segments", "segment_title",
           "prefill_by_request", "end_of", "p95_ttft_request"]

#: A lane with more segments than this is drawn coarsely (sub-phases folded into their phase).
MAX_SEGMENTS = 200

#: Phase -> (fill, legend label).
PHASES = {
    "waiting": (GREY, "waiting: no slot / static batch"),  # the title says which (WAIT_REASONS)
    "stalled": ("url(#tl-stalled)", "admitted, no budget left"),
    "prefill": (SKY, "prefill"),
    "chunked": (BLUE, "prefill, chunk cap reached"),
    "decode": (ORANGE, "decode (one token per tick)"),
    "skipped": ("url(#tl-skipped)", "decode skipped, no budget"),
}
#: Why a queued request waits, by "is the case static batching" (lab.md §4): in a continuous case
#: a queued request is admitted as soon as a slot frees (the policy only picks which one), so a
#: wait means every slot was taken; static batching admits a new batch only once the whole
#: previous batch has ended, so a wait there means that batch was still running, free slots or not.
WAIT_REASONS = {False: "no free slot", True: "static batch still running"}
_COARSE = {"stalled": "prefill", "chunked": "prefill", "skipped": "decode"}


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of ticks ``[start, end)`` of one request in one phase (a key of :data:`PHASES`).

    ``tokens`` lists the prompt tokens computed per prefill tick (prefill phases, when tick
    records exist); ``emitted`` counts the output tokens of a decode segment.
    """

    phase: str
    start: int
    end: int
    tokens: tuple[int, ...] = ()
    emitted: int = 0


def prefill_by_request(result: CaseResult, names: set[str]) -> dict[str, dict[int, int]] | None:
    """name -> {tick: prefilled tokens} for ``names``, or None when no tick records exist."""
    ticks = getattr(result, "ticks", None)
    if not ticks or not hasattr(ticks[0], "prefilled"):  # no per-tick records (timeline counts/off)
        return None
    found: dict[str, dict[int, int]] = {name: {} for name in names}
    for record in ticks:
        for name, tokens in record.prefilled:
            if name in found:
                found[name][record.tick] = tokens
    return found


def end_of(request: Request) -> int:
    """The tick the lane ends: ``done_at``, or for an unfinished request its latest known tick."""
    if request.done_at is not None:
        return request.done_at
    return max([request.spec.arrival, *request.token_times[-1:]])


class LaneBuilder:
    """Builds segments, merging a run with the previous one when the (mapped) phase is the same."""

    def __init__(self, phases: dict[str, str]) -> None:
        self.phases = phases
        self.runs: list[list] = []   # [phase, start, end, tokens list, emitted]

    def add(self, phase: str, start: int, end: int, tokens: tuple[int, ...] = (), emitted: int = 0) -> None:
        if end <= start:
            return
        phase = self.phases.get(phase, phase)
        last = self.runs[-1] if self.runs else None
        if last is not None and last[0] == phase and last[2] == start:
            last[2] = end
            last[3].extend(tokens)
            last[4] += emitted
        else:
            self.runs.append([phase, start, end, list(tokens), emitted])

    def segments(self) -> list[Segment]:
        return [Segment(phase, start, end, tuple(tokens), emitted) for phase, start, end, tokens, emitted in self.runs]


def lane_segments(request: Request, prefill_ticks: dict[int, int] | None,
                  chunk_tokens: int | None) -> list[Segment]:
    """Cut one request's life into segments (phases as in the module docstring).

    ``prefill_ticks`` maps tick -> prompt tokens computed (from the case's tick records), or is
    ``None`` when per-tick records are absent; ``chunk_tokens`` is the case's cap or ``None``.
    Returns segments in time order; every tick from arrival to the end belongs to exactly one.
    Work is proportional to the request's prefill ticks and runs of token stamps, not to its waiting time.
    Example (static baseline, S1): waiting [1, 32), prefill [32, 35), decode [35, 51).
    """
    segments = _build(request, prefill_ticks, chunk_tokens, {})
    if len(segments) > MAX_SEGMENTS:
        segments = _build(request, prefill_ticks, chunk_tokens, _COARSE)
    return segments


def _build(request: Request, prefill_ticks, chunk_tokens, phases: dict[str, str]) -> list[Segment]:
    lane = LaneBuilder(phases)
    end = end_of(request)
    admitted = request.admitted_at
    lane.add("waiting", request.spec.arrival, end if admitted is None else admitted)
    if admitted is None:
        return lane.segments()
    prefill_end = request.prefill_done_at
    if prefill_end is None:
        prefill_end = request.token_times[0] - 2 if request.token_times else end - 1
    prefill_end = min(prefill_end, end - 1)
    if prefill_ticks is None:
        lane.add("prefill", admitted, prefill_end + 1)
    else:
        cursor, left = admitted, request.prefill_tokens
        for tick in sorted(t for t in prefill_ticks if admitted <= t <= prefill_end):
            tokens = prefill_ticks[tick]
            lane.add("stalled", cursor, tick)
            capped = chunk_tokens is not None and tokens == chunk_tokens and left > tokens
            lane.add("chunked" if capped else "prefill", tick, tick + 1, (tokens,))
            left -= tokens
            cursor = tick + 1
        lane.add("stalled", cursor, prefill_end + 1)
    cursor = prefill_end + 1
    for first, count in request.token_runs:  # a token stamped t + 1 was computed in tick t
        lane.add("skipped", cursor, first - 1)
        lane.add("decode", first - 1, first - 1 + count, emitted=count)   # one add per run of stamps
        cursor = first - 1 + count
    lane.add("skipped", cursor, end)
    return lane.segments()


def _ticks_text(start: int, end: int) -> str:
    last = end - 1
    count = end - start
    span = f"tick {start}" if count == 1 else f"ticks {start}–{last}"
    return f"{span} ({count} tick{'s' if count != 1 else ''})"


def segment_title(name: str, case: str, seg: Segment, prompt_tokens: int, static: bool = False) -> str:
    where = f"{name} in {case}: "
    ticks = _ticks_text(seg.start, seg.end)
    if seg.phase == "waiting":
        return where + f"waiting: {WAIT_REASONS[static]}, {ticks}"
    if seg.phase == "stalled":
        return where + f"admitted but no budget left for its prefill, {ticks}"
    if seg.phase in ("prefill", "chunked"):
        if not seg.tokens:
            return where + f"prefill, {ticks} (per-tick tokens not recorded)"
        shown = "+".join(str(t) for t in seg.tokens[:12]) + ("+…" if len(seg.tokens) > 12 else "")
        label = "prefill capped by the chunk size" if seg.phase == "chunked" else "prefill"
        return where + f"{label}, {ticks}: {shown} = {sum(seg.tokens)} of {prompt_tokens} prompt tokens"
    if seg.phase == "decode":
        n = seg.emitted
        tokens = f"{n} output token{'s' if n != 1 else ''}"
        if n == seg.end - seg.start:
            return where + f"decode, {ticks}: {tokens} stamped {seg.start + 1}–{seg.end}"
        return where + f"decode, {ticks}: {tokens}, {seg.end - seg.start - n} ticks skipped for lack of budget"
    return where + f"decode skipped for lack of budget, {ticks}: no token"


_FIRST_TOKEN_AT, _ARRIVAL = attrgetter("first_token_at"), attrgetter("spec.arrival")


def p95_ttft_request(result: CaseResult) -> Request | None:
    """The request whose TTFT is the case's P95 TTFT (lab.md §5, nearest rank): the successful
    requests sorted by TTFT (ties in workload order), the ``ceil(0.95 n)``-th; ``None`` if none
    succeeded. Example: 8 successful requests → the 8th by TTFT, the slowest.

    Requests packed as columns (:class:`sched.core.packed_requests.ColumnRequests`: a finished
    large lab case, a vLLM case) are read from their columns, and the one found is built from them (a new record:
    compare it with others by ``index``)."""
    requests = result.requests
    if isinstance(requests, ColumnRequests):
        ok, ttfts = requests.successful_ttfts()   # indices of the successful requests, their TTFTs
    else:
        ok = [r for r in requests if r.status is Status.DONE]   # r.succeeded, without a call per request
        ttfts = [*map(sub, map(_FIRST_TOKEN_AT, ok), map(_ARRIVAL, ok))]
    if not ok:
        return None
    rank = max(1, (95 * len(ok) + 99) // 100)
    p95 = nlargest(len(ttfts) - rank + 1, ttfts)[-1]   # the rank-th smallest, without a sorted copy of all
    tie = rank - sum(t < p95 for t in ttfts)   # the tie-th request with that TTFT, in workload order
    found = next(r for r, t in zip(ok, ttfts) if t == p95 and (tie := tie - 1) == 0)
    return requests[found] if isinstance(requests, ColumnRequests) else found
