"""Opening a hand-in safely: a ZIP extracted into a scratch folder, or a folder read in place.

A hand-in comes from outside, so nothing in it is trusted: an entry whose path is absolute,
climbs out (``..``), uses backslashes or a drive letter, is a symbolic link, is encrypted or
appears twice refuses the whole hand-in; so do more than :data:`MAX_ENTRIES` entries, a file
over :data:`MAX_FILE_BYTES` or a total over :data:`MAX_TOTAL_BYTES` (declared or actually
inflated: a ZIP bomb stops at the limit). A folder hand-in may hold only regular files and
folders (no links, FIFOs or devices). Every refusal is a :class:`BadHandin` with one line.
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib

from ..base.cmdline import InputError

__all__ = ["BadHandin", "open_handin", "MAX_ENTRIES", "MAX_FILE_BYTES", "MAX_TOTAL_BYTES", "MAX_NAME_CHARS", "MAX_DEPTH",
           "MAX_PART_BYTES"]

#: Most entries in one hand-in (the course's full hand-in has under 100).
MAX_ENTRIES = 1000
#: Largest file in a hand-in, in bytes (the course's largest artifact is about 60 KB).
MAX_FILE_BYTES = 8 * 1024 * 1024
#: Largest hand-in, all files together, in bytes.
MAX_TOTAL_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024


class BadHandin(InputError):
    """A hand-in that cannot be graded at all; the message says why in one line."""


#: Longest entry name, deepest path and longest file name (bytes) a hand-in may use: the course's
#: deepest entry is ``NAME/runs/<run>/<artifact>`` (4 levels); the file system's own limits are 255
#: bytes a name and 4,096 a path, whatever the scratch folder's own path.
MAX_NAME_CHARS, MAX_DEPTH, MAX_PART_BYTES = 1024, 16, 255


def _shown(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:77] + "...")


def _safe_parts(name: str) -> list[str]:
    """The path components of a ZIP entry name, or :class:`BadHandin` when it could escape the
    folder or is longer or deeper than a hand-in's (:data:`MAX_NAME_CHARS`, :data:`MAX_DEPTH`,
    :data:`MAX_PART_BYTES`)."""
    if len(name) > MAX_NAME_CHARS or name.count("/") > MAX_DEPTH or \
            any(len(part.encode("utf-8", "surrogateescape")) > MAX_PART_BYTES for part in name.split("/")):
        raise BadHandin(f"entry {_shown(name)}: a path longer or deeper than a hand-in's")
    if "\\" in name or "\0" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise BadHandin(f"entry {name!r}: a path escaping the hand-in folder (absolute, drive or backslash)")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise BadHandin(f"entry {name!r}: a path escaping the hand-in folder (..)")
    return parts


def _extract(path: str, into: str) -> None:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise BadHandin("not a ZIP file (make the hand-in with: python3 infer_sched_lab.py handin --out NAME.zip)") from None
    except OSError as exc:
        raise BadHandin(f"cannot read ({exc.strerror or exc})") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_ENTRIES:
            raise BadHandin(f"{len(infos)} entries, more than the {MAX_ENTRIES} a hand-in may hold")
        seen, declared = set(), 0
        for info in infos:
            parts = _safe_parts(info.filename)
            key = "/".join(parts)
            if key in seen:
                raise BadHandin(f"entry {info.filename!r}: appears twice")
            seen.add(key)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise BadHandin(f"entry {info.filename!r}: a symbolic link (a hand-in holds regular files only)")
            if info.flag_bits & 0x1:
                raise BadHandin(f"entry {info.filename!r}: encrypted")
            if info.file_size > MAX_FILE_BYTES:
                raise BadHandin(f"entry {info.filename!r}: {info.file_size} bytes, more than {MAX_FILE_BYTES}")
            declared += info.file_size
        if declared > MAX_TOTAL_BYTES:
            raise BadHandin(f"{declared} bytes unpacked, more than the {MAX_TOTAL_BYTES} a hand-in may hold")
        total = 0
        for info in infos:
            parts = _safe_parts(info.filename)
            if not parts:
                continue
            target = os.path.join(into, *parts)
            try:
                os.makedirs(target if info.is_dir() else os.path.dirname(target), exist_ok=True)
            except (FileExistsError, NotADirectoryError):   # a file entry already sits where a folder goes
                raise BadHandin(f"entry {info.filename!r}: clashes with a file of the same name as its folder") from None
            if info.is_dir():
                continue
            if os.path.lexists(target):
                raise BadHandin(f"entry {info.filename!r}: clashes with a folder of the same name")
            try:
                with archive.open(info) as source, open(target, "wb") as out:
                    size = 0
                    while chunk := source.read(_CHUNK):
                        size, total = size + len(chunk), total + len(chunk)
                        if size > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
                            raise BadHandin(f"entry {info.filename!r}: inflates beyond the limits (a ZIP bomb?)")
                        out.write(chunk)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, ValueError, zlib.error) as exc:
                if isinstance(exc, BadHandin):
                    raise
                raise BadHandin(f"entry {info.filename!r}: damaged ({exc})") from None
            except OSError as exc:   # the scratch folder's file system refuses it (a name it cannot hold, a full disk)
                raise BadHandin(f"entry {_shown(info.filename)}: cannot be extracted ({exc.strerror or exc})") from None


def _check_folder(root: str) -> None:
    count = total = 0
    for directory, dirs, names in os.walk(root):
        for name in dirs + names:
            full = os.path.join(directory, name)
            mode = os.lstat(full).st_mode
            relative = os.path.relpath(full, root)
            if stat.S_ISLNK(mode):
                raise BadHandin(f"{relative}: a symbolic link (a hand-in holds regular files only)")
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise BadHandin(f"{relative}: not a regular file")
            count += 1
            if stat.S_ISREG(mode):
                size = os.lstat(full).st_size
                total += size
                if size > MAX_FILE_BYTES:
                    raise BadHandin(f"{relative}: {size} bytes, more than {MAX_FILE_BYTES}")
        if count > MAX_ENTRIES or total > MAX_TOTAL_BYTES:
            raise BadHandin(f"more than {MAX_ENTRIES} files or {MAX_TOTAL_BYTES} bytes: not a hand-in")


def _root(folder: str) -> str:
    """The hand-in's own folder: ``folder``, or its single sub-folder when that is where the
    hand-in sits (a ZIP's top folder ``NAME/``)."""
    names = [n for n in os.listdir(folder) if not n.startswith(".") and n != "__MACOSX"]
    if len(names) == 1 and os.path.isdir(os.path.join(folder, names[0])) and names[0] != "runs":
        return os.path.join(folder, names[0])
    return folder


def open_handin(path: str, scratch: str) -> str:
    """The folder holding the hand-in ``path`` (a hand-in ZIP or a folder), ready to read.

    A ZIP is extracted into ``scratch`` (a new, empty folder the caller owns and removes); a
    folder is checked and read in place. Raises :class:`BadHandin` (see the module's rules).
    """
    if os.path.isdir(path):
        _check_folder(path)
        return _root(path)
    if not os.path.isfile(path):
        raise BadHandin("no such file or folder" if not os.path.lexists(path) else "not a regular file or folder")
    _extract(path, scratch)
    return _root(scratch)
