"""Errors shown beside the noise (issue 18, item 5): sampling noise, repeat-run noise, "within noise".

Values by hand: percentiles by nearest rank of small lists written here.
"""

import json
import os
import unittest

from sched.timing.calibration_report import (percentile_noise, percentile_table, render_percentile_table,
                                             repeat_noise, with_noise)
from tests.helpers import PROJECT, read, run_cli, temp_dir

RUN_DIR = os.path.join(PROJECT, "tests", "data", "blis-llama2-7b-excerpt")


def rows(values):
    return {f"r{i}": {"ttft": v, "e2e": 2 * v, "queue_wait": None, "tpot": None} for i, v in enumerate(values)}


class NoiseTest(unittest.TestCase):
    def test_identical_requests_have_no_sampling_noise(self):
        noise = percentile_noise(rows([10.0] * 8), [f"r{i}" for i in range(8)])
        self.assertEqual(noise["ttft", 50], 0.0)
        self.assertIsNone(noise["tpot", 50])               # nothing measured

    def test_sampling_noise_is_seeded(self):
        measured = rows([1, 2, 3, 4, 5, 6, 7, 8, 9, 100])
        names = list(measured)
        self.assertEqual(percentile_noise(measured, names), percentile_noise(measured, names))
        # P99 of 10 requests is the largest: 100 in a resample with probability 1 − 0.9^10 = 0.65, else at most
        # 9; standard deviation about 91·sqrt(0.65·0.35) = 43, i.e. 43% of 100.
        self.assertAlmostEqual(percentile_noise(measured, names)["ttft", 99], 0.43, delta=0.1)

    def test_repeat_noise_by_hand(self):
        """Run TTFTs 10..40 (P50 = 20), repeat 11..44 (P50 = 22): |22 − 20| / 20 = 10%."""
        measured = rows([10, 20, 30, 40])
        repeat = list(rows([11, 22, 33, 44]).values())
        noise = repeat_noise(measured, list(measured), repeat)
        self.assertAlmostEqual(noise["ttft", 50], 0.1)
        self.assertAlmostEqual(noise["e2e", 50], 0.1)

    def test_within_noise_only_inside_it(self):
        measured = rows([10, 20, 30, 40])
        predicted = rows([10.5, 21, 31.5, 42])               # +5% everywhere
        table = with_noise(percentile_table(measured, predicted, list(measured)),
                           {("ttft", 50): 0.10, ("e2e", 50): 0.01})
        by = {(r["metric"], r["p"]): r for r in table}
        self.assertTrue(by["ttft", 50]["within_noise"])
        self.assertFalse(by["e2e", 50]["within_noise"])
        self.assertIsNone(by["ttft", 90]["within_noise"])    # noise unknown: never "within noise"
        text = "\n".join(render_percentile_table(table))
        self.assertEqual(text.count("within noise"), 1)

    def test_huge_noise_keeps_the_column(self):
        """A measured percentile near 0 ms has a relative noise of thousands of percent (the BLIS
        excerpt's queue wait): the cell says ±>999% and every line keeps the same width."""
        measured = rows([10, 20, 30, 40])
        table = with_noise(percentile_table(measured, rows([10.5, 21, 31.5, 42]), list(measured)),
                           {("ttft", 50): 2132.043, ("ttft", 90): 9.9994, ("e2e", 50): 0.036})
        lines = render_percentile_table(table)
        cells = {line.split()[0] + line.split()[1]: line.split()[5] for line in lines[1:]}
        self.assertEqual((cells["TTFTP50"], cells["TTFTP90"], cells["E2EP50"]), ("±>999%", "±999.9%", "±3.6%"))
        self.assertEqual(len({len(line.replace("  within noise", "")) for line in lines[1:]}), 1)


class RepeatCommandTest(unittest.TestCase):
    def test_a_run_as_its_own_repeat_is_refused(self):
        """Given itself as the repeat, every percentile would differ by 0 and the noise column would read
        ±0.0% as if the server had no run-to-run noise: refused (tests/test_timing_repeat_run.py has a
        genuine repeat and the other refusals)."""
        out = os.path.join(temp_dir(self), "cal")
        code, stdout, err = run_cli(["calibrate", RUN_DIR, "--train-first", "45", "--repeat", RUN_DIR,
                                     "--max-replays", "2", "--out", out])
        self.assertEqual(code, 2, err)
        self.assertIn("the same requests file", err)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
