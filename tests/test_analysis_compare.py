"""Baseline versus candidate (compare.md §3): contract, evidence, gates and the three decisions."""

import json
import os
import shutil
import tempfile
import unittest

from sched.analysis.compare import Thresholds, check_contract, compare
from sched.analysis.compare_sides import check_evidence, load_side
from tests.helpers import read, run_cli, temp_dir


#: CLI arguments -> a run directory simulated once for the whole module (tests get copies).
_SIMULATED: dict = {}


def tearDownModule():
    for path in _SIMULATED.values():
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    _SIMULATED.clear()


class RunsMixin:
    """Simulated run directories, each a fresh copy (in this test's temporary directory) of a run
    simulated once for the module: a test that edits or writes beside it never affects another."""

    def run_dir(self, name, *args):
        path = os.path.join(self.base, name)
        if not os.path.isdir(path):
            if args not in _SIMULATED:
                simulated = os.path.join(tempfile.mkdtemp(prefix="isl-test-"), "run")
                code, _, err = run_cli([*args, "--artifacts", simulated])
                self.assertEqual(code, 0, err)
                _SIMULATED[args] = simulated
            shutil.copytree(_SIMULATED[args], path)
        return path

    def setUp(self):
        self.base = temp_dir(self)

    def pm(self, policy="fcfs", *extra):
        name = "pm-" + policy + "".join(extra).replace("-", "")
        return self.run_dir(name, "--scenario", "priority-mix", "--policy", policy, *extra)

    def compare_cli(self, *args):
        return run_cli(["compare", *args])

    def work_in_temp_dir(self) -> str:
        """Make a fresh temporary directory the current one for this test (compare writes ./decision.json)."""
        work = os.path.join(self.base, "work")
        os.makedirs(work, exist_ok=True)
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(work)
        return work


class ReadOnceTest(RunsMixin, unittest.TestCase):
    def test_each_requests_file_is_read_once(self):
        """A comparison streams each side's requests.jsonl once (the evidence, the trace's
        histograms and the ok lines without text all come from that pass)."""
        from sched.analysis import trace
        opened = []
        real = trace.open_regular
        trace.open_regular = lambda path, *a, **k: opened.append(os.path.basename(path)) or real(path, *a, **k)
        try:
            record = compare(load_side(self.pm("fcfs"), "continuous"), load_side(self.pm("priority"), "continuous"))
        finally:
            trace.open_regular = real
        self.assertEqual(opened, ["requests.jsonl", "requests.jsonl"])
        self.assertEqual(record["hard_failures"], [])


class ContractTest(RunsMixin, unittest.TestCase):
    def test_same_workload_and_one_change_is_comparable(self):
        contract = check_contract(load_side(self.pm("fcfs"), "continuous"), load_side(self.pm("priority"), "continuous"))
        self.assertTrue(contract["ok"], contract["problems"])
        self.assertEqual(contract["change"], {"field": "policy", "baseline": "fcfs", "candidate": "priority"})

    def test_two_cases_of_one_run_differ_in_one_setting(self):
        run = self.pm("fcfs")
        contract = check_contract(load_side(run, "continuous"), load_side(run, "continuous+APC"), declared="apc")
        self.assertTrue(contract["ok"], contract["problems"])
        self.assertEqual(contract["change"]["field"], "apc")

    def test_refused_pairs_are_listed_by_field(self):
        run = self.pm("fcfs")
        baseline = load_side(run, "continuous")
        table = [
            # (candidate, declared change, words expected in the problems)
            ((run, "continuous"), None, ["differ in no scheduler setting"]),
            ((run, "continuous+APC+chunk32"), None, ["more than one scheduler setting (2): apc, chunk_tokens"]),
            ((run, "continuous+APC"), "policy", ["declared change policy but the sides differ in apc"]),
            ((self.run_dir("baseline-prio", "--policy", "priority"), "continuous"), None,
             ["fixed condition workload_sha256 differs"]),
            ((self.pm("priority", "--timeout-ticks", "56"), "continuous"), None,
             ["fixed condition timeout_ticks differs"]),
        ]
        for (directory, case), declared, words in table:
            with self.subTest(candidate=f"{os.path.basename(directory)}#{case}", declared=declared):
                contract = check_contract(baseline, load_side(directory, case), declared)
                self.assertFalse(contract["ok"])
                for word in words:
                    self.assertTrue(any(word in p for p in contract["problems"]), contract["problems"])
                record = compare(baseline, load_side(directory, case), declared_change=declared)
                self.assertEqual(record["decision"], "reject")

    def test_mismatch_names_the_field_and_both_values(self):
        other = load_side(self.run_dir("baseline-prio", "--policy", "priority"), "continuous")
        contract = check_contract(load_side(self.pm("fcfs"), "continuous"), other)
        fields = [m["field"] for m in contract["mismatches"]]
        self.assertEqual(fields, ["workload_sha256"])


