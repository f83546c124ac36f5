"""vLLM bench serve's metrics and goodput (bench-metrics.md; sched.core.bench_metrics), by hand.

The four requests of :data:`FOUR` (duration 2 s), worked out in the docstrings below:

- A: ok, prompt 10, 3 tokens in 3 chunks: TTFT 0.1 s, ITLs 0.05, 0.05, E2EL 0.2; TPOT (0.2 − 0.1)/2 = 0.05.
- B: ok, prompt 20, 1 token: TTFT 0.3, no ITL, E2EL 0.3; no TPOT sample (goodput reads its TPOT as 0).
- C: failed, prompt 5, with a TTFT and an ITL recorded before it failed: excluded entirely (§2).
- D: ok, prompt 30, 5 tokens in 2 chunks: TTFT 0.2, one ITL 0.3, E2EL 0.5; TPOT 0.3/4 = 0.075.
"""

import json
import math
import os
import unittest

from sched.core.bench_metrics import (BenchRequest, bench_fields, calculate_metrics, is_good, linear_percentile,
                                      np_mean, np_median, np_std, parse_goodput_pair, parse_metric_percentiles, percentile_key)
from tests.helpers import assert_bad_input, read, run_cli, temp_dir

FOUR = [BenchRequest(True, 10, 3, 0.1, [0.05, 0.05], 0.2), BenchRequest(True, 20, 1, 0.3, [], 0.3),
        BenchRequest(False, 5, 0, 0.05, [0.01], 0.0), BenchRequest(True, 30, 5, 0.2, [0.3], 0.5)]


