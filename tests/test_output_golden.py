"""Golden files: a fresh run of each reference directory equals ``expected/`` byte for byte.

On mismatch the test prints a unified diff. To regenerate deliberately (and explain every change
from lab.md): ``python3 -m tests.regenerate_expected``.
"""

import difflib
import json
import os
import re
import unittest

from sched.base.safe_write import ARTIFACT_FILES
from tests.helpers import EXPECTED, REFERENCE_RUNS, read, run_cli, temp_dir


class GoldenTest(unittest.TestCase):
    def assert_same_text(self, got: str, expected: str, label: str) -> None:
        if got != expected:
            diff = "".join(difflib.unified_diff(expected.splitlines(True), got.splitlines(True),
                                                f"expected/{label}", f"fresh/{label}", n=2))
            self.fail(f"{label} differs from the reference (regenerate only deliberately: "
                      f"python3 -m tests.regenerate_expected)\n{diff[:6000]}")

    def test_every_reference_directory(self):
        for name, args in REFERENCE_RUNS.items():
            out = os.path.join(temp_dir(self), name)
            code, stdout, err = run_cli([*args, "--artifacts", out])
            self.assertEqual(code, 0, err)
            self.assertEqual(sorted(os.listdir(os.path.join(EXPECTED, name))), sorted(ARTIFACT_FILES))
            for artifact in ARTIFACT_FILES:
                with self.subTest(reference=name, artifact=artifact):
                    self.assert_same_text(read(os.path.join(out, artifact)),
                                          read(os.path.join(EXPECTED, name, artifact)), f"{name}/{artifact}")
            with self.subTest(reference=name, artifact="stdout"):
                self.assertTrue(stdout.startswith(read(os.path.join(EXPECTED, name, "table.txt"))))

    def test_baseline_table_matches_lab_md_section_6(self):
        """The reference numbers of lab.md §6, typed in from the spec, not from the code."""
        spec = {  # case: (P95 TTFT, P95 ITL, P95 TPOT, output/tick, hit tokens, ok/arrived with the error
                  #        rate of lab.md §5 in percent, makespan, latency samples: 8 successful requests)
            "static": ("56", "1", "1", "1.64", "0", "8/8 ok, 0% failed", "83", "8"),
            "continuous": ("30", "1", "1", "2.39", "0", "8/8 ok, 0% failed", "57", "8"),
            "continuous+APC": ("26", "1", "1", "2.62", "384", "8/8 ok, 0% failed", "52", "8"),
            "continuous+APC+chunk32": ("29", "1", "1", "2.43", "384", "8/8 ok, 0% failed", "56", "8"),
        }
        lines = read(os.path.join(EXPECTED, "baseline", "table.txt")).splitlines()
        cells = [re.split(r"\s{2,}", line.strip()) for line in lines[2:6]]
        self.assertEqual({row[0]: tuple(row[1:]) for row in cells}, spec)
        summary = json.loads(read(os.path.join(EXPECTED, "baseline", "summary.json")))["cases"]
        self.assertEqual([c["p95_ttft"] for c in summary], [56, 30, 26, 29])
        self.assertEqual([c["makespan"] for c in summary], [83, 57, 52, 56])
        self.assertEqual([c["hit_tokens"] for c in summary], [0, 0, 384, 384])

    def test_failure_rate_stands_next_to_ok_over_arrived(self):
        """``--timeout-ticks 30`` (lab.md §8): 3 of 8 succeed in continuous, so (8 − 3) / 8 = 62.5%
        failed (lab.md §5's denominator: every arrived request); none in static: 100%."""
        lines = read(os.path.join(EXPECTED, "deadline30", "table.txt")).splitlines()
        cells = {row[0]: row[6] for row in (re.split(r"\s{2,}", line.strip()) for line in lines[2:6])}
        self.assertEqual(cells, {"static": "0/8 ok, 100% failed", "continuous": "3/8 ok, 62.5% failed",
                                 "continuous+APC": "3/8 ok, 62.5% failed",
                                 "continuous+APC+chunk32": "4/8 ok, 50% failed"})

    def test_readme_shows_the_real_baseline_table(self):
        """The handbook pastes the real output; it must not drift from the reference."""
        from tests.helpers import PROJECT
        self.assertIn(read(os.path.join(EXPECTED, "baseline", "table.txt")), read(os.path.join(PROJECT, "README.md")))


if __name__ == "__main__":
    unittest.main()
