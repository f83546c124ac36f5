"""Writing directories and files safely (lab.md §7): what kind a directory is, and atomic writes.

:func:`write_artifacts` builds the whole directory beside its target and moves it into place only
when complete, so a failure leaves nothing half-written and an earlier run is never overwritten
unless asked (``force``); :func:`directory_kind` tells a run's directory from a sweep's, an
export's or a calibration's, so ``--force`` never replaces another command's files.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile

from .files import exclusive_lock, normal_mode, note_written, open_regular, refuse_non_regular, staging_prefix

__all__ = ["ArtifactError", "ARTIFACT_FILES", "KIND_MARKERS", "check_target", "directory_kind", "files_kind",
           "refuse_kind_file", "write_artifacts", "write_text_file"]

#: Every file a run directory holds; ``--force`` replaces these and nothing else.
ARTIFACT_FILES = ("manifest.json", "workload.json", "summary.json", "summary.csv",
                  "requests.jsonl", "timeline.jsonl", "table.txt", "timeline.svg", "report.html")


class ArtifactError(OSError):
    """The artifacts directory cannot be written; the message names the path."""


#: The file that says what kind of directory holds it (:func:`directory_kind`); every writer's files carry one.
KIND_MARKERS = ("manifest.json", "export.json", "calibration.json")


def _marker_kind(name: str, text) -> str:
    """The kind one marker file's text names (see :func:`directory_kind`)."""
    try:
        data = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return "unknown"
    if name == "calibration.json":   # calibrate's numbers (no tool field of their own)
        return "calibrate" if isinstance(data.get("step_ms"), dict) else "unknown"
    if not str(data.get("tool", "")).startswith("infer-sched-lab"):
        return "unknown"
    if name == "export.json":
        return "export" if data.get("kind") == "export" else "unknown"
    if data.get("tool") == "infer-sched-lab sweep":
        return "sweep"
    kind = data.get("kind")
    return "simulated" if kind is None else kind if isinstance(kind, str) and kind else "unknown"


def _kind_of_markers(found: dict) -> str | None:
    kinds = sorted(set(found.values()))
    return None if not kinds else kinds[0] if len(kinds) == 1 else "+".join(kinds)


def files_kind(files: dict) -> str | None:
    """The kind of directory ``files`` (name → text) make, by the same rule as :func:`directory_kind`."""
    return _kind_of_markers({name: _marker_kind(name, files[name]) for name in KIND_MARKERS if name in files})


def directory_kind(directory: str) -> str | None:
    """What kind of directory ``directory`` is, by its marker files (:data:`KIND_MARKERS`):
    ``"simulated"`` (a lab run, manifest.json), ``"sweep"``, ``"real"`` (import-results),
    ``"serving-bench"``, another manifest ``kind``, ``"export"`` (export.json), ``"calibrate"``
    (calibration.json), ``"unknown"`` (an unreadable or foreign marker), ``"A+B"`` (markers of two
    kinds), or ``None`` when there is no marker."""
    found = {}
    for name in KIND_MARKERS:
        path = os.path.join(directory, name)
        if os.path.lexists(path):
            try:
                with open_regular(path) as handle:
                    found[name] = _marker_kind(name, handle.read())
            except (OSError, ValueError):
                found[name] = "unknown"
    return _kind_of_markers(found)


def refuse_kind_file(path: str) -> None:
    """Refuse to replace an existing ``path`` inside a directory another command wrote (one with a
    kind, :func:`directory_kind`), even with --force: that file belongs to that directory (e.g. an
    export's frozen workload.json). Raises :class:`ArtifactError`."""
    found = directory_kind(os.path.dirname(path) or ".") if os.path.lexists(path) else None
    if found is not None:
        raise ArtifactError(f"{path}: belongs to a directory of another kind ({found}); --force replaces only "
                            "a lone file, never one of a run's, export's or other output's files: choose another path")


