"""``diff RUN_A RUN_B``: what changed between two simulated runs, request by request (README §12.5).

Reads each run's ``manifest.json``, ``workload.json``, ``summary.json`` and ``requests.jsonl``
(lab.md §7); nothing is simulated again. The report has four parts:

1. **workload**: requests only in A, only in B, and every field that differs for a request of
   the same name (``U6: suffix_tokens 160 -> 640``); the two runs may hold different workloads;
2. **configuration**: policy, knobs and timeout that differ;
3. **summary**: for each case in both runs, the lab.md §6 columns of A and B side by side with
   B − A;
4. **requests**: for each case, every request (matched by name) whose admission, first token,
   end, TTFT, E2E, queue wait, hit tokens or status differs, largest change first: a status change
   (e.g. ``ok -> timeout``) ranks first, then the largest absolute change in ticks or tokens.

Every delta is B − A in ticks (tokens for hits): ``+`` means later or slower in B. Two
``--step-model`` runs (``manifest.json`` ``time_unit: ms``, vllm-engine.md §6) are compared in ms
throughout: the request times come from the ``*_ms`` fields of ``requests.jsonl`` (its tick fields
are µs), like their summaries; a step-model run and a tick run are refused (two clocks). Exit code of
the command: 0 when nothing differs, 1 when something does, 2 for unusable input (one line naming
the file, the line, the request and the field). What it reads of each run, and the checks, are in
:mod:`sched.analysis.rundiff_input`.
"""

from __future__ import annotations

import heapq
import json
import os

from ..base.cmdline import EXIT_OK, InputError, LineParser, integer, run_command
from ..core.clock import RunClock
from ..workload.file import canonical_columns
from ..output.vllm_artifacts import async_scheduling_of
from .rundiff_input import (MS_REQUEST_FIELDS, REQUEST_FIELDS, TAKEN, diff_manifest, missing_line_error, name_index,
                            read_text, request_lines, request_values, same_text, second_line_error, summary_rows,
                            workload_by_name)

__all__ = ["command", "diff_runs", "format_diff", "RunDiff", "REQUEST_FIELDS", "MS_REQUEST_FIELDS", "MAX_ROWS"]

EXIT_DIFFERENT = 1

#: Summary columns shown side by side (summary.json field -> header), as in table.txt (lab.md §6).
SUMMARY_COLUMNS = {"p95_ttft": "P95 TTFT", "p95_itl": "P95 ITL", "p95_tpot": "P95 TPOT",
                   "throughput": "output/tick", "hit_tokens": "hit tokens", "succeeded": "ok",
                   "arrived": "arrived", "makespan": "makespan"}
#: A vLLM-engine run's load columns (sched.vllm.load_stats), shown when both runs have them.
LOAD_COLUMNS = {"num_preemptions": "preemptions", "peak_kv_blocks_used": "peak KV", "mean_kv_blocks_used": "mean KV",
                "peak_num_running": "peak running", "mean_num_running": "mean running",
                "peak_num_waiting": "peak waiting", "mean_num_waiting": "mean waiting"}
#: Most changed requests listed per case (the rest are counted).
MAX_ROWS = 20


class RunDiff:
    """The differences between run A and run B (plain data; :func:`format_diff` renders it).

    ``workload``: lines naming requests only in one run and changed fields; ``config``: lines
    naming changed settings; ``summaries``: ``[(case, row_a, row_b)]`` for cases in both runs;
    ``cases_only``: ``(cases only in A, cases only in B)``; ``requests``: case -> list of
    ``(name, status_a, status_b, {field: (a, b)})`` sorted largest change first; ``more``: case ->
    changed requests not kept in ``requests`` (when :func:`diff_runs` was given ``top``).
    """

    def __init__(self, a: str, b: str):
        self.a, self.b = a, b
        self.workload: list[str] = []
        self.config: list[str] = []
        self.summaries: list[tuple[str, dict, dict]] = []
        self.cases_only: tuple[list[str], list[str]] = ([], [])
        self.requests: dict[str, list] = {}
        self.more: dict[str, int] = {}   # case -> changed requests beyond those kept (diff_runs' top)
        self.unit = "ticks"   # "ms" for two --step-model runs

    @property
    def any(self) -> bool:
        """True when the two runs differ in anything compared."""
        return bool(self.workload or self.config or any(self.cases_only) or any(self.requests.values())
                    or any(_row_changed(a, b) for _, a, b in self.summaries))


