"""``serving-bench simulate``: the chapter's experiment on the lab's vLLM engine with a step model (serving-bench.md §4).

Hand computation with the default step model (step_ms = 24.527162 + 0.086245136·prompt, whole µs):
- priority group, run 0: h0 and h1 (prompts 32 + 48 = 80 tokens) are admitted in step 0 (max_num_seqs 2),
  which lasts 24.527162 + 6.8996 = 31.4268 ms → first token at 31.427 ms; then 15 decode steps of
  24.527 ms each → h0 ends at 31.427 + 15 · 24.527 = 399.332 ms.
- FCFS group: h0 and l0 (32 + 256 = 288 tokens) share step 0: 24.527162 + 24.8386 = 49.366 ms, a tie.
  First-token order over the 16 (urgent, low) pairs: h0 ties l0 (½) and beats l1–l3 (3); h1 beats
  l1–l3 (3); h2 beats l2, l3 (2); h3 beats l3 (1): 9.5 / 16 = 0.5938. Priority: every urgent first: 1.0.
"""

import json
import os
import unittest

from tests import serving_bench_reference as chapter
from tests.helpers import assert_bad_input, read, run_cli, temp_dir


class SimulateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.base = tempfile.mkdtemp(prefix="isl-test-")
        cls.out = os.path.join(cls.base, "sim")
        cls.code, cls.stdout, cls.err = run_cli(["serving-bench", "simulate", "--out-dir", cls.out])

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.base, ignore_errors=True)

    def group(self, name):
        return json.loads(read(os.path.join(self.out, name)))

    def test_files_in_the_chapters_shape_marked_simulated(self):
        self.assertEqual(self.code, 0, self.err)
        self.assertIn("SIMULATED, not a measurement", self.stdout)
        g0, g1 = self.group("g0_fcfs.json"), self.group("g1_priority.json")
        for data, policy, send in ((g0, "fcfs", False), (g1, "priority", True)):
            self.assertEqual((data["simulated"], data["evidence_level"], data["status"]),
                             (True, "simulated_scheduler_run", "ok"))
            ident = data["scheduler_identity"]
            self.assertEqual((ident["scheduler_policy"], ident["send_priority"], ident["concurrency"],
                              ident["max_num_seqs"], ident["synchronized_start"]), (policy, send, 8, 2, True))
            self.assertEqual((len(data["runs"]), data["metrics"]["successful_requests"]), (5, 8))
            self.assertEqual(sorted({r["priority"] for r in data["runs"][0]["results"]}), [0, 5])
            self.assertEqual(data["normalized_result"]["config"]["warmup"], 2)
        by_name = {r["request_id"]: r for r in g1["runs"][0]["results"]}
        self.assertEqual((by_name["h0"]["ttft_ms"], by_name["h0"]["e2e_ms"]), (31.427, 399.332))
        self.assertEqual(g0["metrics"]["priority_first_token_order_score"], 0.5938)
        self.assertEqual(g1["metrics"]["priority_first_token_order_score"], 1.0)
        self.assertEqual({r["request_id"]: r["ttft_ms"] for r in g0["runs"][0]["results"]}["l0"], 49.366)

    def test_decide_and_the_chapters_step5_take_them(self):
        g0, g1 = os.path.join(self.out, "g0_fcfs.json"), os.path.join(self.out, "g1_priority.json")
        self.assertEqual(chapter.step5(g0, g1)["decision"], "accept")
        evidence = os.path.join(self.base, "evidence.json")
        code, stdout, err = run_cli(["serving-bench", "decide", g0, g1, "--out", evidence])
        self.assertEqual(code, 0, err)
        record = json.loads(read(evidence))
        self.assertEqual((record["evidence_level"], record["simulated"], record["decision"]["decision"]),
                         ("simulated_scheduler_pair", True, "accept"))
        self.assertEqual(record["decision"]["comparison"]["priority_first_token_order_gain"], round(1.0 - 0.5938, 4))
        self.assertEqual(record["decision"]["comparison"], chapter.step5(g0, g1)["comparison"])

    def test_an_open_loop_urgent_stream_starves_the_low_class(self):
        out = os.path.join(self.base, "stream")
        code, _, err = run_cli(["serving-bench", "simulate", "--out-dir", out, "--urgent-stream", "60:60",
                                "--repeats", "1", "--warmup", "0"])
        self.assertEqual(code, 0, err)
        theirs = chapter.step5(os.path.join(out, "g0_fcfs.json"), os.path.join(out, "g1_priority.json"))
        self.assertEqual(theirs["decision"], "tune")
        self.assertGreater(theirs["comparison"]["low_priority_e2e_p95_ratio"], 1.5)
        self.assertFalse(theirs["gates"]["low_priority_e2e_p95_ratio_ok"])

    def test_the_kv_victim_follows_the_policy(self):
        """vllm-engine.md §2 step 3: under KV shortage fcfs preempts the last request of the running list,
        priority the running request with the largest (priority, arrival). With l0 2 ms early and 23 blocks
        (22 usable; l0 alone grows to 20), fcfs preempts h3 (admitted after l2), priority preempts l0."""
        out = os.path.join(self.base, "kv")
        code, stdout, err = run_cli(["serving-bench", "simulate", "--out-dir", out, "--early", "l0:2",
                                     "--num-gpu-blocks", "23", "--repeats", "1", "--warmup", "0"])
        self.assertEqual(code, 0, err)
        preempted = {}
        for name in ("g0_fcfs.json", "g1_priority.json"):
            rows = json.loads(read(os.path.join(out, name)))["runs"][0]["results"]
            preempted[name] = {r["request_id"]: r["num_preemptions"] for r in rows if r["num_preemptions"]}
        self.assertEqual(set(preempted["g0_fcfs.json"]), {"h3"})
        self.assertEqual(set(preempted["g1_priority.json"]), {"l0"})
        self.assertIn("preempted (all repeats): h3 x1", stdout)

    def test_bad_flags_are_one_line(self):
        target = os.path.join(self.base, "bad")
        for argv, mention in ((["--early", "x9:2"], "--early"), (["--urgent-stream", "5"], "COUNT:EVERY_MS"),
                              (["--repeats", "0"], "--repeats"), (["--num-gpu-blocks", "1"], "--num-gpu-blocks"),
                              (["--num-gpu-blocks", "5"], "could never run"), (["--jitter-ms", "nan"], "--jitter-ms"),
                              (["--step-model", os.path.join(self.base, "none.json")], "no such step model file")):
            with self.subTest(argv):
                assert_bad_input(self, ["serving-bench", "simulate", "--out-dir", target, *argv], mention)
                self.assertFalse(os.path.exists(target))
        assert_bad_input(self, ["serving-bench", "simulate", "--out-dir", self.out], "--force")


if __name__ == "__main__":
    unittest.main()
