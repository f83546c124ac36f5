"""``plan``: the capacity search per setting (sched.planning), its files and its refusals.

The search is checked first on hand-made attainment curves (``evaluate`` replaced): a curve that
passes up to 2 req/s must give an answer in [2 / 1.01, 2] and a monotone verdict; a curve with a
passing island just above the answer must be reported non-monotone. Then end to end on a small
workload with a hand-written step model: re-running the reported setting at ``max_request_rate``
through the normal run command meets the SLO, and at ``max_request_rate × (1 + 2·resolution)`` it
does not (or the plan said non-monotone).
"""

import json
import os
import unittest
from unittest import mock

from sched.planning import search
from tests.helpers import assert_bad_input, full_only, read, run_cli, temp_dir

STEP_MODEL = {"kind": "step-model", "engine": "vllm", "step_ms": {"a": 5.0, "b": 0.05, "c": 0.5},
              "settings": {"num_gpu_blocks": 200, "block_size": 16, "max_num_batched_tokens": 512, "max_num_seqs": 8,
                           "long_prefill_token_threshold": 0, "enable_prefix_caching": False, "policy": "fcfs"},
              "fitted_on": {"model": "a hand-written model", "device": "GPU-X"}}


def plan_inputs(base, requests=40, prompt=100, output=20, model=STEP_MODEL):
    """Write into ``base`` a workload of ``requests`` requests arriving at 0 (request i: ``prompt``
    + 37·(i mod 5) prompt tokens, ``output`` + 11·(i mod 4) output tokens) and the step model
    ``model``; returns their paths ``(w.json, m.json)``."""
    workload, model_path = os.path.join(base, "w.json"), os.path.join(base, "m.json")
    with open(workload, "w", encoding="utf-8") as out:
        json.dump({"requests": [{"name": f"r{i}", "arrival": 0, "prefix_key": None, "prefix_tokens": 0,
                                 "suffix_tokens": prompt + 37 * (i % 5), "output_tokens": output + 11 * (i % 4)}
                                for i in range(requests)]}, out)
    with open(model_path, "w", encoding="utf-8") as out:
        json.dump(model, out)
    return workload, model_path


def curve(passes):
    """A stand-in for one run: attainment 1 where ``passes(rate)``, else 0.5; capacity 3 req/s (the
    run itself: its rate)."""
    def probe(workload, knobs, model, rate, goodput, burstiness, seed, max_concurrency=None):
        return {"slo_attainment": 1.0 if passes(rate) else 0.5, "request_throughput": 3.0, "request_rate": rate}, rate
    return probe


def reported(result, rate, goodput):
    """A stand-in for the metrics of a reported point: its run (the rate, above) must be the rate's."""
    assert result == rate
    return {"request_rate": rate, "reported": True}


class SearchTest(unittest.TestCase):
    def find(self, passes, resolution=0.01, requests=()):
        with mock.patch.object(search, "probe", curve(passes)), mock.patch.object(search, "point_metrics", reported), \
                mock.patch.object(search, "peak_running", lambda result: None):
            return search.find_capacity(list(requests), None, None, {"ttft": 1}, 0.9, resolution, 1.0, 0, 0.01,
                                        1000.0)

    def test_a_monotone_curve(self):
        result = self.find(lambda r: r <= 2.0)
        self.assertLessEqual(result["max_request_rate"], 2.0)
        self.assertGreaterEqual(result["max_request_rate"], 2.0 / 1.01)
        self.assertFalse(result["non_monotone"])
        self.assertEqual(result["points"][0], ["inf", 0.5])   # rate inf first
        self.assertEqual(result["metrics"], {"request_rate": result["max_request_rate"], "reported": True})
        self.assertEqual(result["check"]["request_rate"], result["max_request_rate"] * 1.02)

    def test_an_island_above_the_answer_is_reported(self):
        """Fails above 2 req/s but passes again from 2.019 to 2.045. Whatever the probes, either the
        answer is in [2 / 1.01, 2] and its check point (answer × 1.02, within [2.0198, 2.04]) lands on
        the island, or a probe landed there (then a failing rate below the answer betrays it)."""
        result = self.find(lambda r: r <= 2.0 or 2.019 < r < 2.045)
        self.assertTrue(result["non_monotone"])

    def test_no_probe_below_what_a_workload_file_holds(self):
        """2,000 requests: a rate below 2 req/s would send the last one after 1,000 s, past the
        arrivals a workload.json may hold (its reproducing command would be refused), so a setting
        that never meets the SLO stops at 2 req/s, not at --min-rate 0.01."""
        low = self.find(lambda r: False, requests=[None] * 2000)
        self.assertEqual(low["bound"], "arrival_span")
        self.assertEqual(min(r for r, _ in low["points"] if r != "inf"), 2.0)

    def test_bounds(self):
        self.assertEqual(self.find(lambda r: True)["max_request_rate"], "inf")
        low = self.find(lambda r: False)
        self.assertIsNone(low["max_request_rate"])
        self.assertEqual(low["bound"], "min_rate")


