"""A millisecond run's token stamps as spans of its step ends: per-token work done once per step.

A step-model run (:mod:`sched.timing.msrun`, vllm-engine.md §6) stamps every token a step samples at
that step's end (µs), so all the requests decoding in a step share one stamp, and a request decoding
step after step holds consecutive step ends. :class:`StepEnds` finds the case's distinct stamps once
(``ends``, increasing: on the Azure trace with the 4090 settings 127,681 of them for 4.1 million
tokens) and describes each request's stamps as *spans* ``(first index into ends, length)``: one span
for a request that sampled in every step from its first token to its last, one more after each step
it sat out (a preemption, a token in flight). Whatever the artifacts derive per token is then
derived once per step end and counted or sliced per request:

- :meth:`StepEnds.itl_histogram`: the ITL sample in ticks (µs) of the successful requests as
  ``{gap: count}`` (lab.md §5's ITL; the same histogram as :func:`sched.core.metrics.gap_histogram`);
- :meth:`StepEnds.pooled_itl`: vLLM's pooled ITL sample in seconds, in request order, with its
  counts (bench-metrics.md §4: the mean and std read the order, the percentiles the counts), as
  slices of one list of the step ends' gaps (:class:`sched.core.pairwise_sum.Pieces`), never
  joined into one list of millions of values;
- :meth:`StepEnds.runs_texts` and :meth:`StepEnds.times_ms_texts`: ``requests.jsonl``'s
  ``token_runs`` text (``[s, 1], [s, 1], ...``, µs) and ``token_times_ms`` text, each a slice of one
  text made for every step end.

A request gets spans only when every run of its tokens is one token long (always on a step-model
run: steps last more than 1 µs) and its stamps are, in C-level list comparisons, exactly the step
ends its spans name; any other request (``spans`` ``None``) is handled token by token, as before.
"""

from __future__ import annotations

from array import array
from collections import Counter
from itertools import accumulate, compress, repeat
from operator import add, mul, ne, sub, truediv

from ..core.bench_metrics import CountedSample
from ..core.metrics import gap_histogram
from ..core.pairwise_sum import Pieces
from ..core.records import Status
from ..core.step_stamps import StepStampedRequest

__all__ = ["StepEnds", "ms_text"]


def ms_text(value: int | None) -> str:
    """The JSON text of a time in µs (an int) in ms, ``round(value / 1000, 3)`` as ``json.dumps``
    writes it (``repr``), ``"null"`` for ``None``. For an int ``value`` (|value| < 2**53) the
    rounding changes nothing: ``value / 1000`` is already the double nearest to the 3-decimal number
    ``value / 1000`` (within half an ulp, far less than 0.0005), so it is written as
    ``repr(value / 1000)``, skipping ``round``'s decimal conversion; any other value is rounded."""
    if value is None:
        return "null"
    return repr(value / 1000) if value.__class__ is int else repr(round(value / 1000, 3))


