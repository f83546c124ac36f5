"""vLLM ``bench serve``'s metrics of a millisecond run (bench-metrics.md, :mod:`sched.core.bench_metrics`).

A simulated client sees each request the way ``vllm bench serve`` would have: it was sent at its
arrival (ms, the engine's µs clock), its TTFT and E2EL run from there to its first and last token,
each later token is one streamed chunk (the engine emits one token per request per step), and the
run's ``duration`` runs from the clock's origin (the start of dispatch: ``vllm bench serve`` sends
its first request one inter-arrival gap after it starts) to the last request's end.

:func:`add_bench_flags` and :func:`bench_settings_from_args` carry ``--metric-percentiles`` and
``--goodput`` (vLLM's syntax) from a command line (the run, ``import-results``, ``plan``) to the renderers; :func:`bench_row` gives the keys added to a case row of ``summary.json``/``summary.csv``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from itertools import repeat
from operator import sub, truediv

from ..core.bench_metrics import (DEFAULT_PERCENTILES, BenchRequest, bench_fields, bench_units,
                                  calculate_metrics, headline_metrics, parse_goodput_pair, parse_metric_percentiles,
                                  settle_goodput)
from ..core.records import CaseResult, Status
from ..workload.bench_arrivals import check_burstiness, check_rate
from .step_ends import StepEnds

__all__ = ["BenchSettings", "bench_requests", "bench_row", "bench_headline", "bench_header", "BENCH_DEFINITION", "add_bench_flags",
           "bench_settings_from_args", "bench_flags_given", "add_load_flags", "load_flags_problem", "load_of_args",
           "rate_arg", "burstiness_arg", "seed_arg", "concurrency_arg", "goodput_pair_arg"]

#: Ticks per second of a step-model run (1 µs ticks): :func:`bench_requests`' ``per_second``.
_PER_SECOND = 1_000_000 / 1.0

BENCH_DEFINITION = ("vLLM 0.33.0 bench serve's calculate_metrics: successful requests only; percentiles by "
                    "linear interpolation (numpy's default), std with ddof 0, an empty sample read as [0]; "
                    "TPOT per request with > 1 output token; ITL per streamed chunk; duration from the start "
                    "of dispatch to the last request's return")


@dataclass(frozen=True)
class BenchSettings:
    """``--metric-percentiles`` (floats in [0, 100]) and ``--goodput`` (``{key: limit_ms}`` or ``None``);
    ``load``: ``{"request_rate", "burstiness", "seed"}`` when the arrivals were re-timed, else ``None``."""

    percentiles: tuple = DEFAULT_PERCENTILES
    goodput: dict | None = None
    load: dict | None = None

    def fields(self) -> tuple[str, ...]:
        return bench_fields(self.percentiles)


def bench_requests(result: CaseResult, us_per_tick: float = 1.0, itl: bool = True,
                   ends: StepEnds | None = None) -> tuple[list[BenchRequest], float]:
    """The requests of one case as the benchmark client sees them, and the run's duration, in seconds.

    ``us_per_tick``: microseconds per engine tick (1 on a step-model run). A request succeeded when
    it emitted every output token (status ``ok``); a timed-out one is a failure. Duration = the
    latest end of any request − 0 (the clock's origin). ``itl`` false: every request's ITL list is
    left empty (for :func:`bench_headline`, which does not read it); then ``ends``, the case's
    :class:`sched.timing.step_ends.StepEnds` when the caller has it, gives a request's token count
    and first stamp from its spans (the span lengths added, the step end it starts at) rather than
    from its token runs.
    """
    per_second = 1_000_000 / us_per_tick   # ticks per second (divided, not multiplied: 3500 µs is 0.0035 s)
    requests = []
    latest = 0
    share = repeat(per_second)
    spans_of = repeat(None) if ends is None or itl else iter(ends.spans)
    for r, spans in zip(result.requests, spans_of):
        if r.done_at is not None and r.done_at > latest:
            latest = r.done_at
        if r.status is not Status.DONE:
            requests.append(BenchRequest(False, r.spec.prompt_tokens, 0, 0.0, (), 0.0))
            continue
        arrival = r.spec.arrival
        if itl:
            times = r.token_times
            count, first = len(times), times[0]
            gaps = list(map(truediv, map(sub, times[1:], times), share))   # (b − a) / per_second each
        elif spans:   # the token count and the first stamp from the spans (first end, count, ...)
            count, first, gaps = (spans[1] if len(spans) == 2 else sum(spans[1::2])), ends.ends[spans[0]], ()
        else:   # the token count and the first stamp from the runs [first stamp, count, ...]
            runs = r.flat_token_runs
            count, first, gaps = sum(runs[1::2]), runs[0], ()
        requests.append(BenchRequest(True, r.spec.prompt_tokens, count, (first - arrival) / per_second, gaps,
                                     (r.done_at - arrival) / per_second))
    return requests, latest / per_second


def bench_row(result: CaseResult, settings: BenchSettings, ends: StepEnds | None = None,
              histogram: Counter | None = None) -> dict:
    """The vLLM bench keys of one case (:func:`sched.core.bench_metrics.calculate_metrics`); every value
    ``None`` when the run lasted no time at all (nothing to divide by).

    The pooled ITL sample is taken from the case's step ends (:class:`sched.timing.step_ends.StepEnds`
    of ``result.requests``; ``ends`` when the caller has it, and its ITL ``histogram`` in ticks), its
    percentiles read by counting: the same doubles as sorting the pooled list."""
    requests, duration = bench_requests(result, itl=False, ends=ends)
    if duration <= 0:
        return dict.fromkeys(settings.fields())
    ends = StepEnds(result.requests) if ends is None else ends
    return calculate_metrics(requests, duration, settings.percentiles, settings.goodput,
                             itl=ends.pooled_itl(_PER_SECOND, histogram))


def bench_headline(result: CaseResult, goodput: dict | None) -> dict:
    """The first ten keys of :func:`bench_row` (``duration`` to ``slo_attainment``,
    :func:`sched.core.bench_metrics.headline_metrics`), the same values without the latency
    statistics (no ITL list is built); every value ``None`` when the run lasted no time at all."""
    requests, duration = bench_requests(result, itl=False)
    if duration <= 0:
        return dict.fromkeys(bench_fields(())[:10])
    return headline_metrics(requests, duration, goodput)


def bench_header(settings: BenchSettings) -> dict:
    """The ``vllm_bench`` object of ``summary.json``: the definition followed, the percentiles and limits."""
    header = {"definition": BENCH_DEFINITION, "metric_percentiles": list(settings.percentiles),
              "goodput_ms": settings.goodput, "field_units": bench_units(settings.percentiles)}
    if settings.load is not None:
        header["load"] = {k: ("inf" if v == float("inf") else v) for k, v in settings.load.items()}
    return header


# --- the flags, vLLM's syntax (shared by every command that reports these metrics) ---------------

def goodput_pair_arg(text: str) -> tuple[str, float]:
    try:
        return parse_goodput_pair(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _percentiles(text: str) -> tuple[float, ...]:
    try:
        return parse_metric_percentiles(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_bench_flags(parser: argparse.ArgumentParser, when: str = "") -> None:
    """Add ``--metric-percentiles`` and ``--goodput`` (vLLM's syntax) to ``parser``; ``when`` ends their help."""
    group = parser.add_argument_group("vLLM bench serve's metrics (bench-metrics.md)")
    group.add_argument("--metric-percentiles", type=_percentiles, metavar="P,P,...",
                       help="percentiles of TTFT, TPOT, ITL and E2EL to report as pNN_*_ms, e.g. 50,90,95,99 "
                            "(linear interpolation, as vLLM; default 99)" + when)
    group.add_argument("--goodput", type=goodput_pair_arg, nargs="+", metavar="KEY:MS",
                       help="SLO limits in ms, vLLM's syntax: ttft:2000 tpot:100 e2el:20000 (0 allowed); adds "
                            "request_goodput (good requests/s) and slo_attainment (good / completed)" + when)


def rate_arg(text: str) -> float:
    try:
        return check_rate(float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc) if "must" in str(exc) else f"not a number: {text!r}") from None


