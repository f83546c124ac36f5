# One piece (~460 lines): the statistics contract of lab.md §5, each metric's definition beside the one pass that computes them all, so a definition and its fast form cannot drift apart.
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

Extra per-run metrics (compare.md §2), appended after the lab.md columns: queue-wait P50/P99/mean,
``fairness`` over the successful TTFTs, ``budget_utilization``, ``busy_fraction``,
``completion_rate`` and the two priority order scores. The value functions (:func:`fairness`,
:func:`order_score`, :func:`mean`) take plain numbers, so imported real runs (milliseconds) use the
very same formulas.
"""

from __future__ import annotations

import gc
import math
from array import array
from bisect import bisect_left
from collections import Counter
from fractions import Fraction
from itertools import compress, repeat
from operator import add, attrgetter, itemgetter, mul, sub, truediv

from .packed_requests import ColumnRequests
from .records import CaseResult, Request, Status
from .step_stamps import shared_step_ends, through_step_ends
from .samples import at_rank, extend_columns, like, low_high, ordered_sample

#: The record fields summarize() reads, one tuple per request.
_SPEC = attrgetter("spec")
_FIELDS = attrgetter("status", "spec.arrival", "admitted_at", "done_at", "hit_tokens", "spec.priority", "_runs",
                      "_open_from")

__all__ = ["percentile", "percentile_of_histogram", "gap_histogram", "mean", "fairness", "order_score", "ttft",
           "e2e", "queue_wait", "itls", "tpot", "summarize", "SUMMARY_FIELDS", "COMPARE_FIELDS"]


def percentile(values, p: float):
    """Nearest-rank percentile: sort the n values, take the ``ceil(p/100 · n)``-th (1-based).

    Returns ``None`` for an empty sample. Example: ``percentile(range(1, 21), 95) == 19``.
    """
    return _nearest_rank(_sorted_exact(values), p)


def _nearest_rank(ordered: list, p: float):
    """The nearest-rank percentile of an already sorted list (None when empty)."""
    if not ordered:
        return None
    rank = max(1, math.ceil(Fraction(p) / 100 * len(ordered)))
    return ordered[rank - 1]


def _ratio_percentile(ratios: list[tuple[int, int]], p: float) -> Fraction | None:
    """:func:`percentile` of the exact ratios ``num / den`` (den > 0) given as integer pairs."""
    nums, dens = (list(column) for column in zip(*ratios)) if ratios else ([], [])
    return _ratio_percentiles(nums, dens, (p,))[p]


def _ratio_percentiles(nums: list[int], dens: list[int], ps) -> dict:
    """``{p: percentile}`` of the exact ratios ``nums[i] / dens[i]`` (dens > 0) for each ``p`` in
    ``ps``, sorting plain floats once and without building a Fraction per value: the ``p``-th by
    float order lies among the values with the same float (float division is monotonic), and that
    group (in input order, as a stable sort by float leaves it) is ordered exactly."""
    if not nums:
        return {p: None for p in ps}
    if nums == dens:   # every ratio is 1 (a TPOT of one tick, the lab engine's steady decode)
        return {p: Fraction(1) for p in ps}
    # The floats as 8-byte doubles, ordered as a histogram when they take few values (no object each).
    values = (array("d", map(truediv, nums, dens)) if type(nums) is array and type(dens) is array
              else list(map(truediv, nums, dens)))
    ordered = ordered_sample(values)
    found, groups = {}, {}
    for p in ps:
        rank = max(1, math.ceil(Fraction(p) / 100 * len(values))) - 1
        value, lo, hi = at_rank(ordered, rank)
        if hi - lo == 1:   # the only ratio with this float
            at = values.index(value)
            found[p] = Fraction(nums[at], dens[at])
            continue
        if value not in groups:   # the ratios with this float, in input order
            same = list(map(value.__eq__, values))
            group_nums, group_dens = list(compress(nums, same)), list(compress(dens, same))
            num, den = group_nums[0], group_dens[0]
            if list(map(mul, group_nums, repeat(den))) == list(map(mul, group_dens, repeat(num))):
                groups[value] = [(num, den)] * len(group_nums)   # all equal exactly
            else:   # ordered exactly (a stable sort: input order among equals)
                groups[value] = sorted(zip(group_nums, group_dens), key=lambda r: Fraction(*r))
        found[p] = Fraction(*groups[value][rank - lo])
    return found


def _sorted_exact(values) -> list:
    """``sorted(values)`` for ints and Fractions, fast on large samples: sorted by ``float`` (a
    monotonic map), then each run of equal floats re-sorted exactly, so the order is exact."""
    ordered = sorted(values, key=float)
    start = 0
    for end in range(1, len(ordered) + 1):
        if end == len(ordered) or float(ordered[end]) != float(ordered[start]):
            if end - start > 1:
                ordered[start:end] = sorted(ordered[start:end])
            start = end
    return ordered


def mean(values):
    """Exact arithmetic mean (a :class:`~fractions.Fraction` for integers), ``None`` when empty."""
    values = list(values)
    if not values:
        return None
    total = sum(values)
    return Fraction(total, len(values)) if isinstance(total, int) else total / len(values)


def fairness(ttfts):
    """Teaching proxy for unequal waits (compare.md §2), in [0, 1]; 1 for an empty sample.

    ``max(0, 1 − (max − min) / max(mean, 1))`` over the successful requests' TTFTs (ticks or
    milliseconds). Example: TTFTs [2, 4, 6] give 1 − 4/4 = 0; [10, 12] give 1 − 2/11 = 9/11.
    """
    values = [value for value in ttfts if value is not None]
    return _fairness(min(values), max(values), mean(values)) if values else Fraction(1)


def _fairness(low, high, average) -> Fraction:
    """:func:`fairness` of a sample with this minimum, maximum and mean."""
    return max(Fraction(0), 1 - Fraction(high - low) / max(average, 1))


def order_score(pairs):
    """Share of priority-ordered pairs served in priority order (compare.md §2), or ``None``.

    ``pairs`` is an iterable of ``(priority, time)``, one per successful request (lower priority
    value = more urgent; time in ticks or milliseconds). Over every two requests of *different*
    priority, a pair scores 1 when the more urgent one's time is earlier, 1/2 on a tie in time,
    0 otherwise; the result is the exact mean, ``None`` when there is no such pair.
    Example: [(0, 5), (1, 3), (1, 5)] has two pairs: (5 vs 3) scores 0, (5 vs 5) scores 1/2 → 1/4.
    """
    pairs = list(pairs)
    times_by_priority: dict = {}
    for priority, time in pairs:
        times_by_priority.setdefault(priority, []).append(time)
    if len(times_by_priority) < 2:
        return None  # every request has the same priority: no pair to score
    # Pairs of different priority: all pairs minus those within one priority; those tied in time
    # (one half each): pairs at one time minus those at one time and one priority.
    num_pairs = (len(pairs) ** 2 - _sum_of_squares(map(len, times_by_priority.values()))) // 2
    ties = (_sum_of_squares(Counter(map(itemgetter(1), pairs)).values())
            - _sum_of_squares(Counter(pairs).values())) // 2
    # Pairs whose more urgent one is strictly earlier (1 each): for each priority, the earlier
    # times among the more urgent priorities, counted by bisection in their sorted times.
    urgent: list = []
    earlier = 0
    for priority in sorted(times_by_priority):
        times = times_by_priority[priority]
        if urgent:
            earlier += sum(map(bisect_left, repeat(urgent), times))
        urgent += times
        urgent.sort()
    return Fraction(2 * earlier + ties, 2 * num_pairs)


def _sum_of_squares(counts) -> int:
    counts = list(counts)
    return sum(map(mul, counts, counts))


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
    flat_runs = [request.flat_token_runs for request in requests if request.succeeded]
    return _runs_gap_histogram(flat_runs, sum(count for runs in flat_runs for count in runs[1::2]))


def _runs_gap_histogram(flat_runs: list, num_tokens: int) -> Counter:
    """:func:`gap_histogram` of the flat token runs (``[first stamp, count, ...]``) of successful
    requests holding ``num_tokens`` tokens in all: the gaps of 1 inside runs (the bulk of the
    sample) number every token minus every run."""
    counts = Counter()
    for runs in flat_runs:
        if len(runs) > 2:   # start of each run − (start + count − 1 of the run before), mapped in C
            counts.update(map(sub, runs[2::2], map(sub, map(add, runs[0:-2:2], runs[1:-2:2]), repeat(1))))
    ones = num_tokens - sum(map(len, flat_runs)) // 2
    if ones:
        counts[1] += ones
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
    # compare.md §2, appended so the lab.md §7 columns keep their order.
    "p50_queue_wait", "p99_queue_wait", "mean_queue_wait", "fairness", "budget_utilization",
    "busy_fraction", "completion_rate", "priority_first_token_order_score", "priority_order_score",
    # The distribution of each latency as vLLM's serving benchmark reports it (mean, median, P90,
    # P95, P99) with its own sample count; appended so every earlier column keeps its place. The
    # P95s and the queue wait's P50/P99/mean are the columns above.
    "mean_ttft", "median_ttft", "p90_ttft", "p99_ttft", "ttft_samples",
    "mean_tpot", "median_tpot", "p90_tpot", "p99_tpot", "tpot_samples",
    "mean_itl", "median_itl", "p90_itl", "p99_itl", "itl_samples",
    "mean_e2e", "median_e2e", "p90_e2e", "p99_e2e", "e2e_samples",
    "median_queue_wait", "p90_queue_wait", "queue_wait_samples",
)

#: The metrics a comparison needs from each side (compare.md §3.2).
COMPARE_FIELDS = ("p95_ttft", "p95_tpot", "throughput", "completion_rate", "fairness")


def summarize(result: CaseResult, gaps: Counter | None = None) -> dict:
    """One row of the summary for a case (keys :data:`SUMMARY_FIELDS`).

    ``gaps``: the case's ITL histogram ``{gap in ticks: count}`` (:func:`gap_histogram` of its
    requests) when the caller has it (a step-model run counts it per step end:
    :mod:`sched.timing.step_ends`); else it is counted here from the token runs.

    Latencies are ticks, throughputs output tokens per tick, ``error_rate``, ``completion_rate``,
    ``fairness``, ``budget_utilization`` and ``busy_fraction`` fractions in [0, 1]; ratios are
    exact :class:`fractions.Fraction` (the artifact writers round them); ``None`` where a sample
    is empty or the makespan is zero.

    Linear in requests (one pass, then sorts): the cyclic garbage collector is paused meanwhile,
    since the pass builds a tuple per request, each allocation burst triggering collections that
    walk every live record (the cost grew about with the square of the requests). It builds no
    reference cycles; the collector's state is restored on the way out.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _summarize(result, gaps)
    finally:
        if collecting:
            gc.enable()


