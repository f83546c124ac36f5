"""Scale features (docs/handbook/real-traffic.md §14): compact token runs, exact ITL histogram, timeline detail levels,
streamed artifacts, and the load sweep with any executor."""

import json
import os
import unittest
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

from sched.output.artifacts import render_artifacts, stream_artifacts
from sched.runs.build import default_timeline, run_lab
from sched.core.config import EngineConfig
from sched.core.metrics import gap_histogram, itls, percentile, percentile_of_histogram
from sched.core.records import Request, Status
from sched.runs.sweep import render_sweep_manifest, render_sweep_svg, run_sweep, scale_arrivals
from sched.workload.specs import RequestSpec, scenario
from tests.helpers import EXPECTED, read, run_cli, temp_dir


class CompactTokensTest(unittest.TestCase):
    def test_runs_and_histogram_match_the_spec_example(self):
        """lab.md §5: token times [2, 3, 4, 14] -> runs [(2, 3), (14, 1)], gaps [1, 1, 10]."""
        request = Request(RequestSpec("A", 0, None, 0, 1, 4), 0, status=Status.DONE, token_times=[2, 3, 4, 14])
        self.assertEqual(request.token_runs, [(2, 3), (14, 1)])
        self.assertEqual(request.token_times, [2, 3, 4, 14])
        self.assertEqual(gap_histogram([request]), {1: 2, 10: 1})
        self.assertEqual(percentile_of_histogram(gap_histogram([request]), 95), 10)

    def test_histogram_percentile_equals_the_sorted_list(self):
        values = [5, 1, 1, 3, 9, 3, 3, 2]
        counts = {v: values.count(v) for v in set(values)}
        for p in (1, 50, 95, 99, 100):
            self.assertEqual(percentile_of_histogram(counts, p), percentile(values, p))
        self.assertIsNone(percentile_of_histogram({}, 95))

    def test_ratio_percentile_equals_the_fraction_percentile(self):
        """Seeded random TPOT ratios, plus two that share one float: same answer as sorting Fractions."""
        import random
        from sched.core.metrics import _ratio_percentile
        rng = random.Random(5)
        ratios = [(rng.randint(1, 60), rng.randint(1, 12)) for _ in range(300)]
        ratios += [(1, 3), (333333333333333333, 10**18)]
        for p in (1, 25, 50, 95, 99, 100):
            self.assertEqual(_ratio_percentile(ratios, p), percentile([Fraction(*r) for r in ratios], p))
        self.assertIsNone(_ratio_percentile([], 95))

    def test_percentile_stays_exact_where_floats_tie(self):
        """1/3 and 333333333333333333/10**18 have the same float but differ exactly: the sort
        that backs percentile() must still put the smaller first."""
        close = Fraction(333333333333333333, 10**18)
        self.assertEqual(float(close), float(Fraction(1, 3)))
        values = [Fraction(1, 3), close, Fraction(1, 2), Fraction(1, 4)]
        self.assertEqual([percentile(values, p) for p in (25, 50, 75, 100)],
                         [Fraction(1, 4), close, Fraction(1, 3), Fraction(1, 2)])


class SweepManifestTest(unittest.TestCase):
    def test_load_factors_are_plain_numbers(self):
        """Factors 1/2 and 2 are written as 0.5 and 2, as in sweep.csv, never as "1/2"."""
        manifest = json.loads(render_sweep_manifest(scenario("baseline"), EngineConfig(), "fcfs",
                                                    [Fraction(1, 2), Fraction(2)]))
        self.assertEqual(manifest["loads"], [0.5, 2])


