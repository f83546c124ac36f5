"""File helpers shared by every command: read only regular files; give new files normal permissions.

Reading: ``open(path)`` on a FIFO waits for a writer forever, so every reader of user-named files
(workload, artifacts, trace and result files) goes through :func:`open_regular`: the file is opened
non-blocking, checked with ``fstat`` on the same descriptor (no race with a rename), and refused
unless it is a regular file.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["NotRegularFileError", "open_regular", "read_regular_text", "normal_mode"]


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
