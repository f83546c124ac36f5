"""``check RUN_DIR REF_DIR``: an instructor's comparison of a run with a reference run (lab.md §1, §7).

First the identity of the two runs: the workload (its sha256 in ``manifest.json``, and when it
differs every request and field that differs in ``workload.json``) and the configuration (knobs,
policy, timeout, cases). If those differ the artifacts are not compared further (they could not
agree). Otherwise every artifact of the reference is compared:

- ``requests.jsonl``: per (case, request), every field: ``continuous / S7 / first_token_at: got
  40, expected 37``; ``timeline.jsonl``: per (case, tick), every field; ``summary.json``: per
  case, every field; ``workload.json``: per request, every field;
- any other file (``table.txt``, ``summary.csv``, ``timeline.svg``, ``report.html``, …): equal
  text, or a short unified diff.

A file present in the reference and missing from the run is a difference; files only in the run
are ignored. ``manifest.json``'s ``source`` may differ (a replay of ``workload.json`` is the
same run, lab.md §7).
"""

from __future__ import annotations

import difflib
import json
import os

from .run_manifest import read_manifest
from ..base.cmdline import InputError
from ..base.strict_json import strict_json
from ..base.safe_write import ARTIFACT_FILES, directory_kind
from ..base.files import read_regular_text

__all__ = ["CheckError", "compare_runs", "format_report", "first_line", "MAX_PER_FILE"]

#: Most differences listed per artifact (the count of the rest is still given).
MAX_PER_FILE = 20
_DIFF_LINES = 12
_IDENTITY = ("workload_sha256", "num_requests", "policy", "config", "timeout_ticks", "cases")
_IDENTITY_PART = "workload and configuration"
#: manifest.json ``kind`` -> words (a simulated run's manifest has no ``kind``).
_RUN_KINDS = {None: "a simulated", "real": "an imported real (import-results)", "export": "an export (export)"}
_KEYED = {  # file -> function giving a record's key label
    "requests.jsonl": lambda r: f"{r.get('case')} / {r.get('name')}",
    "timeline.jsonl": lambda r: f"{r.get('case')} / tick {r.get('tick')}",
}


class CheckError(ValueError):
    """A directory or file that cannot be compared at all (missing, unreadable, not JSON)."""


def _read(path: str) -> str:
    try:
        return read_regular_text(path)  # a FIFO is refused, never waited on
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None


def _json(path: str, text: str, where: str = ""):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckError(f"{path}: {where or f'line {exc.lineno}: '}not valid JSON") from None
    except ValueError:  # an integer of thousands of digits
        raise CheckError(f"{path}: {where}holds an integer with too many digits to be a run's value") from None
    except RecursionError:
        raise CheckError(f"{path}: {where}JSON nested too deeply to be a run's artifact") from None