class ProbeTest(unittest.TestCase):
    def test_the_probe_reads_what_the_full_metrics_say(self):
        """A probe scores only the headline keys; they are the full evaluation's, to the bit, and the
        kept run gives the full metrics again."""
        from sched.timing.stepmodel import StepModel
        from sched.vllm.config import VllmKnobs
        from sched.workload.specs import RequestSpec
        specs = [RequestSpec(name=f"r{i}", arrival=0, prefix_key=None, prefix_tokens=0,
                             suffix_tokens=100 + 37 * (i % 5), output_tokens=20 + 11 * (i % 4)) for i in range(40)]
        model = StepModel(5.0, 0.05, 0.5, dict(STEP_MODEL["settings"]), {"device": "GPU-X"})
        knobs = VllmKnobs(num_gpu_blocks=200, max_num_batched_tokens=512, max_num_seqs=8)
        for rate, meets in ((float("inf"), False), (20.0, True)):   # 40 requests at once miss ttft:300; 20 req/s meets it
            full = search.evaluate(specs, knobs, model, rate, {"ttft": 300.0}, 1.0, 0)
            row, result = search.probe(specs, knobs, model, rate, {"ttft": 300.0}, 1.0, 0)
            self.assertEqual(set(row), {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                                        "request_throughput", "request_goodput", "output_throughput",
                                        "total_token_throughput", "slo_attainment", "request_rate"})
            self.assertEqual(row, {key: full[key] for key in row})
            self.assertEqual(search.point_metrics(result, rate, {"ttft": 300.0}), full)
            self.assertEqual(row["slo_attainment"] >= 0.9, meets)


class PlanCommandTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.workload, self.model = plan_inputs(self.base)

    def plan(self, *extra):
        out_dir = os.path.join(self.base, "plan")
        code, out, err = run_cli(["plan", "--workload", self.workload, "--step-model", self.model, "--goodput",
                                  "ttft:300", "--workers", "1", "--out", out_dir, *extra])
        self.assertEqual(code, 0, err)
        return json.loads(read(os.path.join(out_dir, "plan.json"))), out, out_dir

    def rerun(self, config, rate):
        settings = config["searched"]
        words = []
        for field, value in settings.items():
            words += ["--policy", value] if field == "policy" else [f"--{field.replace('_', '-')}", str(value)]
        target = os.path.join(self.base, f"rerun{len(os.listdir(self.base))}")
        code, _, err = run_cli(["--engine", "vllm", "--workload", self.workload, "--step-model", self.model, *words,
                                "--request-rate", repr(rate), "--goodput", "ttft:300", "--artifacts", target])
        self.assertEqual(code, 0, err)
        return json.loads(read(os.path.join(target, "summary.json")))["cases"][0]["slo_attainment"]

    def test_the_answer_is_a_true_boundary(self):
        doc, out, out_dir = self.plan("--max-num-seqs", "2,8", "--attainment", "0.9")
        self.assertEqual({"configs", "seed", "burstiness", "resolution", "recommendation"} - set(doc), set())
        rates = [c["max_request_rate"] for c in doc["configs"]]
        self.assertEqual(len(rates), 2)
        for config in doc["configs"]:
            with self.subTest(settings=config["searched"]):
                self.assertEqual(config["settings"]["max_num_seqs"], config["searched"]["max_num_seqs"])
                self.assertEqual(config["resolution"], 0.01)
                rate = config["max_request_rate"]
                self.assertIsInstance(rate, float)
                self.assertGreaterEqual(self.rerun(config, rate), 0.9)
                self.assertAlmostEqual(self.rerun(config, rate), config["metrics"]["slo_attainment"], places=12)
                if not config["non_monotone"]:
                    self.assertLess(self.rerun(config, rate * 1.02), 0.9)
                self.assertIn("--request-rate", config["command"])
        listed = [line.split()[3] for line in out.splitlines()[1:3]]
        self.assertEqual(listed, sorted(listed, key=float, reverse=True))   # table sorted by rate
        self.assertTrue(read(os.path.join(out_dir, "pareto.svg")).startswith("<svg"))
        self.assertIn("recommendation:", out)

    def test_recommendation_line_reads_as_flags_and_rounded_rates(self):
        doc, out, out_dir = self.plan("--max-num-seqs", "2,8", "--num-gpu-blocks", "64")
        rec = doc["recommendation"]
        line = next(line for line in out.splitlines() if line.startswith("recommendation:"))
        blocks = rec["settings"]["num_gpu_blocks"]
        self.assertEqual(blocks, 64)
        flags = f"--max-num-seqs {rec['settings']['max_num_seqs']} --num-gpu-blocks 64"
        evidence = rec["evidence"]
        # three decimals, as the table's "max req/s" and "attain" columns
        self.assertTrue(line.startswith(
            f"recommendation: {rec['gpu']} {flags} at up to {rec['max_request_rate']:.3f} req/s (attainment "
            f"{evidence['slo_attainment_at_rate']:.3f}, and {evidence['slo_attainment_above']:.3f} at "
            f"{evidence['rate_above']:.3f} req/s)"), line)
        self.assertNotIn("{", line)
        self.assertIn(line + "\n", read(os.path.join(out_dir, "plan.txt")))
        # plan.json and the reproduce command keep the full rate (the command must replay the same arrivals)
        self.assertNotEqual(round(rec["max_request_rate"], 3), rec["max_request_rate"])
        self.assertIn(f"--request-rate {rec['max_request_rate']!r}", rec["command"])
        self.assertIn(f"reproduce: {rec['command']}", out)

    def test_bad_input_writes_nothing(self):
        out_dir = os.path.join(self.base, "never")
        base = ["plan", "--workload", self.workload, "--step-model", self.model, "--out", out_dir]
        for extra, mention in ((["--goodput", "itl:5"], "unknown SLO"), (["--goodput", "ttft:-1"], ">= 0"),
                               (["--goodput", "ttft:1", "--attainment", "0"], "(0, 1]"),
                               (["--goodput", "ttft:1", "--attainment", "1.5"], "(0, 1]"),
                               (["--goodput", "ttft:1", "--min-rate", "5", "--max-rate", "1"], "contradict"),
                               (["--goodput", "ttft:1", "--max-num-seqs", "64", "--max-num-batched-tokens", "32"],
                                "below --max-num-seqs"),
                               (["--goodput", "ttft:1", "--max-num-seqs", "8,8"], "given twice"),
                               (["--goodput", "ttft:1", "--policy", "fcfs,lifo"], "--policy"),
                               (["--goodput", "ttft:1", "--max-rate", "inf"], "--max-rate")):
            with self.subTest(extra=extra):
                assert_bad_input(self, base + extra, mention)
                self.assertFalse(os.path.exists(out_dir))
        assert_bad_input(self, ["plan", "--workload", self.workload, "--goodput", "ttft:1"], "--step-model")


