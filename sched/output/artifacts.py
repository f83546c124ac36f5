"""Artifacts of one run (lab.md §7), rendered deterministically.

Rendering is pure (text in, text out); the lines of ``requests.jsonl`` and ``timeline.jsonl``
are :mod:`sched.output.jsonl_lines`'s; writing the directory safely (atomically, never over an earlier run
unless asked) is :mod:`sched.base.safe_write`'s.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction

from .. import __version__
from ..base.files import decoded_chunks
from ..core.clock import UNITS_NOTE, RunClock
from ..core.config import EngineConfig
from ..core.ended_requests import preemption_counts
from .jsonl_lines import jsonl_chunks, jsonl_text, request_lines, sectioned_chunks, timeline_lines
from ..core.metrics import SUMMARY_FIELDS, summarize
from .picture import render_timeline_svg
from ..core.records import CaseResult
from .report import render_report
from .vllm_artifacts import manifest_config, table_header
from ..vllm.load_stats import LOAD_FIELDS, LOAD_UNITS, load_summary
from ..workload.specs import (RequestSpec, workload_json_and_sha256, workload_json_chunks, workload_sha256,
                              workload_tick_ms, write_workload_json)

__all__ = ["LabRun", "render_artifacts", "render_table", "stream_artifacts", "UNITS_NOTE"]


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

#: Short units of a vLLM-engine run's load columns in report.html (sched.vllm.load_stats).
_LOAD_COLUMN_UNITS = {f: "preemptions" if f == "num_preemptions" else "KV blocks" if "kv" in f else "requests"
                      for f in LOAD_FIELDS}


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
    """A finished run: its input, knobs, source description and one result per case.

    ``clock``: the run's engine kind and clock (:class:`sched.core.clock.RunClock`), which every
    renderer asks instead of looking at the knobs; made where the run is built. Left out, it is the
    knobs' engine on its own ticks (``RunClock(config.ENGINE)``): a ``--step-model`` run names
    :data:`sched.core.clock.VLLM_MS`.
    """

    workload: list[RequestSpec]
    config: EngineConfig
    policy: str
    source: str          # e.g. "scenario:baseline" or "workload:workload.json" (never a full path)
    results: list[CaseResult]
    timeline: str = "full"   # detail of the results' timeline records (sched.core.records.TIMELINE_DETAILS)
    clock: RunClock | None = field(default=None, kw_only=True)
    _summaries: list = field(default_factory=list, repr=False, compare=False)
    _sha256: list = field(default_factory=list, repr=False, compare=False)
    #: ``[(workload.json text, its sha256)]`` once built (:meth:`workload_json`), else empty.
    _workload_json: list = field(default_factory=list, repr=False, compare=False)
    #: Each case's ``requests.jsonl``/``timeline.jsonl`` lines rendered where it was simulated
    #: (:class:`sched.output.case_sections.CaseSections`; a case not written there is rendered from its
    #: result), or ``None``.
    _sections: object = field(default=None, repr=False, compare=False)
    #: ``workload.json`` written once into an anonymous temporary file while its sha256 is hashed
    #: (:meth:`spool_workload_json`): ``[that file]``, else empty.
    _spool: list = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.clock is None:
            object.__setattr__(self, "clock", RunClock(self.config.ENGINE))

    @property
    def summaries(self) -> list[dict]:
        """One :func:`summarize` row per case, computed once."""
        if not self._summaries:
            self._summaries.extend(summarize(result) for result in self.results)
        return self._summaries

    @property
    def workload_sha256(self) -> str:
        """sha256 of the canonical workload text (:func:`sched.workload.specs.workload_sha256`), computed once."""
        if not self._sha256:
            self._sha256.append(self._workload_json[0][1] if self._workload_json else workload_sha256(self.workload))
        return self._sha256[0]

    def close(self) -> None:
        """Release what the run holds outside memory (the temporary files of its rendered
        sections); call it once its artifacts are written. Safe to call more than once."""
        if self._sections is not None:
            self._sections.close()
        while self._spool:
            self._spool.pop().close()

    def spool_workload_json(self):
        """``workload.json``'s text as chunks read back from an anonymous temporary file, written
        there by :func:`sched.workload.specs.write_workload_json`, which hashes the text as it
        formats it (:attr:`workload_sha256` then needs no second formatting; the text is never held
        whole); ``None`` when the file cannot be written (the caller formats the text itself). The
        file goes with :meth:`close`."""
        try:
            handle = tempfile.TemporaryFile()
        except OSError:
            return None
        self._spool.append(handle)
        try:
            sha256 = write_workload_json(self.workload, handle)
            handle.seek(0)
        except OSError:
            self._spool.remove(handle)
            handle.close()
            return None
        if not self._sha256:
            self._sha256.append(sha256)
        return decoded_chunks(handle)

    def workload_json(self) -> tuple[str, str]:
        """``(workload.json text, its sha256)``: :func:`sched.workload.specs.workload_json_and_sha256`,
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
    config, vllm = run.config, run.clock.is_vllm
    timeout = "no timeout" if config.timeout_ticks is None else f"timeout {config.timeout_ticks} ticks"
    # No source here: a replay of workload.json must reproduce this file byte for byte.
    header = table_header(run) if vllm else (
        f"infer-sched-lab {__version__} | {len(run.workload)} requests, workload sha256 "
        f"{run.workload_sha256[:12]} | "
        f"policy {run.policy} | budget {config.budget}, decode cost {config.decode_cost}, "
        f"max active {config.max_active}, chunk {config.chunk_tokens} | {timeout}")
    # lab.md §6 columns, plus latency_samples: §5 says latency tables always report it; the vLLM
    # engine adds its preemptions (vllm-engine.md §5).
    columns = ("case", "P95 TTFT", "P95 ITL", "P95 TPOT", "output/tick", "hit tokens", "ok/arrived", "makespan",
               "latency samples") + (("preemptions",) if vllm else ())
    rows = [columns]
    for result, s in zip(run.results, run.summaries if summaries is None else summaries):
        throughput = "NA" if s["throughput"] is None else f"{float(s['throughput']):.2f}"
        extra = (str(preemption_counts(result.requests)[0]),) if vllm else ()
        rows.append((s["case"], _cell(s["p95_ttft"]), _cell(s["p95_itl"]), _cell(s["p95_tpot"]), throughput,
                     str(s["hit_tokens"]), _ok_cell(s), str(s["makespan"]),
                     str(s["latency_samples"])) + extra)
    width0 = max(len(row[0]) for row in rows)
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join([row[0].ljust(width0)] + [cell.rjust(widths[i]) for i, cell in enumerate(row) if i])
             for row in rows]
    return "\n".join([header, *lines, run.clock.units_note]) + "\n"