#: Rows of :func:`summarize` held at once before they move into its columns.
_ROWS_AT_ONCE = 8192


def _summarize(result: CaseResult, given_gaps: Counter | None) -> dict:
    requests = result.requests
    arrived = len(requests)
    # One pass over the records (token stamps from the flat runs [first stamp, count, ...], for an
    # ended request its stored list), keeping per successful request the differences it feeds.
    emitted = hit_tokens = 0
    latest, earliest = (requests[0].done_at, requests[0].spec.arrival) if requests else (0, 0)
    rows = []   # per successful request: queue wait, TTFT, E2E, last − first token, tokens, priority, ...
    # ... moved every _ROWS_AT_ONCE rows into columns of 4-byte integers (priorities: a list), the
    # token runs into the gap histogram; priority, first and last token only when the order scores
    # can exist (two priority classes among the requests, none given = 0).
    # Requests packed as columns (a finished large case) give these fields without a record each.
    packed = isinstance(requests, ColumnRequests)
    ranked = len({spec.priority or 0 for spec in (requests.specs if packed else map(_SPEC, requests))}) > 1
    columns = [array("i"), array("i"), array("i"), array("i"), array("i"), *([[], array("i"), array("i")] * ranked)]
    gaps = Counter() if given_gaps is None else None   # None: given, not counted
    fields = requests.summary_fields() if packed else map(_FIELDS, requests)
    ends = None if packed else shared_step_ends(requests)   # runs of step ordinals: read through it
    for index, (status, arrival, admitted, done, hit, priority, runs, open_from) in enumerate(fields):
        if ends is not None and gaps is None and open_from is None:
            # Step ordinals, their gaps given: the first and last token's stamps through the step ends.
            first, last, count = through_step_ends(runs, ends)
            span = None if first is None else last - first
        else:
            if open_from is not None or ends is not None:   # an open run counts too; stamps in µs to count
                runs = requests[index].flat_token_runs
            if len(runs) == 2:
                first, count = runs
                span = count - 1
            else:
                count = sum(runs[1::2])
                first, span = (runs[0], runs[-2] + runs[-1] - 1 - runs[0]) if runs else (None, None)
        emitted += count
        hit_tokens += hit
        if done > latest:
            latest = done
        if arrival < earliest:
            earliest = arrival
        if status is Status.DONE:
            rows.append((admitted - arrival, first - arrival, done - arrival, span, count, priority, first, done, runs))
            if len(rows) == _ROWS_AT_ONCE:
                _move(rows, columns, gaps)
                rows.clear()
    # ... and their columns, in workload order.
    _move(rows, columns, gaps)
    del rows
    if gaps is None:
        gaps = given_gaps
    waits, ttfts, e2es, spans, counts, *ranks = columns
    num_ok = len(waits)
    completed = sum(counts)
    makespan = latest - earliest
    # Each sample ordered once for its percentiles, one at a time (a histogram when it holds few values).
    ordered = ordered_sample(ttfts)
    ttft_p50, ttft_p95, ttft_stats = _rank(ordered, 50), _rank(ordered, 95), _sorted_stats("ttft", ordered)
    ttft_fairness = _fairness(*low_high(ordered), ttft_stats["mean_ttft"]) if num_ok else Fraction(1)
    ordered = ordered_sample(waits)
    wait_stats = {f"p{p}": _rank(ordered, p) for p in (50, 90, 95, 99)}
    wait_mean = _sorted_stats("", ordered)["mean_"]
    ordered = ordered_sample(e2es)
    e2e_p95, e2e_stats = _rank(ordered, 95), _sorted_stats("e2e", ordered)
    del ordered, waits, ttfts, e2es
    # Order scores need two different priorities (lower = more urgent, none given = 0), else None.
    priorities, firsts, ends = ranks or ([], (), ())
    urgencies = [p or 0 for p in priorities] if len({p or 0 for p in set(priorities)}) > 1 else None
    first_order = order_score(zip(urgencies, firsts)) if urgencies else None
    end_order = order_score(zip(urgencies, ends)) if urgencies else None
    del urgencies, priorities, firsts, ends, ranks, columns
    # TPOT as exact ratios ticks / tokens of every successful request with >= 2 tokens.
    tpot_ticks = like(spans, compress(spans, map((1).__lt__, counts)))
    tpot_tokens = like(counts, map(sub, compress(counts, map((1).__lt__, counts)), repeat(1)))
    del spans, counts
    tpot_percentiles = _ratio_percentiles(tpot_ticks, tpot_tokens, (50, 90, 95, 99))  # sorted once
    row = {
        "case": result.case.name,
        "p50_ttft": ttft_p50,
        "p95_ttft": ttft_p95,
        "p95_itl": percentile_of_histogram(gaps, 95),
        "p95_tpot": tpot_percentiles[95],
        "p95_e2e": e2e_p95,
        "p95_queue_wait": wait_stats["p95"],
        "throughput": Fraction(emitted, makespan) if makespan else None,
        "completed_output_tps": Fraction(completed, makespan) if makespan else None,
        "output_tokens": emitted,
        "hit_tokens": hit_tokens,
        "succeeded": num_ok,
        "timed_out": arrived - num_ok,
        "arrived": arrived,
        "error_rate": Fraction(arrived - num_ok, arrived) if arrived else None,
        "makespan": makespan,
        "latency_samples": num_ok,
        "p50_queue_wait": wait_stats["p50"],
        "p99_queue_wait": wait_stats["p99"],
        "mean_queue_wait": wait_mean,
        "fairness": ttft_fairness,
        "budget_utilization": Fraction(result.budget_spent, result.config.budget * makespan) if makespan else None,
        "busy_fraction": Fraction(result.busy_ticks, makespan) if makespan else None,
        "completion_rate": Fraction(num_ok, arrived) if arrived else None,
        "priority_first_token_order_score": first_order,
        "priority_order_score": end_order,
    }
    row.update(ttft_stats)
    row.update(_tpot_stats(tpot_ticks, tpot_tokens, tpot_percentiles))
    row.update(_itl_stats(gaps))
    row.update(e2e_stats)
    row.update({"median_queue_wait": row["p50_queue_wait"], "p90_queue_wait": wait_stats["p90"],
                "queue_wait_samples": num_ok})
    return row




