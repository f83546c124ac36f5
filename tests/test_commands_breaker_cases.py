"""The breaker's cases (hostile inputs, faults, interrupts), replayed as one table so none comes back.

Each row is one case the breaker found handled badly: what it prepares, the command, and what the
README §13 promises instead (exit code, words on stderr). A refused case must print exactly one
stderr line, no traceback, and leave no staging directory (``.*.tmp``) behind. The cases that need
a real process and a real signal are in :mod:`tests.test_base_interrupts`.
"""

import contextlib
import errno
import io
import json
import os
import shutil
import subprocess
import sys
import unittest

from sched.commands.main import main
from tests.helpers import EXPECTED, PROJECT, read, run_cli, temp_dir

BASELINE = os.path.join(EXPECTED, "baseline")
EXCERPT = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090")


def _json_edit(change):
    def edit(text):
        data = json.loads(text)
        change(data)
        return json.dumps(data, indent=2) + "\n"
    return edit


def _summary_edit(case, field, value):
    """summary.json with ``field`` of ``case`` set to ``value``."""
    return _json_edit(lambda d: next(c for c in d["cases"] if c["case"] == case).__setitem__(field, value))


def _line_edit(case, name, **fields):
    """requests.jsonl with the line of (``case``, ``name``) given ``fields``."""
    def edit(text):
        lines = []
        for line in text.splitlines():
            row = json.loads(line)
            if row["case"] == case and row["name"] == name:
                row.update(fields)
            lines.append(json.dumps(row))
        return "\n".join(lines) + "\n"
    return edit


class _Full(io.StringIO):
    """A stdout on a full disk: every write fails with ENOSPC."""

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")


class _InterruptedOnPrint(io.StringIO):
    """A stdout where Ctrl-C lands while the table is printed (after the artifacts were written)."""

    def write(self, text):
        raise KeyboardInterrupt


