"""``explain NAME``: one request's life across the cases, told from a run's artifacts (lab.md §7–8).

Reads ``requests.jsonl`` (arrival, admission, first token, end, hit tokens) and, when present,
``timeline.jsonl`` (each prefill tick and its tokens; while the request waited, which requests
held the slots and how the budget was spent) and ``manifest.json`` (the budget and decode cost).
A run made with ``--timeline counts`` or ``off`` (lab.md §7; ``manifest.json`` then names its
``"timeline"``) has no per-request tick records: its ``timeline.jsonl`` is never read, the story is
told from ``requests.jsonl`` alone (with its ``token_runs``) and says that per-tick detail needs a
run with ``--timeline full``.
Nothing is simulated again: every number printed is read from those files. Only simulated runs are
told: an imported real run (``import-results``, times in milliseconds) is refused.

Example (``python3 infer_sched_lab.py explain S7 --artifacts runs/baseline``), in part::

    == continuous+APC+chunk32 ==
      arrival      tick 12
      waiting      ticks 12–38 (27 ticks in the queue, no free slot)
      admission    tick 39, cache hit: 128 prefix tokens skipped
      prefill      tick 39: 16 tokens (prefill complete, 16 of 144 prompt tokens computed)
      first token  tick 41 (TTFT 29)
"""

from __future__ import annotations

import json
import os

from ..core.clock import RunClock
from ..output.vllm_artifacts import preemption_problem
from .explain_error import ExplainError
from .explain_input import (REQUEST_FIELDS, TICK_FIELDS, async_scheduling, case_makespans, check_times, lines_with,
                            read_manifest, static_cases, step_formula, tick_problem, timeline_detail)
from .lab_explain import MAX_WAIT_LINES, lab_case_story
from .vllm_explain import (VLLM_STEP_FIELDS, check_step_times, check_tick_steps, step_problem, vllm_case_story,
                           vllm_costs)

__all__ = ["ExplainError", "explain_request", "MAX_WAIT_LINES"]