class TimelineDetailTest(unittest.TestCase):
    def test_default_threshold(self):
        """Full up to 1,000 requests, 50,000 prompt + output tokens and 1,000,000 requests × tokens;
        counts above any of them."""
        def small(n, output=1):
            return [RequestSpec(f"r{i}", 0, None, 0, 1, output) for i in range(n)]
        self.assertEqual(default_timeline(scenario("baseline")), "full")
        # 500 requests of 2 tokens: 1,000 tokens, 500,000 names; 1,000 such: 2,000,000 names.
        self.assertEqual((default_timeline(small(500)), default_timeline(small(1000))), ("full", "counts"))
        self.assertEqual(default_timeline(small(1001)), "counts")
        # 20 requests of 1 + 2,499 tokens: 50,000 tokens, 1,000,000 names (both at the bound).
        self.assertEqual((default_timeline(small(20, 2499)), default_timeline(small(20, 2500))), ("full", "counts"))
        # One request: 1 prompt token + 49,999 output tokens is exactly the bound; one more is over.
        self.assertEqual((default_timeline(small(1, 49_999)), default_timeline(small(1, 50_000))),
                         ("full", "counts"))

    def test_counts_detail_keeps_every_request_fact(self):
        """With counts, requests.jsonl lines are canonical JSON whose token_runs expand to the
        golden token_times and whose other fields equal the golden line's."""
        files = render_artifacts(run_lab(scenario("baseline"), EngineConfig(), timeline="counts"))
        golden = read(os.path.join(EXPECTED, "baseline", "requests.jsonl")).splitlines()
        for line, expected in zip(files["requests.jsonl"].splitlines(), golden, strict=True):
            row, want = json.loads(line), json.loads(expected)
            self.assertEqual(line, json.dumps(row, ensure_ascii=False))
            runs = row.pop("token_runs")
            self.assertEqual([s + k for s, c in runs for k in range(c)], want.pop("token_times"))
            self.assertEqual(row, want)
        for line in files["timeline.jsonl"].splitlines():
            self.assertEqual(line, json.dumps(json.loads(line), ensure_ascii=False))
        for name in ("summary.json", "summary.csv", "table.txt"):
            self.assertEqual(files[name], read(os.path.join(EXPECTED, "baseline", name)))
        self.assertEqual(json.loads(files["manifest.json"])["timeline"], "counts")
        self.assertNotIn("timeline", json.loads(read(os.path.join(EXPECTED, "baseline", "manifest.json"))))

    def test_streamed_artifacts_have_the_same_bytes(self):
        run = run_lab(scenario("baseline"), EngineConfig(), timeline="counts")
        self.addCleanup(run.close)   # workload.json's temporary file
        streamed = {name: text if isinstance(text, str) else "".join(text)
                    for name, text in stream_artifacts(run).items()}
        self.assertEqual(streamed, render_artifacts(run))

    def test_cli_timeline_off(self):
        out = os.path.join(temp_dir(self), "run")
        code, _, err = run_cli(["--timeline", "off", "--artifacts", out])
        self.assertEqual(code, 0, err)
        self.assertEqual(read(os.path.join(out, "timeline.jsonl")), "")


class SweepTest(unittest.TestCase):
    def test_scale_arrivals(self):
        """Arrivals [0, 3, 10]: factor 2 -> [0, 1, 5]; factor 1/2 -> [0, 6, 20]."""
        workload = [RequestSpec(n, a, None, 0, 1, 1) for n, a in (("a", 0), ("b", 3), ("c", 10))]
        self.assertEqual([s.arrival for s in scale_arrivals(workload, Fraction(2))], [0, 1, 5])
        self.assertEqual([s.arrival for s in scale_arrivals(workload, Fraction(1, 2))], [0, 6, 20])

    def test_load_one_is_the_plain_run_and_any_executor_works(self):
        """At load 1 every row equals lab.md §6 (P95 TTFT 56/30/26/29, hits 0/0/384/384)."""
        with ThreadPoolExecutor(2) as pool:
            rows = run_sweep(scenario("baseline"), EngineConfig(), [1, 2], executor=pool)
        self.assertEqual([(r["load"], r["p95_ttft"], r["hit_tokens"]) for r in rows[:4]],
                         [(1, 56, 0), (1, 30, 0), (1, 26, 384), (1, 29, 384)])
        self.assertEqual([r["load"] for r in rows[4:]], [2] * 4)
        self.assertTrue(render_sweep_svg(rows).startswith("<svg"))

    def test_cli_writes_the_directory(self):
        out = os.path.join(temp_dir(self), "sweep")
        code, stdout, err = run_cli(["sweep", "--loads", "1,2", "--workers", "1", "--timeout-ticks", "30",
                                     "--out", out])
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(os.listdir(out)), ["manifest.json", "sweep.csv", "sweep.svg", "sweep.txt"])
        self.assertIn("error rate", stdout)
        self.assertEqual(run_cli(["sweep", "--loads", "0,1"])[0], 2)


if __name__ == "__main__":
    unittest.main()
