"""Integers too large to be measurements, anywhere a command reads JSON: exit 2, one line, never 3.

Python refuses to parse an integer of more than 4,300 digits (a ValueError that is not a JSON
syntax error), and an integer of 400 digits cannot become a float (OverflowError): both once
escaped as internal errors.
"""

import json
import os
import shutil
import unittest

from tests.helpers import EXPECTED, PROJECT, run_cli, temp_dir

HUGE = "9" * 5000          # more digits than Python parses
BIG = 10 ** 400            # parses, but no float holds it
REAL = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090", "requests.jsonl")


class HugeNumberTest(unittest.TestCase):
    def copy_run(self) -> str:
        run = os.path.join(temp_dir(self), "run")
        shutil.copytree(os.path.join(EXPECTED, "baseline"), run)
        return run

    def replace_in(self, path: str, old: str, new: str) -> None:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        self.assertIn(old, text)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text.replace(old, new, 1))

    def assert_bad_input(self, argv: list[str], needle: str) -> None:
        code, _, err = run_cli(argv)
        self.assertEqual(code, 2, err)
        self.assertIn(needle, err)
        self.assertNotIn("internal error", err)

    def test_compare_summary_with_huge_and_big_integers(self):
        for value in (HUGE, str(BIG)):
            with self.subTest(digits=len(value)):
                run = self.copy_run()
                self.replace_in(os.path.join(run, "summary.json"), '"p95_ttft": 56', f'"p95_ttft": {value}')
                out = os.path.join(temp_dir(self), "decision.json")
                self.assert_bad_input(["compare", run, "--baseline-case", "static", "--candidate-case",
                                       "continuous", "--out", out], "summary.json")
                self.assertFalse(os.path.exists(out))

    def test_check_and_explain_with_a_huge_integer(self):
        run = self.copy_run()
        self.replace_in(os.path.join(run, "requests.jsonl"), '"arrival": 1,', f'"arrival": {HUGE},')
        self.assert_bad_input(["check", run, os.path.join(EXPECTED, "baseline")], "requests.jsonl")
        self.assert_bad_input(["explain", "S1", "--artifacts", run], "requests.jsonl")

    def test_import_results_with_big_counts(self):
        directory = temp_dir(self)
        with open(REAL, encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle][:3]
        for field, value in (("input_toks", BIG), ("queued_ts", BIG), ("output_toks", HUGE)):
            with self.subTest(field=field):
                path = os.path.join(directory, f"{field}.jsonl")
                lines = [json.dumps(row) for row in rows]
                lines[1] = lines[1].replace(f'"{field}": ', f'"{field}": {value}, "_was": ', 1)
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write("\n".join(lines) + "\n")
                out = os.path.join(directory, f"out-{field}")
                self.assert_bad_input(["import-results", path, "--format", "request-jsonl", "--artifacts", out],
                                      path)
                self.assertFalse(os.path.exists(out))

    def test_mooncake_row_nested_too_deeply_is_a_bad_row(self):
        path = os.path.join(temp_dir(self), "deep.jsonl")
        good = {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}
        deep = '{"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": ' + "[" * 100000 + "]" * 100000 + "}"
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(good) + "\n" + deep + "\n")
        out = os.path.join(temp_dir(self), "w.json")
        code, stdout, err = run_cli(["import", "mooncake", path, "-o", out])
        self.assertEqual(code, 0, err)
        self.assertIn("nested too deeply", stdout)
        with open(out, encoding="utf-8") as handle:
            self.assertEqual(len(json.load(handle)["requests"]), 1)


if __name__ == "__main__":
    unittest.main()
