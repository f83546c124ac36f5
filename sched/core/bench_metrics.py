"""vLLM ``bench serve``'s metrics and goodput, defined as vLLM 0.33.0 computes them (bench-metrics.md).

The lab's own columns (:mod:`sched.core.metrics`, lab.md §5) use nearest-rank percentiles over
ticks; these are the numbers a vLLM user reads in ``vllm bench serve``'s output, under its names,
so a simulated run and a real one can be read against the same page:

- Input: one :class:`BenchRequest` per request, times in **seconds** from the client's view (the
  request's send time, after the concurrency limit let it go), and the run's ``duration`` in
  seconds (the client's wall time from the start of dispatch until every request returned).
- Which requests count (§2): only successful ones feed ``completed``, the token totals and every
  latency list; ``failed`` counts the rest.
- Throughputs (§3): ``request_throughput`` = completed / duration (requests/s),
  ``output_throughput`` = output tokens of successful requests / duration (tokens/s),
  ``total_token_throughput`` = (their prompt tokens + output tokens) / duration.
- Latencies (§4): TTFT per successful request; TPOT = (latency − TTFT) / (output − 1) per
  successful request with more than one output token; ITL every gap between consecutive output
  chunks, pooled; E2EL the request's latency. Each reported in ms as ``mean_``, ``median_``,
  ``std_`` (population, ddof 0) and ``pNN_`` (numpy's default linear interpolation) of
  ``ttft_ms``, ``tpot_ms``, ``itl_ms``, ``e2el_ms``. An empty list counts as ``[0]``: every
  statistic of it is 0.0, as in vLLM. Means and standard deviations are summed in numpy's own
  pairwise order, so every value is the very double vLLM's ``calculate_metrics`` gives (checked
  against vLLM 0.33.0's own code by ``tests/test_core_bench_metrics_vllm.py``).
- Goodput (§6): ``--goodput ttft:MS tpot:MS e2el:MS``; a successful request is good when each
  named metric is at most its limit (inclusive); its TPOT for this test is 0 when it has at most one
  output token. ``request_goodput`` = good / duration (``None`` without limits). ``slo_attainment``
  (this lab's addition) = good / completed, the share of completed requests meeting every limit.

Pure functions over plain numbers: a simulated run (:mod:`sched.timing.msrun`) and an imported real
one (:mod:`sched.timing.realrun`) feed the very same code.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import accumulate, chain
from typing import NamedTuple, Sequence

from .pairwise_sum import Pieces, pairwise_sum

__all__ = ["BenchRequest", "BENCH_METRICS", "GOODPUT_KEYS", "DEFAULT_PERCENTILES", "parse_goodput_pair",
           "settle_goodput", "parse_metric_percentiles", "percentile_key", "linear_percentile", "np_sum", "np_mean",
           "np_median", "np_std", "CountedSample", "request_tpot", "is_good", "calculate_metrics", "headline_metrics", "bench_fields",
           "bench_units"]

#: The latency metrics reported, in vLLM's names (``--percentile-metrics``' words).
BENCH_METRICS = ("ttft", "tpot", "itl", "e2el")
#: The metrics ``--goodput`` may name (vLLM refuses ``itl``).
GOODPUT_KEYS = ("ttft", "tpot", "e2el")
#: ``--metric-percentiles``' default in vLLM 0.33.0.
DEFAULT_PERCENTILES = (99.0,)


class BenchRequest(NamedTuple):
    """One request as ``vllm bench serve``'s ``calculate_metrics`` sees it (bench-metrics.md §1-2).

    ``success``: it returned an output chunk without error; ``prompt_len``/``output_len``: tokens
    (``output_len`` the usage count, at least 1 for a successful request); ``ttft`` and ``latency``
    (E2EL): seconds from the request's send time to its first and last output chunk; ``itl``: the
    gaps in seconds between consecutive chunks (one per chunk after the first).
    """

    success: bool
    prompt_len: int
    output_len: int
    ttft: float
    itl: Sequence[float]
    latency: float


def parse_goodput_pair(text: str) -> tuple[str, float]:
    """One ``KEY:VALUE`` argument of ``--goodput`` (vLLM's ``parse_goodput``/``check_goodput_args``).

    Returns ``(key, limit in ms)``. Raises :class:`ValueError` naming the problem: not exactly one
    colon, a value that is not a finite number, a key other than ``ttft``, ``tpot``, ``e2el``, or a
    negative limit (0 is allowed, as in vLLM).
    """
    if text.count(":") != 1:
        raise ValueError(f"{text!r}: expected KEY:VALUE with one colon, e.g. ttft:2000 (ms)")
    key, value = text.split(":")
    key = key.strip()
    try:
        limit = float(value)
    except ValueError:
        raise ValueError(f"{text!r}: {value!r} is not a number of milliseconds") from None
    if key not in GOODPUT_KEYS:
        raise ValueError(f"{text!r}: unknown SLO {key!r}; vLLM's --goodput knows {', '.join(GOODPUT_KEYS)}")
    if not math.isfinite(limit) or limit < 0:
        raise ValueError(f"{text!r}: the limit must be a finite number of ms >= 0, got {value!r}")
    return key, limit


def settle_goodput(pairs) -> dict[str, float] | None:
    """``--goodput``'s parsed pairs as ``{key: limit_ms}`` (a repeated key keeps the last value, as
    in vLLM); ``None`` when no pair was given."""
    if not pairs:
        return None
    return dict(pairs)


def parse_metric_percentiles(text: str) -> tuple[float, ...]:
    """``--metric-percentiles`` (comma-separated numbers, e.g. ``"50,90,95,99"``) as floats in
    [0, 100]. Raises :class:`ValueError` for an empty item, a non-number or a value out of range."""
    values = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"{item.strip()!r} is not a number (expected e.g. 50,90,95,99)") from None
        if not 0 <= value <= 100:
            raise ValueError(f"{item.strip()!r} is not a percentile in [0, 100]")
        values.append(value)
    return tuple(values)


def percentile_key(p: float) -> str:
    """The word in a result key for percentile ``p``: ``99`` -> ``"99"``, ``99.9`` -> ``"99.9"``
    (vLLM: ``str(int(p))`` when integral, else ``str(p)``)."""
    return str(int(p)) if float(p).is_integer() else str(p)


def linear_percentile(values: Sequence[float], p: float) -> float:
    """``numpy.percentile(values, p)`` with its default ``linear`` method, in plain floats.

    Sorted values ``v``; the virtual index ``(n - 1) * (p / 100)`` splits into ``i`` (its floor)
    and ``t``; the result is ``v[i] + (v[i+1] - v[i]) * t``, computed from the upper end
    (``v[i+1] - (v[i+1] - v[i]) * (1 - t)``) when ``t >= 0.5``, as numpy's ``_lerp`` does; at or
    beyond the last index, ``v[-1]``. Example: ``[1, 2, 3, 4]`` at 50 -> index 1.5 -> 2.5.
    Raises :class:`ValueError` on an empty sample (callers replace it by ``[0]``).
    """
    ordered = sorted(values)
    return _linear(ordered.__getitem__, len(ordered), p)


def _linear(at, size: int, p: float) -> float:
    """:func:`linear_percentile` of a sample of ``size`` values whose ``k``-th smallest is ``at(k)``."""
    if not size:
        raise ValueError("percentile of an empty sample")
    index = (size - 1) * (p / 100)
    if index >= size - 1:
        return float(at(size - 1))
    below = math.floor(index)
    t = index - below
    a, b = float(at(below)), float(at(below + 1))
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def _middle(at, size: int) -> float:
    """:func:`np_median` of a sample of ``size`` values whose ``k``-th smallest is ``at(k)``."""
    middle = size // 2
    return float(at(middle)) if size % 2 else (at(middle - 1) + at(middle)) / 2


class CountedSample(NamedTuple):
    """A pooled sample whose values repeat (vLLM's ITLs of a simulated run: one gap per step, shared
    by every request decoding in it), given twice: ``values`` in the pooled order (what the sums
    read: numpy's pairwise order depends on it; a list, or :class:`sched.core.pairwise_sum.Pieces`
    summed piece by piece) and ``counts``, ``{value: how many times}`` (what the median and the
    percentiles read: the k-th smallest value by counting, not by sorting millions of floats).
    ``squares``: ``squares(centre)`` gives ``(x - centre) * (x - centre)`` of each value in order
    (a list or :class:`~sched.core.pairwise_sum.Pieces`; the caller may square each distinct value
    once), or ``None``."""

    values: list
    counts: dict
    squares: object = None

    def ranked(self):
        """``(at, size)``: ``at(k)`` is the ``k``-th smallest value (0-based) of the ``size`` values."""
        keys = sorted(self.counts)
        ends = list(accumulate(map(self.counts.__getitem__, keys)))   # ends[i]: values up to keys[i]
        return (lambda k: keys[bisect_right(ends, k)]), (ends[-1] if ends else 0)


def np_sum(values: Sequence[float]) -> float:
    """``numpy.sum`` of a list of floats (float64): numpy's pairwise summation in its own order
    (:func:`sched.core.pairwise_sum.pairwise_sum`), the same double, not the exactly rounded sum.
    ``0.0`` for no values. ``values``: a list, :class:`sched.core.pairwise_sum.Pieces` (summed piece
    by piece) or any iterable of floats."""
    values = values if isinstance(values, (list, Pieces)) else list(values)
    return 0.0 + pairwise_sum(values)


def np_mean(values: Sequence[float]) -> float:
    """``numpy.mean``: :func:`np_sum` divided by the count (the same double as numpy's)."""
    return np_sum(values) / len(values)


def np_median(values: Sequence[float]) -> float:
    """``numpy.median``: the middle value, or the mean of the two middle values of an even sample."""
    ordered = sorted(values)
    return _middle(ordered.__getitem__, len(ordered))


def np_std(values: Sequence[float], mean: float | None = None, squares: list | None = None) -> float:
    """``numpy.std`` with ``ddof=0`` (the population standard deviation), in numpy's order: the mean
    (:func:`np_mean`, or ``mean`` when the caller has it), the squared deviations
    ``(x - mean) * (x - mean)`` summed pairwise as :func:`np_sum` does, divided by the count, the square
    root. So a sample of equal values can give numpy's tiny non-zero value rather than 0.
    ``squares``: those squared deviations in order (a list or :class:`sched.core.pairwise_sum.Pieces`),
    when the caller has them (else made here)."""
    values = values if isinstance(values, (list, Pieces)) else list(values)
    centre = np_mean(values) if mean is None else mean
    if squares is None:
        squares = [(x - centre) * (x - centre) for x in values]
    return math.sqrt((0.0 + pairwise_sum(squares)) / len(values))


def request_tpot(request: BenchRequest) -> float | None:
    """TPOT of one successful request in s: (latency − TTFT) / (output − 1); ``None`` with at most one
    output token (such a request feeds no TPOT sample)."""
    if request.output_len > 1:
        return (request.latency - request.ttft) / (request.output_len - 1)
    return None


def is_good(request: BenchRequest, slos_ms: dict[str, float]) -> bool:
    """Whether a request meets every limit of ``slos_ms`` (``{"ttft"|"tpot"|"e2el": ms}``): it
    succeeded and each named value (s) is ``<= limit / 1000``; a TPOT of a one-token request is 0."""
    if not request.success:
        return False
    values = {"ttft": request.ttft, "tpot": request_tpot(request) or 0.0, "e2el": request.latency}
    return all(slo / 1000 >= values[key] for key, slo in slos_ms.items())


def _stats(samples, name: str, percentiles: Sequence[float]) -> dict:
    """Mean, median, std and the ``percentiles`` of one latency (``samples``: a list in the pooled
    order, or a :class:`CountedSample`), in ms; ordered once for the median and every percentile."""
    if isinstance(samples, CountedSample) and samples.values:
        values, squares = samples.values, samples.squares
        at, size = samples.ranked()
    else:
        values = (samples.values if isinstance(samples, CountedSample) else samples) or [0.0]   # vLLM: [] is 0
        ordered, squares = sorted(values), None
        at, size = ordered.__getitem__, len(ordered)
    mean = np_mean(values)
    row = {f"mean_{name}_ms": mean * 1000, f"median_{name}_ms": _middle(at, size) * 1000,
           f"std_{name}_ms": np_std(values, mean, None if squares is None else squares(mean)) * 1000}
    for p in percentiles:
        row[f"p{percentile_key(p)}_{name}_ms"] = _linear(at, size, p) * 1000
    return row


def calculate_metrics(requests: Sequence[BenchRequest], duration: float,
                      percentiles: Sequence[float] = DEFAULT_PERCENTILES,
                      goodput: dict[str, float] | None = None, itl: CountedSample | None = None) -> dict:
    """The result keys of ``vllm bench serve`` for ``requests`` over ``duration`` seconds.

    Returns, in this order: ``duration`` (s), ``completed``, ``failed``, ``total_input_tokens``,
    ``total_output_tokens``, ``request_throughput``, ``request_goodput`` (req/s, ``None`` without
    ``goodput``), ``output_throughput``, ``total_token_throughput`` (tokens/s), ``slo_attainment``
    (fraction, ``None`` without ``goodput`` or without a completed request), then for each of
    :data:`BENCH_METRICS` its mean, median, std and one ``pNN`` per percentile, in ms.
    ``itl``: the pooled ITL sample of the successful requests (seconds, in request order), when the
    caller has it as a :class:`CountedSample`; the requests' own ``itl`` lists are then not read.
    Raises :class:`ValueError` when ``duration`` is not positive.
    """
    row = headline_metrics(requests, duration, goodput)
    ok = [r for r in requests if r.success]
    tpots = [t for t in map(request_tpot, ok) if t is not None]
    samples = {"ttft": [r.ttft for r in ok], "tpot": tpots,
               "itl": list(chain.from_iterable(r.itl for r in ok)) if itl is None else itl,
               "e2el": [r.latency for r in ok]}
    for name in BENCH_METRICS:
        row.update(_stats(samples[name], name, percentiles))
    return row


def headline_metrics(requests: Sequence[BenchRequest], duration: float, goodput: dict[str, float] | None = None) -> dict:
    """The first ten keys of :func:`calculate_metrics` (``duration`` to ``slo_attainment``), computed
    as it computes them; a request's ``itl`` is not read (it may be empty). Raises :class:`ValueError`
    when ``duration`` is not positive."""
    if not duration > 0:
        raise ValueError(f"duration must be > 0 s, got {duration!r}")
    ok = [r for r in requests if r.success]
    completed = len(ok)
    total_input = sum(r.prompt_len for r in ok)
    total_output = sum(r.output_len for r in ok)
    good = sum(1 for r in ok if is_good(r, goodput)) if goodput is not None else None
    return {
        "duration": duration, "completed": completed, "failed": len(requests) - completed,
        "total_input_tokens": total_input, "total_output_tokens": total_output,
        "request_throughput": completed / duration,
        "request_goodput": None if good is None else good / duration,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "slo_attainment": None if good is None or not completed else good / completed,
    }


def bench_fields(percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> tuple[str, ...]:
    """The keys :func:`calculate_metrics` returns for ``percentiles``, in order (summary.csv's columns).

    Percentiles with the same key word (``99`` and ``99.0``) give one key, as in vLLM's result dict."""
    head = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
            "request_goodput", "output_throughput", "total_token_throughput", "slo_attainment")
    words = dict.fromkeys(f"p{percentile_key(p)}" for p in percentiles)
    stats = tuple(f"{stat}_{name}_ms" for name in BENCH_METRICS for stat in ("mean", "median", "std", *words))
    return head + stats


def bench_units(percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, str]:
    """Unit of each :func:`bench_fields` key, for ``field_units`` maps."""
    units = {"duration": "s (client wall time: dispatch start to the last request's return)",
             "completed": "requests", "failed": "requests", "total_input_tokens": "tokens",
             "total_output_tokens": "tokens", "request_throughput": "requests per second",
             "request_goodput": "requests meeting every --goodput limit per second",
             "output_throughput": "output tokens per second", "total_token_throughput": "tokens per second",
             "slo_attainment": "fraction of completed requests meeting every --goodput limit"}
    for key in bench_fields(percentiles)[len(units):]:
        units[key] = "ms per output token" if "_tpot_" in key else "ms"
    return units
