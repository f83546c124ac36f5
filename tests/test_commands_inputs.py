"""Every sub-command against the learner trial's breaker inputs (reference.md §2): a missing input,
a directory where a file belongs, an empty file. Each is one stderr line, exit 2, that starts with
``infer_sched_lab.py COMMAND: error:`` (the plain run: ``infer_sched_lab.py: error:``) and names
the file as it was given; ``--help`` is exit 0."""

from __future__ import annotations

import json
import os
import unittest

from tests.helpers import EXPECTED, FULL, PROJECT, read, run_cli, temp_dir

DATA = os.path.join(PROJECT, "tests", "data")
REAL_RUN = os.path.join(DATA, "llmservingsim-vllm-rtx4090-run", "requests.jsonl")
SERVING = os.path.join(DATA, "serving-bench")
BASELINE = os.path.join(EXPECTED, "baseline")


def breaker_table(given: str, out: str) -> dict[str, list[str]]:
    """Label -> argv feeding ``given`` to one input of one sub-command; outputs go under ``out``."""
    return {
        "run --workload": ["--workload", given],
        "run --step-model": ["--engine", "vllm", "--step-model", given],
        "explain": ["explain", "S1", "--artifacts", given],
        "diff": ["diff", BASELINE, given],
        "check": ["check", given, BASELINE],
        "compare": ["compare", BASELINE, given, "--case", "static", "--out", f"{out}/d.json"],
        "export": ["export", "--workload", given, "--out", f"{out}/e"],
        "import-results": ["import-results", given, "--artifacts", f"{out}/r"],
        "import-results --meta": ["import-results", REAL_RUN, "--meta", given, "--artifacts", f"{out}/r"],
        "import azure": ["import", "azure", given, "-o", f"{out}/w.json"],
        "import mooncake": ["import", "mooncake", given, "-o", f"{out}/w.json"],
        "sweep": ["sweep", "--workload", given, "--loads", "1"],
        "calibrate": ["calibrate", given, "--train-first", "5", "--out", f"{out}/c"],
        "calibrate --meta": ["calibrate", REAL_RUN, "--meta", given, "--train-first", "5", "--out", f"{out}/c"],
        "serving-bench run": ["serving-bench", "run", given],
        "serving-bench decide": ["serving-bench", "decide", os.path.join(SERVING, "baseline.json"), given,
                                 "--out", f"{out}/ev.json"],
    }


class BreakerInputsTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.empty = os.path.join(self.base, "empty.json")
        open(self.empty, "w").close()
        self.given = {"missing": os.path.join(self.base, "nope.json"), "directory": os.path.join(self.base, "adir"),
                      "empty": self.empty}
        os.mkdir(self.given["directory"])

    def assert_one_line(self, argv: list[str], given: str) -> str:
        code, out, err = run_cli(argv)
        self.assertEqual((code, out), (2, ""), err)
        self.assertEqual(len(err.splitlines()), 1, err)
        word = argv[0] if not argv[0].startswith("-") else None
        if word == "serving-bench":
            word = f"serving-bench {argv[1]}"   # as argparse names its own usage errors
        self.assertTrue(err.startswith(f"infer_sched_lab.py {word}: error: " if word else "infer_sched_lab.py: error: "), err)
        self.assertIn(given, err)
        self.assertNotIn("Errno", err)   # the reason, not the OSError's repr with the path again
        return err

    def test_missing_directory_and_empty_inputs(self):
        for kind, given in self.given.items():
            out = os.path.join(self.base, f"out-{kind}")
            os.mkdir(out)
            for label, argv in breaker_table(given, out).items():
                if (kind, label) == ("missing", "serving-bench decide"):
                    continue   # a missing group is the chapter's reject with its failure record: test_serving_step5
                with self.subTest(kind=kind, command=label):
                    self.assert_one_line(argv, given)
                    self.assertEqual(os.listdir(out), [])   # nothing written

    def test_bench_trace_that_is_a_directory_or_empty_is_one_line_not_an_internal_error(self):
        """Was exit 3 (`internal error: CalledProcessError ...`) from the measuring child process.
        Each kind starts that child process: the learner's run tries the directory, ISL_FULL=1 both."""
        for kind in ("directory", "empty") if FULL else ("directory",):
            with self.subTest(kind):
                err = self.assert_one_line(["bench", "--azure", self.given[kind], "--mooncake", self.given["missing"],
                                            "--sizes", "1"], self.given[kind])
                self.assertIn("--azure", err)

    def test_check_says_what_it_accepts(self):
        """An imported real run against a simulated reference: the line names check, not "diffed"."""
        real = os.path.join(self.base, "real")
        self.assertEqual(run_cli(["import-results", REAL_RUN, "--artifacts", real])[0], 0)
        err = self.assert_one_line(["check", real, BASELINE], real)
        self.assertEqual(err, f"infer_sched_lab.py check: error: {real} is an imported real (import-results) run "
                              f"and {BASELINE} is a simulated run; check accepts two simulated runs or two imported "
                              "real runs, never one of each (ticks against ms); compare reads both kinds\n")
        self.assertIn("is not a directory", self.assert_one_line(["check", self.empty, BASELINE], self.empty))

    def test_help_of_every_command_is_exit_0(self):
        for argv in ([], ["explain"], ["diff"], ["check"], ["zip"], ["compare"], ["export"], ["import-results"],
                     ["import"], ["sweep"], ["calibrate"], ["serving-bench"], ["serving-bench", "run"],
                     ["serving-bench", "decide"], ["bench"], ["help"]):
            with self.subTest(argv):
                code, out, err = run_cli([*argv, "--help"])
                self.assertEqual((code, err), (0, ""))
                self.assertTrue(out.startswith("usage: infer_sched_lab.py"), out[:60])


class FileNamesAsGivenTest(unittest.TestCase):
    def test_calibrate_names_meta_json_beside_a_relative_run_relatively(self):
        """`calibrate requests.jsonl` in the run's folder with a broken meta.json beside it: the line
        said /abs/path/meta.json (the default meta path was made absolute)."""
        base = temp_dir(self)
        with open(os.path.join(base, "requests.jsonl"), "w", encoding="utf-8") as out:
            out.write(read(REAL_RUN))
        with open(os.path.join(base, "meta.json"), "w", encoding="utf-8") as out:
            out.write(json.dumps({"num_requests": 300})[:-1])   # cut short: not valid JSON
        cwd = os.getcwd()
        os.chdir(base)
        self.addCleanup(os.chdir, cwd)
        for argv in (["calibrate", "requests.jsonl", "--train-first", "5", "--out", "c"],
                     ["import-results", "requests.jsonl", "--artifacts", "r"]):
            with self.subTest(argv[0]):
                code, _, err = run_cli(argv)
                self.assertEqual(code, 2, err)
                self.assertTrue(err.startswith(f"infer_sched_lab.py {argv[0]}: error: meta.json: not valid JSON"), err)
                self.assertNotIn(base, err)


if __name__ == "__main__":
    unittest.main()