def burstiness_arg(text: str) -> float:
    try:
        return check_burstiness(float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc) if "must" in str(exc) else f"not a number: {text!r}") from None


def seed_arg(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**32 - 1] (numpy's seed), got {text!r}")
    return int(text)


def concurrency_arg(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 10**9:
        raise argparse.ArgumentTypeError(f"must be a whole number of requests >= 1, got {text!r}")
    return int(text)


def add_load_flags(parser: argparse.ArgumentParser, when: str = "") -> None:
    """``--request-rate``, ``--burstiness``, ``--seed``: arrivals re-timed as ``vllm bench serve`` sends
    (:mod:`sched.workload.bench_arrivals`); ``--max-concurrency``: its client's limit on requests in
    flight (:mod:`sched.vllm.client_gate`)."""
    group = parser.add_argument_group("load as vllm bench serve sets it")
    group.add_argument("--request-rate", type=rate_arg, metavar="R",
                       help="requests per second (inf: all at once); replaces the workload's arrivals by vLLM's "
                            "gamma-spaced send times, in workload order" + when)
    group.add_argument("--burstiness", type=burstiness_arg, metavar="B",
                       help="gamma shape of the gaps: 1 = Poisson (default), < 1 burstier, > 1 more even, inf evenly "
                            "spaced; needs --request-rate")
    group.add_argument("--max-concurrency", type=concurrency_arg, metavar="N",
                       help="most requests in flight, as the benchmark client's semaphore: a request starts (and "
                            "its TTFT and E2EL count from) when an earlier one ends" + when)
    group.add_argument("--seed", type=seed_arg, metavar="N",
                       help="the gaps' seed (numpy's legacy generator, as vLLM's client seeds it; default 0); "
                            "needs --request-rate")


def load_flags_problem(args) -> str | None:
    """Why the load flags cannot be used as given (``--burstiness``/``--seed`` without a rate), or ``None``."""
    if args.request_rate is None:
        for flag, value in (("--burstiness", args.burstiness), ("--seed", args.seed)):
            if value is not None:
                return f"{flag} needs --request-rate (it shapes the re-timed arrivals)"
    return None


def load_of_args(args) -> dict | None:
    """``{"request_rate", "burstiness", "seed"}`` of parsed load flags, or ``None`` without ``--request-rate``."""
    if getattr(args, "request_rate", None) is None:
        return None
    return {"request_rate": args.request_rate, "burstiness": 1.0 if args.burstiness is None else args.burstiness,
            "seed": 0 if args.seed is None else args.seed}


def bench_flags_given(args) -> list[str]:
    """The bench and load flags typed on the command line (``[]`` when none)."""
    return [flag for flag, value in (("--metric-percentiles", args.metric_percentiles), ("--goodput", args.goodput),
                                     ("--request-rate", getattr(args, "request_rate", None)),
                                     ("--max-concurrency", getattr(args, "max_concurrency", None)))
            if value is not None]


def bench_settings_from_args(args) -> BenchSettings | None:
    """The :class:`BenchSettings` of parsed flags; ``None`` when none of them was given."""
    if not bench_flags_given(args):
        return None
    load = load_of_args(args)
    if getattr(args, "max_concurrency", None) is not None:
        load = dict(load or {}, max_concurrency=args.max_concurrency)
    return BenchSettings(percentiles=args.metric_percentiles or BenchSettings().percentiles,
                         goodput=settle_goodput(args.goodput), load=load)
