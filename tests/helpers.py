"""Shared test helpers: running the CLI in-process and temporary directories."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import unittest

from sched.commands.main import main

#: ``ISL_FULL=1`` (``.ci/run`` sets it): also run the heavy, duplicated and exhaustive tests that the
#: learner's ``python3 -m unittest`` skips to stay within about 30 s (docs/reference.md, test variables).
FULL = os.environ.get("ISL_FULL", "") not in ("", "0")


def full_only(what: str):
    """Decorator: run the test (or class) only with ``ISL_FULL=1``; ``what`` says what it adds."""
    return unittest.skipUnless(FULL, f"ISL_FULL=1 runs it ({what})")


PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECTED = os.path.join(PROJECT, "expected")

#: Reference directory name -> the CLI arguments that produce it (see tests/regenerate_expected.py).
REFERENCE_RUNS = {
    "baseline": [],
    "prefix-broken": ["--scenario", "prefix-broken"],
    "deadline30": ["--timeout-ticks", "30"],
    "output-heavy": ["--scenario", "output-heavy"],
    # The priority lesson's candidate (compare.md §1): FCFS is already pinned by the four above.
    "priority-mix": ["--scenario", "priority-mix", "--policy", "priority"],
}


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Run ``main(argv)`` in-process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_bad_input(test: unittest.TestCase, argv: list[str], mention: str) -> None:
    """``main(argv)`` exits 2 with nothing on stdout and one stderr line that names ``mention``."""
    code, out, err = run_cli(argv)
    test.assertEqual(code, 2, err)
    test.assertEqual(out, "")
    test.assertEqual(len(err.strip().splitlines()), 1, err)
    test.assertIn(mention, err)


def temp_dir(test: unittest.TestCase) -> str:
    """A fresh temporary directory removed when the test ends."""
    path = tempfile.mkdtemp(prefix="isl-test-")
    test.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path


def read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()