def _columns(a: dict, b: dict) -> dict:
    """The summary columns of a pair of rows: :data:`SUMMARY_COLUMNS`, and :data:`LOAD_COLUMNS` when both have them."""
    return {**SUMMARY_COLUMNS, **LOAD_COLUMNS} if "peak_kv_blocks_used" in a and "peak_kv_blocks_used" in b \
        else SUMMARY_COLUMNS


def _row_changed(a: dict, b: dict) -> bool:
    return any(a.get(f) != b.get(f) for f in _columns(a, b))


def _workloads(dir_a: str, dir_b: str) -> tuple[dict, dict, list[str]]:
    """The requests of both runs by name and the workload lines of the report. Two runs of the same
    workload file (the common case) differ in nothing: A's text is read, B's compared with it a
    chunk at a time, and the names read once (column by column when the file has the canonical
    layout), as name -> index, without an object per request beyond its name."""
    text = read_text(os.path.join(dir_a, "workload.json"))
    if same_text(text, os.path.join(dir_b, "workload.json")):
        found = canonical_columns(text, keep=(0,))
        names = name_index(found[1][0] if found is not None else workload_by_name(dir_a, text))
        return names, names, []
    a, b = workload_by_name(dir_a, text), workload_by_name(dir_b)
    return a, b, _workload_lines(a, b)


def _show(value) -> str:
    return "none" if value is None else json.dumps(value, ensure_ascii=False)


def _workload_lines(a: dict, b: dict) -> list[str]:
    """Requests only in one run (``a``, ``b``: :func:`~sched.analysis.rundiff_input.workload_by_name`), then every differing field of
    requests with the same name."""
    lines = []
    only_a, only_b = [n for n in a if n not in b], [n for n in b if n not in a]
    if only_a:
        lines.append(f"only in A: {', '.join(only_a)}")
    if only_b:
        lines.append(f"only in B: {', '.join(only_b)}")
    for name, spec in a.items():
        if name in b and spec != b[name]:
            other = b[name]
            changes = [f"{field} {_show(spec.get(field))} -> {_show(other.get(field))}"
                       for field in [*spec, *(f for f in other if f not in spec)] if spec.get(field) != other.get(field)]
            lines.append(f"{name}: {', '.join(changes)}")
    return lines


def _config_lines(a: dict, b: dict) -> list[str]:
    """Every setting of manifest ``a`` that differs in ``b``: engine, policy, timeout, timeline, the
    knobs, and of two step-model runs the step model (coefficients, provenance, overridden settings)."""
    lines = []
    if a.get("engine", "lab") != b.get("engine", "lab"):
        lines.append(f"engine {a.get('engine', 'lab')} -> {b.get('engine', 'lab')}")
    for field in ("policy", "timeout_ticks"):
        if a.get(field) != b.get(field):
            lines.append(f"{field} {_show(a.get(field))} -> {_show(b.get(field))}")
    config_a = a.get("config") if isinstance(a.get("config"), dict) else {}
    config_b = b.get("config") if isinstance(b.get("config"), dict) else {}
    for field in [*config_a, *(f for f in config_b if f not in config_a)]:
        if config_a.get(field) != config_b.get(field):
            lines.append(f"{field} {_show(config_a.get(field))} -> {_show(config_b.get(field))}")
    if a.get("timeline", "full") != b.get("timeline", "full"):
        lines.append(f"timeline {a.get('timeline', 'full')} -> {b.get('timeline', 'full')}")
    model_a, model_b = a.get("step_model") or {}, b.get("step_model") or {}
    for key in ("a", "b", "c", "d"):
        x, y = (model.get("step_ms", {}).get(key) for model in (model_a, model_b))
        if x != y:
            lines.append(f"step model {key} {_show(x)} -> {_show(y)} ms")
    for key in ("fitted_on", "overridden"):
        if model_a.get(key) != model_b.get(key):
            lines.append(f"step model {key.replace('_', ' ')} differs")
    return lines


def _change_size(status_a: str, status_b: str, fields: dict) -> tuple:
    """Sort key, largest first: a status change, then the largest absolute delta."""
    deltas = [abs(b - a) for a, b in fields.values() if a is not None and b is not None]
    appeared = any((a is None) != (b is None) for a, b in fields.values())
    return (status_a != status_b, appeared, max(deltas, default=0))


