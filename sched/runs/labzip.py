"""The lab ZIP an instructor ships (lab.md §1): reproducible, with one top folder.

``inference-scheduler-lab.zip`` holds ``inference-scheduler-lab/`` with exactly: the entry point
``infer_sched_lab.py``, the chapter's import alias ``infer_sched_lab_bench.py``, the package ``sched/``, ``bench/`` if it exists, ``workloads/``,
``expected/``, ``tests/`` (with any ``tests/data/`` excerpts and their attribution files), the
templates ``prediction.md`` and ``diagnosis.md``, ``README.md`` and ``docs/`` if it exists (the
handbook's chapter files ``docs/handbook/``, the reference, answers and instructor guide, and the
specification the handbook cites, e.g. ``docs/spec/lab.md``), ``pyproject.toml``, ``.ci/run``,
the lab's own licence ``LICENSE`` (MIT) and any other licence or attribution files at the top
(``LICENSE*``, ``LICENCE*``, ``NOTICE*``, ``COPYING*``, ``ATTRIBUTION*``, ``SOURCES*``) when
present. Only regular files. Nothing else: no ``__pycache__``, ``*.pyc``, hidden files, runs or
``.git``.

Beside the lab, ``LAB.json`` records the lab version and the source commit (from git, or from the
``LAB.json`` of an extracted lab, when known) and which course data is in the ZIP; the default
ZIP name carries the same version and commit (``inference-scheduler-lab-0.1.0-<commit>.zip``).

The course data the handbook uses (:data:`COURSE_DATA`: the three full traces of §14.1, the real
vLLM run of §11.5 and §18, with their ``SOURCES.md``) sits beside the project in
``../shared/data/``; the ZIP carries it as a second top folder ``shared/data/``, so that every
``../shared/data/...`` command of the handbook works from the extracted lab as it is. Without
that folder (or with ``data=None``) the ZIP is built without it and ``LAB.json`` lists what is
left out and which sections need it.

Reproducible: entries sorted by path, every timestamp 1980-01-01 00:00:00, permissions fixed by
path (0755 for ``infer_sched_lab.py`` and ``.ci/run``, 0644 otherwise), deflate level 9, no
comment and no extra fields; the same sources give the same bytes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import zipfile

from .. import __version__
from ..base.files import normal_mode, note_written, open_regular

__all__ = ["LabZipError", "TOP_FOLDER", "DATA_FOLDER", "DEFAULT_ZIP", "COURSE_DATA", "LAB_RECORD", "lab_files",
           "source_commit", "default_zip_name", "course_data_dir", "course_data_files", "sections_needing", "build_lab_zip",
           "BESIDE_PROJECT"]

TOP_FOLDER = "inference-scheduler-lab"
#: The course data's folder in the ZIP, beside the lab (the handbook's ``../shared/data``).
DATA_FOLDER = "shared/data"
DEFAULT_ZIP = "inference-scheduler-lab.zip"   # without a version: the name before LAB.json existed
#: The lab's own record in the ZIP (version, source commit, course data).
LAB_RECORD = "LAB.json"
#: The course data files the handbook uses (relative to the data folder) -> the sections needing them.
COURSE_DATA = {
    "traces/SOURCES.md": "14.1",
    "traces/AzureLLMInferenceTrace_conv.csv": "14.1, 14.7, 17.7 (bench)",
    "traces/conversation_trace.jsonl": "14.1, 14.7 (bench)",
    "traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv": "14.1",
    "results/SOURCES.md": "11.5",
    "results/llmservingsim-vllm-rtx4090-llama3.1-8b/meta.json": "11.5, 14.2",
    "results/llmservingsim-vllm-rtx4090-llama3.1-8b/requests.jsonl": "11.5, 14.2",
    "results/llmservingsim-vllm-rtx4090-llama3.1-8b/timeseries.csv": "11.5",
}
#: ``data`` argument of :func:`build_lab_zip`: the course data folder beside the project, if present.
BESIDE_PROJECT = "beside-project"

_REQUIRED = ("infer_sched_lab.py", "infer_sched_lab_bench.py", "sched", "workloads", "expected", "tests", "prediction.md", "diagnosis.md",
             "README.md", "pyproject.toml", ".ci/run", "LICENSE")
_OPTIONAL_DIRS = ("bench", "docs")
_LEGAL_PREFIXES = ("LICENSE", "LICENCE", "NOTICE", "COPYING", "ATTRIBUTION", "SOURCES")
_EXECUTABLE = {"infer_sched_lab.py", ".ci/run"}
_EPOCH = (1980, 1, 1, 0, 0, 0)


class LabZipError(OSError):
    """The project cannot be packed (a required file is missing, the ZIP cannot be written)."""


def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__" or name.endswith((".pyc", ".pyo")) \
        or name.endswith(".egg-info")


def lab_files(project: str) -> list[str]:
    """The project's files that go into the ZIP, as sorted ``/``-separated relative paths.

    ``project`` is the project's top directory. Only regular files are packed: a FIFO, socket or
    device under a packed folder is skipped (reading it could block forever). Raises
    :class:`LabZipError` naming the first required file or folder that is missing.
    """
    for required in _REQUIRED:
        if not os.path.exists(os.path.join(project, required)):
            raise LabZipError(f"{os.path.join(project, required)}: missing; the lab ZIP is built from a source "
                              "checkout of the project (not from an installed copy)")
    files = {required for required in _REQUIRED if os.path.isfile(os.path.join(project, required))}
    files |= {name for name in os.listdir(project)
              if name.upper().startswith(_LEGAL_PREFIXES) and os.path.isfile(os.path.join(project, name))}
    folders = [d for d in _REQUIRED + _OPTIONAL_DIRS if os.path.isdir(os.path.join(project, d))]
    for folder in folders:
        for root, dirs, names in os.walk(os.path.join(project, folder)):
            dirs[:] = sorted(d for d in dirs if not _skipped(d))
            for name in names:
                if not _skipped(name) and os.path.isfile(os.path.join(root, name)):  # regular files only
                    files.add(os.path.relpath(os.path.join(root, name), project).replace(os.sep, "/"))
    return sorted(files)


def _packed_path(project: str, output: str) -> str | None:
    """The project-relative path of ``output`` when a later ``zip`` would pack a file there (inside a
    packed folder such as ``tests/``, or a top-level licence-like name), else ``None``."""
    relative = os.path.relpath(os.path.realpath(output), os.path.realpath(project))
    parts = relative.split(os.sep)
    if relative == os.curdir or parts[0] == os.pardir or any(_skipped(part) for part in parts):
        return None
    if len(parts) == 1:
        packed = parts[0] in _REQUIRED or parts[0].upper().startswith(_LEGAL_PREFIXES)
    else:
        packed = parts[0] in _REQUIRED + _OPTIONAL_DIRS or "/".join(parts[:2]) in _REQUIRED
    return relative.replace(os.sep, "/") if packed else None


def source_commit(project: str) -> str | None:
    """The git commit the project's files come from (``git rev-parse HEAD`` when the project is the
    top of its own git work tree; 40 hex digits, with ``-dirty`` when tracked files differ from it), else the ``source_commit`` of the ``LAB.json``
    an extracted lab carries, else ``None``."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=project, capture_output=True, text=True,
                             timeout=20)
        own = top.returncode == 0 and os.path.realpath(top.stdout.strip()) == os.path.realpath(project)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True, timeout=20)
        if own and head.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", head.stdout.strip()):
            status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=project,
                                    capture_output=True, text=True, timeout=20)
            return head.stdout.strip() + ("-dirty" if status.returncode != 0 or status.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass   # no git: the record of an extracted lab, if any
    try:
        with open_regular(os.path.join(project, LAB_RECORD)) as handle:
            commit = json.load(handle).get("source_commit")
        return commit if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit) else None
    except (OSError, ValueError, AttributeError):
        return None