class StatisticsTest(unittest.TestCase):
    def test_linear_percentile_is_numpys_default(self):
        """[1, 2, 3, 4]: index (n − 1)·p/100; P50 at 1.5 -> 2.5, P99 at 2.97 -> 3.97, ends exact."""
        self.assertEqual(linear_percentile([4, 1, 3, 2], 50), 2.5)
        self.assertAlmostEqual(linear_percentile([1, 2, 3, 4], 99), 3.97, places=12)
        self.assertEqual(linear_percentile([1, 2, 3, 4], 0), 1)
        self.assertEqual(linear_percentile([1, 2, 3, 4], 100), 4)
        self.assertEqual(linear_percentile([7], 95), 7)
        self.assertAlmostEqual(linear_percentile([10, 20], 25), 12.5, places=12)

    def test_median_and_population_std(self):
        self.assertEqual(np_median([3, 1, 2]), 2)
        self.assertEqual(np_median([4, 1, 3, 2]), 2.5)
        self.assertAlmostEqual(np_std([1, 2, 3, 4]), math.sqrt(1.25), places=15)   # ddof 0, not sqrt(5/3)

    def test_percentile_keys(self):
        self.assertEqual([percentile_key(p) for p in (99.0, 50, 99.9)], ["99", "50", "99.9"])
        fields = bench_fields((99, 99.0, 50))   # one key per word, as vLLM's result dict: summary.csv has no twin column
        self.assertEqual(len(fields), len(set(fields)))
        self.assertEqual([f for f in fields if f.endswith("_ttft_ms")],
                         ["mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "p50_ttft_ms"])
        self.assertEqual(parse_metric_percentiles("50,90, 99.9"), (50.0, 90.0, 99.9))
        for bad in ("", "50,,90", "101", "-1", "p99"):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                parse_metric_percentiles(bad)


class CalculateMetricsTest(unittest.TestCase):
    def setUp(self):
        self.row = calculate_metrics(FOUR, 2.0, (50, 99))

    def test_counts_and_throughputs(self):
        """Successful A, B, D: 3 completed, 1 failed; inputs 60, outputs 3 + 1 + 5 = 9; over 2 s."""
        row = self.row
        self.assertEqual((row["completed"], row["failed"], row["total_input_tokens"], row["total_output_tokens"]),
                         (3, 1, 60, 9))
        self.assertEqual((row["request_throughput"], row["output_throughput"], row["total_token_throughput"]),
                         (1.5, 4.5, 34.5))
        self.assertIsNone(row["request_goodput"])   # key present, null without --goodput (§6)
        self.assertIsNone(row["slo_attainment"])

    def test_latency_statistics(self):
        """TTFT [0.1, 0.3, 0.2]: mean 200 ms, std sqrt(0.02/3) s, P99 at index 1.98: 0.2 + 0.1·0.98.
        TPOT [0.05, 0.075] (B has one token): mean 62.5, std 12.5, P99 0.075 − 0.025·0.01.
        ITL [0.05, 0.05, 0.3] (per chunk, C's excluded): mean 133.3, median 50, P99 0.05 + 0.25·0.98.
        E2EL [0.2, 0.3, 0.5]: mean 333.3, median 300, P99 0.3 + 0.2·0.98."""
        expected = {"mean_ttft_ms": 200, "median_ttft_ms": 200, "std_ttft_ms": math.sqrt(0.02 / 3) * 1000,
                    "p50_ttft_ms": 200, "p99_ttft_ms": 298, "mean_tpot_ms": 62.5, "median_tpot_ms": 62.5,
                    "std_tpot_ms": 12.5, "p99_tpot_ms": 74.75, "mean_itl_ms": 400 / 3, "median_itl_ms": 50,
                    "std_itl_ms": math.sqrt(((0.05 - 0.4 / 3) ** 2 * 2 + (0.3 - 0.4 / 3) ** 2) / 3) * 1000,
                    "p99_itl_ms": 295, "mean_e2el_ms": 1000 / 3, "median_e2el_ms": 300, "p99_e2el_ms": 496}
        for key, value in expected.items():
            with self.subTest(key=key):
                self.assertAlmostEqual(self.row[key], value, delta=1e-9 * max(1, value))
        self.assertEqual(list(self.row), list(bench_fields((50, 99))))

    def test_goodput(self):
        """ttft:250 tpot:60 -> A good; B's TTFT 0.3 too slow; D's TPOT 0.075 too slow: 1 good / 2 s.
        tpot:0 -> only B (one token: TPOT 0, and the limit is inclusive). ttft:200 -> A and D (0.2 <= 0.2)."""
        for slos, good in (({"ttft": 250, "tpot": 60}, 1), ({"tpot": 0}, 1), ({"ttft": 200}, 2),
                           ({"e2el": 500}, 3), ({"e2el": 499.999}, 2)):
            with self.subTest(slos=slos):
                row = calculate_metrics(FOUR, 2.0, goodput=slos)
                self.assertEqual(row["request_goodput"], good / 2)
                self.assertEqual(row["slo_attainment"], good / 3)
        self.assertFalse(is_good(FOUR[2], {}))   # a failed request is never good

    def test_all_failed_reports_zeros(self):
        """Every list empty -> [0]: each statistic 0.0, not null (§4); attainment has no denominator."""
        row = calculate_metrics([FOUR[2]], 1.0, goodput={"ttft": 1})
        self.assertEqual((row["completed"], row["failed"], row["request_goodput"]), (0, 1, 0.0))
        self.assertIsNone(row["slo_attainment"])
        self.assertTrue(all(row[key] == 0.0 for key in row if key.endswith("_ms")))

    def test_goodput_pairs_as_vllm_checks_them(self):
        self.assertEqual(parse_goodput_pair("ttft:2000"), ("ttft", 2000.0))
        self.assertEqual(parse_goodput_pair("e2el:0"), ("e2el", 0.0))
        for bad, word in (("itl:5", "unknown SLO"), ("ttft:-1", ">= 0"), ("ttft", "one colon"), ("ttft:1:2", "one colon"),
                          ("ttft:abc", "not a number"), ("ttft:nan", ">= 0")):
            with self.subTest(bad=bad), self.assertRaisesRegex(ValueError, word):
                parse_goodput_pair(bad)


class AgainstNumpyTest(unittest.TestCase):
    """numpy's own functions on random samples, where numpy happens to be installed (never required)."""

    def test_random_samples(self):
        try:
            import numpy
        except ImportError:
            self.skipTest("numpy not installed (the hand-computed tests above stand alone)")
        import random
        rng = random.Random(19)
        for _ in range(300):
            values = [rng.expovariate(4) for _ in range(rng.randint(1, 30))]
            for p in (0, 50, 90, 95, 99, 99.9, rng.uniform(0, 100)):
                self.assertEqual(linear_percentile(values, p), float(numpy.percentile(values, p)))
            self.assertEqual(np_median(values), float(numpy.median(values)))
            self.assertEqual(np_mean(values), float(numpy.mean(values)))   # numpy's pairwise order: the same double
            self.assertEqual(np_std(values), float(numpy.std(values)))
        for n in (7, 8, 9, 128, 129, 1000, 8193):   # each branch of the pairwise sum, and past numpy's buffer size
            values = [rng.expovariate(4) for _ in range(n)]
            self.assertEqual(np_mean(values), float(numpy.mean(values)), n)


ONE_REQUEST = {"requests": [{"name": "only", "arrival": 0, "prefix_key": None, "prefix_tokens": 0,
                             "suffix_tokens": 16, "output_tokens": 3}]}
STEP_MODEL = {"kind": "step-model", "engine": "vllm", "step_ms": {"a": 2.0, "b": 0.25, "c": 0.5},
              "settings": {"num_gpu_blocks": 41, "block_size": 16, "max_num_batched_tokens": 64, "max_num_seqs": 4,
                           "long_prefill_token_threshold": 0, "enable_prefix_caching": False, "policy": "fcfs"},
              "fitted_on": {"model": "a hand-written model", "device": "no GPU"}}


class StepModelRunTest(unittest.TestCase):
    """One request, 16 prompt tokens, 3 output tokens, step_ms = 2 + 0.25·prompt + 0.5·decode: the
    prefill step lasts 2 + 4 = 6 ms (first token at 6), each decode step 2.5 ms (tokens at 8.5, 11).
    TTFT 6 ms, ITLs 2.5, 2.5, E2EL 11 ms, TPOT 5/2 = 2.5 ms; duration 0.011 s: 1/0.011 req/s."""

    def setUp(self):
        self.base = temp_dir(self)
        self.workload, self.model = (os.path.join(self.base, name) for name in ("w.json", "m.json"))
        for path, doc in ((self.workload, ONE_REQUEST), (self.model, STEP_MODEL)):
            with open(path, "w", encoding="utf-8") as out:
                json.dump(doc, out)

    def run_with(self, *extra):
        target = os.path.join(self.base, "run" + str(len(os.listdir(self.base))))
        code, out, err = run_cli(["--engine", "vllm", "--workload", self.workload, "--step-model", self.model,
                                  "--artifacts", target, *extra])
        self.assertEqual(code, 0, err)
        return json.loads(read(os.path.join(target, "summary.json"))), read(os.path.join(target, "summary.csv")), out

    def test_summary_carries_vllms_keys(self):
        summary, csv_text, _ = self.run_with("--metric-percentiles", "50,99")
        row = summary["cases"][0]
        expected = {"duration": 0.011, "completed": 1, "request_throughput": 1 / 0.011,
                    "output_throughput": 3 / 0.011, "total_token_throughput": 19 / 0.011, "mean_ttft_ms": 6,
                    "p99_ttft_ms": 6, "mean_itl_ms": 2.5, "p50_itl_ms": 2.5, "std_itl_ms": 0, "mean_tpot_ms": 2.5,
                    "mean_e2el_ms": 11, "p99_e2el_ms": 11}
        for key, value in expected.items():
            with self.subTest(key=key):
                self.assertAlmostEqual(row[key], value, delta=1e-9 * max(1, value))
        header, line = csv_text.splitlines()
        self.assertIn("p50_ttft_ms", header.split(","))
        self.assertEqual(summary["vllm_bench"]["metric_percentiles"], [50.0, 99.0])

    def test_goodput_is_inclusive_in_ms(self):
        for limit, attainment in (("6", 1.0), ("5.999", 0.0)):
            with self.subTest(limit=limit):
                summary, _, out = self.run_with("--goodput", f"ttft:{limit}", "tpot:2.5")
                row = summary["cases"][0]
                self.assertEqual(row["slo_attainment"], attainment)
                self.assertAlmostEqual(row["request_goodput"], attainment / 0.011, delta=1e-9)
                self.assertIn("slo_attainment", out)

    def test_default_is_vllms_p99_without_goodput(self):
        summary, _, out = self.run_with()
        row = summary["cases"][0]
        self.assertIn("p99_ttft_ms", row)
        self.assertNotIn("p95_ttft_ms", row)
        self.assertIsNone(row["request_goodput"])
        self.assertNotIn("vLLM bench serve:", out)   # table.txt as before unless a bench flag is given

    def test_bad_flags(self):
        base = ["--engine", "vllm", "--workload", self.workload, "--step-model", self.model]
        for argv, mention in ((base + ["--goodput", "itl:5"], "itl"), (base + ["--goodput", "ttft:-3"], ">= 0"),
                              (base + ["--metric-percentiles", "50,x"], "--metric-percentiles"),
                              (["--engine", "vllm", "--goodput", "ttft:100"], "needs --step-model")):
            with self.subTest(argv=argv):
                assert_bad_input(self, argv, mention)


class ImportedRunTest(unittest.TestCase):
    """``import-results`` of a ``vllm bench serve --save-detailed`` file holding :data:`FOUR` (C failed
    with an error string yet carries a TTFT and an ITL): the same numbers as the hand computation above,
    from the file's raw seconds."""

    def test_import_computes_from_raw_seconds(self):
        base = temp_dir(self)
        path = os.path.join(base, "result.json")
        doc = {"backend": "vllm", "num_prompts": 4, "duration": 2.0, "completed": 3, "failed": 1,
               "input_lens": [r.prompt_len for r in FOUR], "output_lens": [3, 1, 0, 5],
               "ttfts": [r.ttft for r in FOUR], "itls": [list(r.itl) for r in FOUR],
               "latencies": [r.latency for r in FOUR], "errors": ["", "", "boom", ""],
               "start_times": [100.0, 100.5, 101.0, 101.5]}
        with open(path, "w", encoding="utf-8") as out:
            json.dump(doc, out)
        target = os.path.join(base, "imported")
        code, out, err = run_cli(["import-results", path, "--artifacts", target, "--goodput", "ttft:250", "tpot:60",
                                  "--metric-percentiles", "99"])
        self.assertEqual(code, 0, err)
        row = json.loads(read(os.path.join(target, "summary.json")))["cases"][0]
        for key, value in {"request_goodput": 0.5, "slo_attainment": 1 / 3, "p99_itl_ms": 295, "p99_ttft_ms": 298,
                           "mean_e2el_ms": 1000 / 3, "total_token_throughput": 34.5, "failed": 1}.items():
            with self.subTest(key=key):
                self.assertAlmostEqual(row[key], value, delta=1e-9 * max(1, value))
        self.assertIn("slo_attainment 0.333", out)
        assert_bad_input(self, ["import-results", path, "--artifacts", os.path.join(base, "x"), "--goodput", "foo:1"],
                         "unknown SLO")
        self.assertFalse(os.path.exists(os.path.join(base, "x")))
