"""calibrate and --step-model (vllm-engine.md §6) on the real RTX 4090 run in tests/data.

The small version of the issue's target: the first 60 requests of the run (meta.json's
``num_requests`` set to 60 to match), fitted on the first 30, judged on the last 30. The measured
percentiles are recomputed here from the raw file (TTFT = first_token_ts − queued_ts, E2E =
last_token_ts − queued_ts, nearest rank by hand), never taken from the tool. The truncated run
lacks the competition of requests 61-300 that were still running when the last of these finished,
so the E2E prediction runs a few percent short (about −6% at P50, −9% at P95 when written); the
tolerance here is 10% for TTFT and 12% for E2E. The full target (train 150, judge 150, 10% on P50
and P95 of TTFT and E2E) replays all 300 requests and runs when ``ISL_CALIBRATION_FULL=1``.
"""

import json
import math
import os
import shutil
import unittest

from tests.test_timing_unidentified import assert_said_as_unidentified
from tests.helpers import PROJECT, assert_bad_input, full_only, read, run_cli, temp_dir

RUN_DIR = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090-run")
RUN = os.path.join(RUN_DIR, "requests.jsonl")


def raw_lines(count=None):
    with open(RUN, encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    return lines if count is None else lines[:count]


def nearest_rank(values, p):
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def small_run(test, count=60):
    """A directory with the first ``count`` lines of the run and a meta.json saying ``count`` requests."""
    base = temp_dir(test)
    with open(os.path.join(base, "requests.jsonl"), "w", encoding="utf-8") as out:
        out.writelines(json.dumps(line) + "\n" for line in raw_lines(count))
    meta = json.loads(read(os.path.join(RUN_DIR, "meta.json")))
    meta["num_requests"] = count
    with open(os.path.join(base, "meta.json"), "w", encoding="utf-8") as out:
        json.dump(meta, out)
    return base


class SmallCalibrationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = small_run(cls._Holder())
        cls.out = os.path.join(cls.base, "cal")
        cls.code, cls.stdout, cls.stderr = run_cli(["calibrate", os.path.join(cls.base, "requests.jsonl"),
                                                    "--train-first", "30", "--out", cls.out])
        cls.numbers = json.loads(read(os.path.join(cls.out, "calibration.json"))) if cls.code == 0 else None

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.base, ignore_errors=True)

    class _Holder:
        """Stands in for a test case so small_run can register no cleanup (tearDownClass removes it)."""

        def addCleanup(self, *args, **kwargs):
            pass

    def table(self, name="held_out_table"):
        return {(row["metric"], row["p"]): row for row in self.numbers[name]}

    def test_exit_and_files(self):
        self.assertEqual(self.code, 0, self.stderr)
        self.assertEqual(sorted(os.listdir(self.out)),
                         ["calibration.json", "calibration.txt", "step-model.json", "workload.json"])
        self.assertEqual(read(os.path.join(self.out, "calibration.txt")), self.stdout.split("wrote ")[0])

    def test_measured_percentiles_come_from_the_raw_file(self):
        """Held-out = lines 31..60 (arrival order = file order); TTFT and E2E on the monotonic clock, in ms."""
        held = raw_lines(60)[30:]
        ttft = [(r["first_token_ts"] - r["queued_ts"]) * 1000 for r in held]
        e2e = [(r["last_token_ts"] - r["queued_ts"]) * 1000 for r in held]
        table = self.table()
        for metric, values in (("ttft", ttft), ("e2e", e2e)):
            for p in (50, 90, 95, 99):
                with self.subTest(metric=metric, p=p):
                    self.assertAlmostEqual(table[metric, p]["measured"], nearest_rank(values, p), delta=0.01)

    def test_prediction_within_tolerance(self):
        held = raw_lines(60)[30:]
        measured = {"ttft": [(r["first_token_ts"] - r["queued_ts"]) * 1000 for r in held],
                    "e2e": [(r["last_token_ts"] - r["queued_ts"]) * 1000 for r in held]}
        table = self.table()
        for metric, tolerance in (("ttft", 0.10), ("e2e", 0.12)):
            for p in (50, 95):
                with self.subTest(metric=metric, p=p):
                    truth = nearest_rank(measured[metric], p)
                    self.assertLess(abs(table[metric, p]["predicted"] - truth) / truth, tolerance)

    def test_kv_rules_matter(self):
        """Without a KV limit nothing waits: TTFT comes out more than 90% short (formats.md: the run is
        heavily overloaded); the rows are in the documented order."""
        rows = self.numbers["ablation"]
        self.assertEqual([row["replay"].split(",")[0] for row in rows],
                         ["no KV limit (ample blocks)", "KV limit", "KV limit + recompute preemption",
                          "KV limit + preemption + fitted step time"])
        self.assertLess(rows[0]["errors"]["ttft"]["50"], -0.9)
        self.assertEqual(rows[0]["preemptions"], 0)
        self.assertEqual(rows[1]["preemptions"], 0)
        # Reserving whole sequences admits fewer requests than vLLM's rules, so everyone waits longer.
        self.assertGreater(rows[1]["errors"]["ttft"]["50"], rows[2]["errors"]["ttft"]["50"])
        self.assertGreater(rows[1]["errors"]["e2e"]["95"], rows[2]["errors"]["e2e"]["95"])
        self.assertGreater(rows[2]["preemptions"], 0)

    def test_step_model_and_honesty(self):
        model = json.loads(read(os.path.join(self.out, "step-model.json")))
        self.assertEqual(model["settings"]["num_gpu_blocks"], 2588)
        self.assertEqual(model["fitted_on"]["device"], "NVIDIA GeForce RTX 4090")
        self.assertTrue(all(model["step_ms"][k] >= 0 for k in "abc"))
        assert_said_as_unidentified(self, model, self.stdout)
        for phrase in ("RTX 4090", "run-to-run variance", "async scheduling", "share prefixes"):
            with self.subTest(phrase):
                self.assertIn(phrase, self.stdout)
        # No timeseries.csv beside the truncated run (the real one covers all 300 requests): not compared.
        self.assertIsNone(self.numbers["counts"])
        self.assertIn("no timeseries.csv beside the run", self.stdout)

    def test_workload_names_and_arrivals(self):
        """name = request_id; bench-1 arrives 0.386902 s after bench-0 on the monotonic clock -> 387 ms."""
        workload = json.loads(read(os.path.join(self.out, "workload.json")))
        self.assertEqual(workload["tick_ms"], 1.0)
        first, second = workload["requests"][:2]
        self.assertEqual((first["name"], first["arrival"], second["name"], second["arrival"]),
                         ("bench-0", 0, "bench-1", 387))

    @full_only("the printed 'predict with' command run after a whole calibration")
    def test_run_with_the_step_model_reproduces_the_prediction(self):
        """The run command given workload.json and step-model.json replays the same steps: its
        held-out TTFT and E2E percentiles (ms fields of requests.jsonl) equal calibrate's."""
        directory = temp_dir(self)
        out = os.path.join(directory, "run")
        code, stdout, err = run_cli(["--engine", "vllm", "--workload", os.path.join(self.out, "workload.json"),
                                     "--step-model", os.path.join(self.out, "step-model.json"), "--artifacts", out])
        self.assertEqual(code, 0, err)
        self.assertEqual(err, "")
        self.assertIn("(times in ms; arrivals = arrival x 1 ms", stdout)
        self.assertIn("fitted on one run of meta-llama/Llama-3.1-8B on NVIDIA GeForce RTX 4090", stdout)
        lines = [json.loads(line) for line in read(os.path.join(out, "requests.jsonl")).splitlines()]
        held = lines[30:]
        table = self.table()
        for metric in ("ttft", "e2e"):
            for p in (50, 95):
                with self.subTest(metric=metric, p=p):
                    self.assertAlmostEqual(nearest_rank([r[metric + "_ms"] for r in held], p),
                                           table[metric, p]["predicted"], places=2)
        first = lines[0]
        self.assertAlmostEqual(first["ttft_ms"], first["ttft"] / 1000, places=3)
        self.assertEqual(len(first["token_times_ms"]), first["output_tokens"])
        summary = json.loads(read(os.path.join(out, "summary.json")))
        self.assertEqual(summary["time_unit"], "ms")
        manifest = json.loads(read(os.path.join(out, "manifest.json")))
        self.assertEqual(manifest["step_model"]["overridden"], [])
        code, story, err = run_cli(["explain", "bench-40", "--artifacts", out])
        self.assertEqual(code, 0, err)
        self.assertNotIn("tick", story.replace("--timeline", ""))   # a step-model run is told in ms
        row = lines[40]
        self.assertIn(f"(TTFT {row['ttft_ms']:g} ms)", story)

    @full_only("two more step-model runs: an overridden setting and policy are said")
    def test_explicit_flag_overrides_and_is_said(self):
        directory = temp_dir(self)
        code, stdout, err = run_cli(["--engine", "vllm", "--workload", os.path.join(self.out, "workload.json"),
                                     "--step-model", os.path.join(self.out, "step-model.json"),
                                     "--num-gpu-blocks", "5000", "--artifacts", os.path.join(directory, "r")])
        self.assertEqual(code, 0, err)
        self.assertIn("--num-gpu-blocks 5000 (fitted with 2588)", err)
        self.assertIn("overridden: --num-gpu-blocks 5000", stdout)
        manifest = json.loads(read(os.path.join(directory, "r", "manifest.json")))
        self.assertEqual(manifest["config"]["num_gpu_blocks"], 5000)
        code, stdout, err = run_cli(["--engine", "vllm", "--workload", os.path.join(self.out, "workload.json"),
                                     "--step-model", os.path.join(self.out, "step-model.json"),
                                     "--scheduling-policy=priority"])
        self.assertEqual(code, 0, err)
        self.assertIn("--policy priority (fitted with fcfs)", err)
        self.assertTrue(any("extrapolated" in line for line in manifest["step_model"]["limits"]))


