"""Artifacts of one run (lab.md §7), rendered deterministically.

Rendering is pure (text in, text out); writing the directory safely (atomically, never over an
earlier run unless asked) is :mod:`sched.safe_write`'s.
"""

from __future__ import annotations

import csv
import functools
import io
import json
from dataclasses import dataclass, field
from fractions import Fraction

from . import __version__
from .config import EngineConfig
from .metrics import SUMMARY_FIELDS, e2e, queue_wait, summarize, ttft
from .picture import render_timeline_svg
from .records import CaseResult, Status
from .report import render_report
from .vllm_picture import VllmLaneView
from .vllm_artifacts import UNITS_NOTE_VLLM, is_vllm_run, manifest_config, table_header, timeline_lines
from .workload import RequestSpec, workload_json_and_sha256, workload_sha256, workload_tick_ms

__all__ = ["LabRun", "render_artifacts", "render_table", "stream_artifacts", "UNITS_NOTE"]

UNITS_NOTE = ("Times are abstract ticks and work abstract budget units (a teaching model: no KV-cache "
              "capacity, no eviction, no preemption); nothing here is milliseconds or GPU tokens/s.")


#: Unit of each summary field that has one (``summary.json`` carries this map).
SUMMARY_UNITS = {
    "p50_ttft": "ticks", "p95_ttft": "ticks", "p95_itl": "ticks", "p95_tpot": "ticks per output token",
    "p95_e2e": "ticks", "p95_queue_wait": "ticks",
    "throughput": "output tokens per tick (all emitted tokens / makespan)",
    "completed_output_tps": "output tokens per tick (tokens of successful requests only / makespan)",
    "output_tokens": "tokens", "hit_tokens": "tokens", "error_rate": "fraction of arrived requests",
    "makespan": "ticks", "latency_samples": "successful requests feeding the latency columns",
    # compare.md §2
    "p50_queue_wait": "ticks", "p99_queue_wait": "ticks", "mean_queue_wait": "ticks",
    "fairness": "fraction in [0, 1] (1 = equal TTFTs; 1 when no request succeeded)",
    "budget_utilization": "fraction of budget x makespan ticks", "busy_fraction": "fraction of makespan ticks",
    "completion_rate": "fraction of arrived requests",
    "priority_first_token_order_score": "share of different-priority pairs served in priority order",
    "priority_order_score": "share of different-priority pairs completed in priority order",
    # Distributions (mean, median = nearest-rank P50, P90, P99) and their own sample counts.
    **{f"{stat}_{metric}": unit for metric, unit in (("ttft", "ticks"), ("tpot", "ticks per output token"),
                                                     ("itl", "ticks"), ("e2e", "ticks"), ("queue_wait", "ticks"))
       for stat in ("mean", "median", "p90", "p99")},
    "ttft_samples": "successful requests", "tpot_samples": "successful requests with at least 2 tokens",
    "itl_samples": "gaps between adjacent tokens of successful requests", "e2e_samples": "successful requests",
    "queue_wait_samples": "successful requests",
}


#: Short unit of every summary column, shown in report.html's table header (``case`` is the label).
COLUMN_UNITS = {
    **{f: "ticks" for f in ("p50_ttft", "p95_ttft", "p95_itl", "p95_e2e", "p95_queue_wait", "makespan",
                            "p50_queue_wait", "p99_queue_wait", "mean_queue_wait")},
    "p95_tpot": "ticks per output token",
    "throughput": "output tokens per tick",
    "completed_output_tps": "output tokens per tick, successful requests only",
    "output_tokens": "tokens", "hit_tokens": "tokens",
    "succeeded": "requests", "timed_out": "requests", "arrived": "requests", "latency_samples": "requests",
    "error_rate": "fraction", "completion_rate": "fraction", "busy_fraction": "fraction",
    "budget_utilization": "fraction", "fairness": "0 to 1",
    "priority_first_token_order_score": "share of pairs", "priority_order_score": "share of pairs",
    **{f"{stat}_{metric}": "ticks per output token" if metric == "tpot" else "ticks"
       for metric in ("ttft", "tpot", "itl", "e2e", "queue_wait") for stat in ("mean", "median", "p90", "p99")},
    **{f"{metric}_samples": "gaps" if metric == "itl" else "requests"
       for metric in ("ttft", "tpot", "itl", "e2e", "queue_wait")},
}