def _move(rows: list, columns: list, gaps: Counter) -> None:
    """Move :func:`_summarize`'s ``rows`` into its ``columns`` (as many leading row fields as there
    are columns), their token runs (the last field) into the gap histogram ``gaps`` (unless ``None``)."""
    if rows and gaps is not None:
        gaps.update(_runs_gap_histogram([row[-1] for row in rows], sum(row[4] for row in rows)))
    if rows:
        extend_columns(columns, rows)


def _sorted_stats(metric: str, ordered) -> dict:
    """Mean (exact), median (the nearest-rank P50), P90 and P99 of a sample ordered by
    :func:`sched.core.samples.ordered_sample`, and its size."""
    if type(ordered) is Counter:
        size = sum(ordered.values())
        average = Fraction(sum(value * count for value, count in ordered.items()), size) if size else None
    else:
        size, average = len(ordered), mean(ordered)
    return {f"mean_{metric}": average, f"median_{metric}": _rank(ordered, 50),
            f"p90_{metric}": _rank(ordered, 90), f"p99_{metric}": _rank(ordered, 99),
            f"{metric}_samples": size}


def _rank(ordered, p: float):
    """The nearest-rank ``p``-th percentile of a sample ordered by :func:`sched.core.samples.ordered_sample` (None when empty)."""
    return percentile_of_histogram(ordered, p) if type(ordered) is Counter else _nearest_rank(ordered, p)


