"""Only regular files are read (sched/base/files.py): a FIFO named as input is refused at once, never waited on.

Each command runs in-process (``main(argv)``) under a watchdog: if it is still running after
:data:`PATIENCE` seconds, the watchdog opens every FIFO of the test for writing and closes it again,
so a command blocked on opening or reading one wakes up (end of file), and the test fails saying it
waited, instead of hanging the suite.
"""

import errno
import os
import threading
import time
import unittest

from sched.base.files import NotRegularFileError, open_regular, read_regular_text
from tests.helpers import EXPECTED, run_cli, temp_dir

BASELINE_DIR = os.path.join(EXPECTED, "baseline")
#: Seconds a command may run before the watchdog unblocks its FIFOs (and the test fails).
PATIENCE = 10


class _Result:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@unittest.skipUnless(hasattr(os, "mkfifo"), "needs FIFOs")
class FifoTest(unittest.TestCase):
    def setUp(self):
        self.fifos = []

    def fifo(self, name: str = "fifo.json", folder: str | None = None) -> str:
        path = os.path.join(folder or temp_dir(self), name)
        os.mkfifo(path)
        self.fifos.append(path)
        return path

    def _unblock(self, stop: threading.Event, fired: list) -> None:
        """After PATIENCE seconds, keep giving every FIFO a writer that closes at once (EOF) until stopped."""
        if stop.wait(PATIENCE):
            return
        fired.append(True)
        while not stop.is_set():
            for path in self.fifos:
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                except OSError as exc:
                    if exc.errno not in (errno.ENXIO, errno.ENOENT):  # ENXIO: nobody is reading it yet
                        raise
            time.sleep(0.05)

    def run_entry(self, *argv: str) -> _Result:
        """``main(argv)`` in-process; fails the test if a FIFO made it wait PATIENCE seconds."""
        stop, fired = threading.Event(), []
        watchdog = threading.Thread(target=self._unblock, args=(stop, fired), daemon=True)
        watchdog.start()
        started = time.monotonic()
        try:
            code, out, err = run_cli(list(argv))
        finally:
            stop.set()
            watchdog.join()
        self.assertEqual(fired, [], f"{argv} waited {time.monotonic() - started:.0f} s on a FIFO instead of refusing it")
        return _Result(code, out, err)

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
        self.fifo("manifest.json", run_dir)
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
        self.fifo("summary.json", run_dir)
        run = self.run_entry("compare", run_dir, "--baseline-case", "continuous", "--candidate-case",
                             "continuous+APC", "--out", os.path.join(temp_dir(self), "decision.json"))
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("summary.json", run.stderr)


if __name__ == "__main__":
    unittest.main()
