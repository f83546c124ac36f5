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

from ..base.files import open_regular
from .explain_error import ExplainError
from ..output.lanes import WAIT_REASONS
from ..core.clock import RunClock
from ..core.records import TIMELINE_DETAILS
from ..output.vllm_artifacts import preemption_problem
from .vllm_explain import VLLM_STEP_FIELDS, check_step_times, vllm_case_story, vllm_costs

__all__ = ["ExplainError", "explain_request", "MAX_WAIT_LINES"]

#: Most lines describing who held the slots while the request waited, per case.
MAX_WAIT_LINES = 24


def _lines_with(path: str, needle: str, fields: dict):
    """Parsed JSON objects of the lines of ``path`` containing ``needle`` (a cheap pre-filter),
    each checked against ``fields`` (:func:`_checked`)."""
    try:
        with open_regular(path) as handle:
            for number, line in enumerate(handle, 1):
                if needle in line:
                    try:
                        record = json.loads(line)
                    except (ValueError, RecursionError):  # bad JSON, a huge integer, absurd nesting
                        raise ExplainError(f"{path}: line {number}: not valid JSON") from None
                    yield _checked(record, fields, f"{path}: line {number}")
    except OSError as exc:
        raise ExplainError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ExplainError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _is_int(value) -> bool:
    return type(value) is int  # not bool, not float: ticks and tokens are whole numbers


def _is_tick(value) -> bool:
    return _is_int(value) and value >= 0


def _is_token_runs(value) -> bool:
    """``[[first stamp, count], ...]``: ticks >= 0, counts >= 1 (a reduced run's requests.jsonl)."""
    return isinstance(value, list) and all(
        isinstance(run, list) and len(run) == 2 and _is_tick(run[0]) and _is_int(run[1]) and run[1] >= 1
        for run in value)