class BreakerCasesTest(unittest.TestCase):
    """One subTest per case: (label, prepare() -> argv, exit code, words on stderr[, stderr lines])."""

    def setUp(self):
        self.base = temp_dir(self)

    # --- preparing inputs ------------------------------------------------------------------------

    def tampered(self, name, **edits):
        """A copy of expected/baseline with ``edits`` ({file name with '.' as '_': text -> text})."""
        target = os.path.join(self.base, name)
        shutil.copytree(BASELINE, target)
        for key, edit in edits.items():
            path = os.path.join(target, key.replace("_json", ".json").replace("_jsonl", ".jsonl"))
            text = read(path)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(edit(text))
        return target

    def write(self, name, text, mode="w"):
        path = os.path.join(self.base, name)
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            handle.write(text)
        return path

    def device(self, name):
        """A character device node like /dev/null (needs root; the case is skipped otherwise)."""
        path = os.path.join(self.base, name)
        try:
            os.mknod(path, 0o666 | 0o020000, os.makedev(1, 3))
        except (PermissionError, AttributeError):
            self.skipTest("creating a device node needs root")
        return path

    def compare_args(self, run, *extra):
        return ["compare", run, "--baseline-case", "continuous", "--candidate-case", "continuous+APC",
                "--out", os.path.join(self.base, "decision.json"), *extra]

    def cases(self):
        b = self
        long_name = "n" * 100_000
        yield ("compare: negative P95 TTFT in the baseline",
               lambda: b.compare_args(b.tampered("neg", summary_json=_summary_edit("continuous", "p95_ttft", -44))),
               2, "field 'p95_ttft': must be >= 0, got -44")
        yield ("compare: completion rate 7.5",
               lambda: b.compare_args(b.tampered("rate", summary_json=_summary_edit("continuous+APC", "completion_rate", 7.5))),
               2, "field 'completion_rate': must be between 0 and 1, got 7.5")
        yield ("compare: fairness -3",
               lambda: b.compare_args(b.tampered("fair", summary_json=_summary_edit("continuous+APC", "fairness", -3))),
               2, "field 'fairness': must be between 0 and 1")
        yield ("compare: a fractional count",
               lambda: b.compare_args(b.tampered("frac", summary_json=_summary_edit("continuous", "succeeded", 7.5))),
               2, "field 'succeeded': must be a whole number")
        yield ("compare: a summary that requests.jsonl contradicts (P95 TTFT 30 written as 20)",
               lambda: b.compare_args(b.tampered("lie", summary_json=_summary_edit("continuous", "p95_ttft", 20))),
               2, "field 'p95_ttft': is 20 but")
        yield ("compare: a list where a case name is expected (manifest.json)",
               lambda: b.compare_args(b.tampered("listcase", manifest_json=_json_edit(
                   lambda d: d["cases"][1].__setitem__("case", ["continuous"])))),
               2, "field 'cases[1].case': must be a string")
        yield ("compare --out a device node --force",
               lambda: b.compare_args(BASELINE, "--force")[:-3] + ["--out", b.device("null-c"), "--force"],
               2, "exists and is not a regular file")
        yield ("import -o a device node --force",
               lambda: ["import", "lengths", os.path.join(PROJECT, "tests", "data", "sharegpt_lengths_head.csv"),
                        "--rate", "1", "-o", b.device("null-i"), "--force"],
               2, "exists and is not a regular file")
        yield ("explain: a list where a case name is expected (manifest.json)",
               lambda: ["explain", "S7", "--artifacts", b.tampered("explist", manifest_json=_json_edit(
                   lambda d: d["cases"][0].__setitem__("case", ["static"])))],
               2, "field 'cases[0].case': must be a string")
        yield ("check: a list where a kind is expected (manifest.json)",
               lambda: ["check", b.tampered("checklist", manifest_json=_json_edit(
                   lambda d: d.__setitem__("kind", ["real"]))), BASELINE],
               2, "field 'kind': must be a string, got [")
        yield ("explain: admitted_at 10**15 (was a MemoryError)",
               lambda: ["explain", "S7", "--artifacts", b.tampered("e15", requests_jsonl=_line_edit(
                   "continuous", "S7", admitted_at=10**15, first_token_at=10**15 + 2, done_at=10**15 + 20))],
               2, "more than the case's makespan")
        yield ("explain: admitted_at 3 x 10**7 without summary.json (was 68 s and 1.4 GB)",
               lambda: ["explain", "S7", "--artifacts", b.without(b.tampered("e7", requests_jsonl=_line_edit(
                   "continuous", "S7", admitted_at=3 * 10**7, first_token_at=3 * 10**7 + 2, done_at=3 * 10**7 + 20)),
                   "summary.json")],
               2, "holds only")
        yield ("explain: a first token before admission",
               lambda: ["explain", "S7", "--artifacts", b.tampered("order", requests_jsonl=_line_edit(
                   "continuous", "S7", first_token_at=20))],
               2, "field 'first_token_at': tick 20 is not after admitted_at")
        yield ("a deleted current directory",
               lambda: b.in_deleted_directory(["--scenario", "baseline"]),
               2, "the current directory no longer exists")
        yield ("8 requests with 100 KB names (wrote 251 MB)",
               lambda: ["--workload", b.write("names.json", json.dumps({"requests": [
                   {"name": f"{long_name}{i}", "arrival": i, "prefix_key": None, "prefix_tokens": 0,
                    "suffix_tokens": 8, "output_tokens": 4} for i in range(8)]})), "--artifacts", b.path("names")],
               2, "must be at most 64 characters, got 100001", 8)  # one line per request (README §13)
        yield ("a newline in a request_id cannot forge a second error line",
               lambda: ["import-results", b.write("nl.jsonl", json.dumps(
                   {"request_id": "a\ninfer_sched_lab.py: error: forged", "input_toks": -1, "output_toks": 3,
                    "queued_ts": 1.0}) + "\n"), "--artifacts", b.path("nl")],
               2, "(a\\ninfer_sched_lab.py: error: forged)")
        yield ("check: a reference artifact that is a directory",
               lambda: ["check", BASELINE, b.with_directory(b.tampered("refdir"), "requests.jsonl")],
               2, "requests.jsonl is a directory, not an artifact")
        yield ("zip -o inside the source tree (the next ZIP would pack it)",
               lambda: ["zip", "-o", os.path.join(PROJECT, "tests", "data", "never-written.zip")],
               2, "lies inside the lab's sources (tests/data/never-written.zip)")
        yield ("sweep --loads 1_0", lambda: ["sweep", "--loads", "1_0"], 2, "--loads: not a number: '1_0'")
        yield ("--budget 1_0", lambda: ["--budget", "1_0"], 2, "must be a positive integer, got '1_0'")
        yield ("an unterminated CSV quote reports the rows it swallowed",
               lambda: ["import", "lengths", b.write("q.csv", 'num_prefill_tokens,num_decode_tokens\n10,5\n"20,6\n30,7\n40,8\n'),
                        "--rate", "1", "-o", b.path("q.json")],
               2, "line 3: a quote opened here is never closed; it swallowed lines 3-5 (3 lines)")

    def path(self, name):
        return os.path.join(self.base, name)

    def without(self, run, name):
        os.remove(os.path.join(run, name))
        return run

    def with_directory(self, run, name):
        os.remove(os.path.join(run, name))
        os.mkdir(os.path.join(run, name))
        return run

    def in_deleted_directory(self, argv):
        gone = os.path.join(self.base, "gone")
        os.mkdir(gone)
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(gone)
        os.rmdir(gone)
        return argv

    def test_each_case_is_one_line_and_its_exit_code(self):
        for label, prepare, code, words, *lines in self.cases():
            with self.subTest(label):
                here = os.getcwd()
                try:
                    argv = prepare()
                    got, out, err = run_cli(argv)
                finally:
                    os.chdir(here)
                self.assertEqual(got, code, err)
                self.assertNotIn("Traceback", err)
                self.assertEqual(len(err.strip().splitlines()), lines[0] if lines else 1, err)
                self.assertIn(words, err)
                self.assertTrue(all(len(line) < 300 for line in err.splitlines()), err)
                self.assertFalse(os.path.exists(os.path.join(self.base, "decision.json")))
                leftovers = [n for _, dirs, files in os.walk(self.base) for n in dirs + files if n.endswith(".tmp")]
                self.assertEqual(leftovers, [])