def _jsonl(path: str, text: str) -> list[dict]:
    """The records of a JSON Lines artifact; each line must be a JSON object."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        record = _json(path, line, f"line {number}: ")
        if not isinstance(record, dict):
            raise CheckError(f"{path}: line {number}: expected a JSON object, got {_kind_of(record)}")
        records.append(record)
    return records


def _records(path: str, text: str, field: str) -> list[dict]:
    """The list ``field`` of the JSON object in ``path`` (``cases`` of summary.json, ``requests`` of
    workload.json); raises :class:`CheckError` naming the file, the field and the item when the
    shape is not an object holding a list of objects."""
    data = _json(path, text)
    if not isinstance(data, dict):
        raise CheckError(f"{path}: expected a JSON object, got {_kind_of(data)}")
    records = data.get(field, [])
    if not isinstance(records, list):
        raise CheckError(f"{path}: field '{field}': expected a list of objects, got {_kind_of(records)}")
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise CheckError(f"{path}: {field}[{index}]: expected an object, got {_kind_of(record)}")
    return records


def _kind_of(value) -> str:
    """A JSON value's type in words, for messages."""
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _show(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def _same(got, expected) -> bool:
    """Equal as JSON: the same types as well as values (Python's ``1 == True == 1.0`` would call a
    manifest with ``"async_scheduling": 1`` identical to one with ``true``); key order aside."""
    return json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


def _field_diffs(label: str, got: dict, expected: dict, prefix: str = "") -> list[str]:
    """One line per differing field; fields holding objects on both sides are compared field by
    field (``manifest / config.budget: got 48, expected 64``)."""
    out = []
    for field in list(expected) + [f for f in got if f not in expected]:
        name = f"{prefix}{field}"
        if field not in got:
            out.append(f"{label} / {name}: missing, expected {_show(expected[field])}")
        elif field not in expected:
            out.append(f"{label} / {name}: got {_show(got[field])}, not in the reference")
        elif isinstance(got[field], dict) and isinstance(expected[field], dict):
            out += _field_diffs(label, got[field], expected[field], f"{name}.")
        elif not _same(got[field], expected[field]):
            out.append(f"{label} / {name}: got {_show(got[field])}, expected {_show(expected[field])}")
    return out


def _keyed_diffs(got: list, expected: list, key) -> list[str]:
    """Differences between two lists of records matched by ``key`` (a label function)."""
    got_by = {key(r): r for r in got if isinstance(r, dict)}
    out = []
    seen = set()
    for record in expected:
        label = key(record)
        seen.add(label)
        if label not in got_by:
            out.append(f"{label}: missing")
        else:
            out += _field_diffs(label, got_by[label], record)
    out += [f"{label}: not in the reference" for label in got_by if label not in seen]
    return out


def _text_diff(name: str, got: str, expected: str) -> list[str]:
    lines = list(difflib.unified_diff(expected.splitlines(), got.splitlines(), f"expected/{name}",
                                      f"got/{name}", n=0, lineterm=""))
    shown = [line if len(line) <= 160 else line[:157] + "..." for line in lines[:_DIFF_LINES]]
    if len(lines) > _DIFF_LINES:
        shown.append(f"... ({len(lines) - _DIFF_LINES} more diff lines)")
    return ["\n".join(["text differs:", *shown])]


def _cut(line: str, width: int = 60) -> str:
    return line if len(line) <= width else line[:width - 3] + "..."


def first_line(difference: str) -> str:
    """One line standing for one difference of :func:`compare_runs` (a grade sheet's cell).

    A field difference is already one line and is returned as it is. A text difference
    (``text differs:`` followed by a unified diff) becomes ``text differs from line N: got '...',
    expected '...'``: N is the run's first changed line (1-based), each side cut to 60 characters,
    ``nothing`` for a side with no line there (a side the cut-short diff does not show is left out).
    """
    lines = difference.splitlines()
    if not lines or lines[0] != "text differs:":
        return lines[0] if lines else ""
    hunk = next((line for line in lines if line.startswith("@@ ")), None)
    if hunk is None:
        return lines[0]
    start = hunk.split()[2].lstrip("+").split(",")[0]   # "@@ -a,b +c,d @@": the run's side
    number = max(int(start), 1) if start.isdigit() else 1
    got = next((line[1:] for line in lines[1:] if line.startswith("+") and not line.startswith("+++")), None)
    expected = next((line[1:] for line in lines[1:] if line.startswith("-") and not line.startswith("---")), None)
    cut_short = lines[-1].startswith("... (")   # the diff shown was cut: a side not shown is unknown
    sides = [f"{side} {'nothing' if text is None else repr(_cut(text))}"
             for side, text in (("got", got), ("expected", expected)) if text is not None or not cut_short]
    return f"text differs from line {number}: {', '.join(sides)}"


def _artifact_diffs(name: str, run_dir: str, ref_dir: str) -> list[str]:
    ref_path, run_path = os.path.join(ref_dir, name), os.path.join(run_dir, name)
    expected_text = _read(ref_path)
    if os.path.lexists(run_path) and not os.path.isfile(run_path):
        return [f"not a regular file in the run ({'a directory' if os.path.isdir(run_path) else 'not a file'})"]
    if not os.path.isfile(run_path):
        return ["missing from the run"]
    got_text = _read(run_path)
    if got_text == expected_text:
        return []
    if name in _KEYED:
        found = _keyed_diffs(_jsonl(run_path, got_text), _jsonl(ref_path, expected_text), _KEYED[name])
    elif name == "summary.json":
        found = _keyed_diffs(_records(run_path, got_text, "cases"), _records(ref_path, expected_text, "cases"),
                             lambda r: str(r.get("case")))
    elif name == "workload.json":
        found = _keyed_diffs(_records(run_path, got_text, "requests"),
                             _records(ref_path, expected_text, "requests"), lambda r: str(r.get("name")))
    else:
        found = []
    return found or _text_diff(name, got_text, expected_text)


def _workload_diffs(run_dir: str, ref_dir: str) -> list[str]:
    """Which requests and fields of two different workloads differ (``workload / U6 / suffix_tokens:
    got 640, expected 160``), read from each run's ``workload.json``; nothing when either is absent."""
    paths = [os.path.join(d, "workload.json") for d in (run_dir, ref_dir)]
    if not all(os.path.isfile(p) for p in paths):
        return []
    got, expected = (_records(p, _read(p), "requests") for p in paths)
    return [f"workload / {line}" for line in _keyed_diffs(got, expected, lambda r: str(r.get("name")))]


def compare_runs(run_dir: str, ref_dir: str) -> list[tuple[str, list[str]]]:
    """Compare the run in ``run_dir`` with the reference in ``ref_dir``.

    Returns ``[(what, [difference, ...]), ...]`` for each part that differs (a text file's diff
    is one multi-line difference) (``"workload and
    configuration"`` or an artifact's file name), empty when the runs agree. Raises
    :class:`CheckError` when a directory or its ``manifest.json`` is missing, a JSON file cannot
    be parsed or has the wrong shape (e.g. ``summary.json`` whose ``cases`` is not a list of
    objects), or the two directories are different kinds of run (simulated vs imported real).
    """
    manifests = []
    for directory in (run_dir, ref_dir):
        if not os.path.isdir(directory):
            raise CheckError(f"{directory}: {'is not a directory' if os.path.lexists(directory) else 'no such directory'}"
                             "; check compares two run directories (--artifacts or import-results)")
        if (kind := directory_kind(directory)) not in (None, "simulated", "real", "unknown"):  # the writers' kinds
            hint = ("; a serving-bench run (the chapter's window model) is checked by replaying its manifest's "
                    "command and comparing with diff -r") if kind == "serving-bench" else ""
            raise CheckError(f"{directory}: holds {kind} output, not a run; check compares "
                             "a run's --artifacts directory (or an import-results one) with a reference run" + hint)
        path = os.path.join(directory, "manifest.json")
        if not os.path.isfile(path):
            raise CheckError(f"{path}: missing (is {directory} a run's --artifacts directory?)")
        if directory == ref_dir:   # the reference is told as "expected": every value checked, as explain and diff do
            manifests.append(read_manifest(directory, CheckError))
            continue
        # The run's own values are told only as differences from the reference ("got 1, expected
        # true"), so they are read strictly as JSON (a key twice, NaN: refused) and compared.
        try:
            manifest = strict_json(_read(path), path)
        except InputError as exc:
            raise CheckError(str(exc)) from None
        if not isinstance(manifest, dict):
            raise CheckError(f"{path}: not a manifest object")
        if not isinstance(manifest.get("kind"), (str, type(None))):
            raise CheckError(f"{path}: field 'kind': must be a string, got {json.dumps(manifest['kind'])[:40]}")
        manifests.append(manifest)
    got, expected = manifests
    kinds = [_RUN_KINDS.get(m.get("kind"), f"{m.get('kind')!r}") for m in manifests]
    if kinds[0] != kinds[1]:
        raise CheckError(f"{run_dir} is {kinds[0]} run and {ref_dir} is {kinds[1]} run; check accepts two "
                         "simulated runs or two imported real runs, never one of each (ticks against ms); "
                         "compare reads both kinds")
    identity = _field_diffs("manifest", {k: got.get(k) for k in _IDENTITY}, {k: expected.get(k) for k in _IDENTITY})
    if got.get("workload_sha256") != expected.get("workload_sha256"):
        identity += _workload_diffs(run_dir, ref_dir)
    if identity:
        return [(_IDENTITY_PART, identity)]
    results = []
    other = {k: v for k, v in got.items() if k != "source"}
    other_expected = {k: v for k, v in expected.items() if k != "source"}
    if not _same(other, other_expected):
        results.append(("manifest.json", _field_diffs("manifest", other, other_expected)))
    for name in ARTIFACT_FILES:  # a reference artifact that is a directory would otherwise be skipped unseen
        path = os.path.join(ref_dir, name)
        if os.path.lexists(path) and not os.path.isfile(path):
            raise CheckError(f"{path}: the reference's {name} is {'a directory' if os.path.isdir(path) else 'not a file'}, "
                             "not an artifact; is the reference directory damaged?")
    present = {n for n in os.listdir(ref_dir) if os.path.isfile(os.path.join(ref_dir, n)) and not n.startswith(".")}
    order = {name: index for index, name in enumerate(ARTIFACT_FILES)}  # data first, pictures last
    names = sorted(present - {"manifest.json"}, key=lambda n: (order.get(n, len(order)), n))
    for name in names:
        found = _artifact_diffs(name, run_dir, ref_dir)
        if found:
            results.append((name, found))
    return results


def format_report(run_dir: str, ref_dir: str, results: list[tuple[str, list[str]]]) -> str:
    """Readable text of :func:`compare_runs`' result, at most :data:`MAX_PER_FILE` lines per part."""
    lines = [f"check {run_dir} against {ref_dir}"]
    if not results:
        lines.append("no differences: same workload, same configuration, every artifact identical")
        return "\n".join(lines) + "\n"
    total = sum(len(found) for _, found in results)
    for what, found in results:
        lines.append(f"{what}: {len(found)} difference{'s' if len(found) != 1 else ''}")
        for difference in found[:MAX_PER_FILE]:
            first, *rest = difference.splitlines()
            lines += [f"  {first}", *(f"    {line}" for line in rest)]
        if len(found) > MAX_PER_FILE:
            lines.append(f"  ... and {len(found) - MAX_PER_FILE} more")
        if what == _IDENTITY_PART:
            lines.append("  (artifacts not compared: the two runs had different inputs)")
    lines.append(f"{total} difference{'s' if total != 1 else ''} in {len(results)} part"
                 f"{'s' if len(results) != 1 else ''}")
    return "\n".join(lines) + "\n"
