"""Preemptions, KV blocks in use, running and waiting of a vLLM-engine run (sched.vllm.load_stats).

Expected values come from the oracle corpus (vLLM 0.33.0's own scheduler, tests/data/vllm-oracle):
its per-step ``kv_blocks_used`` (one tick per step, so the mean weighs each step once), its
``peak_kv_blocks_used`` and ``total_preemptions``; running and waiting by hand on one request.
"""

import csv
import io
import json
import os
import unittest

from sched.vllm.engine import simulate_vllm
from sched.vllm.load_stats import LOAD_FIELDS, load_summary
from tests.helpers import EXPECTED, read, run_cli, temp_dir
from tests.test_vllm_oracle import CORPUS, load_case

CASE = "prio-tight-kv-prio-kv29"   # two requests, 29 blocks: one preemption


def _entry(case_id: str) -> dict:
    with open(os.path.join(CORPUS, "MANIFEST.json"), encoding="utf-8") as handle:
        return next(e for e in json.load(handle)["cases"] if e["id"] == case_id)


class LoadStatsTest(unittest.TestCase):
    def test_against_the_oracle(self):
        workload, knobs, doc = load_case(_entry(CASE))
        row = load_summary(simulate_vllm(workload, knobs, timeline="full"))
        used = [step["kv_blocks_used"] for step in doc["steps"]]
        self.assertEqual(row["num_preemptions"], doc["summary"]["total_preemptions"])
        self.assertEqual(row["preempted_requests"], sum(1 for r in doc["requests"] if r["num_preemptions"]))
        self.assertEqual(row["peak_kv_blocks_used"], doc["summary"]["peak_kv_blocks_used"])
        self.assertAlmostEqual(row["mean_kv_blocks_used"], sum(used) / len(used), places=12)

    def test_counts_timeline_keeps_peaks_not_means(self):
        """A ``counts`` record that spans several steps keeps their largest value: the peak stays exact,
        the mean is unknown (None), never a guess."""
        workload, knobs, doc = load_case(_entry("azure-conv-100-s16"))
        full = load_summary(simulate_vllm(workload, knobs, timeline="full"))
        counts = load_summary(simulate_vllm(workload, knobs, timeline="counts"))
        self.assertEqual(full["peak_kv_blocks_used"], doc["summary"]["peak_kv_blocks_used"])
        for key in ("num_preemptions", "peak_kv_blocks_used", "peak_num_running", "peak_num_waiting"):
            self.assertEqual(counts[key], full[key], key)
        self.assertIsNone(counts["mean_kv_blocks_used"])
        off = load_summary(simulate_vllm(workload, knobs, timeline="off"))
        self.assertIsNone(off["peak_kv_blocks_used"])
        self.assertEqual(off["num_preemptions"], full["num_preemptions"])

    def test_one_request_runs_alone(self):
        """edge-single: one request, running in every step, nothing ever waiting after scheduling."""
        workload, knobs, _ = load_case(_entry("edge-single-t32"))
        row = load_summary(simulate_vllm(workload, knobs, timeline="full"))
        self.assertEqual((row["peak_num_running"], row["mean_num_running"]), (1, 1))
        self.assertEqual((row["peak_num_waiting"], row["mean_num_waiting"]), (0, 0))
        self.assertEqual(row["num_preemptions"], 0)


class LoadInArtifactsTest(unittest.TestCase):
    def test_summary_report_and_diff(self):
        base = temp_dir(self)
        runs = []
        for blocks in ("29", "41"):
            target = os.path.join(base, blocks)
            code, _, err = run_cli(["--engine", "vllm", "--workload", os.path.join(CORPUS, "workloads", "prio-tight-kv.json"),
                                    "--max-num-batched-tokens", "512", "--max-num-seqs", "8", "--policy", "priority",
                                    "--num-gpu-blocks", blocks, "--artifacts", target])
            self.assertEqual(code, 0, err)
            runs.append(target)
        summary = json.loads(read(os.path.join(runs[0], "summary.json")))
        row = summary["cases"][0]
        self.assertEqual((row["num_preemptions"], row["peak_kv_blocks_used"]), (1, 28))
        self.assertEqual(set(LOAD_FIELDS) - set(summary["field_units"]), set())
        header = next(csv.reader(io.StringIO(read(os.path.join(runs[0], "summary.csv")))))
        self.assertEqual(header[-len(LOAD_FIELDS):], list(LOAD_FIELDS))
        self.assertIn('data-field="peak_kv_blocks_used"', read(os.path.join(runs[0], "report.html")))
        code, out, err = run_cli(["diff", *runs])
        self.assertIn(code, (0, 1), err)
        self.assertIn("preemptions", out)
        self.assertIn("peak KV", out)
        # a tampered load count or vLLM bench value read back by diff and compare: one line, exit 2
        path = os.path.join(runs[1], "summary.json")
        clean = read(path)
        for key, value in (("num_preemptions", "x"), ("peak_kv_blocks_used", -1), ("num_preemptions", 1.5),
                           ("request_throughput", "abc"), ("slo_attainment", 5), ("std_ttft_ms", -2.0)):
            doc = json.loads(clean)
            doc["cases"][0][key] = value
            with open(path, "w", encoding="utf-8") as out_file:
                json.dump(doc, out_file)
            for argv in (["diff", *runs], ["compare", *runs, "--out", os.path.join(base, "decision")]):
                with self.subTest(key=key, value=value, command=argv[0]):
                    code, out, err = run_cli(argv)
                    self.assertEqual(code, 2, err)
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
                    self.assertIn(key, err)
                    self.assertFalse(os.path.exists(os.path.join(base, "decision")))

    def test_lab_runs_keep_their_golden_columns(self):
        header = read(os.path.join(EXPECTED, "baseline", "summary.csv")).splitlines()[0]
        self.assertNotIn("peak_kv_blocks_used", header)
