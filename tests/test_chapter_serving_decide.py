"""The chapter's real-engine decision (serving-bench.md §4) on the synthetic sample files.

tests/data/serving-bench/ (synthetic, see its README): 8 requests (4 at priority 0, 4 at the chapter's
low class 5), 5 repeats; top-level metrics.successful_requests 8 (the workload's count, as the chapter's
runner writes it). Hand computation, low-priority (priority 5) E2E per repeat k = 0..4:
  baseline  [1000, 1100, 1200, 1300] + 10k: linear P95 at (4 − 1) · 0.95 = 2.85 → 1200 + 0.85 · 100
            = 1285 + 10k, mean over k → 1305; nearest rank ceil(0.95 · 4) = 4th → 1300 + 10k → 1320.
  candidate [1200, 1400, 1600, 1800] + 10k: 1600 + 0.85 · 200 = 1770 + 10k → 1790; nearest 1820.
Ratios: low-priority 1790 / 1305 = 1.3716; throughput 380 / 400 = 0.95; P95 TTFT 900 / 800 = 1.125.
Order scores 0.5 → 0.9: gain 0.4; per repeat [0.5, 0.55, 0.45, 0.5, 0.5] → [0.9, 0.85, 0.95, 0.9, 0.9]:
paired gains [0.4, 0.3, 0.5, 0.4, 0.4]. Every gate passes: accept.
"""

import copy
import json
import os
import unittest

from sched.chapter.decide import decide_pair
from sched.chapter.groups import p95_linear, read_group
from tests.helpers import PROJECT, read, run_cli, temp_dir

DATA = os.path.join(PROJECT, "tests", "data", "serving-bench")
BASELINE, CANDIDATE, FAILED = (os.path.join(DATA, n) for n in ("baseline.json", "candidate.json", "candidate-failed.json"))


def load(path):
    return json.loads(read(path))


class PercentileTest(unittest.TestCase):
    def test_linear_interpolation(self):
        self.assertEqual(p95_linear([400, 100, 300, 200]), 385.0)
        self.assertAlmostEqual(p95_linear(range(1, 21)), 19.05)   # position 19 · 0.95 = 18.05
        self.assertEqual(p95_linear([5]), 5)
        self.assertIsNone(p95_linear([]))


class SampleDecisionTest(unittest.TestCase):
    def test_view_of_each_group(self):
        base, cand = read_group(BASELINE, "baseline"), read_group(CANDIDATE, "candidate")
        self.assertEqual((base["status"], base["repeats"], base["successful"], base["workload_count"], base["failed"]),
                         ("ok", 5, 8, 8, 0))
        self.assertEqual((base["repeat_successful"], base["repeat_failed"]), ([8] * 5, [0] * 5))
        self.assertTrue(base["outputs_complete"])
        self.assertEqual(base["first_token_order_scores"], [0.5, 0.55, 0.45, 0.5, 0.5])
        self.assertEqual((base["low_priority"], base["low_priority_e2e_p95_ms"],
                          base["low_priority_e2e_p95_ms_nearest_rank"]), (5, 1305.0, 1320.0))
        self.assertEqual(base["low_priority_e2e_p95_by_repeat"], [1285.0, 1295.0, 1305.0, 1315.0, 1325.0])
        self.assertEqual((cand["low_priority_e2e_p95_ms"], cand["low_priority_e2e_p95_ms_nearest_rank"]),
                         (1790.0, 1820.0))
        self.assertEqual((cand["throughput_tps"], cand["ttft_p95_ms"], cand["tpot_p95_ms"]), (380.0, 900.0, 41.0))

    def test_accept_with_gains_and_ratios(self):
        decision = decide_pair(read_group(BASELINE, "baseline"), read_group(CANDIDATE, "candidate"))
        self.assertEqual((decision["decision"], decision["next_action"]), ("accept", "promote_priority_scheduler"))
        self.assertEqual(decision["comparison"], {
            "priority_first_token_order_gain": 0.4, "priority_first_token_gains_by_run": [0.4, 0.3, 0.5, 0.4, 0.4],
            "throughput_ratio": 0.95, "ttft_p95_ratio": 1.125, "low_priority_e2e_p95_ratio": 1.3716})
        self.assertEqual(decision["gates"], {"order_gain_ok": True, "throughput_ratio_ok": True,
                                             "ttft_p95_ratio_ok": True, "low_priority_e2e_p95_ratio_ok": True})
        self.assertEqual([g["passed"] for g in decision["gate_checks"]], [True] * 4)

    def test_cli_view_and_evidence_record(self):
        out = os.path.join(temp_dir(self), "evidence.json")
        before = [read(p) for p in (BASELINE, CANDIDATE)]
        code, stdout, err = run_cli(["serving-bench", "decide", BASELINE, CANDIDATE, "--out", out])
        self.assertEqual(code, 0, err)
        for text in ("decision: ACCEPT", "1305 ms (linear interpolation, the chapter's)", "1320 ms (nearest rank",
                     "paired per-repeat gains: 0.4, 0.3, 0.5, 0.4, 0.4", "low_priority_e2e_p95_ratio 1.3716",
                     "5 repeat(s) of 8 requests, successful 8, failed 0, outputs all non-empty", "per repeat: 0.5, 0.55, 0.45, 0.5, 0.5"):
            self.assertIn(text, stdout)
        record = load(out)
        self.assertEqual((record["schema_version"], record["strategy"], record["role"], record["status"],
                          record["evidence_level"]),
                         ("inference-benchmark/v1", "priority_scheduler", "candidate", "measured",
                          "real_backend_scheduler_pair"))
        self.assertEqual(record["decision"]["decision"], "accept")
        self.assertEqual(record["quality"], {"status": "passed", "output_completeness": True, "paired_runs": 5,
                                             "unpaired_runs": 0})
        config = record["config"]
        self.assertEqual((config["baseline_scheduler_policy"], config["scheduler_policy"], config["max_num_seqs"],
                          config["repeats"], config["concurrency"], config["synchronized_start"]),
                         ("fcfs", "priority", 2, 5, 8, True))
        self.assertEqual((config["model"], config["dtype"], record["project"], record["run_label"]),
                         (None, None, None, None))     # the learner's notebook values: never guessed
        self.assertEqual(record["strategy_metrics"]["g1_priority_low_priority_e2e_p95_ms"], 1790.0)
        self.assertEqual(record["strategy_metrics"]["g0_fcfs_low_priority_e2e_p95_ms"], 1305.0)
        self.assertEqual(record["source_paths"], {"g0_fcfs": BASELINE, "g1_priority": CANDIDATE})
        self.assertIsNone(record["failure"])
        after = [read(p) for p in (BASELINE, CANDIDATE)]
        self.assertEqual(before, after)

    def test_failure_record(self):
        out = os.path.join(temp_dir(self), "evidence.json")
        code, stdout, err = run_cli(["serving-bench", "decide", BASELINE, FAILED, "--out", out])
        self.assertEqual(code, 0, err)
        self.assertIn("decision: REJECT", stdout)
        record = load(out)
        self.assertEqual((record["status"], record["evidence_level"], record["quality"]["status"]),
                         ("failed", "backend_failure_record", "incomplete"))
        self.assertIn("g1_priority (candidate) failed: ServerNotReady", record["failure"]["failure_reason"])
        self.assertEqual(record["failure"]["retest_path"], FAILED)
        self.assertEqual(record["decision"]["next_action"], "rerun_failed_group")