class EvidenceTest(RunsMixin, unittest.TestCase):
    """Edit the candidate's trace by hand: one duplicated, one lost, one unknown id."""

    def edited(self, edit):
        """A copy of the priority run whose continuous lines of requests.jsonl pass through ``edit``."""
        source = self.pm("priority")
        target = os.path.join(self.base, f"edited-{len(os.listdir(self.base))}")
        os.mkdir(target)
        for name in os.listdir(source):
            text = read(os.path.join(source, name))
            if name == "requests.jsonl":
                lines = [json.loads(line) for line in text.splitlines()]
                kept = [line for line in lines if line["case"] != "continuous"]
                text = "".join(json.dumps(line) + "\n" for line in kept + edit([l for l in lines if l["case"] == "continuous"]))
            with open(os.path.join(target, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        return target

    def decide(self, candidate_dir):
        return compare(load_side(self.pm("fcfs"), "continuous"), load_side(candidate_dir, "continuous"))

    def test_complete_trace_has_no_findings(self):
        evidence = check_evidence(load_side(self.pm("priority"), "continuous"))
        self.assertEqual((evidence["arrived"], evidence["in_trace"]), (12, 12))
        self.assertEqual((evidence["duplicated"], evidence["lost"], evidence["unknown"], evidence["missing_metrics"]),
                         ([], [], [], []))

    def test_duplicated_id_is_listed_and_blocks_accept(self):
        candidate = self.edited(lambda lines: lines + [lines[6]])          # I0 twice
        self.assertEqual(check_evidence(load_side(candidate, "continuous"))["duplicated"], ["I0"])
        record = self.decide(candidate)
        self.assertEqual(record["decision"], "tune")
        self.assertIn("candidate: duplicated id(s) I0", record["missing_evidence"])

    def test_lost_id_is_a_hard_failure(self):
        candidate = self.edited(lambda lines: [l for l in lines if l["name"] != "B7"])
        self.assertEqual(check_evidence(load_side(candidate, "continuous"))["lost"], ["B7"])
        record = self.decide(candidate)
        self.assertEqual(record["decision"], "reject")
        self.assertTrue(any("lost (B7)" in h for h in record["hard_failures"]), record["hard_failures"])

    def test_request_that_never_ended_counts_as_lost(self):
        def unfinished(lines):
            lines[0] = dict(lines[0], status="decode", done_at=None)
            return lines
        self.assertEqual(check_evidence(load_side(self.edited(unfinished), "continuous"))["lost"], ["B0"])

    def test_unknown_id_is_listed(self):
        def rename(lines):
            lines[-1] = dict(lines[-1], name="X9")
            return lines
        evidence = check_evidence(load_side(self.edited(rename), "continuous"))
        self.assertEqual((evidence["unknown"], evidence["lost"]), (["X9"], ["B7"]))

    def test_missing_metric_blocks_accept(self):
        """A 1-tick deadline: nobody succeeds, P95 TTFT and TPOT are null -> missing evidence, never accept."""
        baseline = load_side(self.pm("fcfs", "--timeout-ticks", "1"), "continuous")
        candidate = load_side(self.pm("priority", "--timeout-ticks", "1"), "continuous")
        self.assertEqual(check_evidence(candidate)["missing_metrics"], ["p95_ttft", "p95_tpot"])
        self.assertEqual(compare(baseline, candidate)["decision"], "tune")


class DecisionTest(RunsMixin, unittest.TestCase):
    def test_accept_priority_experiment_on_priority_mix(self):
        """continuous, fcfs -> priority (values read off the two summaries, recomputed here):
        P95 TTFT 44 -> 43, throughput 160/69 -> 160/68, order score 13/64 -> 1/2 (gain 0.297),
        batch P95 E2E 59 -> 58: every gate passes."""
        work = self.work_in_temp_dir()
        code, out, err = self.compare_cli(self.pm("fcfs"), self.pm("priority"), "--case", "continuous")
        self.assertEqual(code, 0, err)
        record = json.loads(read(os.path.join(work, "decision.json")))
        self.assertEqual(record["decision"], "accept")
        self.assertTrue(record["priority_experiment"])
        gates = {g["gate"]: g for g in record["gates"]}
        self.assertEqual(gates["first-token order score gain"]["measured"], round(1 / 2 - 13 / 64, 6))
        self.assertEqual(gates["P95 TTFT growth"]["measured"], round(43 / 44 - 1, 6))
        self.assertEqual(gates["P95 TTFT growth"]["threshold"], 0.25)
        self.assertEqual(gates["lowest-priority P95 E2E growth"]["measured"], round(58 / 59 - 1, 6))
        self.assertEqual(record["deltas"]["p95_ttft"], -1)
        self.assertIn("decision: ACCEPT", out)
        self.assertIn("next:", out)

    def test_tune_when_only_some_gates_pass(self):
        run = self.pm("fcfs")
        out_path = os.path.join(self.base, "tune.json")
        code, out, _ = self.compare_cli(run, "--baseline-case", "continuous", "--candidate-case", "continuous+APC",
                                        "--min-throughput-gain", "0.5", "--out", out_path)
        self.assertEqual(code, 0)
        record = json.loads(read(out_path))
        self.assertEqual(record["decision"], "tune")
        self.assertEqual([g["gate"] for g in record["gates"] if g["passed"] is False], ["throughput gain"])
        self.assertIn("FAIL    throughput gain", out)

    def test_reject_when_contract_broken(self):
        run = self.pm("fcfs")
        code, out, _ = self.compare_cli(run, "--baseline-case", "continuous", "--candidate-case",
                                        "continuous+APC+chunk32", "--out", os.path.join(self.base, "d.json"))
        self.assertEqual(code, 0)
        self.assertEqual(json.loads(read(os.path.join(self.base, "d.json")))["decision"], "reject")
        self.assertIn("contract: BROKEN", out)

    def test_dropped_requests_never_accepted(self):
        """priority-mix, deadline 56 ticks, continuous+APC, fcfs -> shortest: the candidate's P95 TTFT
        falls 38 -> 36 and throughput rises, only because one request of 12 timed out (completion
        1 -> 11/12). Even with the completion floor lowered to 0 the fixed 'completion rate change'
        gate keeps it from accept."""
        baseline = load_side(self.pm("fcfs", "--timeout-ticks", "56"), "continuous+APC")
        candidate = load_side(self.pm("shortest", "--timeout-ticks", "56"), "continuous+APC")
        self.assertLess(candidate.summary["p95_ttft"], baseline.summary["p95_ttft"])
        self.assertGreater(candidate.summary["throughput"], baseline.summary["throughput"])
        for thresholds in (Thresholds(), Thresholds(min_completion_rate=0.0)):
            with self.subTest(min_completion_rate=thresholds.min_completion_rate):
                record = compare(baseline, candidate, thresholds)
                self.assertNotEqual(record["decision"], "accept")
                failed = [g["gate"] for g in record["gates"] if g["passed"] is False]
                self.assertIn("completion rate change", failed)

    def test_starving_the_low_class_is_tune(self):
        """Four urgent requests fill the slots at tick 0, one low-priority request L arrives at 1 and
        eight more urgent ones keep arriving (ticks 2-9). FCFS admits L at the first free slot;
        priority admits it only after every urgent request, so L (the lowest class) more than
        doubles its E2E: that gate fails and the decision is tune, never accept."""
        requests = [{"name": f"U{i}", "arrival": max(0, i - 2), "prefix_key": None, "prefix_tokens": 0,
                     "suffix_tokens": 32, "output_tokens": 8, "priority": 0} for i in range(12)]
        requests.insert(4, dict(requests[0], name="L", arrival=1, priority=1))
        path = os.path.join(self.base, "starve.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"requests": requests}, handle)
        baseline = load_side(self.run_dir("st-fcfs", "--workload", path), "continuous")
        candidate = load_side(self.run_dir("st-prio", "--workload", path, "--policy", "priority"), "continuous")
        admitted = {r["name"]: r["admitted_at"] for r in candidate.rows}
        self.assertGreater(admitted["L"], max(v for k, v in admitted.items() if k != "L"))
        record = compare(baseline, candidate)
        low = next(g for g in record["gates"] if g["gate"] == "lowest-priority P95 E2E growth")
        self.assertFalse(low["passed"])
        self.assertGreater(low["measured"], 1.0)
        self.assertEqual(record["decision"], "tune")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class CompareCliTest(RunsMixin, unittest.TestCase):
    def test_default_out_is_the_current_directory_never_a_run(self):
        """compare must not write into a run (or reference) directory unless told to: by default
        decision.json lands in the current directory and both run directories stay as they were."""
        runs = [self.pm("fcfs"), self.pm("priority")]
        before = [sorted(os.listdir(run)) for run in runs]
        work = self.work_in_temp_dir()
        code, out, err = self.compare_cli(*runs, "--case", "continuous")
        self.assertEqual(code, 0, err)
        self.assertEqual([sorted(os.listdir(run)) for run in runs], before)
        self.assertEqual(os.listdir(work), ["decision.json"])
        self.assertIn("wrote decision.json", out)

    def test_default_out_refused_inside_a_run_directory(self):
        """Working inside a run directory (e.g. cd expected/baseline): the default ./decision.json
        would land in the run, so it is refused; an explicit --out there is the user's choice."""
        runs = [self.pm("fcfs"), self.pm("priority")]
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(runs[1])
        code, _, err = self.compare_cli(*runs, "--case", "continuous")
        self.assertEqual(code, 2)
        self.assertIn("the current directory holds a run", err)
        self.assertFalse(os.path.exists(os.path.join(runs[1], "decision.json")))
        self.assertEqual(self.compare_cli(*runs, "--case", "continuous", "--out", "decision.json")[0], 0)
        self.assertTrue(os.path.exists(os.path.join(runs[1], "decision.json")))

    def test_refuses_to_overwrite_decision_without_force(self):
        args = [self.pm("fcfs"), self.pm("priority"), "--case", "continuous"]
        work = self.work_in_temp_dir()
        self.assertEqual(self.compare_cli(*args)[0], 0)
        path = os.path.join(work, "decision.json")
        first = read(path)
        code, _, err = self.compare_cli(*args, "--min-fairness", "0.5")
        self.assertEqual(code, 2)
        self.assertIn("already exists", err)
        self.assertEqual(read(path), first)
        self.assertEqual(self.compare_cli(*args, "--min-fairness", "0.5", "--force")[0], 0)
        self.assertEqual(json.loads(read(path))["decision"], "tune")   # fairness 0 < 0.5
        self.assertEqual(os.listdir(work), ["decision.json"])          # no temporary file left
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o666 & ~_umask())   # not a private 0600 file

    def test_unusable_input_exits_2_with_one_line(self):
        run = self.pm("fcfs")
        table = [
            ([os.path.join(self.base, "nope"), run, "--case", "continuous"], "not a run directory"),
            ([run, self.pm("priority"), "--case", "warp"], "no case 'warp'"),
            ([run, self.pm("priority")], "choose one with --case"),
            ([run, "--case", "continuous"], "needs --baseline-case and --candidate-case"),
            ([run, self.pm("priority"), "--case", "continuous", "--max-ttft-growth", "-1"], "must be a finite number"),
        ]
        for args, words in table:
            with self.subTest(args=args[1:]):
                code, out, err = self.compare_cli(*args)
                self.assertEqual(code, 2)
                self.assertIn(words, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertFalse(os.path.exists(os.path.join(self.pm("priority"), "decision.json")))


if __name__ == "__main__":
    unittest.main()


class BadRunFilesTest(RunsMixin, unittest.TestCase):
    """A run directory edited by hand: every malformed value is exit 2 with one line naming the
    file, the case/line/request and the field (never exit 3, an internal error)."""

    def copy_with(self, filename, edit, policy="fcfs"):
        """A copy of a priority-mix run whose ``filename`` text passes through ``edit``."""
        source = self.pm(policy)
        target = os.path.join(self.base, f"bad-{len(os.listdir(self.base))}")
        os.mkdir(target)
        for name in os.listdir(source):
            text = read(os.path.join(source, name))
            with open(os.path.join(target, name), "w", encoding="utf-8") as handle:
                handle.write(edit(text) if name == filename else text)
        return target

    def json_edit(self, change):
        def edit(text):
            data = json.loads(text)
            change(data)
            return json.dumps(data)
        return edit

    def lines_edit(self, change):
        def edit(text):
            lines = [json.loads(line) for line in text.splitlines()]
            change(lines)
            return "".join(json.dumps(line) + "\n" for line in lines)
        return edit

    def test_malformed_values_exit_2_naming_the_field(self):
        def first_case(key, value):
            return self.json_edit(lambda d: d["cases"][0].__setitem__(key, value))
        table = [
            ("summary.json", first_case("case", 7), "cases[0]: field 'case': must be a string"),
            ("summary.json", self.json_edit(lambda d: d["cases"][1].__setitem__("p95_ttft", "fast")),
             "case 'continuous': field 'p95_ttft': must be a finite number, got \"fast\""),
            ("summary.json", lambda text: "[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
            ("manifest.json", self.json_edit(lambda d: d.__setitem__("config", [1])), "field 'config': must be an object"),
            ("manifest.json", lambda text: "[1, 2]", "manifest.json: must be a JSON object"),
            ("workload.json", self.json_edit(lambda d: d["requests"][3].__setitem__("priority", "high")),
             "request 3 (B3): field 'priority': must be an integer"),
            ("requests.jsonl", self.lines_edit(lambda rows: rows[2].__setitem__("e2e", "x")),
             "requests.jsonl: line 3: field 'e2e': must be a finite number"),
            ("requests.jsonl", self.lines_edit(lambda rows: rows[0].__setitem__("name", 5)),
             "requests.jsonl: line 1: field 'name': must be a string"),
        ]
        candidate = self.pm("priority")
        for filename, edit, words in table:
            with self.subTest(file=filename, words=words):
                bad = self.copy_with(filename, edit)
                for pair in ([bad, candidate], [candidate, bad]):
                    code, out, err = self.compare_cli(*pair, "--case", "continuous", "--out",
                                                      os.path.join(self.base, "never.json"))
                    self.assertEqual(code, 2, err)
                    self.assertIn(words, err)
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
                    self.assertFalse(os.path.exists(os.path.join(self.base, "never.json")))

    def test_nan_metric_is_refused_as_diff_refuses_it(self):
        """The candidate's P95 TTFT is NaN (written as the JSON constant NaN): the program writes
        null for a metric it could not measure, so NaN means an edited file. compare refuses it in
        one line naming the file and the field, as diff does (the same file, the same answer), and
        writes no decision.json."""
        bad = self.copy_with("summary.json", self.json_edit(lambda d: d["cases"][1].__setitem__("p95_ttft", float("nan"))),
                             policy="priority")
        self.assertIn('"p95_ttft": NaN', read(os.path.join(bad, "summary.json")))
        out = os.path.join(self.base, "nan.json")
        code, _, err = self.compare_cli(self.pm("fcfs"), bad, "--case", "continuous", "--out", out)
        self.assertEqual(code, 2, err)
        self.assertIn("summary.json: field 'cases[1].p95_ttft': must be a finite number, got NaN", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertFalse(os.path.exists(out))
        self.assertEqual(run_cli(["diff", self.pm("fcfs"), bad])[0], 2)


class ContractRecordTest(RunsMixin, unittest.TestCase):
    def test_two_scheduler_changes_are_mismatches_not_only_changes(self):
        """continuous vs continuous+APC+chunk32 differ in apc and chunk_tokens: the record must say
        so in mismatches (kind 'scheduler setting') and num_scheduler_changes, not hide it."""
        run = self.pm("fcfs")
        contract = check_contract(load_side(run, "continuous"), load_side(run, "continuous+APC+chunk32"))
        self.assertFalse(contract["ok"])
        self.assertEqual(contract["num_scheduler_changes"], 2)
        self.assertEqual([(m["field"], m["kind"]) for m in contract["mismatches"]],
                         [("apc", "scheduler setting"), ("chunk_tokens", "scheduler setting")])
        self.assertIsNone(contract["change"])

    def test_change_is_inferred_or_declared(self):
        run = self.pm("fcfs")
        sides = load_side(run, "continuous"), load_side(run, "continuous+APC")
        inferred, declared = check_contract(*sides), check_contract(*sides, declared="apc")
        self.assertEqual((inferred["change_inferred"], inferred["declared_change"]), (True, None))
        self.assertEqual((declared["change_inferred"], declared["declared_change"]), (False, "apc"))
        self.assertEqual(inferred["mismatches"], [])
        wrong = check_contract(*sides, declared="policy")
        self.assertEqual([(m["field"], m["kind"]) for m in wrong["mismatches"]], [("apc", "scheduler setting")])
        code, out, _ = self.compare_cli(run, "--baseline-case", "continuous", "--candidate-case", "continuous+APC",
                                        "--out", os.path.join(self.base, "d.json"))
        self.assertIn("one change (inferred, no --change given): apc", out)


class CompareOutTest(RunsMixin, unittest.TestCase):
    def test_unusable_out_paths_name_the_path_given(self):
        """A missing directory, a path under a file and a directory: one line naming the --out
        path as given (never the temporary file), exit 2, nothing written."""
        a_file = os.path.join(self.base, "plain.txt")
        with open(a_file, "w", encoding="utf-8") as handle:
            handle.write("x")
        table = [
            (os.path.join(self.base, "nowhere", "d.json"), "does not exist"),
            (os.path.join(a_file, "d.json"), "is not a directory"),
            (self.base, "is a directory"),
            ("", "output path is empty"),
        ]
        args = [self.pm("fcfs"), self.pm("priority"), "--case", "continuous"]
        for path, words in table:
            with self.subTest(path=path):
                code, _, err = self.compare_cli(*args, "--out", path)
                self.assertEqual(code, 2)
                self.assertIn(words, err)
                self.assertIn(f"error: {path}: " if path else "error: the output path", err)
                self.assertNotIn(".tmp", err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertEqual(sorted(os.listdir(self.base)), ["plain.txt", "pm-fcfs", "pm-priority"])


class ZeroBaselineThroughputTest(RunsMixin, unittest.TestCase):
    def test_a_gain_over_a_baseline_that_emitted_nothing(self):
        """One request of 100 prompt tokens, deadline 5 ticks: with a budget of 8 tokens a step its
        prefill needs 13 steps, so it times out and the baseline emits nothing (throughput 0); with
        128 it is prefilled in one step and done by tick 2. The gain over 0 is infinite: the gate
        passes (inf >= 0) and decision.json says "inf" (JSON has no infinity), exit 0 (it was an
        internal error, exit 3)."""
        workload = os.path.join(self.base, "one.json")
        with open(workload, "w", encoding="utf-8") as handle:
            json.dump({"requests": [{"name": "R0", "arrival": 0, "prefix_key": None, "prefix_tokens": 0,
                                     "suffix_tokens": 100, "output_tokens": 2}]}, handle)
        common = ("--workload", workload, "--engine", "vllm", "--timeout-ticks", "5", "--max-num-seqs", "1")
        a = self.run_dir("a", *common, "--max-num-batched-tokens", "8")
        b = self.run_dir("b", *common, "--max-num-batched-tokens", "128")
        out = os.path.join(self.base, "decision.json")
        code, stdout, err = self.compare_cli(a, b, "--out", out)
        self.assertEqual(code, 0, err)
        gate = next(g for g in json.loads(read(out))["gates"] if g["gate"] == "throughput gain")
        self.assertEqual((gate["measured"], gate["passed"]), ("inf", True))
        self.assertIn("throughput gain", stdout)


class UndecodableNameTest(RunsMixin, unittest.TestCase):
    def test_run_directory_name_with_a_non_utf8_byte(self):
        """A directory named with byte 0xff (Python: the lone surrogate \\udcff) ends up in the
        labels; decision.json must still be written (as an ASCII escape), exit 0, not 3."""
        odd = self.run_dir("pm\udcff", "--scenario", "priority-mix")
        out = os.path.join(self.base, "d.json")
        code, text, err = self.compare_cli(odd, self.pm("priority"), "--case", "continuous", "--out", out)
        self.assertEqual(code, 0, err)
        record = json.loads(read(out))
        self.assertEqual(record["baseline"], "pm\udcff#continuous")
        self.assertIn("pm\\udcff#continuous", text)