def diff_runs(dir_a: str, dir_b: str, case: str | None = None, top: int | None = None) -> RunDiff:
    """Compare run ``dir_a`` (A) with run ``dir_b`` (B), every case in both or only ``case``.
    ``top``: keep only the ``top`` largest changes per case (the others counted in ``more``), so
    memory holds A's few values per request and ``top`` rows, whatever changed.

    Raises :class:`InputError` for unusable input, or a ``case`` that is not in both runs (the
    message lists the cases they share).
    """
    manifests = [diff_manifest(d) for d in (dir_a, dir_b)]
    clocks = [RunClock.from_manifest(m) for m in manifests]   # each run's engine and clock, read once
    units = [c.unit for c in clocks]
    if units[0] != units[1]:
        ms_dir, tick_dir = (dir_a, dir_b) if units[0] == "ms" else (dir_b, dir_a)
        raise InputError(f"{ms_dir}: is a --step-model run (times in ms) but {tick_dir} is a tick run (times in "
                         "engine steps); diff compares two runs on the same clock")
    *workloads, workload_lines = _workloads(dir_a, dir_b)
    sum_a, sum_b = [summary_rows(d) for d in (dir_a, dir_b)]
    result = RunDiff(dir_a, dir_b)
    result.unit = units[0]
    result.workload = workload_lines
    result.config = _config_lines(*manifests)
    shared = [c for c in sum_a if c in sum_b]
    if case is not None and case not in shared:
        raise InputError(f"--case {case!r}: not a case of both runs; the cases they share are "
                         f"{', '.join(shared) or 'none'}")
    result.summaries = [(c, sum_a[c], sum_b[c]) for c in shared if case in (None, c)]
    if case is None:
        result.cases_only = ([c for c in sum_a if c not in sum_b], [c for c in sum_b if c not in sum_a])
    # A's lines are kept as a few values each; B's are streamed past them, each compared at once and
    # its A row replaced by a mark (a second B line for it is refused, a missing one named).
    rows_a = request_values(dir_a, sum_a, workloads[0] if workloads[0] is workloads[1] else name_index(workloads[0]),
                            result.unit, clocks[0].is_vllm,
                            async_scheduling_of(manifests[0], os.path.join(dir_a, "manifest.json")))
    shown = {c for c, _, _ in result.summaries}
    changed: dict[str, list] = {c: [] for c in shown}
    only_b, count_b = set(), 0
    for key, b, where in request_lines(dir_b, sum_b, workloads[1], result.unit, clocks[1].is_vllm,
                                        async_scheduling_of(manifests[1], os.path.join(dir_b, "manifest.json"))):
        a = rows_a.take(*key)
        if a is TAKEN or key in only_b:
            raise second_line_error(where, key[0])
        count_b += 1
        if a is None:
            only_b.add(key)
            continue
        if key[0] not in shown:
            continue
        fields = {f: (x, y) for f, x, y in zip(REQUEST_FIELDS, a[1:-1], b[1:]) if x != y}
        if fields or a[0] != b[0]:
            size = _change_size(a[0], b[0], fields)
            found = changed[key[0]]   # ties: in A's order of that case's lines
            found.append(((tuple(-x for x in size), a[-1]), (key[1], a[0], b[0], fields)))
            if top is not None and len(found) >= 2 * top + 64:   # keep the largest, count the rest
                _keep_largest(found, top, result, key[0])
    if count_b != len(sum_b) * len(workloads[1]):
        raise missing_line_error(dir_b, sum_b, workloads[1], lambda k: rows_a.taken(k) or k in only_b)
    for case, _, _ in result.summaries:
        found = changed[case]
        if top is not None:
            _keep_largest(found, top, result, case)
        found.sort(key=lambda entry: entry[0])
        result.requests[case] = [row for _, row in found]
    return result


def _keep_largest(found: list, top: int, result: "RunDiff", case: str) -> None:
    """Keep the ``top`` largest changes of ``found`` (sort key, row) in place; the others are counted
    in ``result.more[case]``."""
    if len(found) > top:
        kept = heapq.nsmallest(top, found, key=lambda entry: entry[0])
        result.more[case] = result.more.get(case, 0) + len(found) - top
        found[:] = kept


