"""``grade HANDIN... --out grades.csv``: a class graded at once (README "hand-in"; docs/instructor.md).

For each hand-in (a ZIP made by ``handin``, or a folder) and each course run
(:data:`sched.course.plan.COURSE_RUNS`: the required ones always, the optional ones when handed
in), one row:

- ``verdict``: ``same`` (equal to the reference, :func:`sched.analysis.check.compare_runs`),
  ``different`` (``differences`` and ``first_difference`` say how), ``missing``, ``unusable``
  (the run cannot be read; ``reason``), or ``bad hand-in`` (the whole hand-in could not be
  opened: not a ZIP, paths escaping the folder, a ZIP bomb, ...; one row, ``run`` empty);
- ``authentic``: ``yes`` when the run is what the lab makes from its own ``workload.json`` and
  ``manifest.json`` (re-simulated, :func:`sched.course.resimulate.authenticity`), ``no`` with the
  first difference in ``reason`` (a result copied and edited, or written by hand);
- ``tampered``: ``no`` when every file still has the sha256 ``HANDIN.json`` recorded, ``yes`` with
  the first changed file in ``reason``, ``unknown`` without ``HANDIN.json``;
- ``notes``: the state of ``prediction.md`` and ``diagnosis.md`` (missing, the unchanged template,
  or their length in lines), read by the instructor with the rubric.

A bad hand-in never stops the class: every problem is a row.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import tempfile

from .. import __version__
from ..analysis.check import CheckError, compare_runs, first_line
from .handin import HANDIN_KIND
from .notes import unchanged_template
from .plan import COURSE_RUNS, HANDIN_MANIFEST, NOTES
from .references import reference_directory
from .resimulate import authenticity
from .unpack import BadHandin, open_handin

__all__ = ["GRADE_COLUMNS", "grade_handin", "grade_class", "render_csv"]

GRADE_COLUMNS = ("learner", "handin", "run", "required", "verdict", "differences", "first_difference",
                 "authentic", "tampered", "notes", "lab_version", "reason")


def _learner(path: str) -> str:
    name = os.path.basename(os.path.normpath(path))
    return name[:-4] if name.lower().endswith(".zip") else name


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except (OSError, ValueError):   # ValueError: a path HANDIN.json names with a NUL in it
        return None


def _record(root: str) -> tuple[str, str, str]:
    """``(tampered, lab_version, reason)`` from the hand-in's ``HANDIN.json``."""
    path = os.path.join(root, HANDIN_MANIFEST)
    if not os.path.isfile(path):
        return "unknown", "", f"no {HANDIN_MANIFEST}: not made by the handin command"
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return "unknown", "", f"{HANDIN_MANIFEST}: not readable JSON"
    if not isinstance(record, dict) or record.get("kind") != HANDIN_KIND or not isinstance(record.get("files"), dict):
        return "unknown", "", f"{HANDIN_MANIFEST}: not a hand-in record"
    version = record.get("version", "")
    note = ""
    if not isinstance(version, str) or len(version) > 64:   # written by hand: say so rather than print it
        version, note = "", f"{HANDIN_MANIFEST}: field 'version' is not a lab version"

    def tampered(reason: str) -> tuple[str, str, str]:
        return "yes", version, "; ".join(filter(None, [reason, note]))

    for relative, digest in sorted(record["files"].items()):
        parts = str(relative).split("/")
        if ".." in parts or str(relative).startswith("/"):
            return tampered(f"{HANDIN_MANIFEST}: lists a path outside the hand-in ({relative})")
        if _sha256(os.path.join(root, *parts)) != digest:
            return tampered(f"{relative}: changed or removed after the handin command packed it")
    return "no", version, note


def _notes(root: str, project: str) -> str:
    states = []
    for note in NOTES:
        path = os.path.join(root, note)
        if not os.path.isfile(path):
            states.append(f"{note} missing")
            continue
        if unchanged_template(path, note, os.path.join(project, note)):
            states.append(f"{note} is the unchanged template")
            continue
        with open(path, "rb") as handle:
            lines = handle.read().count(b"\n")
        states.append(f"{note} {lines} lines")
    return "; ".join(states)