def explain_request(name: str, directory: str, case: str | None = None) -> str:
    """The life of request ``name`` in every case (or only ``case``) of the run in ``directory``.

    Returns text; ticks are the lab's abstract time, tokens are prompt or output tokens, budget
    in budget units. A queued request's wait is "no free slot" in a continuous case and "static
    batch still running" in the static case (:data:`sched.output.lanes.WAIT_REASONS`). Raises
    :class:`ExplainError` (one line naming the path, the line, the request and the field) when the
    directory or ``requests.jsonl`` is missing, the name or case is unknown, a line is not JSON or
    a field explain reads has the wrong type (e.g. ``first_token_at`` ``"x"``), or the directory
    is not a simulated run (``manifest.json`` with a ``kind``, e.g. an ``import-results`` run in
    milliseconds), or its ``manifest.json`` names a ``timeline`` detail other than full, counts or
    off. Without ``timeline.jsonl``, or when the run's timeline is ``counts`` or ``off``, the per-tick
    parts are left out and the text says so.
    """
    if not os.path.isdir(directory):
        raise ExplainError(f"{directory}: no such artifacts directory")
    requests_path = os.path.join(directory, "requests.jsonl")
    if not os.path.isfile(requests_path):
        raise ExplainError(f"{requests_path}: missing (is {directory} a run's --artifacts directory?)")
    manifest = read_manifest(directory)
    kind = manifest.get("kind")
    if kind is not None:
        raise ExplainError(f"{directory}: is {'an imported real' if kind == 'real' else f'a {kind!r}'} run "
                           "(times in milliseconds, no per-tick record); explain tells simulated runs only")
    quoted = json.dumps(name, ensure_ascii=False)
    rows = [row for row in lines_with(requests_path, quoted, REQUEST_FIELDS) if row.get("name") == name]
    if not rows:
        raise ExplainError(f"{requests_path}: no request named {name!r}")
    if case is not None:
        all_rows, rows = rows, [row for row in rows if row.get("case") == case]
        if not rows:
            raise ExplainError(f"{requests_path}: request {name!r} has no case {case!r}; its cases are "
                               f"{', '.join(row['case'] for row in all_rows)}")

    # The run's engine and clock, read once: a vLLM-engine run tells steps and preemptions
    # (sched.analysis.vllm_explain); a --step-model run (vllm-engine.md §6) has µs tick fields and a
    # summary.json in ms, and its story is told in ms.
    clock = RunClock.from_manifest(manifest)
    step_clock, vllm = clock.in_ms, clock.is_vllm
    makespans = case_makespans(directory, clock.ticks_per_unit)
    for row in rows:
        check_times(row, requests_path, makespans.get(row["case"]))
        makespan = makespans.get(row["case"])
        problem = vllm and preemption_problem(row, None if makespan is None else row["arrival"] + makespan,
                                              vllm and async_scheduling(manifest, os.path.join(directory, "manifest.json")))
        if problem:
            raise ExplainError(f"{requests_path} (request {row['name']!r}, case {row['case']!r}): {problem}")
    detail = timeline_detail(manifest, directory)
    timeline_path = os.path.join(directory, "timeline.jsonl")
    ticks: dict[str, dict[int, dict]] | None = None
    if detail == "full" and os.path.isfile(timeline_path):
        wanted = {row["case"] for row in rows}
        ticks = {c: {} for c in wanted}
        budget = (manifest.get("config") or {}).get("max_num_batched_tokens" if vllm else "budget")
        rule = (lambda r: step_problem(r, budget)) if vllm else (lambda r: tick_problem(r, budget))
        for record in lines_with(timeline_path, quoted, VLLM_STEP_FIELDS if vllm else TICK_FIELDS, rule):
            if record.get("case") in wanted:
                ticks[record["case"]][record["tick"]] = record
        for row in rows:
            if step_clock:
                check_step_times(row, ticks[row["case"]], requests_path, timeline_path)
                continue
            if vllm:   # the vLLM timeline counts its waiting requests instead of naming them
                check_tick_steps(row, ticks[row["case"]], requests_path, timeline_path)
                continue
            # every tick a request waits is a walked tick, so it has a record
            end = row["admitted_at"] if row["admitted_at"] is not None else row["done_at"]
            if end is not None and end - row["arrival"] > len(ticks[row["case"]]):
                raise ExplainError(f"{requests_path} (request {name!r}, case {row['case']!r}): waits "
                                   f"{end - row['arrival']} ticks but {timeline_path} holds only "
                                   f"{len(ticks[row['case']])} ticks naming it; the files disagree")
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    budget, decode_cost = config.get("budget"), config.get("decode_cost")
    static = static_cases(manifest, directory)
    costs = (f" Budget {budget} units per tick; a decode token costs {decode_cost}, a prefill token 1."
             if budget and decode_cost else "")
    if vllm:
        costs = vllm_costs(manifest)

    first = rows[0]
    units = ("Times are ms of the step model's clock (each engine step lasts "
             f"{step_formula(manifest, ' ms')}; a prediction, not a measurement), work is tokens; read from requests.jsonl"
             if step_clock else
             "Times are ticks (one engine step each), work is tokens; read from requests.jsonl" if vllm else
             "Times are ticks (abstract), work is budget units; read from requests.jsonl")
    arrives = f"at {clock.at(first['arrival'])}"
    out = [f"{name}: arrives {arrives}, prompt {first.get('prompt_tokens', '?')} tokens, "
           f"{first.get('output_tokens', '?')} output tokens ({directory})",
           units + (" and timeline.jsonl." if ticks is not None else "." if detail != "full" else
                    ". timeline.jsonl is not present: no per-tick detail.") + costs]
    if detail != "full":
        out.append(f"This run's timeline is {detail!r} (manifest.json): "
                   + ("per-step detail (prefill steps, who needed the blocks)" if step_clock else
                      "per-tick detail (prefill ticks, who held the slots)") + " needs a run with --timeline full.")
    for row in rows:
        out.append("")
        out.append(f"== {row['case']} ==")
        case_ticks = None if ticks is None else ticks[row["case"]]
        out += (vllm_case_story(row, case_ticks, clock) if vllm
                else lab_case_story(row, case_ticks, budget, row["case"] in static))
    return "\n".join(out) + "\n"
