"""Step-time model (vllm-engine.md §6), the fit's arithmetic and the error tables: no engine needed.

Expected values are computed by hand in each docstring.
"""

import json
import math
import os
import unittest

from sched.timing.calibrate import load_real_run, run_workload, training_split
from sched.timing.calibration_report import counts_error, percentile_table, relative_error
from sched.base.cmdline import InputError
from sched.timing.fit import FrozenSchedule, Step, log_loss, nelder_mead
from sched.timing.stepmodel import StepModel, load_step_model, parse_step_model, step_model_to_json
from tests.helpers import PROJECT, temp_dir

RUN_DIR = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090-run")
RUN = os.path.join(RUN_DIR, "requests.jsonl")
SETTINGS = {"num_gpu_blocks": 2588, "block_size": 16, "max_num_batched_tokens": 2048, "max_num_seqs": 256,
            "long_prefill_token_threshold": 0, "enable_prefix_caching": True, "policy": "fcfs"}


def model_document(**changes):
    document = json.loads(step_model_to_json(StepModel(20.0, 0.1, 0.05, dict(SETTINGS), {"model": "m"})))
    document.update(changes)
    return document


class StepModelTest(unittest.TestCase):
    def test_step_time(self):
        """20 + 0.1 x 100 prompt + 0.05 x 40 decode = 32 ms = 32000 µs; an empty model step is at least 1 µs."""
        model = StepModel(20.0, 0.1, 0.05, dict(SETTINGS), {})
        self.assertAlmostEqual(model.step_ms(100, 40), 32.0)
        self.assertEqual(model.step_us(100, 40), 32000)
        self.assertEqual(StepModel(0.0, 0.0, 1e-9, dict(SETTINGS), {}).step_us(0, 1), 1)

    def test_round_trip(self):
        text = step_model_to_json(StepModel(20.5, 0.125, 0.0625, dict(SETTINGS),
                                            {"model": "meta-llama/Llama-3.1-8B", "async_scheduling": True}))
        model = parse_step_model(text, "step-model.json")
        self.assertEqual((model.a_ms, model.b_ms, model.c_ms), (20.5, 0.125, 0.0625))
        self.assertEqual(model.settings, SETTINGS)
        document = json.loads(text)
        self.assertEqual(document["engine"], "vllm")
        self.assertTrue(any("async scheduling" in line for line in document["limits"]))
        self.assertTrue(any("run-to-run variance" in line for line in document["limits"]))

    def test_bad_step_models(self):
        cases = {
            "another engine": (model_document(engine="lab"), "'engine'"),
            "not a step model": (model_document(kind="run"), "'kind'"),
            "negative": (model_document(step_ms={"a": -1, "b": 0, "c": 0}), "'step_ms.a'"),
            "all zero": (model_document(step_ms={"a": 0, "b": 0, "c": 0}), "'step_ms.a': must be at least 0.001"),
            # a < 1 µs: every step at zero tokens would round to the clock's smallest unit, 1 µs
            "a below 1 µs, b = c = 0": (model_document(step_ms={"a": 1e-7, "b": 0, "c": 0}),
                                       "'step_ms.a': must be at least 0.001 ms"),
            "a 0 with b and c": (model_document(step_ms={"a": 0, "b": 0.1, "c": 0.05}), "'step_ms.a'"),
            "unknown coefficient": (model_document(step_ms={"a": 1, "b": 0, "c": 0, "e": 5}),
                                    "'step_ms.e': unknown field; valid fields are a, b, c, d"),
            "misspelt setting": (model_document(settings=dict(SETTINGS, block_sise=16)),
                                 "'settings.block_sise': unknown field; did you mean 'block_size'?"),
            "missing c": (model_document(step_ms={"a": 1, "b": 0}), "'step_ms.c'"),
            "bad policy": (model_document(settings=dict(SETTINGS, policy="lifo")), "'settings.policy'"),
            "one block": (model_document(settings=dict(SETTINGS, num_gpu_blocks=1)), "'settings.num_gpu_blocks'"),
            "no settings": (model_document(settings=None), "'settings'"),
        }
        for name, (document, mention) in cases.items():
            with self.subTest(name):
                with self.assertRaises(InputError) as caught:
                    parse_step_model(json.dumps(document), "sm.json")
                self.assertIn(mention, str(caught.exception))
                self.assertIn("sm.json", str(caught.exception))

    def test_non_finite_coefficients_are_named(self):
        """NaN or Infinity for a coefficient is "not finite", not "missing" (it is present)."""
        for literal in ("NaN", "Infinity", "1e999"):
            with self.subTest(literal):
                text = json.dumps(model_document(step_ms={"a": 1.5, "b": 0, "c": 0})).replace("1.5", literal)
                with self.assertRaises(InputError) as caught:
                    parse_step_model(text, "sm.json")
                message = str(caught.exception)
                self.assertIn("'step_ms.a': must be a finite number, got " + ("NaN" if literal == "NaN" else "Infinity"),
                              message)
                self.assertNotIn("missing", message)

    def test_a_file_with_a_bom_is_read(self):
        """A UTF-8 BOM (an editor's) before the JSON is accepted, as for workloads."""
        path = os.path.join(temp_dir(self), "sm.json")
        with open(path, "w", encoding="utf-8-sig") as handle:
            handle.write(step_model_to_json(StepModel(20.0, 0.1, 0.05, dict(SETTINGS), {})))
        self.assertEqual(load_step_model(path).a_ms, 20.0)


