"""File helpers shared by every command: read only regular files; give new files normal permissions;
write safely (short staging names, ``--force`` only over regular files, one writer at a time).

Reading: ``open(path)`` on a FIFO waits for a writer forever, so every reader of user-named files
(workload, artifacts, trace and result files) goes through :func:`open_regular`: the file is opened
non-blocking, checked with ``fstat`` on the same descriptor (no race with a rename), and refused
unless it is a regular file.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import stat

__all__ = ["NotRegularFileError", "open_regular", "read_regular_text", "normal_mode", "staging_prefix",
           "refuse_non_regular", "exclusive_lock", "note_written", "reset_written", "written",
           "decoded_chunks", "STAGING_NAME_BYTES"]


class NotRegularFileError(OSError):
    """``path`` names a FIFO, device, socket or directory rather than a regular file."""


def open_regular(path: str, mode: str = "r", encoding: str | None = "utf-8", **kwargs):
    """Open the regular file ``path`` for reading (``mode`` ``"r"`` or ``"rb"``); returns the file object.

    Raises :class:`IsADirectoryError` for a directory, :class:`NotRegularFileError` (an
    ``OSError`` whose ``strerror`` says what the path is) for any other non-regular file, and the
    usual ``OSError`` (``FileNotFoundError``, ``PermissionError``, ...) otherwise.
    """
    if mode not in ("r", "rb"):
        raise ValueError(f"open_regular reads only, got mode {mode!r}")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        kind = os.fstat(fd).st_mode
        if stat.S_ISDIR(kind):
            raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", path)
        if not stat.S_ISREG(kind):
            what = "a FIFO" if stat.S_ISFIFO(kind) else "a socket" if stat.S_ISSOCK(kind) else "a device"
            raise NotRegularFileError(errno.EINVAL, f"not a regular file (it is {what})", path)
        if mode == "rb":
            return os.fdopen(fd, "rb", **kwargs)
        return os.fdopen(fd, "r", encoding=encoding, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def read_regular_text(path: str, encoding: str = "utf-8") -> str:
    """The whole text of the regular file ``path`` (see :func:`open_regular` for the errors)."""
    with open_regular(path, encoding=encoding) as handle:
        return handle.read()


def normal_mode(directory: bool = False) -> int:
    """Permission bits a new file (0666) or directory (0777) gets under the process umask.

    ``tempfile`` creates private files (0600) and directories (0700); a finished artifact or ZIP
    is chmod-ed to this so it reads like any file the user creates.
    """
    mask = os.umask(0o022)  # the only portable way to read the umask is to set it and put it back
    os.umask(mask)
    return (0o777 if directory else 0o666) & ~mask


# --- writing safely: staging names, replacing only regular files, one writer at a time -----------

#: Bytes of the target's name kept in a staging name: ``.<name>.<8 random>.tmp`` then stays far
#: below the usual 255-byte limit of one file name, however long the target's own name is.
STAGING_NAME_BYTES = 200


def staging_prefix(name: str) -> str:
    """``"." + name + "."`` for ``tempfile.mkstemp``/``mkdtemp``, ``name`` cut to
    :data:`STAGING_NAME_BYTES` bytes (a 250-byte directory name must not make a 265-byte one)."""
    raw = os.fsencode(name)
    if len(raw) > STAGING_NAME_BYTES:
        name = os.fsdecode(raw[:STAGING_NAME_BYTES])
    return f".{name}."


def refuse_non_regular(path: str, error=OSError) -> None:
    """Raise ``error`` (one line naming ``path``) when ``path`` exists and is not a regular file (or a
    link to one): ``--force`` replaces files, never a device node, FIFO, socket or directory."""
    if os.path.lexists(path) and not os.path.isfile(path):
        what = "a directory" if os.path.isdir(path) else "not a regular file (a device, FIFO, socket or broken link)"
        raise error(f"{path}: exists and is {what}; --force replaces only a regular file (move it away first)")


@contextlib.contextmanager
def exclusive_lock(directory: str):
    """Hold an exclusive ``flock`` on ``directory`` (an existing directory) while inside: two writers
    of the same place take turns, the second waiting until the first has finished (a Ctrl-C while
    waiting interrupts the wait). The lock goes with the process; nothing is left on disk. Where
    the directory cannot be opened or locked (no ``fcntl``, a file system without locks) the
    block runs unlocked."""
    try:
        import fcntl
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


#: Outputs completed since :func:`reset_written` (the CLI tells an interrupt after a write apart
#: from one before any: "nothing was written" is said only when it is true).
_written: list[str] = []


def note_written(path: str) -> None:
    """Record that ``path`` (a file or directory) was written completely."""
    _written.append(path)


def reset_written() -> None:
    """Forget the recorded outputs (at the start of one command)."""
    _written.clear()


def written() -> list[str]:
    """The outputs recorded by :func:`note_written` since the last :func:`reset_written`."""
    return list(_written)


def decoded_chunks(handle, size: int = 1 << 20):
    """The rest of the binary file ``handle`` as UTF-8 text chunks of about ``size`` bytes (a chunk
    may end inside a character: the incremental decoder carries it over). Raises what reading
    ``handle`` raises (``OSError``) and ``UnicodeDecodeError``."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    while chunk := handle.read(size):
        yield decoder.decode(chunk)
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail
