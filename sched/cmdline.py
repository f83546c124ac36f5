"""Small command-line helpers shared by the subcommand modules (``compare``, ``realrun``).

Kept apart from :mod:`sched.cli` so a library module can offer its own ``command(argv)`` handler
without importing the CLI (imports flow one way).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

__all__ = ["LineParser", "InputError", "EXIT_OK", "EXIT_BAD_INPUT", "fraction_arg", "run_command",
           "write_text_atomically"]

EXIT_OK, EXIT_BAD_INPUT = 0, 2


class InputError(ValueError):
    """Unusable input for a subcommand; the message names the file, the request and the field."""


class LineParser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line (exit 2) without the usage block."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def fraction_arg(text: str) -> float:
    """A non-negative number given on the command line (e.g. a gate threshold such as 0.15)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def run_command(prog: str, body, argv: list[str]) -> int:
    """Run ``body(argv) -> int``; an :class:`InputError` or ``OSError`` becomes one stderr line and exit 2."""
    try:
        return body(argv)
    except (InputError, OSError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def write_text_atomically(path: str, text: str, force: bool = False) -> None:
    """Write ``text`` to ``path`` via a temporary file beside it, so no reader sees half a file.

    An existing ``path`` is refused (:class:`InputError`) unless ``force``.
    """
    if os.path.exists(path) and not force:
        raise InputError(f"{path}: already exists; choose another --out or pass --force to replace it")
    directory = os.path.dirname(os.path.abspath(path))
    handle, staging = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as out:
            out.write(text)
        os.replace(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.unlink(staging)
        raise
