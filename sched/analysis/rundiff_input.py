"""What ``diff`` reads of a finished run (lab.md §7, README §12.5): ``manifest.json``, ``summary.json``,
``requests.jsonl`` and ``workload.json``, each value checked where it is read.

Bad input (a missing file, bad JSON, a row or line with an impossible value, a request line given
twice or missing) is an :class:`~sched.base.cmdline.InputError` with one line naming the file, the
line, the request and the field. :mod:`sched.analysis.rundiff` compares what these return.
"""

from __future__ import annotations

import json
import os
from array import array

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
                record = _plain_object(line)   # the common line, decoded quickly; any doubt: parse_json decides
                if record is None:
                    record = parse_json(line, f"{path}: line {number}")
                if not isinstance(record, dict) or not isinstance(record.get("case"), str) \
                        or not isinstance(record.get("name"), str):
                    raise InputError(f"{path}: line {number}: must be an object with string fields 'case' and 'name'")
                where = f"{path}: line {number} (request {record['name']!r})"
                if record["case"] not in cases:
                    raise InputError(f"{where}: field 'case': {record['case']!r} is not a case of summary.json")
                if record["name"] not in names:
                    raise InputError(f"{where}: field 'name': not a request of workload.json")
                values = [*map(record.get, keys)]
                if unit == "ms" or {*map(type, values)} != _WHOLE or min(values) < 0:   # else: all whole, >= 0
                    for field in keys:
                        if unit == "ms" and field not in record:
                            raise InputError(f"{where}: field '{field}' is missing "
                                             "(manifest.json says the run's times are ms)")
                        if not (_is_ms if field.endswith("_ms") else _is_count)(record.get(field)):
                            what = "a number of ms >= 0" if field.endswith("_ms") else "a whole number >= 0"
                            raise InputError(f"{where}: field '{field}' must be "
                                             f"{what} or null, got {json.dumps(record.get(field))}")
                # Never preempted (0 and []): nothing impossible; anything else is checked in full.
                if vllm and not (type(record.get("num_preemptions")) is int and record["num_preemptions"] == 0
                                 and record.get("preempted_at") == []):
                    problem = preemption_problem(record, async_scheduling=async_scheduling)
                    if problem:
                        raise InputError(f"{where}: {problem}")
                yield (record["case"], record["name"]), (str(record.get("status")), *values), where
    except FileNotFoundError:
        raise InputError(f"{path}: missing (is {directory} a run's --artifacts directory?)") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None


_WHOLE = {int}
_RAW_DECODE = json.JSONDecoder().raw_decode


def _plain_object(line: str):
    """The JSON object on ``line`` when it is one with nothing around it but the line's end, as
    :func:`json.loads` decodes it; ``None`` otherwise (then :func:`parse_json` decides)."""
    try:
        record, end = _RAW_DECODE(line)
    except (ValueError, RecursionError):
        return None
    return record if type(record) is dict and (end == len(line) or line[end:] == "\n") else None


def second_line_error(where: str, case: str) -> InputError:
    return InputError(f"{where}: field 'name': a second line for this request in case {case!r}")


def missing_line_error(directory: str, cases, names, seen) -> InputError:
    case, name = next((c, n) for c in cases for n in names if not seen((c, n)))
    return InputError(f"{os.path.join(directory, 'requests.jsonl')}: case {case!r} (request {name!r}): no line for "
                      "this request of workload.json")