def check_target(directory: str, force: bool = False, names=ARTIFACT_FILES, kind: str | None = None) -> None:
    """Refuse an artifacts directory that cannot be used, before anything is simulated or written.

    ``directory`` must be new, empty, or (with ``force``) an existing directory where each of
    ``names`` (the files to replace) is absent or a regular file and whose marker files (if any) say
    it is the same ``kind`` of directory as the one to write (:func:`directory_kind`; ``None`` for
    files without a marker): a sweep never replaces a run's files, a run never an export's. A path
    whose parent is a file is refused too. Raises :class:`ArtifactError` with one readable line.
    """
    if not directory:
        raise ArtifactError("--artifacts: needs a directory name, got an empty string")
    target = os.path.normpath(directory)
    if os.path.exists(target) and not os.path.isdir(target):
        raise ArtifactError(f"{directory}: exists and is not a directory")
    try:
        occupied = os.path.isdir(target) and bool(os.listdir(target))
    except OSError as exc:
        raise ArtifactError(f"{directory}: cannot read the directory ({exc.strerror or exc})") from None
    if occupied and not force:
        raise ArtifactError(f"{directory}: already holds files; choose another directory or pass --force "
                            "to replace the lab's files there")
    found = directory_kind(target) if occupied else None
    if found not in (None, kind):
        markers = ", ".join(name for name in KIND_MARKERS if os.path.lexists(os.path.join(target, name)))
        raise ArtifactError(f"{directory}: already holds files of another kind ({found}) according to its "
                            f"{markers}; --force replaces only a directory of the same kind ({kind or 'unmarked'}): "
                            "choose another directory")
    if occupied:
        for name in names:
            path = os.path.join(target, name)
            if os.path.lexists(path) and (os.path.islink(path) or not os.path.isfile(path)):
                raise ArtifactError(f"{path}: is not a regular file; --force replaces only the lab's own files "
                                    "(move it away first)")
    ancestor = os.path.dirname(os.path.abspath(target))
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise ArtifactError(f"{directory}: cannot write artifacts ({ancestor} is a file, not a directory)")


def write_artifacts(files: dict[str, str], directory: str, force: bool = False) -> None:
    """Write ``files`` (name → text, or an iterable of text chunks) as ``directory``, atomically.

    The files are written into a temporary directory (beside a new target, inside an existing one:
    :func:`_write_staged`) and moved into place only when all are complete, under an exclusive
    lock on the parent directory (:func:`sched.base.files.exclusive_lock`: a second writer waits, then
    finds the first one's run); on any failure (read-only place, full disk, Ctrl-C, SIGTERM) the temporary
    directory and any parent directories created for it are removed again, so nothing is left
    half-written. An existing non-empty target is refused unless ``force``, and with ``force``
    unless it is the same kind of directory (:func:`files_kind`, :func:`check_target`); only
    the named files are replaced, all or none (:func:`_swap_in`), and anything else there is left
    alone. New directories and files get the usual permissions (0777/0666 minus the umask).
    Raises :class:`ArtifactError` with one readable line naming ``directory``.
    """
    kind = files_kind(files)   # the kind rule needs no caller's help: the files name their kind
    check_target(directory, force, files, kind)
    target = os.path.normpath(directory)
    parent = os.path.dirname(os.path.abspath(target))
    created = _missing_ancestors(parent)
    try:
        os.makedirs(parent, exist_ok=True)
        with exclusive_lock(parent):  # two writers of one place take turns, never mix their files
            check_target(directory, force, files, kind)  # again: another writer may have finished meanwhile
            _write_staged(files, target, parent)
        note_written(directory)
    except BaseException as exc:  # Ctrl-C and SIGTERM included: nothing half-written stays behind
        for path in created:  # deepest first; each is empty once the staging directory is gone
            with contextlib.suppress(OSError):
                os.rmdir(path)
        if isinstance(exc, OSError) and not isinstance(exc, ArtifactError):
            raise ArtifactError(f"{directory}: cannot write artifacts ({exc.strerror or exc})") from None
        raise


