"""Interrupts, signals and concurrent writers (README §13), with real processes and real signals.

Every process started here is bounded by a timeout and ended by the test; the whole module takes a
few seconds. The sweep cases need Linux's ``/proc`` to find the worker processes. The learner's run
has one real-signal test per mechanism (a sweep's workers end with it; a staging directory is
removed; Ctrl-C while loading); ``ISL_FULL=1`` adds Ctrl-C twice to the process group and SIGTERM
while zipping.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

from sched.base.safe_write import write_artifacts
from sched.runs.scale import long_run_warning
from sched.base.cmdline import one_line
from sched.core.config import EngineConfig
from sched.lab.estimate import estimate_walked_ticks
from sched.base.files import exclusive_lock
from sched.workload.specs import RequestSpec, scenario
from tests.helpers import PROJECT, full_only, read, temp_dir

SCRIPT = os.path.join(PROJECT, "infer_sched_lab.py")
LIMIT = 20  # seconds any child may live


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def _slow_workload(path: str) -> str:
    """200 requests of 1,000 + 1,000 tokens: with decode cost 64 each sweep point takes about a second."""
    requests = [{"name": f"R{i}", "arrival": 0, "prefix_key": None, "prefix_tokens": 0, "suffix_tokens": 1000,
                 "output_tokens": 1000} for i in range(200)]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"requests": requests}, handle)
    return path


def signal_while_writing(out: str, signal_name: str) -> str:
    """Python code for ``-c``: a baseline run into ``out`` that sends itself ``signal_name`` as
    it opens its 4th file for writing (an artifact, mid-way through writing the directory)."""
    return (f"import builtins, os, signal, sys; sys.path.insert(0, {PROJECT!r})\n"
            "from sched.commands.main import main\n"
            "real_open, count = builtins.open, [0]\n"
            "def open_(path, mode='r', *args, **kwargs):\n"
            "    if 'w' in mode:\n"
            "        count[0] += 1\n"
            "        if count[0] == 4:\n"
            f"            os.kill(os.getpid(), signal.{signal_name})\n"
            "    return real_open(path, mode, *args, **kwargs)\n"
            "builtins.open = open_\n"
            f"sys.exit(main(['--artifacts', {out!r}]))\n")


class SignalTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)

    def start(self, argv, **options):
        process = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, cwd=self.base, **options)
        self.addCleanup(self.end, process)
        return process

    def end(self, process):
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=LIMIT)

    def workers_of(self, process) -> list[int]:
        """Wait (at most 10 s) until the sweep's process pool has started its workers."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process.poll() is None:
            workers = _children(process.pid)
            if len(workers) >= 2:
                return workers
            time.sleep(0.02)
        self.fail("the sweep started no worker processes")

    def assert_gone(self, pids):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.02)
        self.assertEqual([pid for pid in pids if _alive(pid)], [], "worker processes outlived the sweep")

    def sweep_argv(self):
        return [SCRIPT, "sweep", "--workload", _slow_workload(os.path.join(self.base, "slow.json")),
                "--decode-cost", "64", "--loads", "1,2", "--workers", "2", "--out", os.path.join(self.base, "sweep")]

    @unittest.skipUnless(os.path.isdir("/proc/self/task"), "needs /proc to see worker processes")
    def test_sigterm_to_a_sweep_ends_its_workers(self):
        """`kill PID` (or `timeout`, or CI cancellation) on the sweep: one line, exit 143, and the
        workers end with it (they used to be orphaned, computing on and holding the caller's pipes)."""
        process = self.start(self.sweep_argv())
        workers = self.workers_of(process)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=LIMIT)
        self.assertEqual((process.returncode, err), (143, "infer_sched_lab.py: error: terminated (SIGTERM); "
                                                          "nothing was written\n"))
        self.assert_gone(workers)
        self.assertEqual(os.listdir(self.base), ["slow.json"])

    @full_only("the sweep's signal handling again, with SIGINT to the whole process group")
    @unittest.skipUnless(os.path.isdir("/proc/self/task"), "needs /proc to see worker processes")
    def test_two_ctrl_c_to_the_process_group_print_one_line(self):
        """The terminal sends Ctrl-C to every process of the group, workers included, and an impatient
        learner presses it twice: one line, exit 130, no traceback from the parent or a worker."""
        process = self.start(self.sweep_argv(), start_new_session=True)
        workers = self.workers_of(process)
        os.killpg(process.pid, signal.SIGINT)
        time.sleep(0.05)
        with self.subTest("second Ctrl-C"):
            try:
                os.killpg(process.pid, signal.SIGINT)
            except ProcessLookupError:  # already gone: the second press came too late to matter
                pass
        _, err = process.communicate(timeout=LIMIT)
        self.assertEqual((process.returncode, err), (130, "infer_sched_lab.py: error: interrupted; nothing was written\n"))
        self.assert_gone(workers)

    def test_sigterm_while_writing_leaves_no_staging_directory(self):
        """SIGTERM lands while the 4th artifact is written: the staging directory `.run.*.tmp` is
        removed (it used to stay, up to 36 MB), nothing else appears, exit 143."""
        process = self.start(["-c", signal_while_writing(os.path.join(self.base, "run"), "SIGTERM")])
        stdout, err = process.communicate(timeout=LIMIT)
        self.assertEqual((process.returncode, stdout), (143, ""))
        self.assertEqual(err, "infer_sched_lab.py: error: terminated (SIGTERM); nothing was written\n")
        self.assertEqual(os.listdir(self.base), [])

    @full_only("the staging clean-up again, for zip")
    def test_sigterm_while_zipping_leaves_no_staging_file(self):
        """The same for `zip`: no `.lab-zip.*.tmp` beside the output."""
        out = os.path.join(self.base, "lab.zip")
        code = (f"import os, signal, sys; sys.path.insert(0, {PROJECT!r})\n"
                "import sched.runs.labzip as labzip\n"
                "from sched.commands.main import main\n"
                "real, count = labzip.open_regular, [0]\n"
                "def open_(*args, **kwargs):\n"
                "    count[0] += 1\n"
                "    if count[0] == 5:\n"
                "        os.kill(os.getpid(), signal.SIGTERM)\n"
                "    return real(*args, **kwargs)\n"
                "labzip.open_regular = open_\n"
                f"sys.exit(main(['zip', '-o', {out!r}]))\n")
        process = self.start(["-c", code])
        _, err = process.communicate(timeout=LIMIT)
        self.assertEqual(process.returncode, 143, err)
        self.assertNotIn("Traceback", err)
        self.assertEqual(os.listdir(self.base), [])

    def test_ctrl_c_while_the_program_loads(self):
        """Ctrl-C or SIGTERM in the first fraction of a second, while `sched` is still being imported:
        one line, exit 130, 143 or 129 (Ctrl-C used to be a traceback; SIGTERM, then SIGHUP, ended the
        process silently)."""
        for signame, code_expected, line in (("SIGINT", 130, "interrupted; nothing was written"),
                                             ("SIGTERM", 143, "terminated (SIGTERM); nothing was written"),
                                             ("SIGHUP", 129, "hung up (SIGHUP: the terminal closed); "
                                                             "nothing was written")):
            prelude = ("import builtins\n"
                       "real = builtins.__import__\n"
                       "def import_(name, *args, **kwargs):\n"
                       "    if name == 'sched.commands.main':\n"
                       f"        os.kill(os.getpid(), signal.{signame})\n"
                       "    return real(name, *args, **kwargs)\n"
                       "builtins.__import__ = import_\n")
            with self.subTest(signame):
                self.assertEqual(self.run_script_after(prelude),
                                 (code_expected, "", f"infer_sched_lab.py: error: {line}\n"))

    def run_script_after(self, prelude: str) -> tuple:
        """``(exit code, stdout, stderr)`` of the script run with no arguments after ``prelude`` (Python
        code; ``os``, ``signal`` and ``sys`` imported, the project first on the path), Ctrl-C handled
        as from a terminal: also where this suite was started with SIGINT ignored (a background job of
        a non-interactive shell), which Python would otherwise leave ignored."""
        code = ("import os, runpy, signal, sys\n"
                "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                f"sys.path.insert(0, {PROJECT!r})\n"
                + prelude +
                f"sys.argv = [{SCRIPT!r}]\n"
                f"runpy.run_path({SCRIPT!r}, run_name='__main__')\n")
        process = self.start(["-c", code])
        stdout, err = process.communicate(timeout=LIMIT)
        return process.returncode, stdout, err

    def test_ctrl_c_just_after_the_command_ends(self):
        """Ctrl-C in the instant after main() has put Python's own handler back (its output written;
        here it lands in the first call after main(), as it did in the wild): the command's own exit
        code and nothing more (it was a traceback); in the instant before main()'s handler is in
        place: one line, exit 130."""
        after = ("def fake(argv=None):\n    return 0\n"
                 "real_getsignal = signal.getsignal\n"
                 "def interrupted(signum):\n"
                 "    signal.getsignal = real_getsignal\n"
                 "    raise KeyboardInterrupt\n"
                 "signal.getsignal = interrupted\n")
        before = "def fake(argv=None):\n    raise KeyboardInterrupt\n"
        for when, fake, code_expected, err_expected in (
                ("after", after, 0, ""),
                ("before", before, 130, "infer_sched_lab.py: error: interrupted; nothing was written\n")):
            with self.subTest(when):
                prelude = f"import sched.commands.main as entry\n{fake}entry.main = fake\n"
                self.assertEqual(self.run_script_after(prelude), (code_expected, "", err_expected))