def run_manifest(run: LabRun) -> dict:
    """The ``manifest.json`` of a simulated run as a dict (formats.md): tool, engine, knobs, cases, units."""
    config = run.config
    # A reduced timeline changes what timeline.jsonl and requests.jsonl hold, so it is named; a
    # full one (every lab scenario) leaves the manifest as it always was.
    detail = {} if run.timeline == "full" else {"timeline": run.timeline}
    if run.clock.is_vllm:   # the engine is named only when it is not the lab's (reference files unchanged)
        return {"tool": "infer-sched-lab", "version": __version__, "source": run.source, "engine": "vllm",
                "workload_sha256": run.workload_sha256, "num_requests": len(run.workload), "policy": run.policy,
                "config": manifest_config(run), "timeout_ticks": config.timeout_ticks,
                "cases": [{"case": r.case.name, "batching": r.case.batching.value, "apc": r.case.apc,
                           "chunk_tokens": r.case.chunk_tokens} for r in run.results],
                **detail, **_tick_ms(run.workload), "units": run.clock.units_note}
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
        "units": run.clock.units_note,
    }




def _tick_ms(workload) -> dict:
    """``{"tick_ms": ms}`` for an imported workload that records it (docs/handbook/real-traffic.md §14); else nothing."""
    tick_ms = workload_tick_ms(workload)
    return {} if tick_ms is None else {"tick_ms": tick_ms}


