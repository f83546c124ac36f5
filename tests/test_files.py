"""Only regular files are read (sched/files.py): a FIFO named as input is refused at once, never waited on.

Each command is run in a child process with a timeout, so a regression fails the test instead of
hanging the suite.
"""

import os
import subprocess
import sys
import unittest

from sched.files import NotRegularFileError, open_regular, read_regular_text
from tests.helpers import EXPECTED, PROJECT, temp_dir

BASELINE_DIR = os.path.join(EXPECTED, "baseline")
ENTRY = os.path.join(PROJECT, "infer_sched_lab.py")


@unittest.skipUnless(hasattr(os, "mkfifo"), "needs FIFOs")
class FifoTest(unittest.TestCase):
    def fifo(self, name: str = "fifo.json") -> str:
        path = os.path.join(temp_dir(self), name)
        os.mkfifo(path)
        return path

    def run_entry(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, ENTRY, *argv], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)

    def test_open_regular_refuses_a_fifo_and_a_directory(self):
        path = self.fifo()
        with self.assertRaises(NotRegularFileError) as caught:
            open_regular(path)
        self.assertIn("FIFO", caught.exception.strerror)
        with self.assertRaises(IsADirectoryError):
            open_regular(os.path.dirname(path))
        with self.assertRaises(FileNotFoundError):
            open_regular(os.path.join(os.path.dirname(path), "absent"))

    def test_open_regular_reads_a_regular_file(self):
        path = os.path.join(temp_dir(self), "a.txt")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("héllo\n")
        self.assertEqual(read_regular_text(path), "héllo\n")
        with open_regular(path, "rb") as handle:
            self.assertEqual(handle.read(), "héllo\n".encode("utf-8"))

    def test_workload_fifo_is_one_line_exit_2(self):
        path = self.fifo()
        run = self.run_entry("--workload", path)
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertEqual(run.stdout, "")
        self.assertEqual(len(run.stderr.splitlines()), 1, run.stderr)
        self.assertIn(path, run.stderr)
        self.assertIn("not a regular file", run.stderr)

    def test_check_with_a_fifo_artifact_is_one_line_exit_2(self):
        run_dir = os.path.join(temp_dir(self), "run")
        os.mkdir(run_dir)
        for name in os.listdir(BASELINE_DIR):
            with open(os.path.join(BASELINE_DIR, name), "rb") as src, \
                    open(os.path.join(run_dir, name), "wb") as dst:
                dst.write(src.read())
        os.remove(os.path.join(run_dir, "manifest.json"))
        os.mkfifo(os.path.join(run_dir, "manifest.json"))
        run = self.run_entry("check", run_dir, BASELINE_DIR)
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("manifest.json", run.stderr)

    def test_import_results_and_compare_with_a_fifo_are_one_line_exit_2(self):
        path = self.fifo("result.json")
        run = self.run_entry("import-results", path, "--artifacts", os.path.join(temp_dir(self), "imp"))
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertEqual(len(run.stderr.splitlines()), 1, run.stderr)
        self.assertIn("not a regular file", run.stderr)
        run_dir = os.path.join(temp_dir(self), "run")
        os.mkdir(run_dir)
        for name in os.listdir(BASELINE_DIR):
            if name != "summary.json":
                with open(os.path.join(BASELINE_DIR, name), "rb") as src, \
                        open(os.path.join(run_dir, name), "wb") as dst:
                    dst.write(src.read())
        os.mkfifo(os.path.join(run_dir, "summary.json"))
        run = self.run_entry("compare", run_dir, "--baseline-case", "continuous", "--candidate-case",
                             "continuous+APC", "--out", os.path.join(temp_dir(self), "decision.json"))
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("summary.json", run.stderr)


if __name__ == "__main__":
    unittest.main()