class LegalPathsTest(unittest.TestCase):
    """Paths the file system allows must work (README §13)."""

    def setUp(self):
        self.base = temp_dir(self)

    def test_a_250_byte_directory_name(self):
        """The staging name ``.<name>.<8>.tmp`` would be 264 bytes: over the 255-byte limit."""
        out = os.path.join(self.base, "d" * 250)
        code, _, err = run_cli(["--artifacts", out])
        self.assertEqual(code, 0, err)
        self.assertEqual(read(os.path.join(out, "summary.json")), read(os.path.join(BASELINE, "summary.json")))

    def test_an_empty_directory_on_another_file_system_through_a_link(self):
        """/dev/shm (tmpfs) through a symlink: staging beside the link would need a move across file
        systems (EXDEV); staging inside the existing target does not."""
        if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(self.base).st_dev:
            self.skipTest("needs /dev/shm on another file system than the temporary directory")
        target = temp_dir_in(self, "/dev/shm")
        link = os.path.join(self.base, "link")
        os.symlink(target, link)
        code, _, err = run_cli(["--artifacts", link])
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(os.listdir(target))[:2], ["manifest.json", "report.html"])
        self.assertFalse([n for n in os.listdir(target) if n.startswith(".")])

    def test_a_workload_file_name_that_is_not_utf8(self):
        """Python keeps the bad byte as a lone surrogate, which no UTF-8 file can hold: the manifest
        records the name with the byte escaped (was an internal error, exit 3)."""
        path = os.path.join(os.fsencode(self.base), b"w\xff.json")
        shutil.copy(os.path.join(PROJECT, "workloads", "baseline.json") if os.path.exists(
            os.path.join(PROJECT, "workloads", "baseline.json")) else os.path.join(BASELINE, "workload.json"), path)
        out = os.path.join(self.base, "run")
        code, _, err = run_cli(["--workload", os.fsdecode(path), "--artifacts", out])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(read(os.path.join(out, "manifest.json")))["source"], "workload:w\\xff.json")

    def test_import_results_accepts_a_byte_order_mark(self):
        text = read(os.path.join(EXCERPT, "requests.jsonl"))
        source = os.path.join(self.base, "requests.jsonl")
        with open(source, "w", encoding="utf-8-sig") as handle:
            handle.write(text)
        shutil.copy(os.path.join(EXCERPT, "meta.json"), self.base)
        code, _, err = run_cli(["import-results", source, "--artifacts", os.path.join(self.base, "real")])
        self.assertEqual(code, 0, err)


def temp_dir_in(test, parent):
    import tempfile
    path = tempfile.mkdtemp(prefix="isl-test-", dir=parent)
    test.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path