@dataclass(frozen=True, slots=True)
class LabRun:
    """A finished run: its input, knobs, source description and one result per case."""

    workload: list[RequestSpec]
    config: EngineConfig
    policy: str
    source: str          # e.g. "scenario:baseline" or "workload:workload.json" (never a full path)
    results: list[CaseResult]
    timeline: str = "full"   # detail of the results' timeline records (sched.records.TIMELINE_DETAILS)
    _summaries: list = field(default_factory=list, repr=False, compare=False)
    _sha256: list = field(default_factory=list, repr=False, compare=False)
    #: ``[(workload.json text, its sha256)]`` once built (:meth:`workload_json`), else empty.
    _workload_json: list = field(default_factory=list, repr=False, compare=False)
    #: Each case's ``requests.jsonl``/``timeline.jsonl`` lines rendered where it was simulated
    #: (:class:`sched.case_sections.CaseSections`; a case not written there is rendered from its
    #: result), or ``None``.
    _sections: object = field(default=None, repr=False, compare=False)

    @property
    def summaries(self) -> list[dict]:
        """One :func:`summarize` row per case, computed once."""
        if not self._summaries:
            self._summaries.extend(summarize(result) for result in self.results)
        return self._summaries

    @property
    def workload_sha256(self) -> str:
        """sha256 of the canonical workload text (:func:`sched.workload.workload_sha256`), computed once."""
        if not self._sha256:
            self._sha256.append(self._workload_json[0][1] if self._workload_json else workload_sha256(self.workload))
        return self._sha256[0]

    def close(self) -> None:
        """Release what the run holds outside memory (the temporary files of its rendered
        sections); call it once its artifacts are written. Safe to call more than once."""
        if self._sections is not None:
            self._sections.close()

    def workload_json(self) -> tuple[str, str]:
        """``(workload.json text, its sha256)``: :func:`sched.workload.workload_json_and_sha256`,
        built once (or handed in ready as ``_workload_json``)."""
        if not self._workload_json:
            self._workload_json.append(workload_json_and_sha256(self.workload))
        return self._workload_json[0]


def _number(value):
    """JSON form of a metric: exact integers stay integers, other ratios round to 6 places."""
    if isinstance(value, Fraction):
        return int(value) if value.denominator == 1 else round(float(value), 6)
    if isinstance(value, float):  # a mean summed in floating point (e.g. mean_tpot)
        return int(value) if value.is_integer() else round(value, 6)
    return value


def _cell(value, places: int = 2) -> str:
    """Text-table form: NA for an empty sample, integers as integers, ratios to ``places``."""
    if value is None:
        return "NA"
    if isinstance(value, Fraction) and value.denominator != 1:
        return f"{float(value):.{places}f}"
    return str(int(value))


def _ok_cell(summary: dict) -> str:
    """``3/8 ok, 62.5% failed``: succeeded/arrived and the error rate (lab.md §5) in percent, to
    one decimal without trailing zeros (``0%``, ``12.5%``); ``<0.1%`` for a rate that would show 0."""
    text = f"{summary['succeeded']}/{summary['arrived']} ok"
    rate = summary["error_rate"]
    if rate is None:
        return text
    percent = f"{float(rate) * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text}, {'<0.1' if percent == '0' and rate else percent}% failed"


def render_table(run: LabRun, summaries: list[dict] | None = None) -> str:
    """The text table of lab.md §6 with a header line and the units note (``table.txt``).

    ``summaries`` may pass ``run.summaries`` when already computed.
    """
    config = run.config
    timeout = "no timeout" if config.timeout_ticks is None else f"timeout {config.timeout_ticks} ticks"
    # No source here: a replay of workload.json must reproduce this file byte for byte.
    header = table_header(run) if is_vllm_run(run) else (
        f"infer-sched-lab {__version__} | {len(run.workload)} requests, workload sha256 "
        f"{run.workload_sha256[:12]} | "
        f"policy {run.policy} | budget {config.budget}, decode cost {config.decode_cost}, "
        f"max active {config.max_active}, chunk {config.chunk_tokens} | {timeout}")
    # lab.md §6 columns, plus latency_samples: §5 says latency tables always report it; the vLLM
    # engine adds its preemptions (vllm-engine.md §5).
    columns = ("case", "P95 TTFT", "P95 ITL", "P95 TPOT", "output/tick", "hit tokens", "ok/arrived", "makespan",
               "latency samples") + (("preemptions",) if is_vllm_run(run) else ())
    rows = [columns]
    for result, s in zip(run.results, run.summaries if summaries is None else summaries):
        throughput = "NA" if s["throughput"] is None else f"{float(s['throughput']):.2f}"
        extra = (str(sum(r.num_preemptions for r in result.requests)),) if is_vllm_run(run) else ()
        rows.append((s["case"], _cell(s["p95_ttft"]), _cell(s["p95_itl"]), _cell(s["p95_tpot"]), throughput,
                     str(s["hit_tokens"]), _ok_cell(s), str(s["makespan"]),
                     str(s["latency_samples"])) + extra)
    width0 = max(len(row[0]) for row in rows)
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join([row[0].ljust(width0)] + [cell.rjust(widths[i]) for i, cell in enumerate(row) if i])
             for row in rows]
    return "\n".join([header, *lines, units_note(run)]) + "\n"


