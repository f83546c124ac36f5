"""Arrivals as vllm bench serve sends them (sched.workload.bench_arrivals).

Reference values are numpy's own legacy generator (``np.random.seed(0); np.random.random()`` is the
well-known 0.5488135039273248) and vLLM's ``get_request`` arithmetic done by hand: evenly spaced
gaps at burstiness inf, zeros at rate inf, the last send time scaled to num_requests / rate.
"""

import json
import math
import os
import unittest

from sched.workload.bench_arrivals import LegacyRandom, bench_send_times, retime
from sched.workload.specs import RequestSpec
from tests.helpers import assert_bad_input, read, run_cli, temp_dir
from tests.test_core_bench_metrics import ONE_REQUEST, STEP_MODEL


class SendTimesTest(unittest.TestCase):
    def test_numpys_legacy_generator(self):
        self.assertEqual(LegacyRandom(0).random(), 0.5488135039273248)
        with self.assertRaises(ValueError):
            LegacyRandom(2**32)

    def test_even_and_instant(self):
        """4 requests at 2/s, burstiness inf: gaps 0.5 s, the first sent after its own gap."""
        self.assertEqual(bench_send_times(4, 2.0, math.inf), [0.5, 1.0, 1.5, 2.0])
        self.assertEqual(bench_send_times(3, math.inf), [0.0, 0.0, 0.0])
        self.assertEqual(bench_send_times(0, 2.0), [])

    def test_scaled_to_the_target_span(self):
        """Whatever the draws, the last request goes at num_requests / rate and times never decrease."""
        for burstiness in (0.3, 1.0, 4.0):
            times = bench_send_times(200, 8.0, burstiness, seed=7)
            self.assertAlmostEqual(times[-1], 25.0, places=9)
            self.assertEqual(times, sorted(times))
            self.assertNotEqual(times, bench_send_times(200, 8.0, burstiness, seed=8))

    def test_first_times_at_1_5_per_second(self):
        """numpy: seed 0, 1000 gamma(1, 1/1.5) gaps summed and scaled to 666.67 s -> these µs."""
        times = bench_send_times(1000, 1.5)
        self.assertEqual([round(t * 1e6) for t in times[:3]], [528711, 1363045, 1976356])

    def test_against_numpy_when_installed(self):
        try:
            import numpy
        except ImportError:
            self.skipTest("numpy not installed (the values above stand alone)")
        for seed, shape in ((0, 1.0), (3, 0.25), (11, 2.5), (2**32 - 1, 9.0)):
            numpy.random.seed(seed)
            expected = [float(numpy.random.gamma(shape, 0.1)) for _ in range(300)]
            rng = LegacyRandom(seed)
            self.assertEqual([rng.gamma(shape, 0.1) for _ in range(300)], expected)

    def test_retime_keeps_everything_but_arrivals(self):
        specs = [RequestSpec(f"r{i}", 99, None, 0, 10 + i, 3) for i in range(4)]
        timed = retime(specs, 2.0, math.inf)
        self.assertEqual([s.arrival for s in timed], [500_000, 1_000_000, 1_500_000, 2_000_000])
        self.assertEqual({s.tick_ms for s in timed}, {0.001})
        self.assertEqual([s.suffix_tokens for s in timed], [10, 11, 12, 13])


class RunFlagsTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.workload, self.model = (os.path.join(self.base, name) for name in ("w.json", "m.json"))
        with open(self.workload, "w", encoding="utf-8") as out:
            json.dump({"requests": [dict(ONE_REQUEST["requests"][0], name=f"r{i}") for i in range(3)]}, out)
        with open(self.model, "w", encoding="utf-8") as out:
            json.dump(STEP_MODEL, out)

    def test_request_rate_retimes_the_run(self):
        """3 requests at 10/s evenly: sent at 100, 200, 300 ms; each runs alone (11 ms, see
        test_bench_metrics.StepModelRunTest): duration 0.311 s."""
        target = os.path.join(self.base, "run")
        code, _, err = run_cli(["--engine", "vllm", "--workload", self.workload, "--step-model", self.model,
                                "--request-rate", "10", "--burstiness", "inf", "--artifacts", target])
        self.assertEqual(code, 0, err)
        workload = json.loads(read(os.path.join(target, "workload.json")))
        self.assertEqual([r["arrival"] for r in workload["requests"]], [100_000, 200_000, 300_000])
        summary = json.loads(read(os.path.join(target, "summary.json")))
        self.assertEqual(summary["vllm_bench"]["load"], {"request_rate": 10.0, "burstiness": "inf", "seed": 0})
        self.assertAlmostEqual(summary["cases"][0]["duration"], 0.311, places=9)
        self.assertAlmostEqual(summary["cases"][0]["mean_ttft_ms"], 6.0, places=9)

    def test_lowest_rate_still_reads_back(self):
        """3 requests at 0.003/s: the last is sent at exactly 1,000 s = 10**9 µs, the most a workload
        file holds; the run's workload.json runs again."""
        target, again = os.path.join(self.base, "slow"), os.path.join(self.base, "again")
        code, _, err = run_cli(["--engine", "vllm", "--workload", self.workload, "--step-model", self.model,
                                "--request-rate", "0.003", "--artifacts", target])
        self.assertEqual(code, 0, err)
        arrivals = [r["arrival"] for r in json.loads(read(os.path.join(target, "workload.json")))["requests"]]
        self.assertEqual(arrivals[-1], 10**9)
        code, _, err = run_cli(["--engine", "vllm", "--workload", os.path.join(target, "workload.json"),
                                "--step-model", self.model, "--artifacts", again])
        self.assertEqual(code, 0, err)

    def test_bad_load_flags(self):
        base = ["--engine", "vllm", "--workload", self.workload, "--step-model", self.model]
        for argv, mention in ((base + ["--request-rate", "0"], "--request-rate"),
                              (base + ["--request-rate", "nan"], "--request-rate"),
                              (base + ["--burstiness", "2"], "needs --request-rate"),
                              (base + ["--request-rate", "1", "--burstiness", "-1"], "--burstiness"),
                              (base + ["--request-rate", "1", "--seed", "-3"], "--seed"),
                              # 3 requests at 0.002/s: the last sent at 1,500 s, past the 1,000 s
                              # (10**9 µs) a workload.json's arrivals may span: it could not be read back
                              (base + ["--request-rate", "0.002"], "use at least 0.003 req/s"),
                              (["--engine", "vllm", "--request-rate", "1"], "needs --step-model")):
            with self.subTest(argv=argv[len(base):]):
                assert_bad_input(self, argv, mention)


class MaxConcurrencyTest(unittest.TestCase):
    """Three requests (16 prompt, 3 output tokens) all sent at 0 (``--request-rate inf``), step_ms =
    2 + 0.25·prompt + 0.5·decode. Alone a request runs 6 ms of prefill then two 2.5 ms decode steps: it
    ends at 11 ms. With ``--max-concurrency 1`` the client starts r1 when r0 ends (11 ms) and r2 at
    22 ms: each TTFT is 6 ms from its own start, each E2EL 11 ms, duration 33 ms. Without a limit the
    three share every step: one prefill of 48 tokens (2 + 12 = 14 ms), then two steps of three decodes
    (2 + 1.5 = 3.5 ms each): TTFT 14, E2EL 21 ms."""

    def setUp(self):
        self.base = temp_dir(self)
        self.workload, self.model = (os.path.join(self.base, name) for name in ("w.json", "m.json"))
        with open(self.workload, "w", encoding="utf-8") as out:
            json.dump({"requests": [dict(ONE_REQUEST["requests"][0], name=f"r{i}") for i in range(3)]}, out)
        with open(self.model, "w", encoding="utf-8") as out:
            json.dump(STEP_MODEL, out)

    def run_with(self, *extra):
        target = os.path.join(self.base, f"run{len(os.listdir(self.base))}")
        code, _, err = run_cli(["--engine", "vllm", "--workload", self.workload, "--step-model", self.model,
                                "--request-rate", "inf", *extra, "--artifacts", target])
        self.assertEqual(code, 0, err)
        summary = json.loads(read(os.path.join(target, "summary.json")))
        lines = [json.loads(line) for line in read(os.path.join(target, "requests.jsonl")).splitlines()]
        return summary, lines

    def test_one_at_a_time(self):
        summary, lines = self.run_with("--max-concurrency", "1")
        self.assertEqual([line["arrival_ms"] for line in lines], [0, 11, 22])
        self.assertEqual([line["ttft_ms"] for line in lines], [6, 6, 6])
        row = summary["cases"][0]
        self.assertAlmostEqual(row["duration"], 0.033, places=9)
        self.assertAlmostEqual(row["mean_e2el_ms"], 11, places=9)
        self.assertEqual(summary["vllm_bench"]["load"]["max_concurrency"], 1)

    def test_no_limit_shares_the_steps(self):
        summary, lines = self.run_with()
        self.assertEqual([line["ttft_ms"] for line in lines], [14, 14, 14])
        self.assertAlmostEqual(summary["cases"][0]["mean_e2el_ms"], 21, places=9)
        summary, _ = self.run_with("--max-concurrency", "3")   # a limit that never binds changes nothing
        self.assertAlmostEqual(summary["cases"][0]["mean_e2el_ms"], 21, places=9)

    def test_decode_jumps_keep_the_gate(self):
        """With ``--timeline counts`` (and no prefix caching) the engine jumps over decode-only steps;
        the gate must release the same requests at the same times as the step-by-step walk, and never
        more than 4 in flight."""
        workload = os.path.join(self.base, "w60.json")
        with open(workload, "w", encoding="utf-8") as out:
            json.dump({"requests": [{"name": f"r{i}", "arrival": 3 * i, "prefix_key": None, "prefix_tokens": 0,
                                     "suffix_tokens": 30 + 7 * (i % 5), "output_tokens": 40 + 13 * (i % 4)}
                                    for i in range(60)]}, out)
        lines = {}
        for detail in ("full", "counts"):
            target = os.path.join(self.base, detail)
            code, _, err = run_cli(["--engine", "vllm", "--workload", workload, "--step-model", self.model,
                                    "--max-concurrency", "4", "--timeline", detail, "--artifacts", target])
            self.assertEqual(code, 0, err)
            lines[detail] = [json.loads(line) for line in read(os.path.join(target, "requests.jsonl")).splitlines()]
        fields = ("arrival", "admitted_at", "done_at", "ttft", "e2e", "status")
        self.assertEqual([[r[f] for f in fields] for r in lines["counts"]], [[r[f] for f in fields] for r in lines["full"]])
        events = sorted([(r["arrival"], 1) for r in lines["full"]] + [(r["done_at"], -1) for r in lines["full"]])
        in_flight, most = 0, 0
        for _, step in events:
            in_flight += step
            most = max(most, in_flight)
        self.assertEqual(most, 4)

    def test_bad_limit(self):
        base = ["--engine", "vllm", "--workload", self.workload, "--step-model", self.model]
        assert_bad_input(self, base + ["--max-concurrency", "0"], "--max-concurrency")
        assert_bad_input(self, ["--engine", "vllm", "--max-concurrency", "4"], "needs --step-model")