def _tpot_stats(ticks: list[int], tokens: list[int], percentiles: dict) -> dict:
    """TPOT's mean, median, P90, P99 (``percentiles``: p -> value) and count over the ratios
    ``ticks[i] / tokens[i]``. The mean is a float (exactly rounded sum, numerators grouped by
    denominator): an exact sum of up to millions of ratios with different denominators would be slow."""
    if not ticks:
        average = None
    elif ticks == tokens:   # every ratio is 1, and so is the mean (n ones summed exactly, over n)
        average = 1.0
    else:
        by_tokens: dict = {}
        for num, den in zip(ticks, tokens):
            by_tokens[den] = by_tokens.get(den, 0) + num
        average = math.fsum(num / den for den, num in by_tokens.items()) / len(ticks)
    return {"mean_tpot": average, "median_tpot": percentiles[50], "p90_tpot": percentiles[90],
            "p99_tpot": percentiles[99], "tpot_samples": len(ticks)}


def _itl_stats(gaps: Counter) -> dict:
    """ITL's mean (exact), median, P90, P99 and count over the pooled gap histogram."""
    total = sum(gaps.values())
    return {"mean_itl": Fraction(sum(gap * count for gap, count in gaps.items()), total) if total else None,
            "median_itl": percentile_of_histogram(gaps, 50), "p90_itl": percentile_of_histogram(gaps, 90),
            "p99_itl": percentile_of_histogram(gaps, 99), "itl_samples": total}