def default_zip_name(commit: str | None) -> str:
    """``inference-scheduler-lab-<version>.zip``, with ``-<first 12 hex digits of the commit>`` (and
    ``-dirty``) when the source commit is known."""
    if commit is None:
        return f"{TOP_FOLDER}-{__version__}.zip"
    return f"{TOP_FOLDER}-{__version__}-{commit[:12]}{'-dirty' if commit.endswith('-dirty') else ''}.zip"


def course_data_dir(project: str) -> str | None:
    """The course data folder beside the project (``<project>/../shared/data``) if it exists."""
    path = os.path.join(project, os.pardir, "shared", "data")
    return os.path.normpath(path) if os.path.isdir(path) else None


def course_data_files(data: str | None) -> list[str]:
    """The :data:`COURSE_DATA` paths present as regular files in the folder ``data`` (none for ``None``)."""
    return [] if data is None else [p for p in COURSE_DATA if os.path.isfile(os.path.join(data, *p.split("/")))]


def sections_needing(paths: list[str]) -> list[str]:
    """The handbook sections (``"11.5"``, ``"14.1"``, ...) that use any of the :data:`COURSE_DATA`
    ``paths``, each once, in the handbook's order."""
    numbers = {number for path in paths for number in re.findall(r"\d+\.\d+", COURSE_DATA[path])}
    return sorted(numbers, key=lambda number: tuple(int(part) for part in number.split(".")))


