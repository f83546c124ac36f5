"""What ``diff`` reads of a finished run (lab.md §7, README §12.5): ``manifest.json``, ``summary.json``,
``requests.jsonl`` and ``workload.json``, each value checked where it is read.

Bad input (a missing file, bad JSON, a row or line with an impossible value, a request line given
twice or missing) is an :class:`~sched.base.cmdline.InputError` with one line naming the file, the
line, the request and the field. :mod:`sched.analysis.rundiff` compares what these return.
"""

from __future__ import annotations

import json
import os

from ..base.cmdline import InputError, parse_json
from ..base.files import open_regular, read_regular_text
from .run_manifest import read_manifest
from .trace import check_summary_row
from ..output.vllm_artifacts import preemption_problem


#: Per-request fields compared: requests.jsonl field -> label in the report (ticks, tokens for hits).
REQUEST_FIELDS = {"admitted_at": "admission", "first_token_at": "first token", "done_at": "end",
                  "ttft": "TTFT", "e2e": "E2E", "queue_wait": "queue wait", "hit_tokens": "hits"}
#: The ms fields of a step-model run's request line, by tick field (sched.timing.msrun).
MS_REQUEST_FIELDS = {"admitted_at": "admitted_ms", "first_token_at": "first_token_ms", "done_at": "done_ms",
                     "ttft": "ttft_ms", "e2e": "e2e_ms", "queue_wait": "queue_wait_ms", "hit_tokens": "hit_tokens"}

def read_text(path: str) -> str:
    try:
        return read_regular_text(path)
    except FileNotFoundError:
        raise InputError(f"{path}: missing (is {os.path.dirname(path) or '.'} a run's --artifacts directory?)") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None


def _read_json(path: str):
    return parse_json(read_text(path), path)


def _object_list(data, path: str, field: str) -> list[dict]:
    if not isinstance(data, dict) or not isinstance(data.get(field), list) or \
            not all(isinstance(item, dict) for item in data[field]):
        raise InputError(f"{path}: field '{field}' must be a list of objects")
    return data[field]


def diff_manifest(directory: str) -> dict:
    if not os.path.isdir(directory):
        raise InputError(f"{directory}: no such run directory")
    manifest = read_manifest(directory)
    if manifest.get("kind") is not None:
        raise InputError(f"{directory}: is a {manifest['kind']!r} run, not a simulated one; diff compares two "
                         "simulated runs (ticks)")
    return manifest


def _is_count(value) -> bool:
    return value is None or (type(value) is int and value >= 0)


def _is_ms(value) -> bool:
    return value is None or (type(value) in (int, float) and value >= 0)


def summary_rows(directory: str) -> dict[str, dict]:
    """case -> row of ``summary.json``, each row checked by the validator ``compare`` uses
    (:func:`sched.analysis.trace.check_summary_row`): a string ``"56"`` or a negative P95 is refused here."""
    path = os.path.join(directory, "summary.json")
    rows = {}
    for row in _object_list(_read_json(path), path, "cases"):
        case = row.get("case")
        if not isinstance(case, str) or case in rows:
            raise InputError(f"{path}: field 'case': must be a distinct string, got {json.dumps(case)}")
        check_summary_row(row, f"{path}: case {case!r}")
        rows[case] = row
    return rows


def request_lines(directory: str, cases, names, unit: str = "ticks", vllm: bool = False,
                   async_scheduling: bool = False):
    """Yield ``((case, name), (status, *the REQUEST_FIELDS values))`` for each line of
    ``requests.jsonl`` (a tuple, not the parsed line: a large run holds millions of lines), each
    line checked; with ``unit`` ``"ms"`` the times are the line's ``*_ms`` fields
    (:data:`MS_REQUEST_FIELDS`). Lines of another case or request (``cases``: summary.json's,
    ``names``: workload.json's) are refused; so are impossible preemption fields of a ``vllm`` run
    (:func:`sched.output.vllm_artifacts.preemption_problem`; ``async_scheduling``: the run's manifest
    says it ran so). The caller refuses a second or a missing line (:func:`request_values`, :func:`diff_runs`)."""
    path = os.path.join(directory, "requests.jsonl")
    keys = list(MS_REQUEST_FIELDS.values()) if unit == "ms" else list(REQUEST_FIELDS)
    try:
        with open_regular(path) as handle:
            for number, line in enumerate(handle, 1):
                where = f"{path}: line {number}"
                record = parse_json(line, where)
                if not isinstance(record, dict) or not isinstance(record.get("case"), str) \
                        or not isinstance(record.get("name"), str):
                    raise InputError(f"{where}: must be an object with string fields 'case' and 'name'")
                where = f"{where} (request {record['name']!r})"
                if record["case"] not in cases:
                    raise InputError(f"{where}: field 'case': {record['case']!r} is not a case of summary.json")
                if record["name"] not in names:
                    raise InputError(f"{where}: field 'name': not a request of workload.json")
                for field in keys:
                    if unit == "ms" and field not in record:
                        raise InputError(f"{where}: field '{field}' is missing "
                                         "(manifest.json says the run's times are ms)")
                    if not (_is_ms if field.endswith("_ms") else _is_count)(record.get(field)):
                        what = "a number of ms >= 0" if field.endswith("_ms") else "a whole number >= 0"
                        raise InputError(f"{where}: field '{field}' must be "
                                         f"{what} or null, got {json.dumps(record.get(field))}")
                problem = vllm and preemption_problem(record, async_scheduling=async_scheduling)
                if problem:
                    raise InputError(f"{where}: {problem}")
                yield (record["case"], record["name"]), (str(record.get("status")), *(record.get(f) for f in keys)), \
                    where
    except FileNotFoundError:
        raise InputError(f"{path}: missing (is {directory} a run's --artifacts directory?)") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None


def second_line_error(where: str, case: str) -> InputError:
    return InputError(f"{where}: field 'name': a second line for this request in case {case!r}")


def missing_line_error(directory: str, cases, names, seen) -> InputError:
    case, name = next((c, n) for c in cases for n in names if not seen((c, n)))
    return InputError(f"{os.path.join(directory, 'requests.jsonl')}: case {case!r} (request {name!r}): no line for "
                      "this request of workload.json")


def request_values(directory: str, cases, names, unit: str = "ticks", vllm: bool = False,
              async_scheduling: bool = False) -> dict[tuple[str, str], tuple]:
    """(case, name) -> ``(status, *the REQUEST_FIELDS values, place)`` of each line of
    ``requests.jsonl`` (:func:`request_lines`; ``place``: the line's rank among its case's lines,
    from 0). A simulated run has exactly one line per request of ``names`` (workload.json) and case
    of ``cases`` (summary.json): a second line or a missing one is refused."""
    rows = {}
    places = dict.fromkeys(cases, 0)
    for key, row, where in request_lines(directory, cases, names, unit, vllm, async_scheduling):
        if key in rows:
            raise second_line_error(where, key[0])
        rows[key] = (*row, places[key[0]])
        places[key[0]] += 1
    if len(rows) != len(cases) * len(names):
        raise missing_line_error(directory, cases, names, rows.__contains__)
    return rows


def workload_by_name(directory: str, text: str | None = None) -> dict[str, dict]:
    """name -> request of ``workload.json`` (``text``: the file's text, when already read)."""
    path = os.path.join(directory, "workload.json")
    data = _read_json(path) if text is None else parse_json(text, path)
    return {str(r.get("name")): r for r in _object_list(data, path, "requests")}
