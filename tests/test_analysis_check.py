"""``check RUN_DIR REF_DIR``: the instructor's comparison of a run with a reference (lab.md §1, §7)."""

import json
import os
import shutil
import unittest

from tests.helpers import EXPECTED, PROJECT, assert_bad_input, read, run_cli, temp_dir

BASELINE = os.path.join(EXPECTED, "baseline")


def write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


class CheckTest(unittest.TestCase):
    def copy_of_baseline(self) -> str:
        run = os.path.join(temp_dir(self), "run")
        shutil.copytree(BASELINE, run)
        return run

    def test_a_fresh_run_and_a_replay_match_the_reference(self):
        base = temp_dir(self)
        fresh, replay = os.path.join(base, "fresh"), os.path.join(base, "replay")
        self.assertEqual(run_cli(["--artifacts", fresh])[0], 0)
        self.assertEqual(run_cli(["--workload", os.path.join(fresh, "workload.json"), "--artifacts", replay])[0], 0)
        for run in (fresh, replay):
            with self.subTest(run=os.path.basename(run)):
                code, out, err = run_cli(["check", run, BASELINE])
                self.assertEqual((code, err), (0, ""))
                self.assertIn("no differences", out)

    def test_other_configuration_is_reported_first_and_stops(self):
        run = os.path.join(temp_dir(self), "run")
        self.assertEqual(run_cli(["--timeout-ticks", "30", "--artifacts", run])[0], 0)
        code, out, _ = run_cli(["check", run, BASELINE])
        self.assertEqual(code, 1)
        self.assertIn("manifest / timeout_ticks: got 30, expected null", out)
        self.assertIn("artifacts not compared", out)
        self.assertNotIn("requests.jsonl", out)

    def test_other_workload_is_reported(self):
        run = os.path.join(temp_dir(self), "run")
        self.assertEqual(run_cli(["--scenario", "prefix-broken", "--artifacts", run])[0], 0)
        code, out, _ = run_cli(["check", run, BASELINE])
        self.assertEqual(code, 1)
        self.assertIn("manifest / workload_sha256: got ", out)
        # ... and which requests and fields differ (prefix-broken renames each shared key, lab.md §2).
        self.assertIn('workload / S1 / prefix_key: got "SYS/S1", expected "SYS"', out)
        self.assertIn('workload / S7 / prefix_key: got "SYS/S7", expected "SYS"', out)
        self.assertNotIn("workload / U3", out)  # U3 has no shared prefix: the same request

    def test_field_differences_name_case_request_and_field(self):
        """Tamper with a copy of the reference: S7's first token in the continuous case (42 in the
        reference: TTFT 30 = P95, lab.md §6) and the static makespan (83)."""
        run = self.copy_of_baseline()
        path = os.path.join(run, "requests.jsonl")
        rows = [json.loads(line) for line in read(path).splitlines()]
        for row in rows:
            if (row["case"], row["name"]) == ("continuous", "S7"):
                self.assertEqual(row["first_token_at"], 42)
                row["first_token_at"] = 40
        write(path, "".join(json.dumps(row) + "\n" for row in rows))
        summary_path = os.path.join(run, "summary.json")
        summary = json.loads(read(summary_path))
        summary["cases"][0]["makespan"] = 80
        write(summary_path, json.dumps(summary, indent=2) + "\n")
        write(os.path.join(run, "table.txt"), read(os.path.join(run, "table.txt")).replace("83", "80"))
        os.remove(os.path.join(run, "timeline.svg"))
        code, out, err = run_cli(["check", run, BASELINE])
        self.assertEqual((code, err), (1, ""))
        self.assertIn("continuous / S7 / first_token_at: got 40, expected 42", out)
        self.assertIn("static / makespan: got 80, expected 83", out)
        self.assertIn("timeline.svg: 1 difference\n  missing from the run", out)
        self.assertIn("table.txt: 1 difference\n  text differs:", out)
        self.assertIn("+static ", out)
        self.assertTrue(out.rstrip().endswith("4 differences in 4 parts"), out)

    def test_unusable_input_exits_2_with_one_line(self):
        empty = temp_dir(self)
        broken = self.copy_of_baseline()
        write(os.path.join(broken, "requests.jsonl"), "{not json\n")
        cases = {
            "missing run": (["check", os.path.join(empty, "gone"), BASELINE], "gone"),
            "missing reference": (["check", BASELINE, os.path.join(empty, "gone")], "gone"),
            "no manifest": (["check", empty, BASELINE], "manifest.json"),
            "broken jsonl": (["check", broken, BASELINE], "requests.jsonl: line 1"),
            "one argument": (["check", BASELINE], "REF_DIR"),
        }
        for label, (argv, mention) in cases.items():
            with self.subTest(label):
                assert_bad_input(self, argv, mention)

    def test_bad_artifact_shapes_exit_2_naming_file_and_field(self):
        """Shapes the tester found crashing check with exit 3 (internal error), and their kin."""
        deep = "[" * 100000 + "]" * 100000
        cases = {
            "cases a number": ("summary.json", '{"cases": 5}\n', "summary.json: field 'cases': expected a list"),
            "a case not an object": ("summary.json", '{"cases": [5]}\n', "summary.json: cases[0]: expected an object"),
            "summary a list": ("summary.json", "[1, 2]\n", "summary.json: expected a JSON object"),
            "deeply nested": ("summary.json", deep + "\n", "summary.json: JSON nested too deeply"),
            "requests not a list": ("workload.json", '{"requests": {}}\n', "workload.json: field 'requests'"),
            "jsonl line a list": ("requests.jsonl", "[1]\n", "requests.jsonl: line 1: expected a JSON object"),
            "deep jsonl line": ("timeline.jsonl", deep + "\n", "timeline.jsonl: line 1: JSON nested too deeply"),
        }
        for label, (name, text, mention) in cases.items():
            with self.subTest(label):
                run = self.copy_of_baseline()
                write(os.path.join(run, name), text)
                code, out, err = run_cli(["check", run, BASELINE])
                self.assertEqual((code, out), (2, ""))
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(mention, err)

    def test_other_budget_is_reported_per_field(self):
        """--budget 48 against the lab's 64 (lab.md §3): one line for config.budget, not two dicts."""
        run = os.path.join(temp_dir(self), "run")
        self.assertEqual(run_cli(["--budget", "48", "--artifacts", run])[0], 0)
        code, out, _ = run_cli(["check", run, BASELINE])
        self.assertEqual(code, 1)
        self.assertIn("  manifest / config.budget: got 48, expected 64\n", out)
        self.assertNotIn("decode_cost", out)
        self.assertIn("workload and configuration: 1 difference\n", out)

    def test_imported_and_simulated_runs_are_not_compared(self):
        """import-results writes manifest kind "real" (times in ms, scheduler.policy); a simulated run
        has no kind. Before, check reported "policy: got null" field by field."""
        imported = os.path.join(temp_dir(self), "real")
        source = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090", "requests.jsonl")
        self.assertEqual(run_cli(["import-results", source, "--artifacts", imported])[0], 0)
        for argv in (["check", imported, BASELINE], ["check", BASELINE, imported]):
            with self.subTest(argv=argv):
                code, out, err = run_cli(argv)
                self.assertEqual((code, out), (2, ""))
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn("imported real", err)
                self.assertIn("simulated", err)
                self.assertNotIn("policy", err)

    def test_a_directory_that_is_no_run_is_refused(self):
        """A sweep (its manifest has no kind either) or an export is not a run: exit 2 like diff,
        never exit 1 "differences"."""
        base = temp_dir(self)
        sweep, export = os.path.join(base, "sweep"), os.path.join(base, "export")
        self.assertEqual(run_cli(["sweep", "--loads", "1", "--workers", "1", "--out", sweep])[0], 0)
        self.assertEqual(run_cli(["export", "--out", export])[0], 0)
        for label, argv in {"sweep as run": [sweep, BASELINE], "sweep as reference": [BASELINE, sweep],
                            "export as run": [export, BASELINE]}.items():
            with self.subTest(label):
                assert_bad_input(self, ["check", *argv], f"{argv[0] if argv[0] != BASELINE else argv[1]}: holds "
                                 f"{'sweep' if 'sweep' in label else 'export'} output, not a run")


if __name__ == "__main__":
    unittest.main()
