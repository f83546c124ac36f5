"""What ``explain`` reads from a run directory (lab.md §7), and the checks that refuse a file no run
could have written: each JSON line's fields and their shapes, the order of a request's times and
their bound by the case's makespan, ``manifest.json``'s timeline detail and static cases,
``summary.json``'s makespans. Every refusal is one :class:`ExplainError` naming the file, the
line or request, and the field.
"""

from __future__ import annotations

import json
import os

from ..base.cmdline import InputError
from ..base.files import open_regular
from ..core.records import TIMELINE_DETAILS
from ..output.vllm_artifacts import async_scheduling_of
from .explain_error import ExplainError
from .run_manifest import read_manifest as checked_manifest

__all__ = ["lines_with", "tick_problem", "checked", "REQUEST_FIELDS", "TICK_FIELDS", "check_times", "step_formula", "case_makespans",
           "read_manifest", "timeline_detail", "static_cases", "async_scheduling"]


def lines_with(path: str, needle: str, fields: dict, rule=None):
    """Parsed JSON objects of the lines of ``path`` containing ``needle`` (a cheap pre-filter),
    each checked against ``fields`` (:func:`checked`) and, when given, ``rule(record)``: a
    sentence saying what is impossible about the record (e.g. :func:`tick_problem`), or ``None``."""
    try:
        with open_regular(path) as handle:
            for number, line in enumerate(handle, 1):
                if needle in line:
                    try:
                        record = json.loads(line)
                    except (ValueError, RecursionError):  # bad JSON, a huge integer, absurd nesting
                        raise ExplainError(f"{path}: line {number}: not valid JSON") from None
                    record = checked(record, fields, f"{path}: line {number}")
                    problem = rule and rule(record)
                    if problem:
                        raise ExplainError(f"{path}: line {number} (case {record['case']!r}, tick {record['tick']}): "
                                           f"{problem}")
                    yield record
    except OSError as exc:
        raise ExplainError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ExplainError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def tick_problem(record: dict, budget: int | None) -> str | None:
    """What is impossible about a lab tick of ``timeline.jsonl`` (lab.md §3): more budget spent, or
    more prefill tokens, than the run's budget per tick (``manifest.json``); ``None`` if nothing."""
    if budget is None:
        return None
    if record["budget_used"] > budget:
        return f"field 'budget_used': {record['budget_used']} is more than the run's budget {budget} per tick"
    prefilled = sum(record["prefilled"].values())
    if prefilled > budget:
        return f"field 'prefilled': {prefilled} tokens in one tick, more than the run's budget {budget}"
    return None


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
REQUEST_FIELDS = {
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
TICK_FIELDS = {
    "case": (lambda v: isinstance(v, str), "a string", True),
    "tick": (_is_tick, "a tick (integer >= 0)", True),
    "active": (lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of names", True),
    "decoded": (lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of names", True),
    "prefilled": (lambda v: isinstance(v, dict) and all(_is_tick(n) for n in v.values()),
                  "an object of name -> tokens", True),
    "budget_used": (_is_tick, "budget units (integer >= 0)", True),
}


def checked(record, fields: dict, where: str) -> dict:
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



#: Each time of a request line and the time it may not precede (lab.md §3: admitted no earlier than
#: arrival, first token at least a tick after admission, end no earlier than the first token).
_ORDER = (("admitted_at", "arrival", False), ("first_token_at", "admitted_at", True),
          ("first_token_at", "arrival", True), ("done_at", "first_token_at", False), ("done_at", "arrival", False),
          ("done_at", "admitted_at", False))


def check_times(row: dict, path: str, makespan: int | None) -> None:
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
    _check_token_runs(row, where, makespan)


def _check_token_runs(row: dict, where: str, makespan: int | None) -> None:
    """Refuse ``token_runs`` (``[[first stamp, count], ...]``, ticks and tokens) that tell more tokens
    than ``output_tokens_emitted``, or a stamp after ``done_at`` or past ``arrival + makespan``: a
    tampered count of 10**9 must never become 10**9 stamps in memory. Raises :class:`ExplainError`."""
    runs = row.get("token_runs")
    if not runs:
        return
    total = sum(count for _, count in runs)
    emitted = row.get("output_tokens_emitted")
    if emitted is not None and total != emitted:
        raise ExplainError(f"{where}: field 'token_runs': {total} tokens, but output_tokens_emitted is {emitted}; "
                           "impossible in a run")
    last = max(start + count - 1 for start, count in runs)
    if row.get("done_at") is not None and last > row["done_at"]:
        raise ExplainError(f"{where}: field 'token_runs': a token stamped {last}, after done_at {row['done_at']}; "
                           "impossible in a run")
    if makespan is not None and last - row["arrival"] > makespan:
        raise ExplainError(f"{where}: field 'token_runs': a token stamped {last}, more than the case's makespan "
                           f"({makespan} ticks, summary.json) after its arrival {row['arrival']}; impossible in this run")


def step_formula(manifest: dict, unit: str = "") -> str:
    """``a + b*prompt + c*decode`` with the run's coefficients (``manifest.json`` ``step_model.step_ms``).

    A term ``step_model.identified`` marks false (the data could not identify it,
    :mod:`sched.timing.identify`) is written ``?`` and named after the formula with the value the run
    used, e.g. ``24.65 + 0.08477*prompt + ?*decode ms (c unidentified; the run held it at 1e-09)``
    with ``unit`` ``" ms"`` (written after the formula, before the note).
    """
    model = manifest.get("step_model") if isinstance(manifest.get("step_model"), dict) else {}
    step = model.get("step_ms") if isinstance(model.get("step_ms"), dict) else {}
    known = model.get("identified") if isinstance(model.get("identified"), dict) else {}
    unknown = [k for k in "abcd" if known.get(k) is False]
    if all(isinstance(step.get(k), (int, float)) and not isinstance(step.get(k), bool) for k in "abc"):
        d = step.get("d") if isinstance(step.get("d"), (int, float)) and not isinstance(step.get("d"), bool) else 0

        def term(key, value, name):
            return f"?*{name}" if key in unknown else f"{value:g}*{name}"
        kv = f" + {term('d', d, 'kv_token')}" if d or "d" in unknown else ""
        text = f"{step['a']:g} + {term('b', step['b'], 'prompt')} + {term('c', step['c'], 'decode')}{kv}{unit}"
        if unknown:
            values = {"a": step["a"], "b": step["b"], "c": step["c"], "d": d}
            text += (f" ({', '.join(unknown)} unidentified; the run held {'it' if len(unknown) == 1 else 'them'} at "
                     f"{', '.join(f'{values[k]:g}' for k in unknown)})")
        return text
    return "a + b*prompt + c*decode" + unit


def case_makespans(directory: str, ticks_per_unit: int = 1) -> dict:
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


def read_manifest(directory: str) -> dict:
    """``manifest.json`` of the run checked by :func:`sched.analysis.run_manifest.read_manifest`
    (every value the story tells: the budget, the KV size, the step model), or ``{}`` when it is
    absent (the story then leaves out the budget). Raises :class:`ExplainError`."""
    if not os.path.lexists(os.path.join(directory, "manifest.json")):
        return {}
    return checked_manifest(directory, ExplainError)


def timeline_detail(manifest: dict, directory: str) -> str:
    """The run's timeline detail (lab.md §7): ``manifest.json``'s ``timeline``, ``"full"`` when absent
    (a full run does not name it); another value is an :class:`ExplainError`."""
    detail = manifest.get("timeline", "full")
    if detail not in TIMELINE_DETAILS:
        raise ExplainError(f"{os.path.join(directory, 'manifest.json')}: field 'timeline' must be one of "
                           f"{', '.join(TIMELINE_DETAILS)}, got {json.dumps(detail)}")
    return detail


def static_cases(manifest: dict, directory: str) -> set:
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


def async_scheduling(manifest: dict, where: str) -> bool:
    """Whether a vLLM-engine run's manifest (read from ``where``) says it ran with async scheduling
    (vllm-engine.md §7): the shared reading of :func:`sched.output.vllm_artifacts.async_scheduling_of`;
    a value other than true/false raises :class:`ExplainError` naming the file and field."""
    try:
        return async_scheduling_of(manifest, where)
    except InputError as exc:
        raise ExplainError(str(exc)) from None
