"""``diff RUN_A RUN_B``: request-by-request differences of two runs, checked by hand (README §12.5)."""

import json
import os
import shutil
import unittest

from sched.analysis.rundiff import diff_runs
from tests.helpers import EXPECTED, assert_bad_input, read, run_cli, temp_dir

BASELINE = os.path.join(EXPECTED, "baseline")


def u6_640(test: unittest.TestCase) -> str:
    """The course exercise (README §8, exercise 6): baseline with U6's suffix 160 -> 640, replayed."""
    base = temp_dir(test)
    data = json.loads(read(os.path.join(BASELINE, "workload.json")))
    data["requests"][6]["suffix_tokens"] = 640
    edited = os.path.join(base, "u6.json")
    with open(edited, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    run = os.path.join(base, "u6-640")
    code, _, err = run_cli(["--workload", edited, "--artifacts", run])
    test.assertEqual(code, 0, err)
    return run


class U6ExerciseTest(unittest.TestCase):
    def test_continuous_case_by_hand(self):
        """lab.md §3 in the continuous case (budget 64, decode 8). Up to tick 32 both runs are the
        same: U6 (arrival 11) is admitted at 32, behind S4 and S5 in the active list. Baseline: U6
        prefills 32 at tick 33, then 48 a tick (64 minus the decodes of S4 and S5) at 34 and 35 and
        the last 32 at 36: 32 + 48 + 48 + 32 = 160, first token 38 (TTFT 27), end 53 (16 tokens).
        640 tokens: 32 at tick 33, 48 in each of ticks 34-45 (12 x 48 = 576), the last 32 at 46:
        first token 48 (+10, TTFT 37), end 63 (+10). S7 (arrival 12, admitted 32, a miss: no APC)
        prefilled 16 at tick 36 in the baseline; now it starts with the 16 left at tick 46, then 48,
        48 and 32 (144 in all) in ticks 47-49: first token 51 instead of 42 (+9, TTFT 39), end 66.
        Nobody else changes: L0..S5 ended or were ahead of U6. P95 TTFT = max of 8 = 30 -> 39."""
        result = diff_runs(BASELINE, u6_640(self))
        self.assertEqual(result.workload, ["U6: suffix_tokens 160 -> 640"])
        self.assertEqual(result.config, [])
        rows = result.requests["continuous"]
        self.assertEqual([name for name, *_ in rows], ["U6", "S7"])  # largest change first
        self.assertEqual(rows[0], ("U6", "ok", "ok", {"first_token_at": (38, 48), "done_at": (53, 63),
                                                       "ttft": (27, 37), "e2e": (42, 52)}))
        self.assertEqual(rows[1], ("S7", "ok", "ok", {"first_token_at": (42, 51), "done_at": (57, 66),
                                                       "ttft": (30, 39), "e2e": (45, 54)}))
        summary = {case: (a, b) for case, a, b in result.summaries}["continuous"]
        self.assertEqual((summary[0]["p95_ttft"], summary[1]["p95_ttft"]), (30, 39))
        self.assertTrue(result.any)

    def test_command_prints_the_workload_change_and_exits_1(self):
        code, out, err = run_cli(["diff", BASELINE, u6_640(self), "--case", "continuous"])
        self.assertEqual((code, err), (1, ""))
        self.assertIn("  U6: suffix_tokens 160 -> 640", out)
        self.assertIn("configuration: same", out)
        self.assertIn("  U6  first token 38 -> 48 (+10), end 53 -> 63 (+10), TTFT 27 -> 37 (+10), E2E 42 -> 52 (+10)",
                      out)
        self.assertIn("== continuous ==  2 requests changed, largest change first", out)
        self.assertNotIn("== static ==", out)


class DiffTest(unittest.TestCase):
    def test_a_run_against_itself_has_no_difference(self):
        code, out, _ = run_cli(["diff", BASELINE, BASELINE])
        self.assertEqual(code, 0)
        self.assertIn("workload: same requests", out)
        self.assertEqual(out.count("no request changed"), 4)

    def test_priority_policy_matches_the_handbook(self):
        """docs/handbook/priority-and-compare.md §11.2 (numbers checked there by hand against the timeline): in continuous, I0-I3's
        TTFTs go from FCFS [30, 31, 39, 38] to priority [19, 22, 23, 22]."""
        base = temp_dir(self)
        fcfs, prio = os.path.join(base, "fcfs"), os.path.join(base, "prio")
        self.assertEqual(run_cli(["--scenario", "priority-mix", "--artifacts", fcfs])[0], 0)
        self.assertEqual(run_cli(["--scenario", "priority-mix", "--policy", "priority", "--artifacts", prio])[0], 0)
        result = diff_runs(fcfs, prio, "continuous")
        self.assertEqual(result.config, ['policy "fcfs" -> "priority"'])
        ttfts = {name: fields["ttft"] for name, _, _, fields in result.requests["continuous"] if "ttft" in fields}
        self.assertEqual({n: ttfts[n] for n in ("I0", "I1", "I2", "I3")},
                         {"I0": (30, 19), "I1": (31, 22), "I2": (39, 23), "I3": (38, 22)})

    def test_status_changes_rank_first(self):
        """deadline30 (lab.md §8) against baseline: in continuous 3 of 8 succeed; the 5 that time out
        come first (their TTFT becomes none), before any request that only moved in time."""
        result = diff_runs(BASELINE, os.path.join(EXPECTED, "deadline30"), "continuous")
        rows = result.requests["continuous"]
        statuses = [(a, b) for _, a, b, _ in rows]
        self.assertEqual(statuses[:5], [("ok", "timeout")] * 5)
        self.assertTrue(all(s == ("ok", "ok") for s in statuses[5:]))
        self.assertEqual(result.config, ["timeout_ticks none -> 30"])

    def test_requests_only_in_one_run_are_listed(self):
        base = temp_dir(self)
        runs = []
        for label, names in (("a", ("X", "Y")), ("b", ("X", "Z"))):
            workload = os.path.join(base, f"{label}.json")
            with open(workload, "w", encoding="utf-8") as handle:
                json.dump({"requests": [{"name": n, "arrival": 0, "prefix_key": None, "prefix_tokens": 0,
                                         "suffix_tokens": 4, "output_tokens": 2} for n in names]}, handle)
            runs.append(os.path.join(base, label))
            self.assertEqual(run_cli(["--workload", workload, "--artifacts", runs[-1]])[0], 0)
        result = diff_runs(*runs)
        self.assertEqual(result.workload, ["only in A: Y", "only in B: Z"])
        # X is first in both workloads and both prompts fit one tick: X is the same request in both.
        self.assertTrue(all(name != "X" for rows in result.requests.values() for name, *_ in rows))

    def test_unusable_input_exits_2_with_one_line(self):
        base = temp_dir(self)
        broken = os.path.join(base, "broken")
        shutil.copytree(BASELINE, broken)
        with open(os.path.join(broken, "requests.jsonl"), "a", encoding="utf-8") as handle:
            handle.write('{"case": "static", "name": "S1", "ttft": "x"}\n')
        no_requests = os.path.join(base, "no-requests")
        shutil.copytree(BASELINE, no_requests)
        os.remove(os.path.join(no_requests, "requests.jsonl"))
        real = os.path.join(base, "real")
        shutil.copytree(BASELINE, real)
        with open(os.path.join(real, "manifest.json"), "w", encoding="utf-8") as handle:
            json.dump({"kind": "real"}, handle)
        cases = {
            "missing directory": ([os.path.join(base, "gone"), BASELINE], "gone"),
            "field of the wrong type": ([BASELINE, broken], "field 'ttft'"),
            "no requests.jsonl": ([no_requests, BASELINE], "requests.jsonl"),
            "imported real run": ([real, BASELINE], "real"),
            "unknown case": ([BASELINE, BASELINE, "--case", "chunk32"], "continuous+APC+chunk32"),
            "one directory only": ([BASELINE], "RUN_B"),
        }
        for label, (argv, mention) in cases.items():
            with self.subTest(label):
                assert_bad_input(self, ["diff", *argv], mention)

    def test_tampered_runs_are_refused_naming_file_request_and_field(self):
        """A hand-edited run B: the summary is checked by compare's validator, every request line
        must be the one line of a workload request in a summary case (lab.md §7)."""
        def summary(field, value):
            def edit(run):
                path = os.path.join(run, "summary.json")
                data = json.loads(read(path))
                data["cases"][0][field] = value
                with open(path, "w", encoding="utf-8") as handle:
                    json.dump(data, handle)
            return edit

        def line(number, field=None, value=None, extra=None):
            def edit(run):
                path = os.path.join(run, "requests.jsonl")
                lines = read(path).splitlines(keepends=True)
                row = json.loads(lines[number - 1])
                if extra is not None:
                    lines.append(json.dumps({**row, "name": extra}) + "\n")
                elif field is None:
                    del lines[number - 1]
                else:
                    lines[number - 1] = json.dumps({**row, field: value}) + "\n"
                with open(path, "w", encoding="utf-8") as handle:
                    handle.writelines(lines)
            return edit

        cases = {
            "P95 TTFT a string": (summary("p95_ttft", "56"), "summary.json: case 'static': field 'p95_ttft'"),
            "arrived a string": (summary("arrived", "8"), "summary.json: case 'static': field 'arrived'"),
            "hit tokens a list": (summary("hit_tokens", [1]), "summary.json: case 'static': field 'hit_tokens'"),
            "negative P95 TTFT": (summary("p95_ttft", -5), "field 'p95_ttft': must be >= 0, got -5"),
            "unknown case": (line(1, "case", "bogus"), "requests.jsonl: line 1 (request 'L0'): field 'case'"),
            "two lines of one name": (line(2, "name", "L0"), "requests.jsonl: line 2 (request 'L0'): field 'name'"),
            "request not in the workload": (line(1, extra="ZZ"), "(request 'ZZ'): field 'name'"),
            "missing line": (line(1), "requests.jsonl: case 'static' (request 'L0')"),
        }
        base = temp_dir(self)
        for label, (edit, mention) in cases.items():
            with self.subTest(label):
                run = os.path.join(base, label.replace(" ", "-"))
                shutil.copytree(BASELINE, run)
                edit(run)
                assert_bad_input(self, ["diff", BASELINE, run], mention)


if __name__ == "__main__":
    unittest.main()


class BoundedDiffTest(unittest.TestCase):
    """``diff --top N`` keeps only the N largest changes per case (the rest counted): the same
    rows and the same report as keeping every change; each requests.jsonl is read once."""

    def test_top_keeps_the_largest_and_counts_the_rest(self):
        from sched.analysis import rundiff, rundiff_input
        other = os.path.join(EXPECTED, "deadline30")
        full = diff_runs(BASELINE, other)
        self.assertGreater(sum(map(len, full.requests.values())), 3)
        for top in (1, 2, 3, 100):
            with self.subTest(top=top):
                kept = diff_runs(BASELINE, other, top=top)
                for case, rows in full.requests.items():
                    self.assertEqual(kept.requests[case], rows[:top])
                    self.assertEqual(len(rows[:top]) + kept.more.get(case, 0), len(rows))
                self.assertEqual(rundiff.format_diff(kept, top), rundiff.format_diff(full, top))
        opened = []
        real = rundiff_input.open_regular
        try:
            rundiff_input.open_regular = lambda path, *a, **k: opened.append(os.path.basename(path)) or real(path, *a, **k)
            diff_runs(BASELINE, other, top=2)
        finally:
            rundiff_input.open_regular = real
        # each requests.jsonl read once (run B's workload.json is opened too: compared with A's chunk by chunk)
        self.assertEqual([name for name in opened if name == "requests.jsonl"], ["requests.jsonl", "requests.jsonl"])
        self.assertLessEqual(opened.count("workload.json"), 1)
