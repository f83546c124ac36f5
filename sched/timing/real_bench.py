"""vLLM ``bench serve``'s metrics of an imported real run, from the file's raw seconds (bench-metrics.md).

``import-results`` normalises times to ms rounded to the µs (:mod:`sched.timing.realrun`); these
metrics are computed before that rounding, from the seconds the file holds, because rounding chunk
times to 1 µs already moves a median ITL by 7e-5 relative (bench-metrics.md §8).

- ``vllm-bench`` files (``--save-detailed``): request ``i`` succeeded when ``errors[i]`` is empty and
  ``output_lens[i] >= 1`` (the file has no ``success`` list, §2); TTFT ``ttfts[i]``, ITL ``itls[i]``,
  E2EL ``latencies[i]`` (when the file lacks ``latencies``: TTFT + the sum of the ITLs, said in
  ``vllm_bench.notes``), output count ``output_lens[i]``, prompt ``input_lens[i]``; ``duration`` the
  file's own. Without per-request lists the file's own aggregates of the same names are kept.
- ``request-jsonl`` files: TTFT = ``first_token_ts − queued_ts``, E2EL = ``last_token_ts −
  queued_ts``, no ITL (the file has no per-token times: its statistics are ``None``); duration =
  latest ``last_token_ts`` − earliest ``queued_ts`` (the file has no client wall time).
"""

from __future__ import annotations

from ..base.cmdline import InputError, number_or_none
from ..core.bench_metrics import BenchRequest, calculate_metrics
from .bench_rows import BenchSettings

__all__ = ["bench_of_vllm_result", "bench_of_request_lines"]


def _seconds(value, where: str) -> float:
    number = number_or_none(value, where, 0, 1e10)
    if number is None:
        raise InputError(f"{where}: missing or not a finite number of seconds")
    return float(number)


def bench_of_vllm_result(run: dict, where: str, settings: BenchSettings) -> tuple[dict, list[str]]:
    """The bench keys of one ``vllm bench serve`` result object ``run`` (per-request lists already
    checked for shape by the importer), and notes on what was inferred. ``where`` names the file and
    run for errors. Raises :class:`InputError` for a latency or duration that is not a number >= 0."""
    fields = settings.fields()
    if not all(isinstance(run.get(key), list) for key in ("input_lens", "output_lens", "ttfts", "itls", "errors")):
        kept = {key: run.get(key) for key in fields if isinstance(run.get(key), (int, float))}
        return {key: kept.get(key) for key in fields}, [
            "no per-request lists: the file's own aggregates are kept where they have these names"]
    notes = []
    latencies = run.get("latencies")
    if not isinstance(latencies, list) or len(latencies) != len(run["ttfts"]):
        latencies = None
        notes.append("no latencies list: E2EL = TTFT + the sum of the ITLs (equal up to float rounding)")
    requests = []
    for i, (error, out, prompt) in enumerate(zip(run["errors"], run["output_lens"], run["input_lens"])):
        at = f"{where}: request {i}"
        if error or not out:
            requests.append(BenchRequest(False, prompt, 0, 0.0, (), 0.0))
            continue
        ttft = _seconds(run["ttfts"][i], f"{at}: field 'ttfts'")
        itl = [_seconds(gap, f"{at}: field 'itls'") for gap in run["itls"][i]]
        latency = (ttft + sum(itl) if latencies is None else _seconds(latencies[i], f"{at}: field 'latencies'"))
        requests.append(BenchRequest(True, prompt, out, ttft, itl, latency))
    duration = number_or_none(run.get("duration"), f"{where}: field 'duration'", 0, 1e10)
    if not duration:
        notes.append("no positive duration in the file: nothing to divide the throughputs by")
        return dict.fromkeys(fields), notes
    return calculate_metrics(requests, float(duration), settings.percentiles, settings.goodput), notes


def bench_of_request_lines(lines: list[dict], settings: BenchSettings) -> tuple[dict, list[str]]:
    """The bench keys of checked ``request-jsonl`` lines (``queued_ts`` ... ``last_token_ts`` in
    monotonic seconds, counts whole), and notes. ITL statistics are ``None`` (no per-token times)."""
    requests = []
    for raw in lines:
        first, last = raw.get("first_token_ts"), raw.get("last_token_ts")
        if first is None or last is None or not raw["output_toks"]:
            requests.append(BenchRequest(False, raw["input_toks"], 0, 0.0, (), 0.0))
            continue
        queued = raw["queued_ts"]
        requests.append(BenchRequest(True, raw["input_toks"], raw["output_toks"], first - queued, (), last - queued))
    ends = [raw["last_token_ts"] for raw in lines if raw.get("last_token_ts") is not None]
    duration = max(ends) - min(raw["queued_ts"] for raw in lines) if ends else 0
    notes = ["ITL: the file has no per-token times", "duration: latest last_token_ts - earliest queued_ts "
             "(the file has no client wall time)"]
    if not duration > 0:
        return dict.fromkeys(settings.fields()), notes
    row = calculate_metrics(requests, duration, settings.percentiles, settings.goodput)
    for key in row:
        if "_itl_" in key:
            row[key] = None
    return row, notes