class TimeoutMsTest(unittest.TestCase):
    """``--timeout-ms`` on a step-model run: one request (16 prompt, 3 output tokens), step_ms = 2 +
    0.25·prompt + 0.5·decode: tokens at 6, 8.5 and 11 ms. A deadline of 8 ms falls inside the decode
    step from 6 to 8.5 ms; the engine never cuts a step, so the request times out at 8.5 ms with 2
    tokens, and vLLM's metrics count it as failed. A deadline of 11 ms lets it finish."""

    def setUp(self):
        self.base = temp_dir(self)
        self.workload, self.model = (os.path.join(self.base, name) for name in ("w.json", "m.json"))
        with open(self.workload, "w", encoding="utf-8") as out:
            json.dump(ONE_REQUEST, out)
        with open(self.model, "w", encoding="utf-8") as out:
            json.dump(STEP_MODEL, out)

    def run_with(self, deadline):
        target = os.path.join(self.base, f"run{deadline}")
        code, _, err = run_cli(["--engine", "vllm", "--workload", self.workload, "--step-model", self.model,
                                "--timeout-ms", deadline, "--artifacts", target])
        self.assertEqual(code, 0, err)
        line = json.loads(read(os.path.join(target, "requests.jsonl")).splitlines()[0])
        return line, json.loads(read(os.path.join(target, "summary.json")))["cases"][0]

    def test_deadline_inside_a_step(self):
        line, row = self.run_with("8")
        self.assertEqual((line["status"], line["done_ms"], line["output_tokens_emitted"]), ("timeout", 8.5, 2))
        self.assertEqual((row["completed"], row["failed"]), (0, 1))
        line, row = self.run_with("11")
        self.assertEqual((line["status"], line["done_ms"]), ("ok", 11))

    def test_refusals(self):
        assert_bad_input(self, ["--engine", "vllm", "--workload", self.workload, "--timeout-ms", "5"], "needs --step-model")
        assert_bad_input(self, ["--engine", "vllm", "--workload", self.workload, "--step-model", self.model,
                                "--timeout-ticks", "5"], "--timeout-ms")
        assert_bad_input(self, ["--engine", "vllm", "--workload", self.workload, "--step-model", self.model,
                                "--timeout-ms", "0"], "--timeout-ms")
        assert_bad_input(self, ["--engine", "vllm", "--workload", self.workload, "--step-model", self.model,
                                "--async-scheduling", "--timeout-ms", "5"], "--no-async-scheduling")
