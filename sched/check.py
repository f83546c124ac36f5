"""``check RUN_DIR REF_DIR``: an instructor's comparison of a run with a reference run (lab.md §1, §7).

First the identity of the two runs: the workload (its sha256 in ``manifest.json``) and the
configuration (knobs, policy, timeout, cases). If those differ the artifacts are not compared
further (they could not agree). Otherwise every artifact of the reference is compared:

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

from .artifacts import ARTIFACT_FILES

__all__ = ["CheckError", "compare_runs", "format_report", "MAX_PER_FILE"]

#: Most differences listed per artifact (the count of the rest is still given).
MAX_PER_FILE = 20
_DIFF_LINES = 12
_IDENTITY = ("workload_sha256", "num_requests", "policy", "config", "timeout_ticks", "cases")
_IDENTITY_PART = "workload and configuration"
_KEYED = {  # file -> function giving a record's key label
    "requests.jsonl": lambda r: f"{r.get('case')} / {r.get('name')}",
    "timeline.jsonl": lambda r: f"{r.get('case')} / tick {r.get('tick')}",
}


class CheckError(ValueError):
    """A directory or file that cannot be compared at all (missing, unreadable, not JSON)."""


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None


def _json(path: str, text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckError(f"{path}: not valid JSON (line {exc.lineno})") from None


def _jsonl(path: str, text: str) -> list:
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise CheckError(f"{path}: line {number}: not valid JSON") from None
    return records


def _show(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def _field_diffs(label: str, got: dict, expected: dict) -> list[str]:
    out = []
    for field in list(expected) + [f for f in got if f not in expected]:
        if field not in got:
            out.append(f"{label} / {field}: missing, expected {_show(expected[field])}")
        elif field not in expected:
            out.append(f"{label} / {field}: got {_show(got[field])}, not in the reference")
        elif got[field] != expected[field]:
            out.append(f"{label} / {field}: got {_show(got[field])}, expected {_show(expected[field])}")
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


def _artifact_diffs(name: str, run_dir: str, ref_dir: str) -> list[str]:
    ref_path, run_path = os.path.join(ref_dir, name), os.path.join(run_dir, name)
    expected_text = _read(ref_path)
    if not os.path.isfile(run_path):
        return ["missing from the run"]
    got_text = _read(run_path)
    if got_text == expected_text:
        return []
    if name in _KEYED:
        found = _keyed_diffs(_jsonl(run_path, got_text), _jsonl(ref_path, expected_text), _KEYED[name])
    elif name == "summary.json":
        found = _keyed_diffs(_json(run_path, got_text).get("cases", []),
                             _json(ref_path, expected_text).get("cases", []), lambda r: str(r.get("case")))
    elif name == "workload.json":
        found = _keyed_diffs(_json(run_path, got_text).get("requests", []),
                             _json(ref_path, expected_text).get("requests", []), lambda r: str(r.get("name")))
    else:
        found = []
    return found or _text_diff(name, got_text, expected_text)


def compare_runs(run_dir: str, ref_dir: str) -> list[tuple[str, list[str]]]:
    """Compare the run in ``run_dir`` with the reference in ``ref_dir``.

    Returns ``[(what, [difference, ...]), ...]`` for each part that differs (a text file's diff
    is one multi-line difference) (``"workload and
    configuration"`` or an artifact's file name), empty when the runs agree. Raises
    :class:`CheckError` when a directory or its ``manifest.json`` is missing or a JSON file
    cannot be parsed.
    """
    manifests = []
    for directory in (run_dir, ref_dir):
        if not os.path.isdir(directory):
            raise CheckError(f"{directory}: no such directory")
        path = os.path.join(directory, "manifest.json")
        if not os.path.isfile(path):
            raise CheckError(f"{path}: missing (is {directory} a run's --artifacts directory?)")
        manifest = _json(path, _read(path))
        if not isinstance(manifest, dict):
            raise CheckError(f"{path}: not a manifest object")
        manifests.append(manifest)
    got, expected = manifests
    identity = _field_diffs("manifest", {k: got.get(k) for k in _IDENTITY}, {k: expected.get(k) for k in _IDENTITY})
    if identity:
        return [(_IDENTITY_PART, identity)]
    results = []
    other = {k: v for k, v in got.items() if k != "source"}
    other_expected = {k: v for k, v in expected.items() if k != "source"}
    if other != other_expected:
        results.append(("manifest.json", _field_diffs("manifest", other, other_expected)))
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