class DecisionOrderTest(unittest.TestCase):
    """Each row changes the sample files and expects the chapter's decision and the first reason."""

    def write(self, name, data):
        path = os.path.join(self.base, name)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        return path

    def decide(self, base_change=None, cand_change=None, base=None):
        b, c = copy.deepcopy(load(base or BASELINE)), copy.deepcopy(load(CANDIDATE))
        for data, change in ((b, base_change), (c, cand_change)):
            if change:
                change(data)
        return decide_pair(read_group(self.write("b.json", b), "baseline"), read_group(self.write("c.json", c), "candidate"))

    def setUp(self):
        self.base = temp_dir(self)

    def test_order(self):
        def other_workload(d):
            d["workload"] = dict(d["workload"], workload_sha256="0" * 64)

        def failed_request(d):
            d["runs"][2]["results"][3]["ok"] = False

        def empty_output(d):
            d["runs"][0]["results"][0]["output_text"] = ""

        def lost_request(d):
            del d["runs"][0]["results"][7]

        def no_order_score(d):
            d["metrics"]["priority_first_token_order_score"] = None

        def small_gain(d):
            d["metrics"]["priority_first_token_order_score"] = 0.6

        def slow(d):
            d["metrics"]["output_token_throughput_per_s"] = 350.0

        def starved(d):
            for run in d["runs"]:
                for row in run["results"]:
                    if row["priority"] == 5:
                        row["e2e_ms"] *= 2

        def counts_unknown(d):
            del d["runs"][0]["results"]
            del d["runs"][0]["metrics"]["successful_requests"]

        def aggregates_only(d):
            for run in d["runs"]:
                del run["results"]         # per-repeat metrics still say 8 successful, 0 failed

        table = [
            ("failed before workload", dict(base=FAILED, cand_change=other_workload), "reject", "baseline group failed"),
            ("different workloads", dict(cand_change=other_workload), "reject", "different workloads"),
            ("a failed request", dict(cand_change=failed_request), "reject",
             "candidate: runs[2]: 7 successful, 1 failed of the workload's 8"),
            ("empty output", dict(base_change=empty_output), "reject", "baseline: 1 ok request(s) with empty output"),
            ("lost request (the lab: each repeat holds the workload)", dict(cand_change=lost_request), "reject",
             "candidate: runs[0]: 7 successful, 0 failed of the workload's 8"),
            ("empty output beats a missing metric", dict(base_change=empty_output, cand_change=no_order_score),
             "reject", "empty output"),
            ("successful count unknown", dict(cand_change=counts_unknown), "reject",
             "candidate: runs[0]: successful request count unknown"),
            ("no per-request results: no low-priority E2E", dict(cand_change=aggregates_only), "tune",
             "candidate: low_priority_e2e_p95_ms missing"),
            ("missing order score", dict(cand_change=no_order_score), "tune", "first_token_order_score missing"),
            ("gain 0.1 < 0.15", dict(cand_change=small_gain), "tune", "first-token order score gain"),
            ("throughput ratio 0.875 < 0.90", dict(cand_change=slow), "tune", "throughput ratio"),
            ("low class starved: 3580 / 1305 > 1.5", dict(cand_change=starved), "tune", "low-priority E2E P95 ratio"),
        ]
        for name, changes, decision, reason in table:
            with self.subTest(name):
                got = self.decide(**changes)
                self.assertEqual(got["decision"], decision, got["reasons"])
                self.assertEqual(got["reason"].split(" (and ")[0], got["reasons"][0])
                self.assertIn(reason, got["reasons"][0])

    def test_a_file_without_runs_is_one_run(self):
        one = load(CANDIDATE)
        single = {k: v for k, v in one.items() if k != "runs"}
        single["results"] = one["runs"][0]["results"]      # repeat 0: low class [1200, 1400, 1600, 1800]
        view = read_group(self.write("single.json", single), "candidate")
        self.assertEqual((view["repeats"], view["workload_count"], view["successful"]), (1, 8, 8))
        self.assertEqual((view["low_priority_e2e_p95_ms"], view["low_priority_e2e_p95_ms_nearest_rank"]), (1770.0, 1800.0))


class DecideBadInputTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.out = os.path.join(self.base, "evidence.json")

    def write(self, name, text):
        path = os.path.join(self.base, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def test_unusable_files_exit_2_naming_file_and_field(self):
        sample = load(CANDIDATE)

        def changed(change):
            data = copy.deepcopy(sample)
            change(data)
            return json.dumps(data)

        table = [
            ("not json", "{", "not valid JSON"),
            ("a list", "[]", "must be a JSON object"),
            ("no identity", changed(lambda d: d.pop("scheduler_identity")), "field 'scheduler_identity'"),
            ("runs not a list", changed(lambda d: d.update(runs={"a": 1})), "field 'runs'"),
            ("no runs", changed(lambda d: d.update(runs=[])), "field 'runs': empty"),
            ("neither runs nor metrics", json.dumps({"scheduler_identity": {}}), "field 'runs'"),
            ("ok not a boolean", changed(lambda d: d["runs"][1]["results"][2].update(ok="yes")),
             "runs[1]: results[2]: field 'ok'"),
            ("negative e2e", changed(lambda d: d["runs"][0]["results"][0].update(e2e_ms=-5)), "field 'e2e_ms'"),
            ("ttft not an object", changed(lambda d: d["metrics"].update(ttft_ms=800)), "field 'metrics.ttft_ms'"),
            ("order score above 1", changed(lambda d: d["metrics"].update(priority_first_token_order_score=1.5)),
             "priority_first_token_order_score"),
            ("text not text", changed(lambda d: d["runs"][0]["results"][0].update(output_text=7)), "field 'output_text'"),
            ("failure without message", json.dumps({"scheduler_identity": {}, "status": "failed",
                                                    "failure": {"type": "X"}}), "field 'failure.message'"),
        ]
        for name, text, mention in table:
            with self.subTest(name):
                path = self.write("bad.json", text)
                code, stdout, err = run_cli(["serving-bench", "decide", BASELINE, path, "--out", self.out])
                self.assertEqual(code, 2, err)
                self.assertEqual(stdout, "")
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(path, err)
                self.assertIn(mention, err)
                self.assertFalse(os.path.exists(self.out))

    def test_out_rules(self):
        copy_of_baseline = self.write("b.json", read(BASELINE))
        code, _, err = run_cli(["serving-bench", "decide", copy_of_baseline, CANDIDATE, "--out", copy_of_baseline,
                                "--force"])
        self.assertEqual(code, 2)
        self.assertIn("is one of the two result files", err)
        self.assertEqual(read(copy_of_baseline), read(BASELINE))
        self.write("evidence.json", "earlier")
        code, _, err = run_cli(["serving-bench", "decide", BASELINE, CANDIDATE, "--out", self.out])
        self.assertEqual(code, 2)
        self.assertIn("already exists", err)
        self.assertEqual(read(self.out), "earlier")
        self.assertEqual(run_cli(["serving-bench", "decide", BASELINE, CANDIDATE, "--out", self.out, "--force"])[0], 0)
        self.assertEqual(load(self.out)["schema_version"], "inference-benchmark/v1")


if __name__ == "__main__":
    unittest.main()