class FrontierTest(unittest.TestCase):
    def test_pareto_points_by_hand(self):
        """Lower P95 TTFT and higher goodput are better: (3, 1.5) loses to (2, 2); (1, 1) and (2, 2) stay.
        With larger x better (tokens/s per user) (3, 1.5) joins (2, 2), and (1, 1) drops out."""
        from sched.planning.pareto import frontier
        points = [(1.0, 1.0), (2.0, 2.0), (3.0, 1.5)]
        self.assertEqual(frontier(points, larger_x_better=False), [0, 1])
        self.assertEqual(frontier(points, larger_x_better=True), [1, 2])


class InterruptTest(unittest.TestCase):
    @full_only("Ctrl-C during a plan: a real process interrupted")
    def test_ctrl_c_leaves_nothing_half_written(self):
        """SIGINT a second and a half into a long plan (5,000 requests: well over ten seconds of
        searching; 300 once were, until the engine got faster): exit 130, no plan directory, no worker
        left behind."""
        import signal
        import subprocess
        import sys
        import time
        from tests.helpers import PROJECT
        base = temp_dir(self)
        workload, model = plan_inputs(base, requests=5000, prompt=300, output=200)
        out_dir = os.path.join(base, "plan")
        process = subprocess.Popen([sys.executable, os.path.join(PROJECT, "infer_sched_lab.py"), "plan", "--workload",
                                    workload, "--step-model", model, "--goodput", "ttft:300", "--max-num-seqs",
                                    "1,2,3,4,5,6,7,8", "--workers", "2", "--out", out_dir],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 130, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertFalse(os.path.exists(out_dir))
        self.assertEqual(sorted(os.listdir(base)), ["m.json", "w.json"])   # no staging directory left either


class PlanGpuTest(unittest.TestCase):
    """``--gpu``: each step model is also carried to the named GPUs (a kept, b and c scaled by the
    data sheets' BF16 FLOP/s): the H100's prompt tokens cost 165.2 / 989.4 of the RTX 4090's, so its
    capacity under the same SLO is at least as high, and its command reruns the point with ``--gpu``."""

    def test_one_row_per_gpu(self):
        base = temp_dir(self)
        workload, model = plan_inputs(base, prompt=400, model=dict(
            STEP_MODEL, fitted_on={"model": "hand-written", "device": "NVIDIA GeForce RTX 4090"}))
        out_dir = os.path.join(base, "plan")
        code, out, err = run_cli(["plan", "--workload", workload, "--step-model", model, "--gpu", "H100 SXM",
                                  "--goodput", "ttft:300", "--workers", "1", "--out", out_dir])
        self.assertEqual(code, 0, err)
        configs = json.loads(read(os.path.join(out_dir, "plan.json")))["configs"]
        by_gpu = {c["gpu"]: c for c in configs}
        self.assertEqual(set(by_gpu), {"NVIDIA GeForce RTX 4090", "H100 SXM"})
        h100, rtx = by_gpu["H100 SXM"], by_gpu["NVIDIA GeForce RTX 4090"]
        self.assertIn("--gpu 'H100 SXM'", h100["command"])
        self.assertNotIn("--gpu", rtx["command"])
        self.assertIsInstance(h100["max_request_rate"], float)
        self.assertGreaterEqual(h100["max_request_rate"], rtx["max_request_rate"])
        target = os.path.join(base, "rerun")
        code, _, err = run_cli(["--engine", "vllm", "--workload", workload, "--step-model", model, "--gpu", "H100 SXM",
                                "--request-rate", repr(h100["max_request_rate"]), "--goodput", "ttft:300",
                                "--artifacts", target])
        self.assertEqual(code, 0, err)
        rerun = json.loads(read(os.path.join(target, "summary.json")))["cases"][0]["slo_attainment"]
        self.assertEqual(rerun, h100["metrics"]["slo_attainment"])
        assert_bad_input(self, ["plan", "--workload", workload, "--step-model", model, "--gpu", "H200 NVL",
                                "--goodput", "ttft:300", "--out", os.path.join(base, "never")], "--gpu")
        self.assertFalse(os.path.exists(os.path.join(base, "never")))


class PlanMemoryTest(unittest.TestCase):
    """``--gpu-memory-utilization`` sizes the KV cache as vLLM does, per GPU. By hand for the RTX 4090
    (24 GiB), "Llama-3.1-8B" (8e9 parameters x 2 bytes of weights) and 131,072 KV bytes per token,
    blocks of 16 tokens (2,097,152 bytes): 0.8 -> (0.8 x 24 x 2^30 - 16e9) / 2,097,152 = 2,201.0 -> 2,201;
    0.9 -> 3,429.8 -> 3,429."""

    def test_blocks_by_hand(self):
        base = temp_dir(self)
        workload, model = os.path.join(base, "w.json"), os.path.join(base, "m.json")
        with open(workload, "w", encoding="utf-8") as out:
            json.dump({"requests": [{"name": f"r{i}", "arrival": 0, "prefix_key": None, "prefix_tokens": 0,
                                     "suffix_tokens": 100, "output_tokens": 20} for i in range(10)]}, out)
        with open(model, "w", encoding="utf-8") as out:
            json.dump(dict(STEP_MODEL, fitted_on={"model": "meta-llama/Llama-3.1-8B",
                                                  "device": "NVIDIA GeForce RTX 4090"}), out)
        out_dir = os.path.join(base, "plan")
        args = ["plan", "--workload", workload, "--step-model", model, "--goodput", "ttft:300", "--workers", "1"]
        code, out, err = run_cli([*args, "--gpu-memory-utilization", "0.8,0.9", "--kv-bytes-per-token", "131072",
                                  "--out", out_dir])
        self.assertEqual(code, 0, err)
        configs = json.loads(read(os.path.join(out_dir, "plan.json")))["configs"]
        blocks = {c["searched"]["gpu_memory_utilization"]: c["settings"]["num_gpu_blocks"] for c in configs}
        self.assertEqual(blocks, {0.8: 2201, 0.9: 3429})
        self.assertTrue(all("--num-gpu-blocks" in c["command"] for c in configs))
        for extra, mention in ((["--gpu-memory-utilization", "0.9"], "--kv-bytes-per-token"),
                               (["--gpu-memory-utilization", "1.5", "--kv-bytes-per-token", "1"], "(0, 1]"),
                               (["--gpu-memory-utilization", "0.5", "--kv-bytes-per-token", "131072"], "no KV block"),
                               (["--gpu-memory-utilization", "0.9", "--kv-bytes-per-token", "1",
                                 "--num-gpu-blocks", "100"], "not both"),
                               (["--kv-bytes-per-token", "131072"], "--gpu-memory-utilization")):
            with self.subTest(extra=extra):
                assert_bad_input(self, [*args, *extra, "--out", os.path.join(base, "never")], mention)
                self.assertFalse(os.path.exists(os.path.join(base, "never")))
