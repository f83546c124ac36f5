"""Import of real measurements (compare.md §4, formats.md): a real engine's per-request results as a run.

Input: a result file (``import-results FILE``, formats below), optionally the exported
``workload.json`` (``--workload``; written by ``export``, :mod:`sched.timing.export`) and a ``meta.json``.
Output: a run directory in milliseconds. ``calibrate`` reads runs with the same readers.

**Import** (``import-results``): a real result file becomes a normalised run directory that
``compare`` accepts: ``manifest.json`` (``kind: real``, ``simulated: false``, ``time_unit: ms``,
``time_base``, backend identity, scheduler settings,
measurement settings, what is missing and why), ``requests.jsonl`` (per request: arrival,
admission, first token, token times, end, status, priority, in **milliseconds** from the earliest
arrival) and ``summary.json`` (one case, the lab's statistics contract in milliseconds, percentiles
by nearest rank; throughputs in output tokens per second; a ``field_units`` map like a simulated
run's, see :data:`REAL_SUMMARY_UNITS`). Values are checked where they are read: impossible ones
(a first token before the queue time, negative or fractional counts, times beyond
:data:`MAX_SECONDS`, NaN) are refused with one line naming the line or request and the field;
nothing is coerced. ``--force`` never writes over a directory holding another kind of run.
Formats read:

- ``vllm-bench``: ``vllm bench serve --save-result --save-detailed`` JSON (one object, or several
  lines with ``--append-result``; pick one with ``--run-index``). Per-request lists are seconds;
  ``start_times`` is a monotonic send time. TTFT = ``ttfts[i]``, token times = send + TTFT, then
  each of ``itls[i]`` added (a chunk may carry more than one token), end = the last chunk. A
  request with a non-empty ``errors[i]``, or with ``output_lens[i]`` 0 (a failure whose HTTP reason
  was empty: vLLM counts every successful request as at least 1 token), failed. The client cannot see admission: queue wait is
  missing. The file's own aggregates (linear interpolation) are kept under ``reported``. With
  ``generated_texts``, each request gets ``output_text_empty`` (an ok request that produced no
  text, which ``compare`` treats as a hard failure, as the serving-bench chapter does).
- ``request-jsonl``: per-request lines with ``request_id, input_toks, output_toks, arrival_time,
  queued_ts, scheduled_ts, first_token_ts, last_token_ts`` (LLMServingSim's vLLM harness), with
  an optional ``meta.json`` beside it (or ``--meta``) giving the engine. ``arrival_time`` is epoch
  seconds and the ``*_ts`` fields a different monotonic clock, so every time is taken on the
  monotonic clock from ``queued_ts``: TTFT = first_token_ts − queued_ts, queue wait =
  scheduled_ts − queued_ts, never against ``arrival_time``. There are no per-token times: ITL is
  missing, TPOT = (last − first) / (output − 1). A line without ``last_token_ts`` never ended.

With ``--workload FILE`` (the exported ``workload.json``), request ``i`` of the result is request
``i`` of the workload: its name and priority come from there and the run carries the workload's
sha256, which ``compare``'s contract needs. Anything a file lacks stays ``null`` and is listed in
``missing``; nothing is invented.

Where each part lives: what a run is made of (records, summary row, manifest, the value checks) in
:mod:`sched.timing.real_record`; one reader per format, :mod:`sched.timing.read_vllm_bench` and
:mod:`sched.timing.read_request_jsonl`; here, the files of the run directory and the command.
"""

from __future__ import annotations

import argparse
import json
import os

from ..base.safe_write import write_artifacts
from ..base.files import open_regular
from ..base.strict_json import strict_json
from ..base.cmdline import EXIT_OK, InputError, LineParser, integer, read_failure, run_command
from ..core.bench_metrics import bench_units
from ..workload.validation import load_workload
from .bench_rows import BenchSettings, add_bench_flags, bench_header, bench_settings_from_args
from .real_record import MAX_SECONDS, REAL_SUMMARY_UNITS, REAL_UNITS, TIME_BASES
from .read_request_jsonl import import_request_jsonl
from .read_vllm_bench import import_vllm_bench

__all__ = ["import_vllm_bench", "import_request_jsonl", "render_import", "import_command", "REAL_UNITS",
           "REAL_SUMMARY_UNITS", "MAX_SECONDS", "TIME_BASES", "read_result_text", "detect_format", "json_text",
           "workload_arg", "directory_arg"]


def _tidy(row: dict) -> dict:
    """The lab's columns' floats to 6 decimal places (sub-nanosecond in ms), so the files read cleanly;
    vLLM bench serve's keys keep full doubles, as vLLM writes them."""
    return {k: round(v, 6) if isinstance(v, float) and k in REAL_SUMMARY_UNITS else v for k, v in row.items()}


def render_import(manifest: dict, records: list[dict], row: dict, bench: BenchSettings | None = None) -> dict[str, str]:
    """The files of a normalised real run directory by name (``compare`` reads them); ``bench``: the
    settings the row's vLLM bench keys were computed with (default vLLM's)."""
    summary = {"units": REAL_UNITS, "time_unit": "ms",
               "field_units": {**REAL_SUMMARY_UNITS, **bench_units((bench or BenchSettings()).percentiles)},
               "percentiles": "nearest rank",
               "vllm_bench": dict(bench_header(bench or BenchSettings()), notes=manifest.get("vllm_bench_notes", [])),
               "cases": [_tidy(row)]}
    return {
        "manifest.json": json_text(manifest, indent=2),
        "summary.json": json_text(summary, indent=2),
        "requests.jsonl": "".join(json_text(r) for r in records),
    }


def json_text(value, indent: int | None = None) -> str:
    """One JSON document and a newline; never NaN or Infinity (strict JSON), never lone surrogates
    (ASCII escapes keep any text writable)."""
    return json.dumps(value, indent=indent, allow_nan=False) + "\n"