#: Shape checks of the fields explain reads: field -> (test, what it must be, required).
_REQUEST_FIELDS = {
    "case": (lambda v: isinstance(v, str), "a string", True),
    "name": (lambda v: isinstance(v, str), "a string", True),
    "arrival": (_is_tick, "a tick (integer >= 0)", True),
    "admitted_at": (lambda v: v is None or _is_tick(v), "a tick or null", True),
    "first_token_at": (lambda v: v is None or _is_tick(v), "a tick or null", True),
    "done_at": (lambda v: v is None or _is_tick(v), "a tick or null", True),
    "status": (lambda v: isinstance(v, str), "a string", True),
    "prompt_tokens": (_is_tick, "a token count (integer >= 0)", False),
    "hit_tokens": (_is_tick, "a token count (integer >= 0)", False),
    "output_tokens": (_is_tick, "a token count (integer >= 0)", False),
    "output_tokens_emitted": (_is_tick, "a token count (integer >= 0)", False),
    "token_runs": (_is_token_runs, "a list of [first tick, count] pairs", False),
    "token_times": (lambda v: isinstance(v, list) and all(_is_tick(x) for x in v), "a list of ticks", False),
}
_TICK_FIELDS = {
    "case": (lambda v: isinstance(v, str), "a string", True),
    "tick": (_is_tick, "a tick (integer >= 0)", True),
    "active": (lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of names", True),
    "decoded": (lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of names", True),
    "prefilled": (lambda v: isinstance(v, dict) and all(_is_tick(n) for n in v.values()),
                  "an object of name -> tokens", True),
    "budget_used": (_is_tick, "budget units (integer >= 0)", True),
}


def _checked(record, fields: dict, where: str) -> dict:
    """``record`` when it is an object whose ``fields`` have the right shape; else :class:`ExplainError`
    naming ``where`` (file and line), the request when known, and the field."""
    if not isinstance(record, dict):
        raise ExplainError(f"{where}: expected a JSON object")
    who = f" (request {record['name']!r})" if isinstance(record.get("name"), str) else ""
    for field, (test, what, required) in fields.items():
        if field not in record:
            if required:
                raise ExplainError(f"{where}{who}: field '{field}' is missing")
        elif not test(record[field]):
            raise ExplainError(f"{where}{who}: field '{field}' must be {what}, got {json.dumps(record[field])}")
    return record


def _span(start: int, end: int) -> str:
    """Ticks ``start … end`` inclusive, as text."""
    return f"tick {start}" if start == end else f"ticks {start}–{end}"


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
    manifest = _manifest(directory)
    kind = manifest.get("kind")
    if kind is not None:
        raise ExplainError(f"{directory}: is {'an imported real' if kind == 'real' else f'a {kind!r}'} run "
                           "(times in milliseconds, no per-tick record); explain tells simulated runs only")
    quoted = json.dumps(name, ensure_ascii=False)
    rows = [row for row in _lines_with(requests_path, quoted, _REQUEST_FIELDS) if row.get("name") == name]
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
    makespans = _makespans(directory, clock.ticks_per_unit)
    for row in rows:
        _check_times(row, requests_path, makespans.get(row["case"]))
        makespan = makespans.get(row["case"])
        problem = vllm and preemption_problem(row, None if makespan is None else row["arrival"] + makespan,
                                              _async_scheduling(manifest))
        if problem:
            raise ExplainError(f"{requests_path} (request {row['name']!r}, case {row['case']!r}): {problem}")
    detail = _timeline_detail(manifest, directory)
    timeline_path = os.path.join(directory, "timeline.jsonl")
    ticks: dict[str, dict[int, dict]] | None = None
    if detail == "full" and os.path.isfile(timeline_path):
        wanted = {row["case"] for row in rows}
        ticks = {c: {} for c in wanted}
        for record in _lines_with(timeline_path, quoted, VLLM_STEP_FIELDS if vllm else _TICK_FIELDS):
            if record.get("case") in wanted:
                ticks[record["case"]][record["tick"]] = record
        for row in rows:
            if step_clock:
                check_step_times(row, ticks[row["case"]], requests_path, timeline_path)
                continue
            if vllm:   # the vLLM timeline counts its waiting requests instead of naming them
                continue
            # every tick a request waits is a walked tick, so it has a record
            end = row["admitted_at"] if row["admitted_at"] is not None else row["done_at"]
            if end is not None and end - row["arrival"] > len(ticks[row["case"]]):
                raise ExplainError(f"{requests_path} (request {name!r}, case {row['case']!r}): waits "
                                   f"{end - row['arrival']} ticks but {timeline_path} holds only "
                                   f"{len(ticks[row['case']])} ticks naming it; the files disagree")
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    budget, decode_cost = config.get("budget"), config.get("decode_cost")
    static = _static_cases(manifest, directory)
    costs = (f" Budget {budget} units per tick; a decode token costs {decode_cost}, a prefill token 1."
             if budget and decode_cost else "")
    if vllm:
        costs = vllm_costs(manifest)

    first = rows[0]
    units = ("Times are ms of the step model's clock (each engine step lasts "
             f"{_formula(manifest)} ms; a prediction, not a measurement), work is tokens; read from requests.jsonl"
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
                else _case_story(row, case_ticks, budget, row["case"] in static))
    return "\n".join(out) + "\n"


#: Each time of a request line and the time it may not precede (lab.md §3: admitted no earlier than
#: arrival, first token at least a tick after admission, end no earlier than the first token).
_ORDER = (("admitted_at", "arrival", False), ("first_token_at", "admitted_at", True),
          ("first_token_at", "arrival", True), ("done_at", "first_token_at", False), ("done_at", "arrival", False),
          ("done_at", "admitted_at", False))


def _check_times(row: dict, path: str, makespan: int | None) -> None:
    """Refuse a request line whose times are impossible: out of order (``_ORDER``) or, when the
    case's ``makespan`` is known (summary.json), later than ``arrival + makespan``: a tampered
    ``admitted_at`` of 10**15 must never become 10**15 ticks of work. Raises :class:`ExplainError`."""
    where = f"{path} (request {row['name']!r}, case {row['case']!r})"
    for later, earlier, strictly in _ORDER:
        a, b = row.get(later), row.get(earlier)
        if a is not None and b is not None and (a <= b if strictly else a < b):
            raise ExplainError(f"{where}: field '{later}': tick {a} is {'not after' if strictly else 'before'} "
                               f"{earlier} {b}; impossible in a run")
    if makespan is not None:
        for key in ("admitted_at", "first_token_at", "done_at"):
            value = row.get(key)
            if value is not None and value - row["arrival"] > makespan:
                raise ExplainError(f"{where}: field '{key}': tick {value} is more than the case's makespan "
                                   f"({makespan} ticks, summary.json) after its arrival {row['arrival']}; "
                                   "impossible in this run")


def _formula(manifest: dict) -> str:
    """``a + b*prompt + c*decode`` with the run's coefficients (``manifest.json`` ``step_model.step_ms``)."""
    model = manifest.get("step_model") if isinstance(manifest.get("step_model"), dict) else {}
    step = model.get("step_ms") if isinstance(model.get("step_ms"), dict) else {}
    if all(isinstance(step.get(k), (int, float)) and not isinstance(step.get(k), bool) for k in "abc"):
        return f"{step['a']:g} + {step['b']:g}*prompt + {step['c']:g}*decode"
    return "a + b*prompt + c*decode"


def _makespans(directory: str, ticks_per_unit: int = 1) -> dict:
    """Case name -> makespan in ticks from ``summary.json`` (whose makespan is ticks, or ms on a
    step-model run: ``ticks_per_unit`` 1000 turns it into the µs ticks of requests.jsonl); ``{}`` when
    it is absent or unreadable (the timeline, when read, still bounds the work)."""
    try:
        with open_regular(os.path.join(directory, "summary.json")) as handle:
            summary = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return {}
    cases = summary.get("cases") if isinstance(summary, dict) else None
    if ticks_per_unit == 1:
        return {c["case"]: c["makespan"] for c in cases or () if isinstance(c, dict)
                and isinstance(c.get("case"), str) and _is_tick(c.get("makespan"))} if isinstance(cases, list) else {}
    return {c["case"]: round(c["makespan"] * ticks_per_unit) for c in cases or () if isinstance(c, dict)
            and isinstance(c.get("case"), str) and type(c.get("makespan")) in (int, float)
            and 0 <= c["makespan"] < 1e15} if isinstance(cases, list) else {}


def _manifest(directory: str) -> dict:
    """``manifest.json`` of the run, or ``{}`` when it is absent or not a JSON object (the story
    then leaves out the budget)."""
    try:
        with open_regular(os.path.join(directory, "manifest.json")) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def _timeline_detail(manifest: dict, directory: str) -> str:
    """The run's timeline detail (lab.md §7): ``manifest.json``'s ``timeline``, ``"full"`` when absent
    (a full run does not name it); another value is an :class:`ExplainError`."""
    detail = manifest.get("timeline", "full")
    if detail not in TIMELINE_DETAILS:
        raise ExplainError(f"{os.path.join(directory, 'manifest.json')}: field 'timeline' must be one of "
                           f"{', '.join(TIMELINE_DETAILS)}, got {json.dumps(detail)}")
    return detail


def _static_cases(manifest: dict, directory: str) -> set:
    """Names of the run's static-batching cases (``manifest.json`` ``cases``; ``static`` if absent).
    An entry whose ``case`` is not a string is an :class:`ExplainError`."""
    cases = manifest.get("cases")
    if not isinstance(cases, list):
        return {"static"}
    for index, entry in enumerate(cases):
        if isinstance(entry, dict) and not isinstance(entry.get("case"), str):
            raise ExplainError(f"{os.path.join(directory, 'manifest.json')}: cases[{index}]: field 'case' must be "
                               f"a string, got {json.dumps(entry.get('case'))}")
    return {c["case"] for c in cases if isinstance(c, dict) and c.get("batching") == "static"}


def _case_story(row: dict, ticks: dict[int, dict] | None, budget, static: bool = False) -> list[str]:
    name, arrival, admitted, end = row["name"], row["arrival"], row["admitted_at"], row["done_at"]
    lines = [f"  arrival      tick {arrival}"]
    queue_end = admitted if admitted is not None else end
    if queue_end is not None and queue_end > arrival:
        lines.append(f"  waiting      {_span(arrival, queue_end - 1)} ({queue_end - arrival} ticks in the queue, "
                     f"{WAIT_REASONS[static]})")
    if admitted is None:
        lines.append("  admission    never")
    else:
        hit = row.get("hit_tokens", 0)
        lines.append(f"  admission    tick {admitted}, "
                     + (f"cache hit: {hit} prefix tokens skipped" if hit else "no cache hit"))
    stalled: list[int] = []
    if ticks is not None and admitted is not None:
        lines += _prefill_lines(row, ticks, stalled)
    first = row["first_token_at"]
    if first is not None:
        lines.append(f"  first token  tick {first} (TTFT {first - arrival})")
    else:
        lines.append("  first token  none")
    emitted, wanted = row.get("output_tokens_emitted"), row.get("output_tokens")
    if row["status"] == "ok":
        lines.append(f"  end          tick {end}, ok, {emitted} of {wanted} tokens (E2E {end - arrival})")
    else:
        lines.append(f"  end          tick {end}, {row['status']} with {emitted} of {wanted} tokens "
                     "(no latency counted)")
    lines.append(f"  hit tokens   {row.get('hit_tokens', 0)}")
    times = row.get("token_times") or []
    if row["status"] == "ok" and len(times) >= 2:
        lines.append(f"  token times  {_times_text(times)}")
    # A gap of g > 1 between tokens stamped a and b: the decodes of ticks a .. b − 2 were skipped.
    skipped = [tick for a, b in zip(times, times[1:]) for tick in range(a, b - 1)]
    if skipped:
        lines.append(f"  no budget    {', '.join(_runs_text(skipped))} (decoding, but the budget was spent "
                     "before its turn)")
    runs = row.get("token_runs")
    if runs:
        spans = ", ".join(_span(start, start + count - 1) for start, count in runs)
        lines.append(f"  token runs   {spans} ({sum(count for _, count in runs)} tokens in {len(runs)} "
                     f"run{'s' if len(runs) > 1 else ''})")
    if ticks is not None:
        waited = list(range(arrival, queue_end if queue_end is not None else arrival)) + stalled + skipped
        lines += _wait_lines(name, waited, ticks, budget)
    return lines


def _times_text(times: list[int]) -> str:
    """``ticks 2, 3, 4, 14: gaps 1, 1, 10; TPOT (14 − 2) / 3 = 4, largest gap 10`` (lab.md §5), the
    middle of a long list elided; ``ticks 41–56, one per tick (TPOT 1)`` when no decode was skipped."""
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    if max(gaps) == 1:
        return f"ticks {times[0]}–{times[-1]}, one per tick (TPOT 1)"
    shown = ", ".join(map(str, times)) if len(times) <= 12 else \
        f"{', '.join(map(str, times[:5]))}, …, {', '.join(map(str, times[-5:]))}"
    gap_text = f"gaps {', '.join(map(str, gaps))}" if len(gaps) <= 12 else f"{len(gaps)} gaps"
    span, count = times[-1] - times[0], len(times) - 1
    tpot = span / count
    tpot_text = str(span // count) if span % count == 0 else f"{tpot:.2f}"
    return (f"ticks {shown}: {gap_text}; TPOT ({times[-1]} − {times[0]}) / {count} = {tpot_text}, "
            f"largest gap {max(gaps)}")


def _prefill_lines(row: dict, ticks: dict[int, dict], stalled: list[int]) -> list[str]:
    """One line per prefill tick; ``stalled`` collects admitted ticks with no prefill budget."""
    name = row["name"]
    need = row.get("prompt_tokens", 0) - row.get("hit_tokens", 0)
    done, lines = 0, []
    tick = row["admitted_at"]
    last = row["done_at"] if row["done_at"] is not None else max(ticks, default=tick)
    while done < need and tick < last and tick in ticks:
        tokens = ticks[tick]["prefilled"].get(name, 0)
        if tokens == 0:
            stalled.append(tick)
        else:
            done += tokens
            label = "prefill" if len(lines) == 0 else ""
            tail = f" (prefill complete, {done} of {row.get('prompt_tokens')} prompt tokens computed)" if done >= need else ""
            lines.append(f"  {label:<12} tick {tick}: {tokens} tokens{tail}")
        tick += 1
    if stalled:
        lines.insert(0, f"  no budget    {', '.join(_runs_text(stalled))} (admitted, but the budget was spent "
                        "before its turn)")
    return lines


def _runs_text(values: list[int]) -> list[str]:
    runs, start = [], None
    for i, value in enumerate(values):
        if start is None:
            start = value
        if i + 1 == len(values) or values[i + 1] != value + 1:
            runs.append(_span(start, value))
            start = None
    return runs


def _wait_lines(name: str, waited: list[int], ticks: dict[int, dict], budget) -> list[str]:
    """Who held the slots and the budget in each tick ``name`` waited, equal ticks grouped."""
    if not waited:
        return []
    lines = [f"  while it waited, the slots (every active request, {name} too once admitted) and the budget went to:"]
    groups: list[tuple[int, int, str]] = []
    for tick in waited:
        record = ticks.get(tick)
        if record is None:
            text = "(tick not in timeline.jsonl)"
        else:
            holders = record["active"]  # the request itself too, once admitted (then it lacked budget)
            spent = [f"decode {' '.join(record['decoded'])}"] if record["decoded"] else []
            prefills = [f"{n} {t}" for n, t in record["prefilled"].items() if n != name]
            if prefills:
                spent.append("prefill " + ", ".join(prefills))
            used = f"{record['budget_used']}/{budget}" if budget else f"{record['budget_used']}"
            text = f"slots {' '.join(holders) or '(none)'} | budget {used}: {'; '.join(spent) or 'nothing'}"
        if groups and groups[-1][1] == tick - 1 and groups[-1][2] == text:
            groups[-1] = (groups[-1][0], tick, text)
        else:
            groups.append((tick, tick, text))
    for start, end, text in groups[:MAX_WAIT_LINES]:
        lines.append(f"    {_span(start, end):<13} {text}")
    if len(groups) > MAX_WAIT_LINES:
        lines.append(f"    … {len(groups) - MAX_WAIT_LINES} more lines: see timeline.jsonl")
    return lines


def _async_scheduling(manifest: dict) -> bool:
    """Whether a vLLM-engine run's manifest says it ran with async scheduling (vllm-engine.md §7)."""
    config = manifest.get("config")
    return isinstance(config, dict) and config.get("async_scheduling") is True
