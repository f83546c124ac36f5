"""``explain NAME``: one request's story agrees with requests.jsonl and timeline.jsonl (lab.md §7–8)."""

import json
import os
import re
import shutil
import unittest

from tests.helpers import EXPECTED, PROJECT, assert_bad_input, read, run_cli, temp_dir

BASELINE = os.path.join(EXPECTED, "baseline")


def load(reference: str):
    requests = [json.loads(line) for line in read(os.path.join(EXPECTED, reference, "requests.jsonl")).splitlines()]
    timeline = [json.loads(line) for line in read(os.path.join(EXPECTED, reference, "timeline.jsonl")).splitlines()]
    return ({(r["case"], r["name"]): r for r in requests},
            {(t["case"], t["tick"]): t for t in timeline})


def sections(text: str) -> dict:
    """case -> the lines of its section in the explain output."""
    found, case = {}, None
    for line in text.splitlines():
        match = re.fullmatch(r"== (.+) ==", line)
        if match:
            case = match.group(1)
            found[case] = []
        elif case is not None and line:
            found[case].append(line)
    return found


class ExplainAgreesWithArtifactsTest(unittest.TestCase):
    def check_request(self, reference: str, name: str) -> int:
        """Checks every case's story; returns how many waiting ticks were checked."""
        requests, timeline = load(reference)
        checked = 0
        code, out, err = run_cli(["explain", name, "--artifacts", os.path.join(EXPECTED, reference)])
        self.assertEqual((code, err), (0, ""))
        story = sections(out)
        cases = [case for (case, n) in requests if n == name]
        self.assertEqual(list(story), cases)
        for case in cases:
            with self.subTest(reference=reference, request=name, case=case):
                row, lines = requests[(case, name)], story[case]
                text = "\n".join(lines)
                self.assertIn(f"arrival      tick {row['arrival']}", text)
                if row["admitted_at"] is not None:
                    self.assertIn(f"admission    tick {row['admitted_at']}, ", text)
                if row["first_token_at"] is not None:
                    self.assertIn(f"first token  tick {row['first_token_at']} (TTFT "
                                  f"{row['first_token_at'] - row['arrival']})", text)
                self.assertIn(f"end          tick {row['done_at']}, {row['status']}", text)
                self.assertIn(f"hit tokens   {row['hit_tokens']}", text)
                # Every prefill tick and its tokens, exactly as timeline.jsonl has them.
                told = [(int(t), int(n)) for t, n in re.findall(r"^\s+(?:prefill)?\s+tick (\d+): (\d+) tokens",
                                                                 text, re.M)]
                recorded = sorted((tick, record["prefilled"][name]) for (c, tick), record in timeline.items()
                                  if c == case and name in record["prefilled"])
                self.assertEqual(told, recorded)
                # While it waited: the slot holders and budget used of each grouped tick.
                for first, last, holders, used in re.findall(
                        r"^\s+ticks? (\d+)(?:–(\d+))?\s+slots ([^|]+) \| budget (\d+)/64", text, re.M):
                    for tick in range(int(first), int(last or first) + 1):
                        record = timeline[(case, tick)]
                        # Every active request, the told one included once admitted (issue: it holds a slot).
                        self.assertEqual(holders.split(), record["active"] or ["(none)"])
                        self.assertEqual(int(used), record["budget_used"])
                        checked += 1
        return checked

    def test_every_baseline_request(self):
        checked = sum(self.check_request("baseline", name) for name in ("L0", "S1", "S2", "U3", "S4", "S5", "U6", "S7"))
        self.assertGreater(checked, 100)

    def test_timeouts(self):
        self.assertGreater(sum(self.check_request("deadline30", name) for name in ("L0", "S1", "S7")), 0)

    def test_s7_in_chunk32_waits_behind_l0(self):
        """lab.md §6 and §8: S7 is admitted at 39 (first token 41, TTFT 29); L0 ends at 40, so it
        still holds a slot in ticks 32–38, while S7 waits in the queue."""
        code, out, _ = run_cli(["explain", "S7", "--artifacts", BASELINE, "--case", "continuous+APC+chunk32"])
        self.assertEqual(code, 0)
        lines = sections(out)["continuous+APC+chunk32"]
        self.assertIn("  waiting      ticks 12–38 (27 ticks in the queue, no free slot)", lines)
        self.assertIn("  admission    tick 39, cache hit: 128 prefix tokens skipped", lines)
        self.assertIn("  first token  tick 41 (TTFT 29)", lines)
        covered = set()
        for first, last, holders in re.findall(r"ticks? (\d+)(?:–(\d+))?\s+slots ([^|]+) \|", "\n".join(lines)):
            for tick in range(int(first), int(last or first) + 1):
                if 32 <= tick <= 38:
                    self.assertIn("L0", holders.split())
                    covered.add(tick)
        self.assertEqual(covered, set(range(32, 39)))

    def test_without_timeline_the_story_is_shorter(self):
        directory = temp_dir(self)
        shutil.copy(os.path.join(BASELINE, "requests.jsonl"), directory)
        code, out, _ = run_cli(["explain", "S1", "--artifacts", directory, "--case", "static"])
        self.assertEqual(code, 0)
        self.assertIn("timeline.jsonl is not present", out)
        self.assertIn("admission    tick 32, no cache hit", out)
        self.assertNotIn("while it waited", out)

    def test_admitted_request_is_among_the_slot_holders(self):
        """lab.md §6: in ``continuous`` S1 is admitted at 1 but L0's 512-token prefill takes the whole
        budget (64) in ticks 1–7: S1 holds one of the slots it waits on, so it is listed."""
        code, out, _ = run_cli(["explain", "S1", "--artifacts", BASELINE, "--case", "continuous"])
        self.assertEqual(code, 0)
        lines = sections(out)["continuous"]
        self.assertIn("  no budget    ticks 1–7 (admitted, but the budget was spent before its turn)", lines)
        self.assertIn("    tick 1        slots L0 S1 | budget 64/64: prefill L0 64", lines)

    def test_wrong_case_lists_the_valid_ones(self):
        code, out, err = run_cli(["explain", "S1", "--artifacts", BASELINE, "--case", "chunk32"])
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn("its cases are static, continuous, continuous+APC, continuous+APC+chunk32", err)

    def test_worked_example_of_token_times_is_told(self):
        """lab.md §5's worked example as the ``token-gaps`` scenario with ``--decode-cost 40`` (the
        tick-by-tick derivation is in ``sched.workload.specs._token_gaps``): W1's tokens in chunk32 are
        stamped [2, 3, 4, 14], gaps [1, 1, 10], TPOT 12 / 3 = 4; its decodes of ticks 4–12 are
        skipped while L0 (ahead in the active list) takes 40 of the 64 units."""
        run = os.path.join(temp_dir(self), "run")
        code, _, err = run_cli(["--scenario", "token-gaps", "--decode-cost", "40", "--artifacts", run])
        self.assertEqual(code, 0, err)
        code, out, _ = run_cli(["explain", "W1", "--artifacts", run, "--case", "continuous+APC+chunk32"])
        self.assertEqual(code, 0)
        lines = sections(out)["continuous+APC+chunk32"]
        self.assertIn("  token times  ticks 2, 3, 4, 14: gaps 1, 1, 10; TPOT (14 − 2) / 3 = 4, largest gap 10", lines)
        self.assertIn("  no budget    ticks 4–12 (decoding, but the budget was spent before its turn)", lines)
        self.assertIn("    ticks 4–12    slots L0 W1 | budget 40/64: decode L0", lines)

    def test_bad_input_exits_2_with_one_line(self):
        empty = temp_dir(self)
        cases = {
            "unknown request": (["explain", "S9", "--artifacts", BASELINE], "S9"),
            "unknown case": (["explain", "S1", "--artifacts", BASELINE, "--case", "nope"], "nope"),
            "missing directory": (["explain", "S1", "--artifacts", os.path.join(empty, "gone")], "gone"),
            "no requests.jsonl": (["explain", "S1", "--artifacts", empty], "requests.jsonl"),
            "no --artifacts": (["explain", "S1"], "--artifacts"),
        }
        for label, (argv, mention) in cases.items():
            with self.subTest(label):
                assert_bad_input(self, argv, mention)

    def test_bad_fields_exit_2_naming_file_line_request_and_field(self):
        """Values the tester found crashing explain with exit 3; now one line, exit 2."""
        def edit(name, case, field, value):
            def change(record):
                if record.get("case") == case and (record.get("name") == name or name in record.get("active", [])):
                    record[field] = value
                return record
            return change
        cases = {
            "first_token_at a string": ("requests.jsonl", edit("S7", "static", "first_token_at", "x"),
                                        "field 'first_token_at' must be a tick or null"),
            "arrival a string": ("requests.jsonl", edit("S7", "static", "arrival", "1"), "field 'arrival'"),
            "arrival true": ("requests.jsonl", edit("S7", "static", "arrival", True), "field 'arrival'"),
            "status missing": ("requests.jsonl", lambda r: {k: v for k, v in r.items() if k != "status"}
                               if r.get("name") == "S7" else r, "field 'status' is missing"),
            "prefilled a list": ("timeline.jsonl", edit("S7", "static", "prefilled", [1]), "field 'prefilled'"),
            "active a string": ("timeline.jsonl", lambda r: dict(r, active="S7") if "S7" in r.get("active", []) else r,
                                "field 'active'"),
        }
        for label, (name, change, mention) in cases.items():
            with self.subTest(label):
                run = os.path.join(temp_dir(self), "run")
                shutil.copytree(BASELINE, run)
                path = os.path.join(run, name)
                rows = [change(json.loads(line)) for line in read(path).splitlines()]
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write("".join(json.dumps(row) + "\n" for row in rows))
                code, out, err = run_cli(["explain", "S7", "--artifacts", run])
                self.assertEqual((code, out), (2, ""))
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertRegex(err, re.escape(path) + r": line \d+")
                self.assertIn(mention, err)

    def test_imported_real_run_is_refused(self):
        """import-results gives times in milliseconds and no timeline: explain would print ms as
        ticks (the tester saw "ticks 0.0–-0.979"), so it says it tells simulated runs only."""
        imported = os.path.join(temp_dir(self), "real")
        source = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090", "requests.jsonl")
        self.assertEqual(run_cli(["import-results", source, "--artifacts", imported])[0], 0)
        code, out, err = run_cli(["explain", "bench-0", "--artifacts", imported])
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("simulated runs only", err)

    def test_static_wait_is_the_running_batch_not_a_full_house(self):
        """Baseline static (lab.md §4, §6): L0 arrives at 0 and is admitted alone, a batch of one; S1
        arrives at 1 and waits until the batch ends (admitted at 32) although only 1 of the 4 slots
        is taken. Continuous: S7 waits 12–38 with all 4 slots taken (no free slot)."""
        _, timeline = load("baseline")
        for tick in range(1, 32):
            self.assertEqual(timeline[("static", tick)]["active"], ["L0"])
        code, out, _ = run_cli(["explain", "S1", "--artifacts", BASELINE, "--case", "static"])
        self.assertEqual(code, 0)
        self.assertIn("  waiting      ticks 1–31 (31 ticks in the queue, static batch still running)",
                      sections(out)["static"])
        self.assertNotIn("no free slot", out)
        for tick in range(12, 39):
            self.assertEqual(len(timeline[("continuous+APC+chunk32", tick)]["active"]), 4)


    def reduced_run(self, detail: str) -> str:
        """A ``--timeline DETAIL`` run of two requests named like a case and a timeline field."""
        directory = temp_dir(self)
        workload = os.path.join(directory, "workload.json")
        with open(workload, "w", encoding="utf-8") as handle:
            json.dump({"requests": [
                {"name": "static", "arrival": 0, "prefix_key": None, "prefix_tokens": 0, "suffix_tokens": 40,
                 "output_tokens": 4},
                {"name": "active", "arrival": 1, "prefix_key": None, "prefix_tokens": 0, "suffix_tokens": 20,
                 "output_tokens": 3}]}, handle)
        run = os.path.join(directory, "run")
        self.assertEqual(run_cli(["--workload", workload, "--timeline", detail, "--artifacts", run])[0], 0)
        return run

    def test_counts_and_off_runs_tell_requests_jsonl_only(self):
        """lab.md §3 by hand (budget 64, decode 8, 4 slots). ``static`` (arrival 0, prompt 40, 4 output
        tokens): prefill 40 at tick 0, decodes ticks 1–4, tokens stamped 2–5, ends at 5; with chunk32 it
        prefills 32 + 8 in ticks 0–1, tokens 3–6. ``active`` (arrival 1, prompt 20, 3 tokens) in the
        static case waits for the batch: ticks 1–4, admitted at 5, prefill 20 at 5, tokens 7–9.
        A counts record (``"case": "static"``, ``"active": 1``) must never be read as a full record
        (it crashed with "field 'active' must be a list of names")."""
        for detail in ("counts", "off"):
            with self.subTest(detail=detail):
                run = self.reduced_run(detail)
                code, out, err = run_cli(["explain", "static", "--artifacts", run])
                self.assertEqual((code, err), (0, ""))
                self.assertIn(f"This run's timeline is '{detail}' (manifest.json): per-tick detail (prefill ticks, "
                              "who held the slots) needs a run with --timeline full.", out)
                story = sections(out)
                self.assertEqual(list(story), ["static", "continuous", "continuous+APC", "continuous+APC+chunk32"])
                self.assertEqual(story["static"], [
                    "  arrival      tick 0", "  admission    tick 0, no cache hit", "  first token  tick 2 (TTFT 2)",
                    "  end          tick 5, ok, 4 of 4 tokens (E2E 5)", "  hit tokens   0",
                    "  token runs   ticks 2–5 (4 tokens in 1 run)"])
                self.assertIn("  token runs   ticks 3–6 (4 tokens in 1 run)", story["continuous+APC+chunk32"])
                self.assertNotIn("tick not in timeline.jsonl", out)
                code, out, err = run_cli(["explain", "active", "--artifacts", run, "--case", "static"])
                self.assertEqual((code, err), (0, ""))
                self.assertEqual(sections(out)["static"], [
                    "  arrival      tick 1",
                    "  waiting      ticks 1–4 (4 ticks in the queue, static batch still running)",
                    "  admission    tick 5, no cache hit", "  first token  tick 7 (TTFT 6)",
                    "  end          tick 9, ok, 3 of 3 tokens (E2E 8)", "  hit tokens   0",
                    "  token runs   ticks 7–9 (3 tokens in 1 run)"])

    def test_token_runs_telling_more_than_the_run_exit_2(self):
        """A tampered ``token_runs`` count of 10**9 was expanded into 10**9 stamps (the process was
        killed for memory). ``static`` of :meth:`reduced_run` emits 4 tokens stamped 2–5 and ends at
        5 (lab.md §3 by hand, above); makespan 9 in the static case (``active`` ends at tick 9)."""
        def edit(rows, change):
            return [change(row) if (row["case"], row["name"]) == ("static", "static") else row for row in rows]
        cases = {
            "count past output_tokens_emitted": (lambda r: dict(r, token_runs=[[2, 10**9]]),
                                                 "field 'token_runs': 1000000000 tokens, but output_tokens_emitted is 4"),
            "a stamp after done_at": (lambda r: dict(r, token_runs=[[2, 3], [9, 1]]),
                                      "field 'token_runs': a token stamped 9, after done_at 5"),
            "no emitted count, past the makespan": (
                lambda r: dict({k: v for k, v in r.items() if k != "output_tokens_emitted"}, done_at=None,
                               token_runs=[[2, 10**9]]), "more than the case's makespan (9 ticks"),
        }
        for label, (change, mention) in cases.items():
            with self.subTest(label):
                run = self.reduced_run("counts")
                path = os.path.join(run, "requests.jsonl")
                rows = edit([json.loads(line) for line in read(path).splitlines()], change)
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write("".join(json.dumps(row) + "\n" for row in rows))
                code, out, err = run_cli(["explain", "static", "--artifacts", run])
                self.assertEqual((code, out), (2, ""))
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(path, err)
                self.assertIn("request 'static'", err)
                self.assertIn(mention, err)

    def test_unknown_timeline_detail_in_manifest_exits_2(self):
        run = os.path.join(temp_dir(self), "run")
        shutil.copytree(BASELINE, run)
        path = os.path.join(run, "manifest.json")
        manifest = json.loads(read(path))
        manifest["timeline"] = "partial"
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle)
        code, out, err = run_cli(["explain", "S7", "--artifacts", run])
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("manifest.json: field 'timeline' must be one of full, counts, off", err)


if __name__ == "__main__":
    unittest.main()