class ConcurrentWritersTest(unittest.TestCase):
    def test_a_second_writer_waits_for_the_first(self):
        """Two --force runs into one directory used to interleave their moves and both report success
        over a mixed directory. The write takes an exclusive lock on the parent directory: while
        another writer holds it, this one waits, then replaces every file at once."""
        base = temp_dir(self)
        target = os.path.join(base, "run")
        write_artifacts({"a.txt": "first\n", "b.txt": "first\n"}, target)
        done = threading.Event()
        worker = threading.Thread(target=lambda: (write_artifacts({"a.txt": "second\n", "b.txt": "second\n"},
                                                                  target, force=True), done.set()))
        with exclusive_lock(base):  # the other writer, mid-write
            worker.start()
            self.assertFalse(done.wait(0.3), "the second writer did not wait for the lock")
            self.assertEqual(read(os.path.join(target, "a.txt")), "first\n")
        worker.join(LIMIT)
        self.assertTrue(done.is_set())
        self.assertEqual([read(os.path.join(target, n)) for n in ("a.txt", "b.txt")], ["second\n", "second\n"])


class LongRunTest(unittest.TestCase):
    def test_walked_ticks_estimate_by_hand(self):
        """1,000 requests of 1,000 prompt + 1,000 output tokens, budget 64, decode cost 64, max active 4:
        4 x 64 > 64, so decoding is walked: ceil(10^6 / 64) = 15,625 prefill ticks + 64 x 10^6 / 64 =
        10^6 decode ticks. The baseline (1,488 prompt tokens, decode fits: 4 x 8 <= 64): ceil(1488 / 64)
        = 24 + 2 x 8 event ticks = 40. A deadline of 10 caps it at last arrival 12 + 10 + 1 = 23."""
        big = [RequestSpec(f"R{i}", 0, None, 0, 1000, 1000) for i in range(1000)]
        self.assertEqual(estimate_walked_ticks(big, EngineConfig(decode_cost=64)), 1_015_625)
        self.assertEqual(estimate_walked_ticks(scenario("baseline"), EngineConfig()), 40)
        self.assertEqual(estimate_walked_ticks(scenario("baseline"), EngineConfig(timeout_ticks=10)), 23)

    def test_warning_names_the_estimate_before_the_run(self):
        """10^5 output tokens each: 4 cases x about 10^8 ticks; the warning gives ticks and time."""
        huge = [RequestSpec(f"R{i}", 0, None, 0, 1000, 100_000) for i in range(1000)]
        warning = long_run_warning(huge, EngineConfig(decode_cost=64))
        self.assertIn("about 4e+08 ticks", warning)
        self.assertIn("roughly 33 minutes", warning)
        self.assertIsNone(long_run_warning(scenario("baseline"), EngineConfig()))


class EscapingTest(unittest.TestCase):
    def test_names_in_messages_stay_on_one_line(self):
        table = [("a\nb", "a\\nb"), ("tab\there", "tab\\there"), ("\x1b[31mred", "\\x1b[31mred"),
                 ("w\udcff.json", "w\\udcff.json"), ("plain S7", "plain S7")]
        for raw, shown in table:
            with self.subTest(raw=raw):
                self.assertEqual(one_line(raw), shown)


if __name__ == "__main__":
    unittest.main()
