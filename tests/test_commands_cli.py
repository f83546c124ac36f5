"""The command line: determinism, replay, safe artifacts, bad input (lab.md §7)."""

import json
import os
import unittest

from sched.base.safe_write import ARTIFACT_FILES
from tests.helpers import assert_bad_input, read, run_cli, temp_dir

REPLAYED = ("workload.json", "summary.json", "summary.csv", "requests.jsonl", "timeline.jsonl", "table.txt")


class DeterminismTest(unittest.TestCase):
    def test_two_runs_are_byte_identical(self):
        base = temp_dir(self)
        for name in ("one", "two"):
            code, _, err = run_cli(["--timeout-ticks", "30", "--artifacts", os.path.join(base, name)])
            self.assertEqual(code, 0, err)
        for artifact in ARTIFACT_FILES:
            with self.subTest(artifact=artifact):
                self.assertEqual(read(os.path.join(base, "one", artifact)), read(os.path.join(base, "two", artifact)))

    def test_replay_of_workload_json_is_byte_identical(self):
        base = temp_dir(self)
        for scenario in ("baseline", "prefix-broken", "output-heavy"):
            first, replay = os.path.join(base, scenario), os.path.join(base, scenario + "-replay")
            self.assertEqual(run_cli(["--scenario", scenario, "--artifacts", first])[0], 0)
            code, _, err = run_cli(["--workload", os.path.join(first, "workload.json"), "--artifacts", replay])
            self.assertEqual(code, 0, err)
            for artifact in REPLAYED:
                with self.subTest(scenario=scenario, artifact=artifact):
                    self.assertEqual(read(os.path.join(first, artifact)), read(os.path.join(replay, artifact)))
            first_manifest = json.loads(read(os.path.join(first, "manifest.json")))
            replay_manifest = json.loads(read(os.path.join(replay, "manifest.json")))
            self.assertEqual(replay_manifest.pop("source"), "workload:workload.json")
            first_manifest.pop("source")
            self.assertEqual(first_manifest, replay_manifest)

    def test_edited_workload_changes_the_run(self):
        """The lab's exercise: U6's suffix from 160 to 640, replayed, makes U6 slower."""
        base = temp_dir(self)
        run_cli(["--artifacts", os.path.join(base, "a")])
        data = json.loads(read(os.path.join(base, "a", "workload.json")))
        data["requests"][6]["suffix_tokens"] = 640
        edited = os.path.join(base, "edited.json")
        with open(edited, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        code, _, err = run_cli(["--workload", edited, "--artifacts", os.path.join(base, "b")])
        self.assertEqual(code, 0, err)
        rows = [json.loads(line) for line in read(os.path.join(base, "b", "requests.jsonl")).splitlines()]
        u6 = [r for r in rows if r["name"] == "U6" and r["case"] == "continuous"][0]
        self.assertEqual(u6["prompt_tokens"], 640)
        self.assertGreater(u6["ttft"], 27)  # 27 in the baseline's continuous case


class SafeArtifactsTest(unittest.TestCase):
    def test_existing_run_is_not_overwritten_without_force(self):
        out = os.path.join(temp_dir(self), "run")
        self.assertEqual(run_cli(["--artifacts", out])[0], 0)
        before = read(os.path.join(out, "summary.json"))
        code, _, err = run_cli(["--scenario", "output-heavy", "--artifacts", out])
        self.assertEqual(code, 2)
        self.assertIn("--force", err)
        self.assertEqual(read(os.path.join(out, "summary.json")), before)
        with open(os.path.join(out, "notes.txt"), "w", encoding="utf-8") as handle:
            handle.write("mine")
        self.assertEqual(run_cli(["--scenario", "output-heavy", "--artifacts", out, "--force"])[0], 0)
        self.assertNotEqual(read(os.path.join(out, "summary.json")), before)
        self.assertEqual(read(os.path.join(out, "notes.txt")), "mine")
        self.assertEqual([n for n in os.listdir(os.path.dirname(out)) if n.startswith(".")], [])


class BadInputTest(unittest.TestCase):
    def test_bad_input_exits_2_with_one_line(self):
        base = temp_dir(self)
        cases = {
            "unknown scenario": (["--scenario", "nope"], "nope"),
            "missing workload": (["--workload", os.path.join(base, "missing.json")], "missing.json"),
            "zero budget": (["--budget", "0"], "--budget"),
            "negative max-active": (["--max-active", "-1"], "--max-active"),
            "budget below decode cost": (["--budget", "4"], "--decode-cost"),
            "scenario and workload": (["--scenario", "baseline", "--workload", "x.json"], "--workload"),
        }
        for label, (argv, needle) in cases.items():
            with self.subTest(label):
                out = os.path.join(base, label.replace(" ", "-"))
                code, stdout, err = run_cli([*argv, "--artifacts", out])
                self.assertEqual(code, 2)
                self.assertIn(needle, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertNotIn("Traceback", err)
                self.assertFalse(os.path.exists(out))

    def test_help_names_units(self):
        code, stdout, _ = run_cli(["--help"])
        self.assertEqual(code, 0)
        text = " ".join(stdout.split())
        for word in ("ticks", "budget units", "tokens", "--timeout-ticks", "--chunk-tokens", "Exit codes"):
            self.assertIn(word, text)

    def test_shipped_baseline_workload_is_the_scenario(self):
        from sched.workload.specs import scenario
        from sched.workload.validation import load_workload
        from tests.helpers import PROJECT
        self.assertEqual(load_workload(os.path.join(PROJECT, "workloads", "baseline.json")), scenario("baseline"))


class CommandsTest(unittest.TestCase):
    """Every sub-command is discoverable from ``--help``; a typo gets the closest name."""

    def test_help_lists_every_command_one_line_each_then_the_run_flags(self):
        from sched.commands.main import SUBCOMMANDS
        code, out, _ = run_cli(["--help"])
        self.assertEqual(code, 0)
        lines = out.splitlines()
        for name in ("explain", "check", "diff", "zip", "compare", "export", "import", "import-results",
                     "sweep", "bench", "help"):
            with self.subTest(name):
                self.assertIn(name, SUBCOMMANDS)
                rows = [line for line in lines if line.split()[:1] == [name] and line.startswith("  ")]
                self.assertEqual(len(rows), 1, rows)
                self.assertGreater(len(rows[0].split()), 2)  # a name and a one-line summary
        self.assertLess(out.index("  bench "), out.index("  --scenario"))  # commands first, then the flags

    def test_a_bare_handler_entry_gets_its_docstring_as_summary(self):
        """A new command added as ``name: handler`` still shows one line in --help."""
        from unittest import mock
        from sched.commands import main as cli

        def handler(argv):
            """do something new"""
            return 0
        with mock.patch.dict(cli.SUBCOMMANDS, {"new-thing": handler}):
            self.assertIn("  new-thing       do something new", cli.commands_text())
            self.assertEqual(run_cli(["new-thing"])[0], 0)

    def test_mistyped_command_suggests_the_closest(self):
        cases = {"expalin": "did you mean 'explain'?", "chek": "did you mean 'check'?",
                 "swep": "did you mean 'sweep'?", "frobnicate": "choose one of explain, diff"}
        for typo, hint in cases.items():
            with self.subTest(typo):
                assert_bad_input(self, [typo, "S7"], hint)

    def test_help_command_shows_that_command_s_flags(self):
        code, out, _ = run_cli(["help", "diff"])
        self.assertEqual(code, 0)
        self.assertIn("usage: infer_sched_lab.py diff", out)
        self.assertIn("RUN_A RUN_B", out)
        code, out, _ = run_cli(["help"])
        self.assertEqual(code, 0)
        self.assertIn("commands (", out)
        assert_bad_input(self, ["help", "expalin"], "did you mean 'explain'?")

    def test_help_run_shows_the_run_flags(self):
        """`help run` is the overview, whose second half lists the run's own flags."""
        code, out, _ = run_cli(["help", "run"])
        self.assertEqual(code, 0)
        self.assertIn("--engine", out)
        self.assertIn("--max-num-batched-tokens", out)
        self.assertEqual(out, run_cli(["--help"])[1])

    def test_help_of_a_sub_sub_command_is_its_own(self):
        """`help serving-bench run` once printed the serving-bench group's help, ignoring `run`."""
        for action, marker in (("run", "--batch-sizes"), ("decide", "--min-order-gain")):
            with self.subTest(action):
                code, out, err = run_cli(["help", "serving-bench", action])
                self.assertEqual((code, err), (0, ""))
                self.assertTrue(out.startswith(f"usage: infer_sched_lab.py serving-bench {action} "), out[:80])
                self.assertIn(marker, out)
                self.assertEqual(run_cli(["serving-bench", action, "--help"]), (code, out, err))
        code, out, _ = run_cli(["help", "serving-bench"])
        self.assertTrue(out.startswith("usage: infer_sched_lab.py serving-bench [-h] {run,decide,simulate}"), out[:80])
        assert_bad_input(self, ["help", "serving-bench", "rnu"], "unknown action 'rnu'; did you mean 'run'?")

    def test_bench_bad_sizes_are_one_line_exit_2(self):
        for sizes in ("abc", "0", "1000,", "-5", "1e3", "10000001"):
            with self.subTest(sizes):
                assert_bad_input(self, ["bench", "--sizes", sizes], "--sizes")


class SharedParserTest(unittest.TestCase):
    def test_cli_parsers_are_the_shared_line_parser(self):
        """One one-line-error argparse subclass for every command (sched/base/cmdline.py), not a copy."""
        from sched.commands import main as cli
        from sched.base import cmdline
        from sched.commands import run as run_module
        self.assertFalse(hasattr(cli, "_Parser"))
        self.assertIsInstance(run_module._run_parser(), cmdline.LineParser)
        self.assertEqual((cli.EXIT_OK, cli.EXIT_BAD_INPUT), (cmdline.EXIT_OK, cmdline.EXIT_BAD_INPUT))
        code, out, err = run_cli(["--budget", "0"])
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(len(err.splitlines()), 1, err)


class BrokenPipeTest(unittest.TestCase):
    def test_closed_stdout_exits_141_with_the_artifacts_written(self):
        """`... | head -1`: the reader goes away; files were written before printing."""
        import contextlib
        import io

        class ClosedPipe(io.StringIO):
            def write(self, text):
                raise BrokenPipeError(32, "Broken pipe")

        from sched.commands.main import main
        out = os.path.join(temp_dir(self), "run")
        err = io.StringIO()
        with contextlib.redirect_stdout(ClosedPipe()), contextlib.redirect_stderr(err):
            code = main(["--artifacts", out])
        self.assertEqual(code, 141)
        self.assertEqual(err.getvalue(), "")
        self.assertIn("table.txt", os.listdir(out))


if __name__ == "__main__":
    unittest.main()