def _lab_record(commit: str | None, included: list[str], data_given: bool) -> bytes:
    left_out = [path for path in COURSE_DATA if path not in included]
    record = {"tool": "infer-sched-lab", "kind": "lab-zip", "version": __version__, "source_commit": commit,
              "course_data": {"folder": f"{DATA_FOLDER}/ (the handbook's ../shared/data/)",
                              "included": included, "left_out": left_out,
                              "sections_needing_what_is_left_out": sections_needing(left_out)}}
    if left_out and not data_given:
        record["course_data"]["why"] = "built without the course data folder"
    return (json.dumps(record, indent=2) + "\n").encode("utf-8")


def build_lab_zip(project: str, output: str, force: bool = False, data: str | None = BESIDE_PROJECT,
                  commit: str | None = None) -> list[str]:
    """Write the lab ZIP of ``project`` to ``output`` atomically; returns the packed paths.

    Entry names are ``inference-scheduler-lab/<path>``. An existing ``output`` is refused unless
    ``force``; an ``output`` that is one of the files the ZIP would contain (e.g. ``prediction.md``)
    is always refused, and so is a path where the next ``zip`` would pack it (inside ``tests/``,
    ``workloads/``, ... or a top-level ``LICENSE*`` name). ``data``: the course data folder
    (:data:`BESIDE_PROJECT`: :func:`course_data_dir`; ``None``: none), whose :data:`COURSE_DATA`
    files present are packed under ``shared/data/``; ``commit``: the source commit recorded in
    ``LAB.json`` (``None``: unknown). The file is first written beside ``output`` and renamed into place when
    complete; on any failure, Ctrl-C included, the temporary file is removed. The ZIP gets the
    usual permissions (0666 minus the umask). Raises :class:`LabZipError` with one line.
    """
    output_abs = os.path.realpath(output)
    files = lab_files(project)
    for path in files:
        if os.path.realpath(os.path.join(project, path)) == output_abs:
            raise LabZipError(f"{output}: is the lab's own file {path}; choose another output path")
    inside = _packed_path(project, output)
    if inside is not None:
        raise LabZipError(f"{output}: lies inside the lab's sources ({inside}): the next zip would pack it; "
                          "choose a path outside the packed folders")
    if os.path.lexists(output):
        if os.path.isdir(output):
            raise LabZipError(f"{output}: is a directory; choose a file path for the ZIP")
        if not force:
            raise LabZipError(f"{output}: already exists; choose another path or pass --force to replace it")
        if not os.path.isfile(output):
            raise LabZipError(f"{output}: exists and is not a regular file; refusing to replace it")
    if data == BESIDE_PROJECT:
        data = course_data_dir(project)
    included = course_data_files(data)
    entries = [(f"{TOP_FOLDER}/{path}", os.path.join(project, path), path in _EXECUTABLE) for path in files]
    entries += [(f"{DATA_FOLDER}/{path}", os.path.join(data, *path.split("/")), False) for path in included]
    entries.append((f"{TOP_FOLDER}/{LAB_RECORD}", _lab_record(commit, included, data is not None), False))
    directory = os.path.dirname(os.path.abspath(output))
    staging = None
    try:
        handle, staging = tempfile.mkstemp(prefix=".lab-zip.", suffix=".tmp", dir=directory)
        with os.fdopen(handle, "wb") as raw, zipfile.ZipFile(raw, "w") as archive:
            for name, source, executable in sorted(entries):
                info = zipfile.ZipInfo(name, date_time=_EPOCH)
                info.create_system = 3  # Unix, so the permission bits below are read
                info.external_attr = (0o100755 if executable else 0o100644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                if isinstance(source, bytes):
                    archive.writestr(info, source, compresslevel=9)
                    continue
                with open_regular(source, "rb") as packed:
                    archive.writestr(info, packed.read(), compresslevel=9)
        os.chmod(staging, normal_mode())  # mkstemp made it private; a ZIP to ship is readable
        os.replace(staging, os.path.abspath(output))
        staging = None
        note_written(output)
    except OSError as exc:
        raise LabZipError(f"{output}: cannot write the lab ZIP ({exc.strerror or exc})") from None
    finally:  # also on Ctrl-C and SIGTERM (sched.base.cmdline.interrupts_raise): no .lab-zip.*.tmp left behind
        if staging is not None and os.path.exists(staging):
            os.remove(staging)
    return files

