"""``handin --out NAME.zip``: bundle exactly what the course asks for (README, "hand-in").

The ZIP holds one top folder ``NAME/`` with ``prediction.md`` and ``diagnosis.md``, every course
run present under ``runs/`` (the five required ones of :data:`sched.course.plan.COURSE_RUNS`, and
the optional ones the learner made) with all nine artifacts, any exercise file
(``my-workload.json``), and ``HANDIN.json``: the lab version, the runs, each packed file's sha256.

Refused, with one line per problem and nothing written: a missing note, a missing required run,
a run missing an artifact, and a run that is not what the lab makes from its own ``workload.json``
and ``manifest.json`` (edited after the run; :func:`sched.course.resimulate.authenticity`).
Reproducible like the lab ZIP: sorted entries, fixed timestamps (1980-01-01) and permissions.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass

from .. import __version__
from ..base.cmdline import InputError
from ..base.files import normal_mode, note_written, open_regular
from ..base.safe_write import ARTIFACT_FILES
from .notes import is_template
from .plan import COURSE_RUNS, EXERCISE_FILES, HANDIN_MANIFEST, NOTES
from .resimulate import authenticity

__all__ = ["HandinError", "Handin", "collect_handin", "handin_manifest", "write_handin", "HANDIN_KIND", "MAX_HANDIN_FILE_BYTES"]

HANDIN_KIND = "handin"
#: Largest single file packed (bytes); the course's largest artifact is about 60 KB.
MAX_HANDIN_FILE_BYTES = 8 * 1024 * 1024
_EPOCH = (1980, 1, 1, 0, 0, 0)


class HandinError(InputError):
    """A hand-in that cannot be made; ``problems`` holds one line per problem (file, run, what to do)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(problems[0])


@dataclass(frozen=True)
class Handin:
    """What :func:`collect_handin` found: ``files`` maps each packed path (``/``-separated, relative
    to the lab folder) to its bytes; ``runs`` names the course runs packed, in course order; ``unfilled`` names the notes still
    the unchanged template (:func:`sched.course.notes.is_template` of the bytes packed), packed all the same."""

    files: dict
    runs: tuple
    unfilled: tuple = ()


def _read(lab_dir: str, path: str) -> bytes:
    full = os.path.join(lab_dir, path)
    if os.path.getsize(full) > MAX_HANDIN_FILE_BYTES:
        raise HandinError([f"{path}: {os.path.getsize(full)} bytes, more than a course file holds "
                           f"({MAX_HANDIN_FILE_BYTES}); is it the right file?"])
    with open_regular(full, "rb") as handle:   # a FIFO is refused, never waited on
        return handle.read()


def collect_handin(lab_dir: str = ".") -> Handin:
    """Gather the hand-in from the lab folder ``lab_dir`` (where the learner ran the course).

    Raises :class:`HandinError` listing every problem: a note (``prediction.md``,
    ``diagnosis.md``) missing, a required run missing (with the command that makes it), a run
    directory missing one of the nine artifacts, a run that differs from its re-simulation (which
    file and field), or an unreadable file. A note that is still the unchanged template is no
    problem (the learner's choice): it is packed and named in ``Handin.unfilled``.
    """
    problems, files, runs = [], {}, []
    for note in NOTES:
        if not os.path.isfile(os.path.join(lab_dir, note)):
            problems.append(f"{note}: missing; fill in the template shipped with the lab (README, course steps 2 and 10)")
    for run in COURSE_RUNS:
        directory = os.path.join(lab_dir, run.directory)
        if not os.path.isdir(directory):
            if run.required:
                problems.append(f"{run.directory}: missing ({run.exercise}); make it with: {run.command}")
            continue
        absent = [name for name in ARTIFACT_FILES if not os.path.isfile(os.path.join(directory, name))]
        if absent:
            problems.append(f"{run.directory}: {', '.join(absent)} missing; make the run again with: "
                            f"{run.command} --force")
            continue
        verdict = authenticity(directory)
        if verdict.status != "yes":
            problems.append(f"{run.directory}: not what the lab makes from its own workload.json and manifest.json "
                            f"({verdict.detail}); edited after the run? make it again with: {run.command} --force")
            continue
        runs.append(run.name)
        files.update((f"{run.directory}/{name}", None) for name in ARTIFACT_FILES)
    files.update((note, None) for note in NOTES if os.path.isfile(os.path.join(lab_dir, note)))
    files.update((name, None) for name in EXERCISE_FILES if os.path.isfile(os.path.join(lab_dir, name)))
    if problems:
        raise HandinError(problems)
    try:
        contents = {path: _read(lab_dir, path) for path in sorted(files)}
    except OSError as exc:
        raise HandinError([f"{exc.filename or lab_dir}: cannot read ({exc.strerror or exc})"]) from None
    unfilled = tuple(note for note in NOTES if note in contents and is_template(contents[note], note))   # the bytes packed
    return Handin(contents, tuple(runs), unfilled)


def handin_manifest(handin: Handin) -> bytes:
    """``HANDIN.json``: tool, kind, lab version, runs packed and every file's sha256 (sorted by path)."""
    record = {"tool": "infer-sched-lab", "kind": HANDIN_KIND, "version": __version__, "runs": list(handin.runs),
              "files": {path: hashlib.sha256(data).hexdigest() for path, data in sorted(handin.files.items())}}
    return (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_handin(handin: Handin, out: str, force: bool = False) -> str:
    """Write ``handin`` to the ZIP ``out`` atomically (temporary file beside it, then renamed);
    returns the top folder's name (``out``'s file name without ``.zip``). ``out`` must end in
    ``.zip`` (so it is never one of the packed files) and its name hold no control character (a
    newline, a tab: the name becomes the learner's in the grade sheet); an existing one is refused unless ``force``,
    and never replaced when it is a directory or not a regular file. Raises :class:`HandinError`."""
    top = os.path.basename(out)[:-4]
    if not out.lower().endswith(".zip") or not top or top.startswith("."):
        raise HandinError([f"{out}: the hand-in is a ZIP named after you, e.g. --out zhang-san.zip"])
    if any(not char.isprintable() for char in top):   # a newline or tab would break the grade sheet's learner name
        raise HandinError([f"{out!r}: the name holds a control character; name the ZIP after you, e.g. --out zhang-san.zip"])
    if os.path.lexists(out):
        if os.path.isdir(out) or not os.path.isfile(out):
            raise HandinError([f"{out}: exists and is not a regular file; refusing to replace it"])
        if not force:
            raise HandinError([f"{out}: already exists; choose another name or pass --force to replace it"])
    entries = dict(handin.files)
    entries[HANDIN_MANIFEST] = handin_manifest(handin)
    directory = os.path.dirname(os.path.abspath(out))
    staging = None
    try:
        handle, staging = tempfile.mkstemp(prefix=".handin.", suffix=".tmp", dir=directory)
        with os.fdopen(handle, "wb") as raw, zipfile.ZipFile(raw, "w") as archive:
            for path in sorted(entries):
                info = zipfile.ZipInfo(f"{top}/{path}", date_time=_EPOCH)
                info.create_system = 3
                info.external_attr = 0o100644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, entries[path], compresslevel=9)
        os.chmod(staging, normal_mode())
        os.replace(staging, os.path.abspath(out))
        staging = None
        note_written(out)
    except OSError as exc:
        raise HandinError([f"{out}: cannot write the hand-in ({exc.strerror or exc})"]) from None
    finally:   # also on Ctrl-C: no .handin.*.tmp left behind
        if staging is not None and os.path.exists(staging):
            os.remove(staging)
    return top