class RequestValues:
    """One run's ``requests.jsonl`` reduced to a few numbers per request (:func:`request_values`):
    per case, an array of status codes and, row after row, the :data:`REQUEST_FIELDS` values and
    the line's place, indexed by the request's place in ``workload.json`` (``names``: name ->
    index); 4 bytes a value (8, or a list, when a value needs it: a larger number, a float of ms),
    not a dict or a tuple per line. ``None`` is kept as -1 (every value is >= 0).
    """

    _ABSENT, _SEEN = -1, -2   # status codes of a request without a line (yet), and of one taken
    _WIDTH = len(REQUEST_FIELDS) + 1   # values per request: the fields, then the place

    def __init__(self, cases, names: dict) -> None:
        self.names, size = names, len(names)
        self.statuses: list[str] = []          # the status strings, by code
        self._codes: dict[str, int] = {}
        # case -> [status codes, the values of every request row after row]
        self.cases = {case: [array("i", [self._ABSENT]) * size, array("i", bytes(4 * self._WIDTH * size))]
                      for case in cases}
        self.count = 0

    def add(self, case: str, name: str, row: tuple, place: int) -> bool:
        """Keep ``row`` (``(status, *the REQUEST_FIELDS values)``) of request ``name`` in ``case``,
        its ``place`` among the case's lines; ``False`` (nothing kept) when it already has a line."""
        columns = self.cases[case]
        index = self.names[name]
        if columns[0][index] != self._ABSENT:
            return False
        code = self._codes.get(row[0])
        if code is None:
            code = self._codes[row[0]] = len(self.statuses)
            self.statuses.append(row[0])
        at, values, row = index * self._WIDTH, columns[1], (*row[1:], place)
        try:
            values[at:at + self._WIDTH] = array(values.typecode, row)
        except (TypeError, OverflowError, AttributeError):   # a None, a value the array cannot hold, a list
            row = [-1 if value is None else value for value in row]
            while True:
                try:
                    values[at:at + self._WIDTH] = array(values.typecode, row) if type(values) is array else row
                    break
                except (TypeError, OverflowError):   # widened: 8-byte integers, else a list (never refuses)
                    wide = values.typecode == "i" and all(type(v) is int and -2**63 <= v < 2**63 for v in row)
                    values = columns[1] = array("q", values) if wide else values.tolist()
        columns[0][index] = code
        self.count += 1
        return True

    def take(self, case: str, name: str):
        """``(status, *the REQUEST_FIELDS values, place)`` of request ``name`` in ``case``, marked as
        taken; ``None`` when the run has no such line, :data:`TAKEN` when it was taken before."""
        columns = self.cases.get(case)
        index = self.names.get(name)
        if columns is None or index is None or columns[0][index] == self._ABSENT:
            return None
        code = columns[0][index]
        if code == self._SEEN:
            return TAKEN
        columns[0][index] = self._SEEN
        at = index * self._WIDTH
        values = columns[1][at:at + self._WIDTH]
        values = values.tolist() if type(values) is array else values
        if -1 in values:   # a place is never -1
            values = [None if value == -1 else value for value in values]
        return (self.statuses[code], *values)

    def taken(self, key: tuple) -> bool:
        """Whether the line of ``key`` ``(case, name)`` was taken (:meth:`take`)."""
        columns, index = self.cases.get(key[0]), self.names.get(key[1])
        return columns is not None and index is not None and columns[0][index] == self._SEEN


#: What :meth:`RequestValues.take` returns for a line taken before.
TAKEN = object()


def request_values(directory: str, cases, names: dict, unit: str = "ticks", vllm: bool = False,
                   async_scheduling: bool = False) -> RequestValues:
    """The :class:`RequestValues` of ``requests.jsonl`` (:func:`request_lines`; ``names``:
    workload.json's name -> index): per case and request ``(status, *the REQUEST_FIELDS values,
    place)`` (``place``: the line's rank among its case's lines, from 0). A simulated run has exactly
    one line per request of ``names`` and case of ``cases`` (summary.json): a second line or a
    missing one is refused."""
    rows = RequestValues(cases, names)
    places = dict.fromkeys(cases, 0)
    for key, row, where in request_lines(directory, cases, names, unit, vllm, async_scheduling):
        if not rows.add(key[0], key[1], row, places[key[0]]):
            raise second_line_error(where, key[0])
        places[key[0]] += 1
    if rows.count != len(cases) * len(names):
        raise missing_line_error(directory, cases, names, lambda key: rows.cases[key[0]][0][names[key[1]]] >= 0)
    return rows


def same_text(text: str, path: str) -> bool:
    """Whether the text of the file ``path`` is ``text``, read a chunk at a time (never held whole)."""
    try:
        with open_regular(path) as handle:
            at = 0
            while True:
                chunk = handle.read(1 << 20)
                if not chunk:
                    return at == len(text)
                if not text.startswith(chunk, at):
                    return False
                at += len(chunk)
    except FileNotFoundError:
        raise InputError(f"{path}: missing (is {os.path.dirname(path) or '.'} a run's --artifacts directory?)") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None


def name_index(names) -> dict[str, int]:
    """name -> its index among the distinct ``names`` (in order; a name given twice keeps its first place)."""
    return dict(zip(dict.fromkeys(names), range(len(names))))


def workload_by_name(directory: str, text: str | None = None) -> dict[str, dict]:
    """name -> request of ``workload.json`` (``text``: the file's text, when already read)."""
    path = os.path.join(directory, "workload.json")
    data = _read_json(path) if text is None else parse_json(text, path)
    return {str(r.get("name")): r for r in _object_list(data, path, "requests")}