def units_note(run: LabRun) -> str:
    """The units note of ``run``'s engine (table, summary, manifest and picture carry it)."""
    return UNITS_NOTE_VLLM if is_vllm_run(run) else UNITS_NOTE


def _manifest(run: LabRun) -> dict:
    config = run.config
    # A reduced timeline changes what timeline.jsonl and requests.jsonl hold, so it is named; a
    # full one (every lab scenario) leaves the manifest as it always was.
    detail = {} if run.timeline == "full" else {"timeline": run.timeline}
    if is_vllm_run(run):   # the engine is named only when it is not the lab's (reference files unchanged)
        return {"tool": "infer-sched-lab", "version": __version__, "source": run.source, "engine": "vllm",
                "workload_sha256": run.workload_sha256, "num_requests": len(run.workload), "policy": run.policy,
                "config": manifest_config(run), "timeout_ticks": config.timeout_ticks,
                "cases": [{"case": r.case.name, "batching": r.case.batching.value, "apc": r.case.apc,
                           "chunk_tokens": r.case.chunk_tokens} for r in run.results],
                **detail, **_tick_ms(run.workload), "units": UNITS_NOTE_VLLM}
    return {
        "tool": "infer-sched-lab",
        "version": __version__,
        "source": run.source,
        "workload_sha256": run.workload_sha256,
        "num_requests": len(run.workload),
        "policy": run.policy,
        "config": {"budget": config.budget, "decode_cost": config.decode_cost, "prefill_cost": 1,
                   "max_active": config.max_active, "chunk_tokens": config.chunk_tokens},
        "timeout_ticks": config.timeout_ticks,
        "cases": [{"case": r.case.name, "batching": r.case.batching.value, "apc": r.case.apc,
                   "chunk_tokens": r.case.chunk_tokens} for r in run.results],
        **detail,
        **_tick_ms(run.workload),
        "units": UNITS_NOTE,
    }


def _tick_ms(workload) -> dict:
    """``{"tick_ms": ms}`` for an imported workload that records it (README §14); else nothing."""
    tick_ms = workload_tick_ms(workload)
    return {} if tick_ms is None else {"tick_ms": tick_ms}


def _request_lines(run: LabRun, parts: list[tuple] | None = None):
    """Lines of ``requests.jsonl``, case after case (dicts for ``full``, encoded text otherwise)."""
    if run.timeline != "full" and parts is None and run.results:
        parts = request_line_parts([r.spec for r in run.results[0].requests])   # once for every case
    for result in run.results:
        yield from _case_request_lines(run, result, parts)


def request_line_parts(specs: list[RequestSpec]) -> list[tuple[str, str, str, int]]:
    """What every case's ``requests.jsonl`` line of each request shares (large runs), for the
    specs the cases' requests hold, in order: ``('"name": ..., "arrival": ..., ', '"prompt_tokens":
    ..., "hit_tokens": ', output tokens as text, output tokens)``; formatted once, not once per case."""
    dumps = json.JSONEncoder(ensure_ascii=False).encode
    return [(f'"name": {dumps(spec.name)}, "arrival": {spec.arrival}, ',
             f'"prompt_tokens": {spec.prefix_tokens + spec.suffix_tokens}, "hit_tokens": ',
             str(spec.output_tokens), spec.output_tokens) for spec in specs]


