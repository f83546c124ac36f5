"""The capacity of one setting: the highest request rate whose SLO attainment reaches the target.

Each point is a normal millisecond run (:func:`sched.timing.msrun.run_with_step_model`) of the
workload re-timed as ``vllm bench serve --request-rate R --burstiness B --seed S`` sends it
(:func:`sched.workload.bench_arrivals.retime`), scored with vLLM's metrics
(:func:`sched.timing.bench_rows.bench_row`): the same run ``infer_sched_lab.py ... --request-rate R``
makes, so the reported command reproduces the point exactly. A probe (:func:`probe`) computes only
the headline keys the search reads (``request_throughput``, ``slo_attainment``: the same code, the
same values); the latency statistics (0.17 s of CPU against 0.05 s for the headline keys, beside
0.7 s for the run, on the 1,000-request Azure trace) are computed once, for the answer, from its
kept run (:func:`point_metrics`).

Search (:func:`find_capacity`), rates in requests per second:

1. Rate ``inf`` (every request at once). If it meets the target, the answer is ``inf``.
2. Otherwise its request throughput ``C`` is what the setting can carry; bracket from there:
   double ``lo = C/2`` down... halving until a rate meets the target (none down to ``min_rate``:
   the answer is ``None``; never below ``num_requests / 1000`` req/s, the lowest rate whose arrivals a
   workload file holds, so every point's command reruns), doubling ``hi`` up from ``C`` until one does not (up to ``max_rate``).
3. Bisect ``[lo, hi]`` until ``hi − lo <= resolution × lo``; the answer is ``lo`` (it met the target).
4. Check monotonicity around it: also run ``lo × (1 + 2·resolution)``. The setting is
   **non-monotone** when that point meets the target, or when any rate tried above the answer met it
   or any rate below it missed it (a preemption storm can do that); the points are kept as evidence.
"""

from __future__ import annotations

import math

from ..timing.bench_rows import BenchSettings, bench_headline, bench_row
from ..timing.msrun import run_with_step_model
from ..vllm.load_stats import load_summary
from ..workload.bench_arrivals import lowest_rate, retime

__all__ = ["evaluate", "probe", "point_metrics", "find_capacity", "PLAN_PERCENTILES"]

#: Percentiles every plan point reports (P95 for the table, P99 as vLLM's default; P50 for tok/s/user).
PLAN_PERCENTILES = (50.0, 95.0, 99.0)


def evaluate(workload, knobs, model, rate: float, goodput: dict, burstiness: float, seed: int,
             max_concurrency: int | None = None) -> dict:
    """One point: the run at ``rate`` (req/s or inf) -> vLLM's metrics plus the load columns, and
    ``request_rate`` (:func:`point_metrics`). ``goodput``: ``{key: limit_ms}``; ``max_concurrency``:
    the client's limit, if any."""
    return point_metrics(_run(workload, knobs, model, rate, burstiness, seed, max_concurrency), rate, goodput)


def probe(workload, knobs, model, rate: float, goodput: dict, burstiness: float, seed: int,
          max_concurrency: int | None = None) -> tuple[dict, object]:
    """One point as the search reads it: the run at ``rate`` -> ``(row, result)``. ``row`` holds the
    ten headline keys of vLLM's metrics (``request_throughput`` ... ``slo_attainment``,
    :func:`sched.timing.bench_rows.bench_headline`: the values :func:`evaluate` gives) and
    ``request_rate``; ``result`` is the run's :class:`~sched.core.records.CaseResult`, from which
    :func:`point_metrics` gives the rest when the point is reported."""
    result = _run(workload, knobs, model, rate, burstiness, seed, max_concurrency)
    row = bench_headline(result, goodput)
    row["request_rate"] = rate
    return row, result


def point_metrics(result, rate: float, goodput: dict) -> dict:
    """Every metric a plan reports of one run: vLLM's keys at :data:`PLAN_PERCENTILES`, the load
    columns (:func:`sched.vllm.load_stats.load_summary`) and ``request_rate`` (req/s)."""
    row = bench_row(result, BenchSettings(percentiles=PLAN_PERCENTILES, goodput=goodput))
    row.update(load_summary(result))
    row["request_rate"] = rate
    return row


def _run(workload, knobs, model, rate, burstiness, seed, max_concurrency):
    return run_with_step_model(retime(workload, rate, burstiness, seed), knobs, model, "plan", "counts",
                               max_concurrency=max_concurrency).results[0]