def _delta(a, b, digits: int = 2) -> str:
    if a is None or b is None or a == b:
        return ""
    difference = b - a
    text = f"{difference:+.{digits}f}" if isinstance(difference, float) else f"{difference:+d}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _cell(value, digits: int = 2) -> str:
    if value is None:
        return "NA"
    if isinstance(value, float) and digits > 2:   # ms of a step-model run: whole µs, trailing zeros dropped
        return f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def format_diff(result: RunDiff, max_rows: int = MAX_ROWS) -> str:
    """The report text of :func:`diff_runs` (deltas B − A; ticks, or ms for two step-model runs;
    tokens for hits)."""
    out = [f"diff A {result.a}  ->  B {result.b}   (B − A in {result.unit}, hits in tokens; + is later or slower in B)"]
    if result.unit == "ms":
        out.append("clock: two --step-model runs; every time is ms of the step model's clock (requests.jsonl's *_ms "
                   "fields, summary.json), a prediction, not a measurement")
    out.append("workload: " + ("same requests" if not result.workload else
                               f"{len(result.workload)} difference{'s' if len(result.workload) != 1 else ''}"))
    out += [f"  {line}" for line in result.workload]
    out.append("configuration: " + ("same" if not result.config else ", ".join(result.config)))
    for label, cases in zip(("A", "B"), result.cases_only):
        if cases:
            out.append(f"cases only in {label}: {', '.join(cases)}")
    if result.summaries:
        out.append("")
        out += _summary_table(result.summaries, result.unit)
    digits = 3 if result.unit == "ms" else 2
    for case, rows in result.requests.items():
        out.append("")
        total = len(rows) + result.more.get(case, 0)
        if not total:
            out.append(f"== {case} ==  no request changed")
            continue
        out.append(f"== {case} ==  {total} request{'s' if total != 1 else ''} changed, largest change first")
        width = max(len(name) for name, *_ in rows[:max_rows])
        for name, status_a, status_b, fields in rows[:max_rows]:
            parts = [f"status {status_a} -> {status_b}"] if status_a != status_b else []
            parts += [f"{REQUEST_FIELDS[f]} {_cell(a, digits)} -> {_cell(b, digits)}"
                      + (f" ({_delta(a, b, digits)})" if _delta(a, b, digits) else "") for f, (a, b) in fields.items()]
            out.append(f"  {name:<{width}}  " + ", ".join(parts))
        if total > max_rows:
            out.append(f"  ... and {total - max_rows} more changed requests")
    return "\n".join(out) + "\n"


def _summary_table(summaries: list[tuple[str, dict, dict]], unit: str = "ticks") -> list[str]:
    """The lab.md §6 columns of each case: a row for A, a row for B, a row for B − A (a step-model
    run's throughput is output tokens per second)."""
    columns = SUMMARY_COLUMNS
    if summaries and all("peak_kv_blocks_used" in a and "peak_kv_blocks_used" in b for _, a, b in summaries):
        columns = {**SUMMARY_COLUMNS, **LOAD_COLUMNS}   # two vLLM-engine runs: their load too
    header = ["summary", "run", *(("output tok/s" if f == "throughput" and unit == "ms" else title)
                                  for f, title in columns.items())]
    rows, digits = [header], 3 if unit == "ms" else 2
    for case, a, b in summaries:
        rows.append([case, "A", *(_cell(a.get(f), digits) for f in columns)])
        rows.append(["", "B", *(_cell(b.get(f), digits) for f in columns)])
        rows.append(["", "B − A", *(_delta(a.get(f), b.get(f), digits) or "·" for f in columns)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return ["  ".join([row[0].ljust(widths[0]), row[1].ljust(widths[1])]
                      + [cell.rjust(widths[i]) for i, cell in enumerate(row) if i > 1]).rstrip() for row in rows]


def _diff(argv: list[str]) -> int:
    parser = LineParser(prog="infer_sched_lab.py diff",
                        description="Compare two simulated runs request by request and case by case: who got "
                                    "faster or slower and by how many ticks (admission, first token, end, TTFT, "
                                    "E2E, queue wait, hits, status), largest change first, with the summary rows "
                                    "side by side. The runs may hold different workloads: requests are matched "
                                    "by name and the workload differences are listed.",
                        epilog="Exit codes: 0 no differences, 1 differences, 2 unusable input.")
    parser.add_argument("run_a", metavar="RUN_A", help="the first run's --artifacts directory, e.g. runs/baseline")
    parser.add_argument("run_b", metavar="RUN_B", help="the second run's, e.g. runs/u6-640")
    parser.add_argument("--case", metavar="CASE", help="only this case, e.g. continuous")
    parser.add_argument("--top", type=integer, default=MAX_ROWS, metavar="N",
                        help=f"most changed requests listed per case (default {MAX_ROWS})")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"argument --top: must be a positive integer, got {args.top}")
    result = diff_runs(args.run_a, args.run_b, args.case, args.top)
    print(format_diff(result, args.top), end="")
    return EXIT_DIFFERENT if result.any else EXIT_OK


def command(argv: list[str]) -> int:
    """The ``diff`` sub-command: exit 0 no differences, 1 differences, 2 unusable input or usage."""
    return run_command("infer_sched_lab.py diff", _diff, argv)