def _summary_csv(summaries: list[dict], fields=SUMMARY_FIELDS) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields)
    for s in summaries:
        writer.writerow(["NA" if s[f] is None else _number(s[f]) for f in fields])
    return out.getvalue()


def _with_load(run: LabRun, summaries: list[dict]) -> tuple[list[dict], tuple, dict]:
    """A vLLM-engine run's summary rows with :data:`sched.vllm.load_stats.LOAD_FIELDS` appended, the
    fields and the units; a lab run's unchanged (its bytes are the goldens')."""
    if not run.clock.is_vllm:
        return summaries, SUMMARY_FIELDS, SUMMARY_UNITS
    rows = [{**s, **load_summary(result)} for s, result in zip(summaries, run.results)]
    return rows, (*SUMMARY_FIELDS, *LOAD_FIELDS), {**SUMMARY_UNITS, **LOAD_UNITS}


def stream_artifacts(run: LabRun) -> dict:
    """Like :func:`render_artifacts`, but ``requests.jsonl``, ``timeline.jsonl`` and ``workload.json`` are iterators
    of text chunks that :func:`sched.base.safe_write.write_artifacts` streams to disk; the bytes are the
    same. A run whose cases were rendered where they were simulated (``run._sections``) reads them
    back instead of rendering them again, and its ``workload.json`` too when it was written there."""
    sections = run._sections
    # workload.json as the run wrote it where it was simulated, read back in chunks, if it did.
    workload = None if sections is None or sections.workload_sha256() is None else sections.workload_chunks()
    if workload is None and not run._workload_json:   # formatted once: written aside and hashed as it goes
        workload = run.spool_workload_json()
    files = render_artifacts(run, jsonl=jsonl_chunks, workload_text=workload)   # lazy: nothing of these rendered yet
    if sections is not None:
        files["requests.jsonl"] = sectioned_chunks(run, "requests.jsonl")
        files["timeline.jsonl"] = sectioned_chunks(run, "timeline.jsonl")
    return files


def render_artifacts(run: LabRun, jsonl=jsonl_text, workload_text=None) -> dict[str, str]:
    """Every artifact's text by file name (:data:`sched.base.safe_write.ARTIFACT_FILES`); same run → same bytes.

    ``workload_text``: ``workload.json``'s text (or its chunks) when already at hand; else it is
    built from the specs (:meth:`LabRun.workload_json`)."""
    raw_summaries = run.summaries
    if workload_text is None:
        # The workload's text built once; when streaming (:func:`stream_artifacts`) and not at hand, text
        # chunks rendered as they are written (its sha256 is hashed in chunks too: never held whole).
        workload_text = (run.workload_json()[0] if jsonl is jsonl_text or run._workload_json
                         else workload_json_chunks(run.workload))
    table = render_table(run, raw_summaries)  # summaries computed once for every file
    raw_summaries, fields, field_units = _with_load(run, raw_summaries)
    summaries = [{k: _number(v) for k, v in s.items()} for s in raw_summaries]
    svg = render_timeline_svg(run.results, run.clock, raw_summaries)
    return {
        "manifest.json": json.dumps(run_manifest(run), indent=2, ensure_ascii=False) + "\n",
        "workload.json": workload_text,
        "summary.json": json.dumps({"units": run.clock.units_note, "field_units": field_units,
                                    "percentiles": "nearest rank", "cases": summaries},
                                   indent=2, ensure_ascii=False) + "\n",
        "summary.csv": _summary_csv(raw_summaries, fields),
        "requests.jsonl": jsonl(request_lines(run)),
        "timeline.jsonl": jsonl(timeline_lines(run)),
        "table.txt": table,
        "timeline.svg": svg,
        "report.html": render_report(table, summaries, fields, svg, {**COLUMN_UNITS, **_LOAD_COLUMN_UNITS}, run.workload,
                                     run.clock.unit),
    }
