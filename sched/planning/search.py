"""The capacity of one setting: the highest request rate whose SLO attainment reaches the target.

Each point is a normal millisecond run (:func:`sched.timing.msrun.run_with_step_model`) of the
workload re-timed as ``vllm bench serve --request-rate R --burstiness B --seed S`` sends it
(:func:`sched.workload.bench_arrivals.retime`), scored with vLLM's metrics
(:func:`sched.timing.bench_rows.bench_row`): the same run ``infer_sched_lab.py ... --request-rate R``
makes, so the reported command reproduces the point exactly.

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

from ..timing.bench_rows import BenchSettings, bench_row
from ..timing.msrun import run_with_step_model
from ..vllm.load_stats import load_summary
from ..workload.bench_arrivals import lowest_rate, retime

__all__ = ["evaluate", "find_capacity", "PLAN_PERCENTILES"]

#: Percentiles every plan point reports (P95 for the table, P99 as vLLM's default; P50 for tok/s/user).
PLAN_PERCENTILES = (50.0, 95.0, 99.0)


def evaluate(workload, knobs, model, rate: float, goodput: dict, burstiness: float, seed: int,
             max_concurrency: int | None = None) -> dict:
    """One point: the run at ``rate`` (req/s or inf) -> vLLM's metrics plus the load columns, and
    ``request_rate``. ``goodput``: ``{key: limit_ms}``; ``max_concurrency``: the client's limit, if any."""
    run = run_with_step_model(retime(workload, rate, burstiness, seed), knobs, model, "plan", "counts",
                              max_concurrency=max_concurrency)
    result = run.results[0]
    row = bench_row(result, BenchSettings(percentiles=PLAN_PERCENTILES, goodput=goodput))
    row.update(load_summary(result))
    row["request_rate"] = rate
    return row


def _meets(row: dict, target: float) -> bool:
    return row["slo_attainment"] is not None and row["slo_attainment"] >= target


def find_capacity(workload, knobs, model, goodput: dict, target: float, resolution: float, burstiness: float,
                  seed: int, min_rate: float, max_rate: float, max_concurrency: int | None = None) -> dict:
    """The search of the module docstring for one setting. Returns ``{"max_request_rate"`` (float,
    ``"inf"`` or ``None``), ``"metrics"`` (the point at the answer, or ``None``), ``"check"`` (the point
    at ``answer × (1 + 2·resolution)``), ``"non_monotone"`` (bool), ``"points"`` (every rate tried:
    ``[rate, attainment]`` in order), ``"bound"`` (``"min_rate"``/``"max_rate"`` when the search hit a
    bound, ``"arrival_span"`` when it missed the SLO at the lowest rate whose arrivals a workload file
    holds, :func:`sched.workload.bench_arrivals.lowest_rate`, above ``min_rate``; else ``None``)}``."""
    points: dict = {}
    floor_bound = "min_rate" if min_rate >= lowest_rate(len(workload)) else "arrival_span"
    min_rate = max(min_rate, lowest_rate(len(workload)))   # a lower rate's workload.json could not be read back

    def run(rate):
        if rate not in points:
            points[rate] = evaluate(workload, knobs, model, rate, goodput, burstiness, seed, max_concurrency)
        return points[rate]

    first = run(math.inf)
    if _meets(first, target):
        return _answer(points, math.inf, None, False, None)
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
                    return _answer(points, lo, None, False, "max_rate")
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
                    return _answer(points, None, None, False, floor_bound)
    while hi - lo > resolution * lo:
        middle = (lo + hi) / 2
        if _meets(run(middle), target):
            lo = middle
        else:
            hi = middle
    check = run(lo * (1 + 2 * resolution))
    non_monotone = (_meets(check, target)
                    or any(_meets(row, target) for r, row in points.items() if r > lo)
                    or any(not _meets(row, target) for r, row in points.items() if r < lo))
    return _answer(points, lo, check, non_monotone, None)


def _answer(points: dict, rate, check, non_monotone: bool, bound) -> dict:
    return {"max_request_rate": "inf" if rate == math.inf else rate,
            "metrics": None if rate is None else points[rate], "check": check, "non_monotone": non_monotone,
            "points": [["inf" if r == math.inf else r, row["slo_attainment"]] for r, row in points.items()],
            "bound": bound}