class FitArithmeticTest(unittest.TestCase):
    def test_log_loss(self):
        """Twice too long and half too long cost ln 2 each; exact is 0."""
        self.assertAlmostEqual(log_loss([(2, 1), (1, 2)]), math.log(2))
        self.assertEqual(log_loss([(5, 5)]), 0.0)

    def test_frozen_schedule_is_linear_per_busy_period(self):
        """Steps: [0, 10) 100 prompt; [10, 15) 5 decode; idle; [50, 60) 2 decode.

        With a=1, b=0.01, c=2: step 0 ends 0 + 1 + 1 = 2; step 1 ends 0 + 2 + 1 + 10 = 13; step 2
        starts a new busy period at 50 (an arrival) and ends 50 + 1 + 4 = 55.
        """
        steps = [Step(0, 10, 100, 0), Step(10, 5, 0, 5), Step(50, 10, 0, 2)]
        frozen = FrozenSchedule(steps, [(0, 0, 1, 2, 13), (50, 2, 2, 5, 5)])
        self.assertEqual([frozen.end(i, 1, 0.01, 2) for i in range(3)], [2, 13, 55])
        self.assertAlmostEqual(frozen.loss((1, 0.01, 2)), 0.0)

    def test_nelder_mead_finds_a_minimum(self):
        """(x − 3)² + (y + 1)² + 2 has its minimum 2 at (3, −1)."""
        point, value = nelder_mead(lambda p: (p[0] - 3) ** 2 + (p[1] + 1) ** 2 + 2, [0.0, 0.0], [1.0, 1.0],
                                   iterations=500)
        self.assertAlmostEqual(point[0], 3, places=3)
        self.assertAlmostEqual(point[1], -1, places=3)
        self.assertAlmostEqual(value, 2, places=6)


class ReportArithmeticTest(unittest.TestCase):
    def test_percentile_table_by_nearest_rank(self):
        """TTFTs 1..20 measured, 2..40 (doubled) predicted: P50 = 10th value = 10 vs 20 (+100%),
        P95 = 19th = 19 vs 38; queue wait unknown for every request -> None, never 0."""
        names = [f"r{i}" for i in range(1, 21)]
        measured = {n: {"ttft": i, "e2e": 10 * i, "queue_wait": None, "tpot": 1.0} for i, n in enumerate(names, 1)}
        predicted = {n: {"ttft": 2 * i, "e2e": 10 * i, "queue_wait": 0, "tpot": 1.0} for i, n in enumerate(names, 1)}
        rows = {(r["metric"], r["p"]): r for r in percentile_table(measured, predicted, names)}
        self.assertEqual((rows["ttft", 50]["measured"], rows["ttft", 50]["predicted"]), (10, 20))
        self.assertEqual(rows["ttft", 50]["error"], 1.0)
        self.assertEqual((rows["ttft", 95]["measured"], rows["ttft", 95]["predicted"]), (19, 38))
        self.assertEqual(rows["e2e", 99]["error"], 0.0)
        self.assertIsNone(rows["queue_wait", 50]["measured"])
        self.assertIsNone(rows["queue_wait", 50]["error"])
        self.assertAlmostEqual(relative_error(110, 100), 0.1)

    def test_counts_error(self):
        """Steps [0, 500) 2 running 1 waiting and [500, 2500) 3 running 0 waiting: at t = 1 s the
        replay has 3/0 (measured 4/0: off by 1); at t = 3 s it is idle 0/0 (measured 1/1: off 1 and 1)."""
        samples = [(0, 500, 2, 1), (500, 2500, 3, 0)]
        result = counts_error(samples, [(1.0, 4, 0), (3.0, 1, 1)])
        self.assertEqual((result["running_mae"], result["waiting_mae"]), (1.0, 0.5))
        self.assertEqual((result["running_mean"], result["waiting_mean"]), (2.5, 0.5))
        self.assertIsNone(counts_error(samples, None))


