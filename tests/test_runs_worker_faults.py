"""Faults around the worker process of a large run (sched/runs/parallel.py) and signals that end a
run (README §13), with real processes and real signals: SIGHUP while writing cleans up like
SIGTERM; a worker stopped from outside is one line and exit 128 + its signal, not an internal
error; a worker never outlives its parent. Each child process is bounded by a timeout."""

import json
import os
import signal
import subprocess
import sys
import time
import unittest

from sched.runs import parallel
from sched.base.cmdline import Interrupted
from sched.core.records import SimulationError
from tests.helpers import PROJECT, full_only, temp_dir
from tests.test_base_interrupts import LIMIT, _alive, _children, signal_while_writing

FORK_AND_PROC = hasattr(os, "fork") and os.path.isdir("/proc/self/task")


def _big_workload(path: str) -> str:
    """2,000 small requests: enough for the run to use a worker process."""
    requests = [{"name": f"r{i}", "arrival": i, "prefix_key": None, "prefix_tokens": 0, "suffix_tokens": 8,
                 "output_tokens": 4} for i in range(2000)]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"requests": requests}, handle)
    return path


#: A run whose worker sleeps instead of simulating (the parent then waits for it): the test can
#: signal the worker or the parent at a known moment. Two usable cores are assumed (patched).
_SLEEPING_WORKER = (
    "import sys, time; sys.path.insert(0, {project!r})\n"
    "from unittest import mock\n"
    "from sched.runs import parallel\n"
    "from sched.commands.main import main\n"
    "def sleep(index):\n"
    "    time.sleep(60)\n"
    "with mock.patch.object(parallel, '_packed_case', sleep), mock.patch.object(parallel, 'usable_cores', lambda: 2):\n"
    "    sys.exit(main(['--workload', {workload!r}, '--artifacts', {out!r}]))\n")


class WorkerLostTest(unittest.TestCase):
    def test_how_a_worker_that_ended_without_results_is_told(self):
        """Killed (exit code -9) or ended by its own SIGTERM/SIGHUP handler (143, 129): the run was
        stopped by that signal (exit 137, 143, 129); any other end is a bug (exit 3)."""
        for exitcode, signum in ((-9, signal.SIGKILL), (143, signal.SIGTERM), (129, signal.SIGHUP)):
            with self.subTest(exitcode=exitcode):
                error = parallel._lost(exitcode)
                self.assertIsInstance(error, Interrupted)
                self.assertEqual(error.exit_code, 128 + signum)
                self.assertIn(signal.Signals(signum).name, error.what)
        for exitcode in (1, None, 0):
            with self.subTest(exitcode=exitcode):
                self.assertIsInstance(parallel._lost(exitcode), SimulationError)


@unittest.skipUnless(FORK_AND_PROC, "needs fork and /proc to see the worker process")
class WorkerFaultTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.out = os.path.join(self.base, "run")
        workload = _big_workload(os.path.join(self.base, "w.json"))
        code = _SLEEPING_WORKER.format(project=PROJECT, workload=workload, out=self.out)
        self.process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=self.base)
        self.addCleanup(self.end)
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline and not _children(self.process.pid):
            time.sleep(0.02)
        self.workers = _children(self.process.pid)
        self.assertEqual(len(self.workers), 1, "the run started no worker process")

    def end(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate(timeout=LIMIT)
        for pid in self.workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)

    @full_only("a worker killed from outside (the parent-killed case runs by default)")
    def test_a_killed_worker_is_one_line_and_exit_137(self):
        os.kill(self.workers[0], signal.SIGKILL)
        stdout, err = self.process.communicate(timeout=LIMIT)
        self.assertEqual((self.process.returncode, stdout), (137, ""))
        self.assertEqual(err, "infer_sched_lab.py: error: a worker process was stopped by SIGKILL before it "
                              "finished; nothing was written\n")
        self.assertEqual(sorted(os.listdir(self.base)), ["w.json"])

    def test_the_worker_ends_with_its_parent(self):
        """The parent killed outright (no clean-up runs): the worker must not live on (it used to,
        blocked for ever on a pipe it was itself holding open)."""
        self.process.kill()
        self.process.communicate(timeout=LIMIT)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _alive(self.workers[0]):
            time.sleep(0.02)
        self.assertFalse(_alive(self.workers[0]), "the worker outlived its parent")


class HangUpTest(unittest.TestCase):
    def test_sighup_while_writing_leaves_no_staging_directory(self):
        """The terminal closes (SIGHUP) while the 4th artifact is written: cleaned up like SIGTERM,
        one line, exit 129 (128 + SIGHUP); it used to leave the staging directory behind."""
        base = temp_dir(self)
        code = signal_while_writing(os.path.join(base, "run"), "SIGHUP")
        process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=base,
                                 timeout=LIMIT)
        self.assertEqual((process.returncode, process.stdout), (129, ""))
        self.assertEqual(process.stderr, "infer_sched_lab.py: error: hung up (SIGHUP: the terminal closed); nothing was written\n")
        self.assertEqual(os.listdir(base), [])


if __name__ == "__main__":
    unittest.main()