def _first_difference(results) -> tuple[int, str]:
    total = sum(len(found) for _, found in results)
    part, found = results[0]
    return total, f"{part}: {first_line(found[0]) if found else ''}"


def grade_handin(path: str, project: str, references: str) -> list[dict]:
    """The rows (column -> value, :data:`GRADE_COLUMNS`) of the hand-in at ``path``.

    ``project``: the lab folder whose ``expected/`` holds the golden references and whose
    ``prediction.md``/``diagnosis.md`` are the templates; ``references``: a scratch folder for the
    references simulated once for the class (:func:`sched.course.references.reference_directory`).
    Never raises for a bad hand-in: its problem is a row.
    """
    learner = _learner(path)
    base = {column: "" for column in GRADE_COLUMNS} | {"learner": learner, "handin": path}
    scratch = tempfile.mkdtemp(prefix="isl-grade-")
    try:
        try:
            root = open_handin(path, scratch)
        except BadHandin as exc:
            return [base | {"verdict": "bad hand-in", "reason": str(exc)}]
        tampered, version, tamper_reason = _record(root)
        notes = _notes(root, project)
        if version and version != __version__:
            tamper_reason = "; ".join(filter(None, [tamper_reason, f"made with lab {version}, graded with {__version__}"]))
        rows = []
        for run in COURSE_RUNS:
            directory = os.path.join(root, "runs", run.name)
            if not os.path.isdir(directory) and not run.required:
                continue
            row = base | {"run": run.directory, "required": "yes" if run.required else "no", "tampered": tampered,
                          "notes": notes, "lab_version": version, "reason": tamper_reason}
            if not os.path.isdir(directory):
                rows.append(row | {"verdict": "missing", "reason": f"make it with: {run.command}"})
                continue
            try:
                results = compare_runs(directory, reference_directory(run, project, references))
                verdict = authenticity(directory)
            except CheckError as exc:
                rows.append(row | {"verdict": "unusable", "reason": str(exc).replace(root, learner)})
                continue
            except Exception as exc:   # one run never stops the others: the row says what went wrong
                rows.append(row | {"verdict": "unusable", "reason": f"could not be graded ({type(exc).__name__}: "
                                                                    f"{str(exc).replace(root, learner)})"})
                continue
            row |= {"authentic": verdict.status, "verdict": "same" if not results else "different",
                    "differences": 0}
            if results:
                row["differences"], row["first_difference"] = _first_difference(results)
            if verdict.detail:
                row["reason"] = "; ".join(filter(None, [row["reason"], verdict.detail.replace(root, learner)]))
            rows.append(row)
        if not rows:
            rows.append(base | {"verdict": "bad hand-in", "reason": "no course run found"})
        return rows
    except Exception as exc:   # a class is never stopped by one hand-in; the row says what went wrong
        return [base | {"verdict": "bad hand-in", "reason": f"could not be graded ({type(exc).__name__}: {exc})"}]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def grade_class(paths: list[str], project: str) -> list[dict]:
    """Every row of every hand-in in ``paths``, in the order given (see :func:`grade_handin`)."""
    references = tempfile.mkdtemp(prefix="isl-references-")
    try:
        return [row for path in paths for row in grade_handin(path, project, references)]
    finally:
        shutil.rmtree(references, ignore_errors=True)


def _cell(value) -> str:
    """A CSV cell on one line; text a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``)
    is quoted with a leading apostrophe."""
    text = " ".join(str(value).split())
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def render_csv(rows: list[dict]) -> str:
    """``grades.csv``: a header of :data:`GRADE_COLUMNS`, then one line per row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(GRADE_COLUMNS)
    writer.writerows([_cell(row[column]) for column in GRADE_COLUMNS] for row in rows)
    return out.getvalue()