class RealRunTest(unittest.TestCase):
    def test_reads_the_run_and_its_settings(self):
        """Settings from meta.json (formats.md: 2,588 blocks of 16 tokens); arrivals in whole ms of the
        monotonic clock: bench-1 was queued 27537.047603549 − 27536.660701067 = 0.386902 s after bench-0."""
        run = load_real_run(RUN)
        # meta.json's resolved scheduler_config.async_scheduling is true: the run's mode is replayed.
        self.assertEqual(run.settings, dict(SETTINGS, async_scheduling=True))
        self.assertEqual(run.fitted_on["device"], "NVIDIA GeForce RTX 4090")
        self.assertIs(run.fitted_on["async_scheduling"], True)
        specs = run_workload(run)
        self.assertEqual(len(specs), 300)
        self.assertEqual((specs[0].name, specs[0].arrival, specs[0].prompt_tokens, specs[0].output_tokens),
                         ("bench-0", 0, 2358, 531))
        self.assertEqual((specs[1].name, specs[1].arrival), ("bench-1", 387))
        self.assertEqual(len(run.timeseries), 184)
        train, held_out = training_split(run, 150, RUN)
        self.assertEqual((train[-1], held_out[0], len(held_out)), ("bench-149", "bench-150", 150))

    def test_bad_runs(self):
        base = temp_dir(self)
        with open(RUN, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        with open(os.path.join(RUN_DIR, "meta.json"), encoding="utf-8") as handle:
            meta = json.load(handle)

        def write(name, run_lines, meta_doc):
            directory = os.path.join(base, name)
            os.makedirs(directory)
            with open(os.path.join(directory, "requests.jsonl"), "w", encoding="utf-8") as out:
                out.write("\n".join(run_lines) + "\n")
            if meta_doc is not None:
                with open(os.path.join(directory, "meta.json"), "w", encoding="utf-8") as out:
                    json.dump(meta_doc, out)
            return os.path.join(directory, "requests.jsonl")

        unfinished = json.loads(lines[5])
        del unfinished["last_token_ts"]
        blocks = json.loads(json.dumps(meta))
        blocks["kv_cache"]["num_gpu_blocks"] = 100
        seqs = json.loads(json.dumps(meta))
        seqs["engine_kwargs"]["max_num_seqs"] = 128
        no_blocks = json.loads(json.dumps(meta))
        del no_blocks["kv_cache"]["num_gpu_blocks"]
        del no_blocks["resolved_config"]["cache_config"]["num_gpu_blocks"]
        del no_blocks["kv_cache"]["num_kv_tokens"]   # with it the KV size is known: tokens / block_size
        tokens = json.loads(json.dumps(meta))
        tokens["kv_cache"]["num_kv_tokens"] = 1
        cases = {
            "no meta": (lines, None, "no meta.json"),
            "fewer requests than meta says": (lines[:20], meta, "'num_requests'"),
            "unfinished request": (lines[:5] + [json.dumps(unfinished)] + lines[6:], meta, "did not finish"),
            "two block counts": (lines, blocks, "contradicts"),
            "two slot counts": (lines, seqs, "'resolved_config.scheduler_config.max_num_seqs'"),
            "blocks unknown": (lines, no_blocks, "'num_gpu_blocks': missing"),
            "kv tokens": (lines, tokens, "'kv_cache.num_kv_tokens'"),
            "duplicate id": (lines[:4] + [lines[3]] + lines[5:], meta, "already names request 3"),
        }
        for name, (run_lines, meta_doc, mention) in cases.items():
            with self.subTest(name):
                path = write(name.replace(" ", "-"), run_lines, meta_doc)
                with self.assertRaises(InputError) as caught:
                    load_real_run(path)
                self.assertIn(mention, str(caught.exception))

    def test_train_first_range(self):
        run = load_real_run(RUN)
        for bad in (0, 301, -1, 1000):
            with self.subTest(bad):
                with self.assertRaises(InputError) as caught:
                    training_split(run, bad, "run.jsonl")
                self.assertIn("between 1 and 300", str(caught.exception))
        self.assertEqual(len(training_split(run, 299, "run.jsonl")[1]), 1)
        # Issue 18: --train-first may name every request (N = requests, or all = None): nothing held out.
        self.assertEqual(training_split(run, 300, "run.jsonl")[1], [])
        self.assertEqual(len(training_split(run, None, "run.jsonl")[0]), 300)


if __name__ == "__main__":
    unittest.main()