def _meets(row: dict, target: float) -> bool:
    return row["slo_attainment"] is not None and row["slo_attainment"] >= target


def find_capacity(workload, knobs, model, goodput: dict, target: float, resolution: float, burstiness: float,
                  seed: int, min_rate: float, max_rate: float, max_concurrency: int | None = None) -> dict:
    """The search of the module docstring for one setting. Returns ``{"max_request_rate"`` (float,
    ``"inf"`` or ``None``), ``"metrics"`` (the point at the answer, :func:`point_metrics`, or ``None``),
    ``"check"`` (the probe's row at ``answer × (1 + 2·resolution)``), ``"non_monotone"`` (bool), ``"points"`` (every rate tried:
    ``[rate, attainment]`` in order), ``"bound"`` (``"min_rate"``/``"max_rate"`` when the search hit a
    bound, ``"arrival_span"`` when it missed the SLO at the lowest rate whose arrivals a workload file
    holds, :func:`sched.workload.bench_arrivals.lowest_rate`, above ``min_rate``; else ``None``),
    ``"peak_num_running"`` (the most requests running at once over every run tried, ``None`` when
    unknown: :class:`sched.planning.same_runs.SharedSearches` reads it)}``."""
    points: dict = {}
    # The run of the highest rate that met the target so far: until the check, that rate is ``lo``
    # (a rate that meets it raises ``lo``; rates above ``lo`` tried so far all missed), the answer.
    kept: dict = {}
    peaks: list = []  # each run's peak_num_running
    floor_bound = "min_rate" if min_rate >= lowest_rate(len(workload)) else "arrival_span"
    min_rate = max(min_rate, lowest_rate(len(workload)))   # a lower rate's workload.json could not be read back

    def run(rate):
        if rate not in points:
            points[rate], result = probe(workload, knobs, model, rate, goodput, burstiness, seed, max_concurrency)
            peaks.append(peak_running(result))
            if _meets(points[rate], target) and all(rate > r for r in kept):
                kept.clear()
                kept[rate] = result
        return points[rate]

    def metrics_at(rate):
        return None if rate is None else point_metrics(kept.pop(rate), rate, goodput)

    def answer(rate, metrics, check, non_monotone, bound):
        peak = None if None in peaks else max(peaks)
        return _answer(points, rate, metrics, check, non_monotone, bound, peak)

    first = run(math.inf)
    if _meets(first, target):
        return answer(math.inf, metrics_at(math.inf), None, False, None)
    capacity = first["request_throughput"] or min_rate
    lo, hi = None, None
    rate = min(max(capacity, min_rate), max_rate)
    if _meets(run(rate), target):
        lo = rate
        while hi is None:
            rate = min(rate * 2, max_rate)
            if _meets(run(rate), target):
                lo = rate
                if rate >= max_rate:
                    return answer(lo, metrics_at(lo), None, False, "max_rate")
            else:
                hi = rate
    else:
        hi = rate
        while lo is None:
            rate = max(rate / 2, min_rate)
            if _meets(run(rate), target):
                lo = rate
            else:
                hi = rate
                if rate <= min_rate:
                    return answer(None, None, None, False, floor_bound)
    while hi - lo > resolution * lo:
        middle = (lo + hi) / 2
        if _meets(run(middle), target):
            lo = middle
        else:
            hi = middle
    metrics = metrics_at(lo)   # before the check, which may meet the target (non-monotone)
    check = run(lo * (1 + 2 * resolution))
    non_monotone = (_meets(check, target)
                    or any(_meets(row, target) for r, row in points.items() if r > lo)
                    or any(not _meets(row, target) for r, row in points.items() if r < lo))
    return answer(lo, metrics, check, non_monotone, None)


def peak_running(result) -> int | None:
    """The most requests running at once in a run (``peak_num_running``,
    :func:`sched.vllm.load_stats.load_summary`; ``None`` when the timeline does not say)."""
    return load_summary(result)["peak_num_running"]


def _answer(points: dict, rate, metrics, check, non_monotone: bool, bound, peak) -> dict:
    return {"max_request_rate": "inf" if rate == math.inf else rate,
            "metrics": metrics, "check": check, "non_monotone": non_monotone,
            "points": [["inf" if r == math.inf else r, row["slo_attainment"]] for r, row in points.items()],
            "bound": bound, "peak_num_running": peak}
