"""The statistics contract (lab.md §5): pure functions over one case's finished requests.

Named timestamps (ticks): arrival, ``admitted_at``, first token (``token_times[0]``), ``done_at``.

- TTFT = first token − arrival; E2E = done − arrival; queue wait = admitted − arrival.
  Success-only: a request that timed out feeds no latency, and never counts as zero.
- ITL: every gap between adjacent token times of every successful request, pooled (counted
  exactly as a histogram of gaps read from token runs, so large runs never list every gap).
- TPOT: per successful request with ≥ 2 tokens, (last − first) / (tokens − 1).
- Percentiles by nearest rank; an empty sample gives ``None`` (``null`` in JSON, ``NA`` in text).
- Error rate = (arrived − succeeded) / arrived, over every arrived request.
- Throughput = every output token emitted / makespan; ``completed_output_tps`` counts only tokens
  of successful requests. Makespan = latest end − earliest arrival.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

from .engine import CaseResult, Request

__all__ = ["percentile", "percentile_of_histogram", "gap_histogram", "ttft", "e2e", "queue_wait", "itls",
           "tpot", "summarize", "SUMMARY_FIELDS"]


def percentile(values, p: float):
    """Nearest-rank percentile: sort the n values, take the ``ceil(p/100 · n)``-th (1-based).

    Returns ``None`` for an empty sample. Example: ``percentile(range(1, 21), 95) == 19``.
    """
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(Fraction(p) / 100 * len(ordered)))
    return ordered[rank - 1]


def ttft(request: Request) -> int | None:
    """Time to first token in ticks, or None when the request did not succeed."""
    return request.first_token_at - request.spec.arrival if request.succeeded else None


def e2e(request: Request) -> int | None:
    """End-to-end latency in ticks, or None when the request did not succeed."""
    return request.done_at - request.spec.arrival if request.succeeded else None


def queue_wait(request: Request) -> int | None:
    """Admission − arrival in ticks, or None when the request did not succeed."""
    return request.admitted_at - request.spec.arrival if request.succeeded else None


def itls(request: Request) -> list[int]:
    """Gaps between adjacent token times in ticks ([] for a failed or one-token request).

    Example: token times [2, 3, 4, 14] give [1, 1, 10].
    """
    if not request.succeeded:
        return []
    times = request.token_times
    return [later - earlier for earlier, later in zip(times, times[1:])]


def tpot(request: Request) -> Fraction | None:
    """Time per output token after the first, in ticks, exact; None for < 2 tokens or failure.

    Example: token times [2, 3, 4, 14] give (14 − 2) / 3 = 4.
    """
    count = request.num_tokens
    if not request.succeeded or count < 2:
        return None
    return Fraction(request.last_token_at - request.first_token_at, count - 1)


def gap_histogram(requests) -> Counter:
    """Exact histogram {gap in ticks: count} of the ITL sample of ``requests`` (successful ones),
    read from token runs: a run of n tokens holds n − 1 gaps of 1, and each pair of adjacent runs
    one gap. Example: runs [(2, 3), (14, 1)] (times [2, 3, 4, 14]) give {1: 2, 10: 1}."""
    counts = Counter()
    for request in requests:
        if not request.succeeded:
            continue
        end = None
        for start, count in request.token_runs:
            if end is not None:
                counts[start - end] += 1
            if count > 1:
                counts[1] += count - 1
            end = start + count - 1
    return counts


def percentile_of_histogram(counts: Counter, p: float):
    """:func:`percentile` of the sample a histogram {value: count} describes (None when empty)."""
    total = sum(counts.values())
    if not total:
        return None
    rank = max(1, math.ceil(Fraction(p) / 100 * total))
    for value in sorted(counts):
        rank -= counts[value]
        if rank <= 0:
            return value


#: Columns of ``summary.json`` / ``summary.csv`` in order (lab.md §7).
SUMMARY_FIELDS = (
    "case", "p50_ttft", "p95_ttft", "p95_itl", "p95_tpot", "p95_e2e", "p95_queue_wait",
    "throughput", "completed_output_tps", "output_tokens", "hit_tokens",
    "succeeded", "timed_out", "arrived", "error_rate", "makespan", "latency_samples",
)


def summarize(result: CaseResult) -> dict:
    """One row of the summary for a case (keys :data:`SUMMARY_FIELDS`).

    Latencies are ticks, throughputs output tokens per tick, ``error_rate`` a fraction; ratios are
    exact :class:`fractions.Fraction` (the artifact writers round them); ``None`` where a sample
    is empty or the makespan is zero.
    """
    requests = result.requests
    ok = [r for r in requests if r.succeeded]
    arrived = len(requests)
    emitted = sum(r.num_tokens for r in requests)
    completed = sum(r.num_tokens for r in ok)
    makespan = (max(r.done_at for r in requests) - min(r.spec.arrival for r in requests)) if requests else 0
    gaps = gap_histogram(ok)
    tpots = [value for value in map(tpot, ok) if value is not None]
    return {
        "case": result.case.name,
        "p50_ttft": percentile(map(ttft, ok), 50),
        "p95_ttft": percentile(map(ttft, ok), 95),
        "p95_itl": percentile_of_histogram(gaps, 95),
        "p95_tpot": percentile(tpots, 95),
        "p95_e2e": percentile(map(e2e, ok), 95),
        "p95_queue_wait": percentile(map(queue_wait, ok), 95),
        "throughput": Fraction(emitted, makespan) if makespan else None,
        "completed_output_tps": Fraction(completed, makespan) if makespan else None,
        "output_tokens": emitted,
        "hit_tokens": sum(r.hit_tokens for r in requests),
        "succeeded": len(ok),
        "timed_out": arrived - len(ok),
        "arrived": arrived,
        "error_rate": Fraction(arrived - len(ok), arrived) if arrived else None,
        "makespan": makespan,
        "latency_samples": len(ok),
    }
