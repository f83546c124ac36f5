"""Standard output trouble for every sub-command (reference.md §2): a reader that closed the pipe
is exit 141 with no message and the artifacts kept; a full disk is one ``stdout: cannot write``
line, exit 2, naming what was written completely."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import unittest

from sched.commands.main import main
from tests.helpers import EXPECTED, PROJECT, temp_dir
from tests.test_timing_calibrate import small_run

DATA = os.path.join(PROJECT, "tests", "data")
REAL_RUN = os.path.join(DATA, "llmservingsim-vllm-rtx4090-run", "requests.jsonl")
SERVING = os.path.join(DATA, "serving-bench")
BASELINE = os.path.join(EXPECTED, "baseline")


def command_table(base: str, small: str) -> dict[str, tuple[list[str], str | None]]:
    """Name -> (argv, the artifact it writes before printing, or None), every sub-command once;
    ``small`` is a 20-request real run with its meta.json (a quick calibration)."""
    return {
        "run": (["--artifacts", f"{base}/run"], "run"),
        "help": (["help"], None),
        "help COMMAND": (["help", "calibrate"], None),
        "--help": (["diff", "--help"], None),
        "calibrate": (["calibrate", os.path.join(small, "requests.jsonl"), "--train-first", "10", "--out", f"{base}/cal"], "cal"),
        "diff": (["diff", BASELINE, os.path.join(EXPECTED, "priority-mix")], None),
        "export": (["export", "--scenario", "baseline", "--out", f"{base}/export"], "export"),
        "import-results": (["import-results", REAL_RUN, "--artifacts", f"{base}/real"], "real"),
        "serving-bench run": (["serving-bench", "run", os.path.join(SERVING, "requests.json"),
                               "--policies", "fifo", "--batch-sizes", "1", "--batch-speedups", "1",
                               "--artifacts", f"{base}/sb"], "sb"),
        "serving-bench decide": (["serving-bench", "decide", os.path.join(SERVING, "baseline.json"),
                                  os.path.join(SERVING, "candidate.json"), "--out", f"{base}/ev.json"], "ev.json"),
        "compare": (["compare", BASELINE, "--baseline-case", "static", "--candidate-case", "continuous",
                     "--out", f"{base}/decision.json"], "decision.json"),
        "check": (["check", BASELINE, BASELINE], None),
        "explain": (["explain", "S1", "--artifacts", BASELINE], None),
        "import": (["import", "azure", os.path.join(DATA, "azure_conv_2023_head.csv"), "-o", f"{base}/w.json"],
                   "w.json"),
        "sweep": (["sweep", "--loads", "1", "--workers", "1"], None),
        "bench": (["bench", "--azure", f"{base}/none.csv", "--mooncake", f"{base}/none.jsonl", "--sizes", "10"], None),
    }


class _FailingStdout(io.StringIO):
    """A stdout whose every write fails with ``error`` (an ``OSError`` instance)."""

    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text):
        raise self.error


def _run(argv: list[str], error: OSError) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(_FailingStdout(error)), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


class ClosedPipeTest(unittest.TestCase):
    def test_every_command_exits_141_quietly_with_its_artifact_written(self):
        """`... | head -1` once the reader has gone: 141, nothing on stderr (was exit 2 and
        `calibrate: error: [Errno 32] Broken pipe` for the commands run through run_command)."""
        base = temp_dir(self)
        for name, (argv, artifact) in command_table(base, small_run(self, 20)).items():
            with self.subTest(name):
                code, err = _run(argv, BrokenPipeError(errno.EPIPE, "Broken pipe"))
                self.assertEqual((code, err), (141, ""))
                if artifact:
                    self.assertTrue(os.path.exists(os.path.join(base, artifact)), artifact)


class FullDiskTest(unittest.TestCase):
    def test_every_command_is_one_line_exit_2_naming_what_was_written(self):
        """`> /dev/full`: one line; `--help` no longer exits 0 having shown nothing."""
        base = temp_dir(self)
        for name, (argv, artifact) in command_table(base, small_run(self, 20)).items():
            with self.subTest(name):
                code, err = _run(argv, OSError(errno.ENOSPC, "No space left on device"))
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertTrue(err.startswith("infer_sched_lab.py: error: stdout: cannot write (No space left"), err)
                if artifact:
                    self.assertIn(f"{os.path.join(base, artifact)} was written completely", err)


class ClosedStdoutTest(unittest.TestCase):
    def test_every_command_refuses_before_starting(self):
        """`>&-`: Python has no sys.stdout; one line, exit 2, nothing written."""
        base = temp_dir(self)
        for name, (argv, artifact) in command_table(base, small_run(self, 20)).items():
            with self.subTest(name):
                err = io.StringIO()
                with contextlib.redirect_stdout(None), contextlib.redirect_stderr(err):
                    code = main(argv)
                self.assertEqual(code, 2, err.getvalue())
                self.assertEqual(err.getvalue(), "infer_sched_lab.py: error: stdout: is closed; run the command "
                                                 "with stdout open (e.g. > FILE or > /dev/null)\n")
                if artifact:
                    self.assertFalse(os.path.exists(os.path.join(base, artifact)), artifact)


if __name__ == "__main__":
    unittest.main()