class BadInputTest(unittest.TestCase):
    def test_bad_calibrate_inputs(self):
        base = small_run(self, 20)
        run = os.path.join(base, "requests.jsonl")
        lines = raw_lines(20)
        missing = os.path.join(base, "missing")
        os.makedirs(missing)
        shutil.copy(os.path.join(base, "meta.json"), missing)
        with open(os.path.join(missing, "requests.jsonl"), "w", encoding="utf-8") as out:
            out.writelines(json.dumps({k: v for k, v in r.items() if k != "first_token_ts" or i != 3}) + "\n"
                           for i, r in enumerate(lines))
        wrong_meta = os.path.join(base, "wrong-meta.json")
        with open(os.path.join(RUN_DIR, "meta.json"), encoding="utf-8") as handle:
            meta = json.load(handle)   # says 300 requests: the 20-line run contradicts it
        with open(wrong_meta, "w", encoding="utf-8") as out:
            json.dump(meta, out)
        out_dir = os.path.join(base, "out")
        cases = {
            "N = 0": (["calibrate", run, "--train-first", "0", "--out", out_dir], "between 1 and 20"),
            "N = requests + 1": (["calibrate", run, "--train-first", "21", "--out", out_dir], "between 1 and 20"),
            "not a number": (["calibrate", run, "--train-first", "x", "--out", out_dir], "--train-first"),
            "no first token": (["calibrate", os.path.join(missing, "requests.jsonl"), "--train-first", "5", "--out",
                                out_dir], "did not finish"),
            "meta contradicts the run": (["calibrate", run, "--meta", wrong_meta, "--train-first", "5", "--out",
                                          out_dir], "'num_requests'"),
            "no such run": (["calibrate", os.path.join(base, "nope.jsonl"), "--train-first", "5", "--out", out_dir],
                            "nope.jsonl"),
        }
        for name, (argv, mention) in cases.items():
            with self.subTest(name):
                assert_bad_input(self, argv, mention)
        self.assertFalse(os.path.exists(out_dir))

    def test_bad_step_model_runs(self):
        base = temp_dir(self)
        model = {"kind": "step-model", "engine": "lab", "step_ms": {"a": 1, "b": 0, "c": 0}, "settings": {}}
        other = os.path.join(base, "other.json")
        with open(other, "w", encoding="utf-8") as out:
            json.dump(model, out)
        cases = {
            "another engine": (["--engine", "vllm", "--step-model", other], "'engine'"),
            "lab engine": (["--step-model", other], "--step-model needs --engine vllm"),
            "no such file": (["--engine", "vllm", "--step-model", os.path.join(base, "none.json")], "none.json"),
            "deadline": (["--engine", "vllm", "--step-model", os.path.join(base, "none.json"), "--timeout-ticks", "5"],
                         "--timeout-ticks"),
        }
        for name, (argv, mention) in cases.items():
            with self.subTest(name):
                assert_bad_input(self, argv, mention)


