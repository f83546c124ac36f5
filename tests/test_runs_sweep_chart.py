"""The sweep chart (sweep.svg) and the sweep's warnings (readable pictures)."""

import re
import unittest
from fractions import Fraction
from unittest import mock

from sched.runs.sweep import linear_ticks, log_ticks, render_sweep_svg
from tests.helpers import run_cli

CASES = ("static", "continuous", "continuous+APC", "continuous+APC+chunk32")


def rows(timeouts: bool) -> list[dict]:
    """Two loads x four cases; with timeouts some requests fail (3/8 and 8/8 succeed)."""
    out = []
    for load in (Fraction(1), Fraction(4)):
        for k, case in enumerate(CASES):
            ok = 3 + k if timeouts and load == 4 else 8
            out.append({"load": load, "case": case, "p50_ttft": 10 * (k + 1), "p95_ttft": 150 * (k + 1) * int(load),
                        "p95_tpot": Fraction(3, 2), "throughput": Fraction(13, 5) + k, "error_rate": Fraction(8 - ok, 8),
                        "hit_tokens": 0, "succeeded": ok, "arrived": 8})
    return out


class TicksTest(unittest.TestCase):
    def test_linear_ticks_span_the_data_in_1_2_5_steps(self):
        table = {2.62: [0, 0.5, 1, 1.5, 2, 2.5, 3], 8: [0, 2, 4, 6, 8], 1: [0, 0.2, 0.4, 0.6, 0.8, 1],
                 137: [0, 20, 40, 60, 80, 100, 120, 140], 19366: [0, 5000, 10000, 15000, 20000], 0: [0, 1]}
        for top, expected in table.items():
            with self.subTest(top=top):
                self.assertEqual(linear_ticks(top), expected)

    def test_log_ticks_reach_the_first_decade_above_the_data(self):
        table = {56: [1, 2, 5, 10, 20, 50, 100], 1: [1, 2, 5, 10], 1500: [1, 10, 100, 1000, 10000],
                 1000: [1, 10, 100, 1000]}
        for top, expected in table.items():
            with self.subTest(top=top):
                self.assertEqual(log_ticks(top), expected)


class SweepChartTest(unittest.TestCase):
    def test_error_rate_panel_only_with_a_deadline(self):
        without, with_deadline = render_sweep_svg(rows(False)), render_sweep_svg(rows(True), deadline=40)
        self.assertNotIn("error rate", without)
        self.assertIn("error rate (deadline 40 ticks, 0..1)", with_deadline)
        for svg in (without, with_deadline):
            self.assertIn("requests succeeded (of 8 per point)", svg)
            self.assertIn("P95 TTFT (ticks, log scale)", svg)

    def test_every_point_says_how_many_succeeded(self):
        svg = render_sweep_svg(rows(True), deadline=40)
        labels = re.findall(r'fill="#[0-9a-f]{6}">(\d+/\d+)</text>', svg)
        self.assertEqual(sorted(labels), sorted(["8/8"] * 4 + ["3/8", "4/8", "5/8", "6/8"]))

    def test_no_line_crosses_a_value_label(self):
        """Each succeeded/arrived label's box (10 px text: 24 px wide, 10 px high) is touched by no
        segment of any case's line, sampled every half pixel; the labels sit in rows under the axis."""
        for timeouts in (False, True):
            svg = render_sweep_svg(rows(timeouts), deadline=40 if timeouts else None)
            labels = [(float(x), float(y)) for x, y in re.findall(
                r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="middle" font-size="10" fill="#[0-9a-f]{6}">\d+/\d+</text>', svg)]
            self.assertEqual(len(labels), 8)
            lines = [[tuple(map(float, p.split(","))) for p in points.split()]
                     for points in re.findall(r'<polyline [^>]*points="([^"]+)"', svg)]
            for (a, b), (c, d) in ((p, q) for line in lines for p, q in zip(line, line[1:])):
                steps = int(max(abs(c - a), abs(d - b)) * 2) + 1
                for i in range(steps + 1):
                    px, py = a + (c - a) * i / steps, b + (d - b) * i / steps
                    for x, y in labels:
                        self.assertFalse(x - 12 <= px <= x + 12 and y - 10 <= py <= y + 1,
                                         f"line through the label at ({x}, {y})")

    def test_axis_labels_span_the_data(self):
        """P95 TTFT tops at 150 x 4 x 4 = 2400 ticks: decades 1 to 10000 are labelled; throughput
        tops at 5.6: 0 to 6 in steps of 1."""
        svg = render_sweep_svg(rows(False))
        labels = set(re.findall(r'text-anchor="end" font-size="11">([^<]+)</text>', svg))
        self.assertTrue({"1", "10", "100", "1000", "10000"} <= labels, labels)
        self.assertTrue({"0", "1", "2", "3", "4", "5", "6"} <= labels, labels)


class SweepWarningTest(unittest.TestCase):
    def test_the_lab_profile_on_a_big_workload_warns_like_the_run(self):
        with mock.patch("sched.runs.scale.LAB_PROFILE_MAX_REQUESTS", 4):   # the baseline's 8 requests count as big
            code, _, err = run_cli(["sweep", "--loads", "1", "--workers", "1"])
            self.assertEqual(code, 0, err)
            self.assertIn("warning: the lab profile (budget 64, max active 4) is a teaching scale; with 8 requests", err)
            code, _, err = run_cli(["sweep", "--loads", "1", "--workers", "1", "--profile", "vllm"])
            self.assertEqual((code, err), (0, ""))


if __name__ == "__main__":
    unittest.main()
