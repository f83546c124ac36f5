"""What the lab's own commands learned from the serving-bench chapter (serving-bench.md §2, §4; issue items 4–5).

- ``export`` rows carry ``request_id`` (= ``name``), so the chapter's frozen-workload checks (unique
  ids, at least two priority levels) pass on an exported workload;
- ``import-results`` keeps, per request, whether an ok request produced no text
  (``output_text_empty``) and ``compare`` treats one as a hard failure (reject);
- ``compare`` says where its rules differ from the chapter's, and its help points to
  ``serving-bench decide``.
"""

import json
import os
import unittest

from tests.helpers import PROJECT, read, run_cli, temp_dir
from tests.test_timing_realrun import vllm_run

SAMPLE_WORKLOAD = os.path.join(PROJECT, "tests", "data", "serving-bench", "workload.json")


class ExportForTheChapterTest(unittest.TestCase):
    def test_frozen_workload_checks_pass_on_an_export(self):
        for args in (["--scenario", "priority-mix"], ["--workload", SAMPLE_WORKLOAD]):
            with self.subTest(args=args):
                out = os.path.join(temp_dir(self), "exp")
                self.assertEqual(run_cli(["export", *args, "--out", out])[0], 0)
                rows = [json.loads(line) for line in read(os.path.join(out, "requests.jsonl")).splitlines()]
                ids = [row["request_id"] for row in rows]
                self.assertEqual(ids, [row["name"] for row in rows])
                self.assertEqual(len(set(ids)), len(ids))                       # unique ids
                self.assertGreaterEqual(len({row["priority"] for row in rows}), 2)  # two priority levels
                self.assertIn("request_id (= name)", json.loads(read(os.path.join(out, "export.json")))["columns"])

    def test_sample_workload_has_eight_requests_at_two_levels(self):
        rows = json.loads(read(SAMPLE_WORKLOAD))["requests"]
        self.assertEqual((len(rows), sorted({r["priority"] for r in rows})), (8, [0, 5]))   # the chapter's two classes


class EmptyOutputTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)

    def imported(self, name, run):
        source = os.path.join(self.base, name + ".json")
        with open(source, "w", encoding="utf-8") as handle:
            json.dump(run, handle)
        out = os.path.join(self.base, name)
        code, _, err = run_cli(["import-results", source, "--artifacts", out])
        self.assertEqual(code, 0, err)
        return out

    def records(self, directory):
        return {r["name"]: r for r in map(json.loads, read(os.path.join(directory, "requests.jsonl")).splitlines())}

    def test_import_keeps_whether_an_ok_request_wrote_text(self):
        """vllm_run: r2 failed with empty text (not an ok request); here r1 is ok with empty text."""
        records = self.records(self.imported("c", vllm_run(generated_texts=["a b c", "", "", "f"])))
        self.assertEqual({name: r["output_text_empty"] for name, r in records.items()},
                         {"r0": False, "r1": True, "r2": False, "r3": False})
        without = vllm_run()
        del without["generated_texts"]
        self.assertNotIn("output_text_empty", self.records(self.imported("n", without))["r0"])

    def test_compare_rejects_an_ok_request_with_empty_output(self):
        baseline = self.imported("b", vllm_run())
        candidate = self.imported("c", vllm_run(scheduling_policy="priority", generated_texts=["a b c", "", "", "f"]))
        out = os.path.join(self.base, "decision.json")
        code, stdout, err = run_cli(["compare", baseline, candidate, "--out", out])
        self.assertEqual(code, 0, err)
        record = json.loads(read(out))
        self.assertEqual(record["decision"], "reject")
        self.assertIn("candidate: 1 ok request(s) with empty output text (r1)", record["hard_failures"])
        self.assertFalse(any(h.startswith("baseline: ") and "empty output" in h for h in record["hard_failures"]))

    def test_generated_texts_must_match_the_requests(self):
        source = os.path.join(self.base, "short.json")
        with open(source, "w", encoding="utf-8") as handle:
            json.dump(vllm_run(generated_texts=["a"]), handle)
        code, _, err = run_cli(["import-results", source, "--artifacts", os.path.join(self.base, "x")])
        self.assertEqual(code, 2)
        self.assertIn("field 'generated_texts'", err)


class CompareNamesTheChapterTest(unittest.TestCase):
    def test_record_report_and_help(self):
        base = temp_dir(self)
        runs = {}
        for policy in ("fcfs", "priority"):
            runs[policy] = os.path.join(base, policy)
            self.assertEqual(run_cli(["--scenario", "priority-mix", "--policy", policy, "--timeline", "off",
                                      "--artifacts", runs[policy]])[0], 0)
        out = os.path.join(base, "decision.json")
        code, stdout, err = run_cli(["compare", runs["fcfs"], runs["priority"], "--case", "continuous", "--out", out])
        self.assertEqual(code, 0, err)
        differences = json.loads(read(out))["chapter_differences"]
        self.assertEqual(len(differences), 3)
        for words in ("lost request: compare rejects", "no TPOT gate", "rejects any failed request"):
            self.assertTrue(any(words in d for d in differences), differences)
        self.assertIn("rules differ from the serving-bench chapter (its rules: serving-bench decide): lost request "
                      "reject (chapter's helpers: tune); P95 TPOT gate (chapter: none)", stdout)
        code, help_text, _ = run_cli(["compare", "--help"])
        self.assertEqual(code, 0)
        self.assertIn("serving-bench decide", " ".join(help_text.split()))


if __name__ == "__main__":
    unittest.main()