class BenchFormatTest(unittest.TestCase):
    def test_vllm_bench_result_with_settings_in_its_metadata(self):
        """A ``vllm bench serve --save-detailed`` object (formats.md) whose ``--metadata`` pairs (strings)
        name the engine settings. r0 sent at 10.0 s, TTFT 0.05 s, 4 gaps of 0.03 s -> E2E 170 ms;
        r2 sent at 10.3 s -> arrival 300 ms."""
        run = {"backend": "vllm", "model_id": "m", "num_prompts": 3, "vllm_version": "0.19.0",
               "input_lens": [100, 200, 50], "output_lens": [5, 6, 7], "start_times": [10.0, 10.1, 10.3],
               "ttfts": [0.05, 0.06, 0.07], "itls": [[0.03] * 4, [0.03] * 5, [0.03] * 6],
               "errors": ["", "", ""], "generated_texts": ["", "", ""],
               "num_gpu_blocks": "100", "block_size": "16", "max_num_seqs": "8", "max_num_batched_tokens": "256",
               "enable_prefix_caching": "false", "scheduling_policy": "fcfs"}
        base = temp_dir(self)
        path = os.path.join(base, "bench.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(run, out)
        code, stdout, err = run_cli(["calibrate", path, "--train-first", "2", "--out", os.path.join(base, "cal")])
        self.assertEqual(code, 0, err)
        self.assertIn("long_prefill_token_threshold not in bench.json: vLLM's default 0 assumed", stdout)
        table = {(r["metric"], r["p"]): r
                 for r in json.loads(read(os.path.join(base, "cal", "calibration.json")))["training_table"]}
        self.assertAlmostEqual(table["e2e", 99]["measured"], 210.0, places=3)   # r1: 60 + 5 x 30 ms
        workload = json.loads(read(os.path.join(base, "cal", "workload.json")))["requests"]
        self.assertEqual([r["arrival"] for r in workload], [0, 100, 300])
        del run["num_gpu_blocks"]
        with open(path, "w", encoding="utf-8") as out:
            json.dump(run, out)
        assert_bad_input(self, ["calibrate", path, "--train-first", "2", "--out", os.path.join(base, "c2")],
                         "'num_gpu_blocks': missing: the replay needs the engine's num_gpu_blocks (give it with "
                         "--num-gpu-blocks, or derive it as vLLM sizes it with --kv-bytes-per-token")
        # Issue 18: the setting given with vLLM's flag name completes the file, is said and is recorded.
        code, stdout, err = run_cli(["calibrate", path, "--train-first", "2", "--num-gpu-blocks", "120",
                                     "--max-num-seqs", "4", "--out", os.path.join(base, "c3")])
        self.assertEqual(code, 0, err)
        self.assertIn("num_gpu_blocks 120 from --num-gpu-blocks 120 (bench.json does not say)", stdout)
        self.assertIn("max_num_seqs 4 from --max-num-seqs 4, which wins over bench.json's 8", stdout)
        settings = json.loads(read(os.path.join(base, "c3", "step-model.json")))["settings"]
        self.assertEqual((settings["num_gpu_blocks"], settings["max_num_seqs"]), (120, 4))


@unittest.skipUnless(os.environ.get("ISL_CALIBRATION_FULL"), "set ISL_CALIBRATION_FULL=1 (replays 300 requests)")
class FullTargetTest(unittest.TestCase):
    def test_held_out_150_within_10_percent(self):
        """Issue 10, item 3: fitted on the first 150, P50 and P95 of TTFT and E2E of the last 150 within 10%."""
        out = os.path.join(temp_dir(self), "cal")
        code, _, err = run_cli(["calibrate", RUN, "--train-first", "150", "--out", out])
        self.assertEqual(code, 0, err)
        table = {(r["metric"], r["p"]): r for r in json.loads(read(os.path.join(out, "calibration.json")))["held_out_table"]}
        held = raw_lines()[150:]
        for metric, field in (("ttft", "first_token_ts"), ("e2e", "last_token_ts")):
            values = [(r[field] - r["queued_ts"]) * 1000 for r in held]
            for p in (50, 95):
                with self.subTest(metric=metric, p=p):
                    truth = nearest_rank(values, p)
                    self.assertLess(abs(table[metric, p]["predicted"] - truth) / truth, 0.10)


if __name__ == "__main__":
    unittest.main()