def _write_staged(files: dict, target: str, parent: str) -> None:
    """Write ``files`` into a staging directory and move them into ``target``; the staging
    directory is removed on any failure. A new target: staged beside it in ``parent`` and renamed
    into place. An existing (empty, or ``--force``) target: staged *inside* it, so every move stays
    on the target's file system (a mount point or a link to ``/dev/shm`` would fail across file
    systems with EXDEV)."""
    exists = os.path.isdir(target)
    staging = tempfile.mkdtemp(prefix=staging_prefix(os.path.basename(target)), suffix=".tmp",
                               dir=target if exists else parent)
    try:
        file_mode = normal_mode()
        for name, text in files.items():
            path = os.path.join(staging, name)
            with open(path, "w", encoding="utf-8", newline="\n") as handle:
                if isinstance(text, str):
                    handle.write(text)
                else:
                    handle.writelines(text)
            os.chmod(path, file_mode)
        if not exists:
            os.chmod(staging, normal_mode(directory=True))  # mkdtemp made it private (0700)
            os.rename(staging, target)
            staging = None
        else:
            _swap_in(staging, target, list(files))
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def _swap_in(staging: str, target: str, names: list[str]) -> None:
    """Replace ``names`` in ``target`` by those in ``staging``: all of them or, on failure, none.

    The old files are first moved into a backup directory inside ``target`` (same file system, so
    every move is a rename), then the new ones are moved in; any failure moves everything back and
    re-raises. The backup directory is removed at the end either way.
    """
    for name in names:  # checked again right before moving: a directory here would be replaced
        path = os.path.join(target, name)
        if os.path.lexists(path) and (os.path.islink(path) or not os.path.isfile(path)):
            raise FileExistsError(errno.EEXIST, f"{name} is not a regular file; refusing to replace it", path)
    backup = tempfile.mkdtemp(prefix=".replaced.", suffix=".tmp", dir=target)
    moved_old, moved_new = [], []
    try:
        for name in names:
            if os.path.lexists(os.path.join(target, name)):
                os.rename(os.path.join(target, name), os.path.join(backup, name))
                moved_old.append(name)
        for name in names:
            os.rename(os.path.join(staging, name), os.path.join(target, name))
            moved_new.append(name)
    except BaseException:
        for name in moved_new:
            with contextlib.suppress(OSError):
                os.rename(os.path.join(target, name), os.path.join(staging, name))
        for name in moved_old:
            with contextlib.suppress(OSError):
                os.rename(os.path.join(backup, name), os.path.join(target, name))
        raise
    finally:
        shutil.rmtree(backup, ignore_errors=True)


def _missing_ancestors(path: str) -> list[str]:
    """``path`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while path and not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path) if os.path.dirname(path) != path else ""
    return missing


def write_text_file(text: str, path: str) -> None:
    """Write one text file atomically (temporary file beside it, then renamed into place).

    The caller decides whether an existing file may be replaced; only a regular file ever is (a
    device node, FIFO or directory at ``path`` is refused), and never one inside a directory of a
    kind (:func:`refuse_kind_file`). The file gets the usual
    permissions (0666 minus the umask); on any failure, Ctrl-C included, the temporary file is
    removed. Raises :class:`ArtifactError`.
    """
    parent = os.path.dirname(os.path.abspath(path))
    refuse_non_regular(path, ArtifactError)
    refuse_kind_file(path)
    staging = None
    try:
        os.makedirs(parent, exist_ok=True)
        handle, staging = tempfile.mkstemp(prefix=staging_prefix(os.path.basename(path)), suffix=".tmp", dir=parent)
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as out:
            out.write(text)
        os.chmod(staging, normal_mode())  # mkstemp made it private (0600)
        os.replace(staging, path)
        staging = None
        note_written(path)
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if staging is not None:
            with contextlib.suppress(OSError):
                os.unlink(staging)