# --- subcommands ---------------------------------------------------------------------------------

def workload_arg(path: str | None):
    """``--workload``: ``(specs, file name)`` of a workload file, or None; a bad file is an :class:`InputError`."""
    if path is None:
        return None
    try:
        return load_workload(path), os.path.basename(path)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def directory_arg(text: str) -> str:
    """An output directory flag's value (argparse type): any non-empty path."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a directory, got an empty path")
    return text


def read_result_text(path: str, what: str) -> str:
    """The text of a result or meta file, as ``import-results`` and ``calibrate`` both read it: a
    regular UTF-8 file, a leading BOM dropped. Raises :class:`InputError` naming ``path`` and ``what``."""
    try:
        with open_regular(path, encoding="utf-8-sig") as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read {what} ({read_failure(exc)})") from None


def _import(argv: list[str]) -> int:
    parser = LineParser(prog="infer_sched_lab.py import-results",
                        description="Import a real engine's per-request results into a normalised run "
                                    "directory that compare accepts (compare.md §4). Times in ms.")
    parser.add_argument("file", metavar="FILE", help="the result file")
    parser.add_argument("--artifacts", metavar="DIR", required=True, type=directory_arg,
                        help="directory to write (new or empty; with --force, an earlier import)")
    parser.add_argument("--format", choices=("auto", "vllm-bench", "request-jsonl"), default="auto",
                        help="input format (default auto: detected from the first record)")
    parser.add_argument("--workload", metavar="FILE",
                        help="the exported workload.json: names, priorities and workload sha256 by position")
    parser.add_argument("--policy", help="the server's scheduling policy when the file does not say (e.g. fcfs)")
    parser.add_argument("--meta", metavar="FILE", help="request-jsonl: the engine's meta.json (default: beside FILE)")
    parser.add_argument("--run-index", type=integer, metavar="N", help="vllm-bench with --append-result: which run")
    parser.add_argument("--label", default="real", help="case name of the imported run (default real)")
    parser.add_argument("--force", action="store_true", help="replace the import's own files in DIR")
    add_bench_flags(parser)
    args = parser.parse_args(argv)
    bench = bench_settings_from_args(args)
    text = read_result_text(args.file, "result file")
    _not_a_chapter_file(text, args.file)
    fmt = args.format if args.format != "auto" else detect_format(text, args.file)
    workload = workload_arg(args.workload)
    if fmt == "vllm-bench":
        result = import_vllm_bench(text, args.file, args.label, workload, args.policy, args.run_index, bench)
    else:
        meta_path = args.meta or os.path.join(os.path.dirname(args.file), "meta.json")
        meta = None
        if args.meta or os.path.exists(meta_path):
            meta = strict_json(read_result_text(meta_path, "meta.json"), meta_path, nan_as_null=True)
        result = import_request_jsonl(text, args.file, args.label, workload, args.policy, meta, meta_path, bench)
    manifest, records, row = result
    write_artifacts(render_import(*result, bench), args.artifacts, force=args.force)
    print(f"imported {len(records)} requests ({row['succeeded']} ok of {row['arrived']} arrived) from "
          f"{os.path.basename(args.file)} as {fmt} into {args.artifacts}/")
    print(f"P95 TTFT {_show(row['p95_ttft'])} ms, P95 TPOT {_show(row['p95_tpot'])} ms, throughput "
          f"{_show(row['throughput'])} output tokens/s (percentiles by nearest rank)")
    if bench is not None and bench.goodput is not None and row.get("request_goodput") is not None:
        print(f"request_goodput {row['request_goodput']:.3f} req/s, slo_attainment {row['slo_attainment']:.3f} "
              f"(vLLM bench serve's definition, from the file's raw seconds)")
    if manifest["missing"]:
        print(f"missing: {', '.join(manifest['missing'])}")
    return EXIT_OK


def _show(value) -> str:
    return "NA" if value is None else f"{value:.1f}"


def _json_or_none(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _not_a_chapter_file(text: str, source: str) -> None:
    """A group's result file of the serving-bench chapter (``scheduler_identity``, or the runner's
    ``serving-scheduler-run/v1`` schema) is not a per-request engine result: send the learner to
    ``serving-bench decide`` instead of importing nothing (serving-bench.md §4)."""
    head = _json_or_none(text)
    if isinstance(head, dict) and ("scheduler_identity" in head or head.get("schema_version") == "serving-scheduler-run/v1"):
        raise InputError(f"{source}: a serving-bench chapter group's result file (scheduler_identity), not a "
                         "per-request engine result; decide the FCFS and priority groups with: infer_sched_lab.py "
                         "serving-bench decide FCFS.json PRIORITY.json --out EVIDENCE.json")


def detect_format(text: str, source: str, advice: str = "pass --format vllm-bench or request-jsonl") -> str:
    """``request-jsonl`` or ``vllm-bench``, from the first record of ``text``; else an :class:`InputError`
    ending with ``advice`` (what the command reads; import-results has ``--format``, calibrate has not)."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    head = _json_or_none(first)
    if head is None:
        head = _json_or_none(text)
    if head is None:
        raise InputError(f"{source}: neither JSON nor JSON lines; cannot detect the format")
    if isinstance(head, dict) and "queued_ts" in head:
        return "request-jsonl"
    if isinstance(head, dict) and ("ttfts" in head or "backend" in head or "num_prompts" in head):
        return "vllm-bench"
    raise InputError(f"{source}: unknown result format; {advice}")


def import_command(argv: list[str]) -> int:
    """The ``import-results`` subcommand; exit 0, or 2 for bad input or usage."""
    return run_command("infer_sched_lab.py import-results", _import, argv)