class AsciiDigitsTest(unittest.TestCase):
    """Numbers on the command line are ASCII digits: int() and float() also read Arabic-Indic
    (١٠) and full-width (１０) digits, and str.isdigit() accepts them; each is exit 2, one line."""

    def test_other_scripts_digits_are_refused(self):
        base = temp_dir(self)
        requests = os.path.join(PROJECT, "tests", "data", "serving-bench", "requests.json")
        lengths = os.path.join(PROJECT, "tests", "data", "sharegpt_lengths_head.csv")
        real = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090-run", "requests.jsonl")
        cases = {
            "bench --sizes": (["bench", "--sizes", "١٠"], "--sizes"),
            "bench --sizes full-width": (["bench", "--sizes", "１０"], "--sizes"),
            "--budget": (["--budget", "٦٤"], "--budget"),
            "diff --top": (["diff", BASELINE, BASELINE, "--top", "١٠"], "--top"),
            "sweep --loads": (["sweep", "--loads", "١"], "--loads"),
            "import --tick-ms": (["import", "lengths", lengths, "-o", os.path.join(base, "w.json"), "--rate", "1",
                                  "--tick-ms", "١٠"], "--tick-ms"),
            "import --seed": (["import", "lengths", lengths, "-o", os.path.join(base, "w.json"), "--rate", "1",
                               "--seed", "١"], "--seed"),
            "export --tick-ms": (["export", "--out", os.path.join(base, "e"), "--tick-ms", "١٠٠"], "--tick-ms"),
            "calibrate --train-first": (["calibrate", real, "--train-first", "١٥٠", "--out",
                                         os.path.join(base, "c")], "--train-first"),
            "serving-bench --batch-sizes": (["serving-bench", "run", requests, "--batch-sizes", "٢"], "--batch-sizes"),
            "serving-bench --batch-speedups": (["serving-bench", "run", requests, "--batch-speedups", "١.٥"],
                                               "--batch-speedups"),
            "compare threshold": (["compare", BASELINE, "--baseline-case", "static", "--candidate-case", "continuous",
                                   "--max-ttft-growth", "٠.١", "--out", os.path.join(base, "d.json")],
                                  "--max-ttft-growth"),
        }
        for label, (argv, mention) in cases.items():
            with self.subTest(label):
                code, out, err = run_cli(argv)
                self.assertEqual((code, out), (2, ""), err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(mention, err)
        self.assertEqual(os.listdir(base), [])


class StreamsTest(unittest.TestCase):
    """A closed or full stdout is one line naming the stream, exit 2 (was exit 3)."""

    def setUp(self):
        self.base = temp_dir(self)

    def run_with_stdout(self, stdout, argv):
        err = io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(err):
            code = main(argv)
        return code, err.getvalue()

    def test_closed_stdout_refused_before_any_work(self):
        out = os.path.join(self.base, "run")
        code, err = self.run_with_stdout(None, ["--artifacts", out])
        self.assertEqual((code, err), (2, "infer_sched_lab.py: error: stdout: is closed; run the command with stdout "
                                          "open (e.g. > FILE or > /dev/null)\n"))
        self.assertFalse(os.path.exists(out))

    def test_full_stdout_names_the_stream_and_what_was_written(self):
        out = os.path.join(self.base, "run")
        code, err = self.run_with_stdout(_Full(), ["--artifacts", out])
        self.assertEqual(code, 2, err)
        self.assertEqual(err, f"infer_sched_lab.py: error: stdout: cannot write (No space left on device); {out} "
                              "was written completely\n")
        self.assertTrue(os.path.isfile(os.path.join(out, "report.html")))

    def test_help_on_a_full_stdout_is_not_lost_silently(self):
        """argparse ignores OSError while printing help: the guarded stream still reports it."""
        for argv in (["--help"], ["help"], ["help", "serving-bench"], ["serving-bench", "run", "--help"],
                     ["diff", "--help"], ["help", "diff"]):
            with self.subTest(argv=argv):
                code, err = self.run_with_stdout(_Full(), argv)
                self.assertEqual((code, err), (2, "infer_sched_lab.py: error: stdout: cannot write "
                                                  "(No space left on device)\n"))

    def test_help_to_dev_full_exits_2(self):
        """The real device: the help text sits in the buffer until the last flush fails."""
        if not os.path.exists("/dev/full"):
            self.skipTest("no /dev/full")
        with open("/dev/full", "w") as full:
            done = subprocess.run([sys.executable, os.path.join(PROJECT, "infer_sched_lab.py"), "--help"],
                                  stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual((done.returncode, done.stderr),
                         (2, "infer_sched_lab.py: error: stdout: cannot write (No space left on device)\n"))

    def test_interrupt_after_the_write_does_not_claim_nothing_was_written(self):
        out = os.path.join(self.base, "run")
        code, err = self.run_with_stdout(_InterruptedOnPrint(), ["--artifacts", out])
        self.assertEqual(code, 130)
        self.assertEqual(err, f"infer_sched_lab.py: error: interrupted after writing {out} (complete)\n")


if __name__ == "__main__":
    unittest.main()
