"""The lab ZIP an instructor ships (lab.md §1): reproducible, with one top folder.

``inference-scheduler-lab.zip`` holds ``inference-scheduler-lab/`` with exactly: the entry point
``infer_sched_lab.py``, the package ``sched/``, ``bench/`` if it exists, ``workloads/``,
``expected/``, ``tests/`` (with any ``tests/data/`` excerpts and their attribution files), the
templates ``prediction.md`` and ``diagnosis.md``, ``README.md`` and ``docs/`` if it exists (the
specification the handbook cites, e.g. ``docs/spec/lab.md``), ``pyproject.toml``, ``.ci/run``,
the lab's own licence ``LICENSE`` (MIT) and any other licence or attribution files at the top
(``LICENSE*``, ``LICENCE*``, ``NOTICE*``, ``COPYING*``, ``ATTRIBUTION*``, ``SOURCES*``) when
present. Only regular files. Nothing else: no ``__pycache__``, ``*.pyc``, hidden files, runs or
``.git``.

Reproducible: entries sorted by path, every timestamp 1980-01-01 00:00:00, permissions fixed by
path (0755 for ``infer_sched_lab.py`` and ``.ci/run``, 0644 otherwise), deflate level 9, no
comment and no extra fields; the same sources give the same bytes.
"""

from __future__ import annotations

import os
import tempfile
import zipfile

from ..base.files import normal_mode, note_written, open_regular

__all__ = ["LabZipError", "TOP_FOLDER", "DEFAULT_ZIP", "lab_files", "build_lab_zip"]

TOP_FOLDER = "inference-scheduler-lab"
DEFAULT_ZIP = "inference-scheduler-lab.zip"

_REQUIRED = ("infer_sched_lab.py", "sched", "workloads", "expected", "tests", "prediction.md", "diagnosis.md",
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


def build_lab_zip(project: str, output: str, force: bool = False) -> list[str]:
    """Write the lab ZIP of ``project`` to ``output`` atomically; returns the packed paths.

    Entry names are ``inference-scheduler-lab/<path>``. An existing ``output`` is refused unless
    ``force``; an ``output`` that is one of the files the ZIP would contain (e.g. ``prediction.md``)
    is always refused, and so is a path where the next ``zip`` would pack it (inside ``tests/``,
    ``workloads/``, ... or a top-level ``LICENSE*`` name). The file is first written beside ``output`` and renamed into place when
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
    directory = os.path.dirname(os.path.abspath(output))
    staging = None
    try:
        handle, staging = tempfile.mkstemp(prefix=".lab-zip.", suffix=".tmp", dir=directory)
        with os.fdopen(handle, "wb") as raw, zipfile.ZipFile(raw, "w") as archive:
            for path in files:
                info = zipfile.ZipInfo(f"{TOP_FOLDER}/{path}", date_time=_EPOCH)
                info.create_system = 3  # Unix, so the permission bits below are read
                info.external_attr = (0o100755 if path in _EXECUTABLE else 0o100644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                with open_regular(os.path.join(project, path), "rb") as source:
                    archive.writestr(info, source.read(), compresslevel=9)
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

