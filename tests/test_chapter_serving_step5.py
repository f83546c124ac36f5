"""``serving-bench decide`` against the chapter's Step 5 rules (serving-bench.md §4; issue: the chapter to the letter).

The expected decisions come from tests/serving_bench_reference.py, a plain transcription of the
chapter's Step 5 rules, run on the same files; the cases are the ones where the lab used to
disagree with the chapter (a ``failure`` without ``status: failed``, whitespace-only output, a
missing group file, workloads that differ only in a recorded "priority sent" field, the runner's
top-level success count, the chapter's low class 5). Group identity and the lab's stricter
checks are one line and exit 2.
"""

import copy
import json
import os
import random
import unittest

from tests import serving_bench_reference as chapter
from tests.helpers import FULL, PROJECT, assert_bad_input, read, run_cli, temp_dir

DATA = os.path.join(PROJECT, "tests", "data", "serving-bench")
BASELINE, CANDIDATE, FAILED = (os.path.join(DATA, n) for n in ("baseline.json", "candidate.json", "candidate-failed.json"))

#: The chapter's 5.6 decision keys and 5.7 record keys (dotted paths) that the next chapters read.
DECISION_KEYS = ("decision", "reason", "next_action", "gates", "comparison")
COMPARISON_KEYS = ("priority_first_token_order_gain", "priority_first_token_gains_by_run", "throughput_ratio",
                   "ttft_p95_ratio", "low_priority_e2e_p95_ratio")
RECORD_PATHS = ("schema_version", "project", "strategy", "role", "config.model", "config.backend", "config.dtype",
                "config.generated_tokens", "config.concurrency", "config.workload", "config.scheduler_policy",
                "config.baseline_scheduler_policy", "config.max_num_seqs", "config.repeats",
                "config.synchronized_start", "workload", "metrics", "quality.status", "quality.output_completeness",
                "quality.paired_runs", "status", "evidence_level", "failure", "decision", "strategy_metrics",
                "source_paths.g0_fcfs", "source_paths.g1_priority")


def load(path):
    return json.loads(read(path))


def has_path(record, dotted):
    for part in dotted.split("."):
        if not isinstance(record, dict) or part not in record:
            return False
        record = record[part]
    return True


class Step5Test(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)

    def dump(self, name, data):
        path = os.path.join(self.base, name)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        return path

    def decide(self, base_path, cand_path, *flags):
        out = os.path.join(self.base, "evidence.json")
        if os.path.exists(out):
            os.remove(out)
        code, stdout, err = run_cli(["serving-bench", "decide", base_path, cand_path, "--out", out, *flags])
        self.assertEqual(code, 0, err)
        return load(out), stdout

    def test_the_shipped_samples_pass_the_chapters_step5(self):
        self.assertEqual(chapter.step5(BASELINE, CANDIDATE)["decision"], "accept")
        self.assertEqual(chapter.step5(BASELINE, FAILED)["decision"], "reject")

    def test_decisions_and_values_equal_the_chapters(self):
        def failure_without_status(d):
            d["failure"] = {"type": "Timeout", "message": "client gave up"}

        def whitespace_output(d):
            d["runs"][1]["results"][4]["output_text"] = "  \n\t"

        def priority_sent_recorded(d):
            d["workload"]["send_priority"] = True

        def other_workload(d):
            d["workload"]["workload_sha256"] = "0" * 64

        def top_count_40(d):
            d["metrics"]["successful_requests"] = 40

        def failed_count(d):
            d["metrics"]["failed_requests"] = 1

        def slow(d):
            d["metrics"]["output_token_throughput_per_s"] = 300.0

        def no_ttft(d):
            d["metrics"]["ttft_ms"] = {"p50": 1.0}

        def starved(d):
            for run in d["runs"]:
                for row in run["results"]:
                    if row["priority"] == 5:
                        row["e2e_ms"] *= 2

        table = [("samples", None, None, "accept"),
                 ("failure object, status ok", None, failure_without_status, "reject"),
                 ("whitespace-only output", whitespace_output, None, "reject"),
                 ("workloads differ only in priority sent", None, priority_sent_recorded, "accept"),
                 ("other workload", None, other_workload, "reject"),
                 ("top-level count 40 of 8", top_count_40, None, "reject"),
                 ("a failed request at top level", None, failed_count, "reject"),
                 ("no P95 TTFT", None, no_ttft, "tune"),
                 ("throughput ratio 0.75", None, slow, "tune"),
                 ("low class starved", None, starved, "tune")]
        for name, base_change, cand_change, expected in table:
            with self.subTest(name):
                b, c = copy.deepcopy(load(BASELINE)), copy.deepcopy(load(CANDIDATE))
                for data, change in ((b, base_change), (c, cand_change)):
                    if change:
                        change(data)
                bp, cp = self.dump("b.json", b), self.dump("c.json", c)
                theirs = chapter.step5(bp, cp)
                self.assertEqual(theirs["decision"], expected)       # the reference itself, by hand
                record, _ = self.decide(bp, cp)
                ours = record["decision"]
                self.assertEqual(ours["decision"], theirs["decision"], ours["reasons"])
                if theirs["comparison"] is not None and ours["comparison"]["throughput_ratio"] is not None:
                    self.assertEqual(ours["comparison"], theirs["comparison"])
                    self.assertEqual(ours["gates"], theirs["gates"])

    def test_a_missing_group_is_the_chapters_failure_record(self):
        nowhere = os.path.join(self.base, "g1.json")
        self.assertEqual(chapter.step5(BASELINE, nowhere)["decision"], "reject")
        record, stdout = self.decide(BASELINE, nowhere)
        self.assertIn("candidate MISSING: no result file at", stdout)
        self.assertEqual((record["status"], record["evidence_level"], record["decision"]["decision"]),
                         ("failed", "backend_failure_record", "reject"))
        self.assertIn("g1_priority (candidate) has no result file", record["failure"]["failure_reason"])
        self.assertEqual(record["failure"]["retest_path"], nowhere)
        self.assertEqual(record["config"]["scheduler_policy"], "priority")

    def test_record_and_decision_carry_the_chapters_names(self):
        record, _ = self.decide(BASELINE, CANDIDATE, "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--dtype", "bfloat16",
                                "--run-label", "sb-1", "--project", "course")
        for path in RECORD_PATHS:
            self.assertTrue(has_path(record, path), path)
        self.assertEqual(tuple(k for k in DECISION_KEYS if k in record["decision"]), DECISION_KEYS)
        self.assertEqual(sorted(record["decision"]["comparison"]), sorted(COMPARISON_KEYS))
        self.assertEqual(len(record["decision"]["gates"]), 4)
        self.assertTrue(all(v is True for v in record["decision"]["gates"].values()))
        self.assertEqual((record["config"]["model"], record["config"]["dtype"], record["run_label"], record["project"]),
                         ("Qwen/Qwen2.5-0.5B-Instruct", "bfloat16", "sb-1", "course"))
        self.assertEqual(record["quality"]["paired_runs"], 5)
        self.assertIs(record["quality"]["output_completeness"], True)


class GroupIdentityTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.out = os.path.join(self.base, "evidence.json")

    def dump(self, name, data):
        path = os.path.join(self.base, name)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        return path

    def refused(self, base, cand, mention):
        assert_bad_input(self, ["serving-bench", "decide", base, cand, "--out", self.out], mention)
        self.assertFalse(os.path.exists(self.out))

    def test_swapped_repeated_or_unnamed_groups_are_one_line(self):
        fcfs_copy = self.dump("fcfs2.json", load(BASELINE))
        self.refused(CANDIDATE, BASELINE, "the first file is the priority group")
        self.refused(BASELINE, fcfs_copy, "both files are the fcfs group")
        self.refused(BASELINE, BASELINE, "the same file as the baseline")
        self.refused(FAILED, BASELINE, "the first file is the priority group")
        silent = load(CANDIDATE)
        silent["scheduler_identity"]["send_priority"] = False
        self.refused(BASELINE, self.dump("c.json", silent), "send_priority': false in the priority group")
        unnamed = load(CANDIDATE)
        del unnamed["scheduler_identity"]["scheduler_policy"]
        self.refused(BASELINE, self.dump("c.json", unnamed), "scheduler_policy': missing")
        odd = load(CANDIDATE)
        odd["scheduler_identity"]["role"] = "baseline"
        self.refused(BASELINE, self.dump("c.json", odd), "field 'scheduler_identity.role'")
        odd["scheduler_identity"]["role"] = {"team": "g1"}     # a role this lab does not know: the policy decides
        code, _, err = run_cli(["serving-bench", "decide", BASELINE, self.dump("c.json", odd), "--out", self.out])
        self.assertEqual(code, 0, err)

    def test_unknown_schema_and_repeated_repeat_are_one_line(self):
        future = load(CANDIDATE)
        future["schema_version"] = "serving-scheduler-run/v2"
        self.refused(BASELINE, self.dump("c.json", future), "field 'schema_version': unknown")
        twice = load(CANDIDATE)
        twice["runs"][3]["repeat"] = 1
        self.refused(BASELINE, self.dump("c.json", twice), "runs[3]: field 'repeat': repeat 1 is already runs[1]")

    def test_import_results_sends_a_chapter_file_to_decide(self):
        for fmt in ("auto", "vllm-bench"):
            with self.subTest(fmt):
                target = os.path.join(self.base, "imported-" + fmt)
                assert_bad_input(self, ["import-results", BASELINE, "--format", fmt, "--artifacts", target],
                                 "serving-bench decide FCFS.json PRIORITY.json")
                self.assertFalse(os.path.exists(target))


class MutatedFilesTest(unittest.TestCase):
    """Random values at random places of a group's file: a decision (0) or one line (2), never exit 3.
    40 mutations of each file by default, 600 with ISL_FULL=1 (CI)."""

    VALUES = (None, 0, -1, 1.5, "x", "", "  ", [], {}, True, [1], {"a": 1}, 10**30, "failed",
              "serving-scheduler-run/v2", "priority", "fcfs")

    def paths(self, data, at=()):
        yield at
        items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
        for key, value in items:
            yield from self.paths(value, at + (key,))

    def test_never_an_internal_error(self):
        base = temp_dir(self)
        rng = random.Random(20)
        for position, source in ((1, CANDIDATE), (0, BASELINE), (1, FAILED)):
            sample = load(source)
            places = list(self.paths(sample))[1:]
            for _ in range(600 if FULL else 40):
                data = copy.deepcopy(sample)
                for _ in range(rng.randint(1, 3)):
                    where, target = rng.choice(places), data
                    try:
                        for key in where[:-1]:
                            target = target[key]
                        target[where[-1]] = rng.choice(self.VALUES)
                    except (KeyError, IndexError, TypeError):
                        pass
                path = os.path.join(base, "g.json")
                with open(path, "w", encoding="utf-8") as handle:
                    json.dump(data, handle)
                pair = [BASELINE, CANDIDATE]
                pair[position] = path
                code, _, err = run_cli(["serving-bench", "decide", *pair, "--out", os.path.join(base, "e.json"),
                                        "--force"])
                self.assertIn(code, (0, 2), err)
                if code == 2:
                    self.assertEqual(len(err.strip().splitlines()), 1, err)


if __name__ == "__main__":
    unittest.main()