class StepEnds:
    """The distinct token stamps of one case's ``requests`` and each request's stamps as spans.

    ``ends``: the stamps (µs) of every request whose runs are one token each, increasing, each once
    (every step's end when the requests keep step ordinals: :meth:`_from_step_ordinals`).
    ``spans``: per request, in order, a tuple ``(i0, n0, i1, n1, ...)``: its tokens are stamped
    ``ends[i0:i0 + n0]``, then ``ends[i1:i1 + n1]``, ...; ``()`` with no token; ``None`` when a run
    of its tokens is longer than one token (then nothing here describes it).
    """

    def __init__(self, requests) -> None:
        self.requests = requests
        self._texts = None
        if self._from_step_ordinals(requests):
            return
        stamps = []
        for runs in (r.flat_token_runs for r in requests):   # an ended request's stored list: read only
            stamps.append(runs[0::2] if runs[1::2].count(1) * 2 == len(runs) else None)
        self.ends = ends = sorted(set().union(*filter(None, stamps)))
        where = dict(zip(ends, range(len(ends))))
        self.spans = spans = []
        for times in stamps:
            if not times:
                spans.append(None if times is None else ())
                continue
            first, count = where[times[0]], len(times)
            if ends[first:first + count] == times:   # one span: the usual request
                spans.append((first, count))
                continue
            # Several spans: a new one starts where the next stamp is not the next step end.
            index = list(map(where.__getitem__, times))
            starts = [0, *compress(range(1, count), map(ne, index[1:], map(add, index, repeat(1)))), count]
            spans.append(tuple(value for a, b in zip(starts, starts[1:]) for value in (index[a], b - a)))

    def _from_step_ordinals(self, requests) -> bool:
        """When every request keeps its stamps as runs of step ordinals on one list of step ends
        (:class:`sched.core.step_stamps.StepStampedRequest`), take ``ends`` and ``spans`` from them
        directly: ``ends`` every step's end (step ``s`` at index ``s - 1``), a run of consecutive
        steps one span. Steps in which no request sampled are ends no span names, so every span,
        histogram and text is the one the stamps would give. Returns whether it could."""
        if not requests or type(requests[0]) is not StepStampedRequest:
            return False
        table = requests[0]._clock
        runs = []
        for r in requests:
            if type(r) is not StepStampedRequest or r._clock is not table:
                return False
            runs.append(r._runs)
        self.ends = table[1:]   # table[0] is no step's end
        self.spans = [(r[0] - 1, r[1]) if len(r) == 2 else
                      tuple(v - 1 if k % 2 == 0 else v for k, v in enumerate(r)) for r in runs]
        return True

    def _succeeded(self):
        """``(request, spans)`` of every successful request (status ok), in order."""
        done = Status.DONE
        return ((r, spans) for r, spans in zip(self.requests, self.spans) if r.status is done)

    def itl_histogram(self) -> Counter:
        """``{gap in ticks: count}`` of every gap between consecutive tokens of a successful request
        (lab.md §5's pooled ITL sample): a span of ``n`` stamps holds the ``n - 1`` gaps between
        consecutive step ends it covers (counted per step end: how many spans cover each gap), two
        spans of a request the gap between them."""
        ends = self.ends
        cover = [0] * (len(ends) + 1)
        counts = Counter()
        others = []
        for r, spans in self._succeeded():
            if spans is None:
                others.append(r)
                continue
            for k in range(0, len(spans), 2):
                first, count = spans[k], spans[k + 1]
                cover[first] += 1
                cover[first + count - 1] -= 1
                if k:
                    counts[ends[first] - ends[spans[k - 2] + spans[k - 1] - 1]] += 1
        for gap, times in zip(map(sub, ends[1:], ends), accumulate(cover)):
            if times:
                counts[gap] += times
        if others:
            counts.update(gap_histogram(others))
        return counts

    def pooled_itl(self, per_second: float, histogram: Counter | None = None) -> CountedSample:
        """vLLM's pooled ITL sample of the successful requests in seconds (each gap in ticks divided by
        ``per_second``, ticks per second), in request order and token order, with its counts
        ``{seconds: count}`` (from ``histogram``, :meth:`itl_histogram`, when given) and its squared
        deviations from a centre. The values and the squares are :class:`sched.core.pairwise_sum.Pieces`
        of as many values as the counts hold, read piece by piece by the pairwise sum, never joined
        into one list: slices (:meth:`_cuts`) of one list of seconds (each step end's gap, then the
        gaps made one by one) or of its squares (each made once)."""
        seconds, starts, stops = self._cuts(per_second)

        def squares(centre: float) -> Pieces:
            deviation = repeat(centre)   # (x − centre) * (x − centre), each factor computed apart: no list of deviations
            return Pieces(list(map(mul, map(sub, seconds, deviation), map(sub, seconds, deviation))), starts, stops)

        counts: dict = {}
        for gap, times in (self.itl_histogram() if histogram is None else histogram).items():
            value = gap / per_second
            counts[value] = counts.get(value, 0) + times
        return CountedSample(Pieces(seconds, starts, stops), counts, squares)

    def _cuts(self, per_second: float) -> tuple[list, list, list]:
        """``(seconds, starts, stops)``: the pooled ITL sample of the successful requests, in request
        and token order, is ``seconds[start:stop]`` for each ``start`` and ``stop`` in turn.
        ``seconds[k]`` for ``k < len(ends) - 1`` is the gap ``(ends[k + 1] − ends[k]) / per_second``
        (a span's gaps are a slice of these); after them, each gap between two spans of a request and
        each gap of a request without spans, divided by ``per_second`` one by one."""
        ends = self.ends
        seconds = list(map(truediv, map(sub, ends[1:], ends), repeat(per_second)))   # gap k: ends[k + 1] − ends[k]
        starts, stops = [], []
        for r, spans in self._succeeded():
            if spans is None:
                times = r.token_times
                starts.append(len(seconds))
                seconds += map(truediv, map(sub, times[1:], times), repeat(per_second))
                stops.append(len(seconds))
            elif len(spans) == 2:   # one span: its gaps, none when it holds one token
                starts.append(spans[0])
                stops.append(spans[0] + spans[1] - 1)
            else:
                for k in range(0, len(spans), 2):
                    first, count = spans[k], spans[k + 1]
                    if k:
                        starts.append(len(seconds))
                        seconds.append((ends[first] - ends[spans[k - 2] + spans[k - 1] - 1]) / per_second)
                        stops.append(len(seconds))
                    starts.append(first)
                    stops.append(first + count - 1)
        return seconds, starts, stops

    def _joined(self):
        """``(µs text, its piece starts, ms text, its piece starts)``: ``"[e, 1]"`` and the ms text
        (:func:`ms_text`) of every step end ``e``, each list joined by ``", "``; piece ``k`` of a
        text starts at ``starts[k]`` (``starts[len(ends)]`` is the text's length + 2). Made once,
        each step end's two texts formatted once for every request sampling at it; the starts are
        arrays (8 bytes a step end, not an int object each)."""
        if self._texts is None:
            ends = self.ends
            digits = list(map(str, ends))   # "[e, 1], " is 7 characters more than e's digits
            texts = [f"[{', 1], ['.join(digits)}, 1]" if ends else "", _starts(digits, 7)]
            del digits   # its pages taken again by the ms pieces
            ms = list(map(repr, map(truediv, ends, repeat(1000))))   # ms_text(e) for an int e
            self._texts = texts + [", ".join(ms), _starts(ms, 2)]
        return self._texts

    def runs_texts(self):
        """Per request, in order (an iterator: each text made as it is read): its ``token_runs``
        pairs as ``requests.jsonl`` writes them (``[s, 1], [s, 1], ...``, without the outer
        brackets), or ``None`` without spans."""
        text, starts = self._joined()[:2]
        return map(_sliced, repeat(text), repeat(starts), self.spans)

    def times_ms_texts(self):
        """Per request, in order (an iterator): its ``token_times_ms`` values as ``requests.jsonl``
        writes them (``t, t, ...`` in ms, without the brackets), or ``None`` without spans."""
        text, starts = self._joined()[2:]
        return map(_sliced, repeat(text), repeat(starts), self.spans)


def _starts(pieces: list, extra: int) -> array:
    """Where each piece starts in a text of ``pieces`` that adds ``extra`` characters to each
    (``starts[k]``, and the text's length + 2 last): 8-byte integers."""
    return array("q", accumulate(map(add, map(len, pieces), repeat(extra)), initial=0))


def _sliced(text: str, starts: list, spans) -> str | None:
    """The pieces of ``text`` (joined by ``", "``) that ``spans`` name, joined by ``", "``."""
    if spans is None:
        return None
    if len(spans) == 2:
        first, count = spans
        return text[starts[first]:starts[first + count] - 2]
    return ", ".join(text[starts[spans[k]]:starts[spans[k] + spans[k + 1]] - 2] for k in range(0, len(spans), 2))