def _case_request_lines(run: LabRun, result: CaseResult, parts: list[tuple] | None):
    if run.timeline != "full":
        yield from _compact_request_lines(result, parts, is_vllm_run(run))
        return
    vllm = is_vllm_run(run)
    for r in result.requests:
        line = {
            "case": result.case.name, "name": r.name, "arrival": r.spec.arrival,
            "admitted_at": r.admitted_at, "first_token_at": r.first_token_at, "done_at": r.done_at,
            "status": r.status.value, "prompt_tokens": r.spec.prompt_tokens, "hit_tokens": r.hit_tokens,
            "output_tokens": r.spec.output_tokens, "output_tokens_emitted": len(r.token_times),
            "ttft": ttft(r), "queue_wait": queue_wait(r), "e2e": e2e(r), "token_times": r.token_times,
        }
        if vllm:   # vllm-engine.md §5 (lab runs never preempt: their lines stay as they were)
            line["num_preemptions"] = r.num_preemptions
            line["preempted_at"] = list(r.preempted_at)
        yield line


_OK = Status.DONE


def _compact_request_lines(result: CaseResult, parts: list[tuple], vllm: bool):
    """Large runs: ``token_runs`` ([first stamp, count] per run of consecutive ticks) replaces
    ``token_times``; every other field is as in a full run. Lines are formatted directly (the
    same text ``json.dumps`` gives for these integers and strings, several times faster)."""
    case = json.JSONEncoder(ensure_ascii=False).encode(result.case.name)
    status_text = {status: status.value for status in Status}
    for r, (head, prompt, output_text, output) in zip(result.requests, parts):
        admitted, done, status = r.admitted_at, r.done_at, r.status
        arrival = r.spec.arrival
        runs = r._runs if r._open_from is None else r.flat_token_runs   # an ended request: its stored runs
        if status is _OK:
            first = runs[0]
            latencies = f'"ttft": {first - arrival}, "queue_wait": {admitted - arrival}, "e2e": {done - arrival}'
        else:
            first = runs[0] if runs else None
            latencies = '"ttft": null, "queue_wait": null, "e2e": null'
        first_text = "null" if first is None else str(first)
        if len(runs) == 2:   # one run of tokens: its count is every token emitted
            emitted = output_text if runs[1] == output else str(runs[1])
            pairs = f"[{first_text}, {emitted}]"
        else:
            pairs = ", ".join([f"[{runs[i]}, {runs[i + 1]}]" for i in range(0, len(runs), 2)])
            emitted = sum(runs[1::2])
        line = (f'{{"case": {case}, {head}'
                f'"admitted_at": {"null" if admitted is None else admitted}, "first_token_at": {first_text}, '
                f'"done_at": {"null" if done is None else done}, "status": "{status_text[status]}", '
                f'{prompt}{r.hit_tokens}, "output_tokens": {output_text}, "output_tokens_emitted": {emitted}, '
                f'{latencies}, "token_runs": [{pairs}]')
        if vllm:
            yield (f'{line}, "num_preemptions": {r.num_preemptions}, "preempted_at": '
                   f'[{", ".join(map(str, r.preempted_at))}]}}')
        else:
            yield line + "}"


def case_jsonl_lines(run: LabRun, parts: list[tuple] | None = None) -> tuple:
    """``(request lines, timeline lines)`` of every case of ``run`` (iterators of encoded text
    lines without newlines), as :func:`stream_artifacts` writes them; for a lab-engine run of
    ``counts`` or ``off`` detail. ``parts``: :func:`request_line_parts` of the workload, if at hand."""
    def encoded(lines):
        encode = json.JSONEncoder(ensure_ascii=False).encode
        return (line if isinstance(line, str) else encode(line) for line in lines)
    return encoded(_request_lines(run, parts)), encoded(_timeline_lines(run))


def _timeline_lines(run: LabRun):
    """Lines of ``timeline.jsonl``, case after case (dicts for ``full``, encoded text for ``counts``)."""
    if is_vllm_run(run):
        yield from timeline_lines(run)
        return
    for result in run.results:
        yield from _case_timeline_lines(run, result)


@functools.lru_cache(maxsize=2)
def _count_texts(num_requests: int) -> list[str]:
    """``str(i)`` for ``i`` in ``0 .. num_requests``: a counts record's request counts (waiting,
    active, admitted, hits, timeouts, finished) never exceed the workload's size, and looking
    their text up is several times cheaper than formatting it again on every line."""
    return [str(i) for i in range(num_requests + 1)]


def _case_timeline_lines(run: LabRun, result: CaseResult):
    if run.timeline == "counts":
        case = json.JSONEncoder(ensure_ascii=False).encode(result.case.name)
        n = _count_texts(len(run.workload))
        for k in result.ticks:
            yield (f'{{"case": {case}, "tick": {k.tick}, "ticks": {k.num_ticks}, "waiting": {n[k.num_waiting]}, '
                   f'"active": {n[k.num_active]}, "admitted": {n[k.num_admitted]}, '
                   f'"cache_hits": {n[k.num_cache_hits]}, "timeouts": {n[k.num_timeouts]}, '
                   f'"decoded": {k.num_decoded}, "prefill_tokens": {k.num_prefill_tokens}, '
                   f'"budget_used": {k.budget_used}, "finished": {n[k.num_finished]}}}')
        return
    for k in result.ticks:
        yield {
            "case": result.case.name, "tick": k.tick, "waiting": k.waiting, "active": k.active,
            "admitted": k.admitted, "cache_hits": k.cache_hits, "timeouts": k.timeouts,
            "decoded": k.decoded, "prefilled": dict(k.prefilled), "budget_used": k.budget_used,
            "finished": k.finished,
        }


def _summary_csv(summaries: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(SUMMARY_FIELDS)
    for s in summaries:
        writer.writerow(["NA" if s[f] is None else _number(s[f]) for f in SUMMARY_FIELDS])
    return out.getvalue()


def _jsonl(records) -> str:
    return "".join(_jsonl_chunks(records))


def _jsonl_chunks(records, lines_per_chunk: int = 4096):
    """The JSON Lines text of ``records`` in chunks of a few thousand lines (for streaming)."""
    encode = json.JSONEncoder(ensure_ascii=False).encode
    chunk = []
    for record in records:  # a dict, or a line already encoded
        chunk.append(record if isinstance(record, str) else encode(record))
        if len(chunk) == lines_per_chunk:
            yield "\n".join(chunk) + "\n"
            chunk = []
    if chunk:
        yield "\n".join(chunk) + "\n"


def stream_artifacts(run: LabRun) -> dict:
    """Like :func:`render_artifacts`, but ``requests.jsonl`` and ``timeline.jsonl`` are iterators
    of text chunks that :func:`sched.safe_write.write_artifacts` streams to disk; the bytes are the
    same. A run whose cases were rendered where they were simulated (``run._sections``) reads them
    back instead of rendering them again."""
    files = render_artifacts(run, jsonl=_jsonl_chunks)   # lazy: nothing of these two rendered yet
    if run._sections is not None:
        files["requests.jsonl"] = _sectioned(run, "requests.jsonl", _case_request_lines)
        files["timeline.jsonl"] = _sectioned(run, "timeline.jsonl", _case_timeline_lines)
    return files


def _sectioned(run: LabRun, name: str, case_lines):
    """``name``'s text chunks case after case: a case's section where it was written, else its
    lines rendered here from its result."""
    parts = None
    for index, result in enumerate(run.results):
        if run._sections.written(index):
            yield from run._sections.chunks(index, name)
            continue
        if parts is None and name == "requests.jsonl":
            parts = request_line_parts([r.spec for r in result.requests])
        yield from _jsonl_chunks(case_lines(run, result, parts) if name == "requests.jsonl"
                                 else case_lines(run, result))


def render_artifacts(run: LabRun, jsonl=_jsonl) -> dict[str, str]:
    """Every artifact's text by file name (:data:`sched.safe_write.ARTIFACT_FILES`); same run → same bytes."""
    raw_summaries = run.summaries
    workload_text, sha256 = run.workload_json()   # the workload's text built once
    summaries = [{k: _number(v) for k, v in s.items()} for s in raw_summaries]
    table = render_table(run, raw_summaries)  # summaries computed once for every file
    svg = render_timeline_svg(run.results, units_note(run), raw_summaries, VllmLaneView() if is_vllm_run(run) else None)
    return {
        "manifest.json": json.dumps(_manifest(run), indent=2, ensure_ascii=False) + "\n",
        "workload.json": workload_text,
        "summary.json": json.dumps({"units": units_note(run), "field_units": SUMMARY_UNITS,
                                    "percentiles": "nearest rank", "cases": summaries},
                                   indent=2, ensure_ascii=False) + "\n",
        "summary.csv": _summary_csv(raw_summaries),
        "requests.jsonl": jsonl(_request_lines(run)),
        "timeline.jsonl": jsonl(_timeline_lines(run)),
        "table.txt": table,
        "timeline.svg": svg,
        "report.html": render_report(table, summaries, SUMMARY_FIELDS, svg, COLUMN_UNITS, run.workload),
    }
