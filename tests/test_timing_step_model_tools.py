"""explain, compare and diff on ``--step-model`` runs (vllm-engine.md §6): times in ms.

A step-model run keeps the engine's clock in whole µs (requests.jsonl's tick fields) and every
time also in ms (its ``*_ms`` fields, summary.json, table.txt). The tools that read artifacts must
speak ms and hold the files to each other in ms.

The fixture is a hand-written step model (``step_ms = 2 + 0.25·prompt + 0.5·decode``) on the
built-in baseline workload under the tight settings of tests/test_vllm_cli.py (64 tokens, 4 seqs,
chunk cap 32, prefix caching, 41 blocks), arrivals read as ms (the workload has no ``tick_ms``).
By hand: the first step schedules 64 prompt tokens of L0 (as the tick run's first step does), so
it lasts 2 + 0.25 × 64 = 18 ms; S1 arrives at 1 ms, joins the first step starting at or after
1 ms, the one at 18 ms, where it is admitted (as in the tick run, at the second step): it waits
17 ms.
"""

import json
import math
import os
import shutil
import unittest

from tests.helpers import PROJECT, assert_bad_input, read, run_cli, temp_dir

TIGHT = ["--engine", "vllm", "--max-num-batched-tokens", "64", "--max-num-seqs", "4",
         "--long-prefill-token-threshold", "32", "--enable-prefix-caching", "--num-gpu-blocks", "41"]
STEP_MODEL = {"kind": "step-model", "engine": "vllm", "step_ms": {"a": 2.0, "b": 0.25, "c": 0.5},
              "settings": {"num_gpu_blocks": 41, "block_size": 16, "max_num_batched_tokens": 64, "max_num_seqs": 4,
                           "long_prefill_token_threshold": 32, "enable_prefix_caching": True, "policy": "fcfs"},
              "fitted_on": {"model": "a hand-written model", "device": "no GPU"}}
REAL_RUN = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090-run")


def ms_text(value) -> str:
    """A time in ms as the tools print it: whole µs, trailing zeros dropped (241.25, 1953)."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def nearest_rank(values, p):
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def lines_of(path: str) -> list[dict]:
    return [json.loads(line) for line in read(path).splitlines()]


class _Holder(unittest.TestCase):
    def runTest(self):
        pass


class StepModelToolsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.holder = _Holder()
        cls.base = temp_dir(cls.holder)
        cls.model = os.path.join(cls.base, "step-model.json")
        with open(cls.model, "w", encoding="utf-8") as out:
            json.dump(STEP_MODEL, out)
        cls.full, cls.wide = os.path.join(cls.base, "full"), os.path.join(cls.base, "wide")
        for target, extra in ((cls.full, ["--timeline", "full"]), (cls.wide, ["--num-gpu-blocks", "60"])):
            code, _, err = run_cli(["--engine", "vllm", "--step-model", cls.model, *extra, "--artifacts", target])
            assert code == 0, err

    @classmethod
    def tearDownClass(cls):
        cls.holder.doCleanups()

    def copy(self, source: str) -> str:
        target = os.path.join(temp_dir(self), "run")
        shutil.copytree(source, target)
        return target

    def test_summary_detail_columns_are_in_ms(self):
        """summary.json says time_unit ms: its mean/median/P90/P99 columns are ms too (the ok lines'
        ttft_ms, e2e_ms, queue_wait_ms; nearest rank), never the µs of the engine's clock."""
        summary = json.loads(read(os.path.join(self.full, "summary.json")))
        self.assertEqual(summary["time_unit"], "ms")
        row = summary["cases"][0]
        ok = [r for r in lines_of(os.path.join(self.full, "requests.jsonl")) if r["status"] == "ok"]
        for metric in ("ttft", "e2e", "queue_wait"):
            values = [r[metric + "_ms"] for r in ok]
            with self.subTest(metric=metric):
                self.assertAlmostEqual(row[f"mean_{metric}"], sum(values) / len(values), places=3)
                self.assertAlmostEqual(row[f"p90_{metric}"], nearest_rank(values, 90), places=3)
                self.assertAlmostEqual(row[f"p99_{metric}"], nearest_rank(values, 99), places=3)
                self.assertEqual(summary["field_units"][f"p90_{metric}"], "ms")
        self.assertEqual(summary["field_units"]["mean_tpot"], "ms per output token")
        self.assertLess(row["mean_tpot"], row["p99_tpot"] + 1e-9)
        self.assertLess(row["p99_itl"], row["p95_e2e"])   # one gap between tokens, in ms

    def test_busy_fraction_is_the_steps_time_over_the_makespan_or_unknown(self):
        """busy_fraction = the steps' durations (timeline.jsonl's duration, whole µs) over the makespan
        (ms); with --timeline off there are no step records: unknown (null, NA in the CSV), never 0."""
        row = json.loads(read(os.path.join(self.full, "summary.json")))["cases"][0]
        busy_us = sum(r["duration"] for r in lines_of(os.path.join(self.full, "timeline.jsonl")))
        self.assertAlmostEqual(row["busy_fraction"], busy_us / 1000 / row["makespan"], places=6)
        off = os.path.join(temp_dir(self), "off")
        code, _, err = run_cli(["--engine", "vllm", "--step-model", self.model, "--timeline", "off", "--artifacts", off])
        self.assertEqual(code, 0, err)
        row = json.loads(read(os.path.join(off, "summary.json")))["cases"][0]
        self.assertIsNone(row["busy_fraction"])
        self.assertIsNone(row["budget_utilization"])

    def test_counts_picture_draws_each_preemption_window(self):
        """timeline.svg of a counts run: each preempted request's lane has its first wait (grey
        ``waiting``) and, per preemption, a ``preempted`` span (pink, as in the tick picture of a
        vLLM run) up to its next token (queue wait and recompute together); the full run draws
        ``preempted`` up to the step that schedules it again, then ``recompute`` to its next token."""
        counts = os.path.join(temp_dir(self), "counts")
        self.assertEqual(run_cli(["--engine", "vllm", "--step-model", self.model, "--timeline", "counts",
                                  "--artifacts", counts])[0], 0)
        rows = {r["name"]: r for r in lines_of(os.path.join(counts, "requests.jsonl")) if r["preempted_at"]}
        self.assertTrue(rows)
        for directory, what, recompute in ((counts, "back in the queue and recomputed until its next token", False),
                                           (self.full, "back in the queue until", True)):
            svg = read(os.path.join(directory, "timeline.svg"))
            for name, row in rows.items():
                with self.subTest(run=os.path.basename(directory), request=name):
                    lane = svg[svg.index(f'<g data-request="{name}">'):]
                    lane = lane[:lane.index("</g>")]
                    self.assertEqual(lane.count('data-phase="waiting"'), 1)
                    self.assertEqual(lane.count('data-phase="preempted" '), len(row["preempted_at"]))
                    self.assertEqual(lane.count('data-mark="preemption"'), len(row["preempted_at"]))
                    self.assertIn('fill="#f4c6dc"', lane)   # the pink of "preempted" in every picture
                    self.assertEqual('data-phase="recompute"' in lane, recompute)
                    self.assertIn(what, lane)

    # --- explain -------------------------------------------------------------------------------

    def test_explain_tells_a_full_step_model_run_in_ms(self):
        """Every queued request is told (no 'files disagree'), in ms; the clock is named once."""
        rows = lines_of(os.path.join(self.full, "requests.jsonl"))
        for row in rows:
            with self.subTest(request=row["name"]):
                code, story, err = run_cli(["explain", row["name"], "--artifacts", self.full])
                self.assertEqual(code, 0, err)
                self.assertIn(f"(TTFT {ms_text(row['ttft_ms'])} ms)", story)
                self.assertIn(f"(E2E {ms_text(row['e2e_ms'])} ms)", story)
                self.assertNotIn("tick", story)
                self.assertNotIn("microsecond", story)
                self.assertEqual(story.count("step model's clock"), 1)
                self.assertIn("2 + 0.25*prompt + 0.5*decode ms", story)
        code, story, _ = run_cli(["explain", "S1", "--artifacts", self.full])
        self.assertIn("  arrival      1 ms\n", story)
        self.assertIn("  waiting      1–18 ms (17 ms in the queue", story)
        self.assertIn("  admission    18 ms, cache hit", story)

    def test_explain_counts_the_steps_of_a_recompute(self):
        """A preempted request: the preemption in ms, the recompute as a count of steps, read from
        timeline.jsonl (the steps scheduling it after it was preempted, before its next token)."""
        rows = [r for r in lines_of(os.path.join(self.full, "requests.jsonl")) if r["preempted_at"]]
        self.assertTrue(rows)
        steps = lines_of(os.path.join(self.full, "timeline.jsonl"))
        for row in rows:
            with self.subTest(request=row["name"]):
                code, story, err = run_cli(["explain", row["name"], "--artifacts", self.full])
                self.assertEqual(code, 0, err)
                at = row["preempted_at"][0]
                following = [t for t in row["token_times"] if t > at]
                recompute = [s for s in steps if row["name"] in s["scheduled"] and s["tick"] > at
                             and s["tick"] + s["duration"] <= following[0]]
                count = len(recompute)
                self.assertIn(f"  preempted    at {ms_text(at / 1000)} ms to free KV blocks", story)
                self.assertIn(f"from {ms_text(recompute[0]['start_ms'])} ms ({count} step{'s' if count > 1 else ''})",
                              story)

    def test_explain_still_refuses_a_tampered_step_model_run(self):
        rows = lines_of(os.path.join(self.full, "requests.jsonl"))
        s1 = next(r for r in rows if r["name"] == "S1")
        cases = {
            "admission inside a step": ("admitted_at", s1["admitted_at"] + 1, "starts no step"),
            "first token inside a step": ("first_token_at", s1["first_token_at"] - 1, "ends no step"),
            "end inside a step": ("done_at", s1["done_at"] + 1, "ends no step"),
            "end after the makespan": ("done_at", 10**15, "makespan"),
        }
        for label, (field, value, mention) in cases.items():
            with self.subTest(label):
                run = self.copy(self.full)
                with open(os.path.join(run, "requests.jsonl"), "w", encoding="utf-8") as out:
                    for row in rows:
                        out.write(json.dumps(dict(row, **{field: value}) if row["name"] == "S1" else row) + "\n")
                assert_bad_input(self, ["explain", "S1", "--artifacts", run], mention)

    # --- compare -------------------------------------------------------------------------------

    def test_compare_two_step_model_runs_in_ms(self):
        out = os.path.join(temp_dir(self), "d.json")
        code, stdout, err = run_cli(["compare", self.full, self.wide, "--out", out])
        self.assertEqual(code, 0, err)
        record = json.loads(read(out))
        self.assertEqual(record["units"], "ms")
        self.assertTrue(record["contract"]["comparable"])
        self.assertEqual(record["contract"]["change"], {"field": "num_gpu_blocks", "baseline": 41, "candidate": 60})
        p95 = [nearest_rank([r["ttft_ms"] for r in lines_of(os.path.join(d, "requests.jsonl"))], 95)
               for d in (self.full, self.wide)]
        self.assertAlmostEqual(record["deltas"]["p95_ttft"], p95[1] - p95[0], places=3)

    def test_compare_still_refuses_an_edited_summary(self):
        run = self.copy(self.full)
        path = os.path.join(run, "summary.json")
        summary = json.loads(read(path))
        summary["cases"][0]["p50_ttft"] += 1
        with open(path, "w", encoding="utf-8") as out:
            json.dump(summary, out)
        assert_bad_input(self, ["compare", run, self.wide, "--out", os.path.join(temp_dir(self), "d.json")],
                         "the two files disagree")

    def test_compare_a_real_run_with_its_prediction(self):
        """calibrate on the first 20 requests of the real run, predict, import the same 20: the two
        sides are in ms from the server's queue time, so gates and deltas are formed; the P95 TTFT
        delta is the prediction's (ttft_ms) minus the measured one (first_token_ts − queued_ts)."""
        base = temp_dir(self)
        with open(os.path.join(REAL_RUN, "requests.jsonl"), encoding="utf-8") as handle:
            raw = [json.loads(line) for line in handle][:20]
        with open(os.path.join(base, "requests.jsonl"), "w", encoding="utf-8") as out:
            out.writelines(json.dumps(r) + "\n" for r in raw)
        meta = json.loads(read(os.path.join(REAL_RUN, "meta.json")))
        meta["num_requests"] = 20
        with open(os.path.join(base, "meta.json"), "w", encoding="utf-8") as out:
            json.dump(meta, out)
        run, cal, pred, real = (os.path.join(base, n) for n in ("requests.jsonl", "cal", "pred", "real"))
        self.assertEqual(run_cli(["calibrate", run, "--train-first", "10", "--out", cal])[0], 0)
        code, _, err = run_cli(["--engine", "vllm", "--workload", os.path.join(cal, "workload.json"),
                                "--step-model", os.path.join(cal, "step-model.json"), "--artifacts", pred])
        self.assertEqual(code, 0, err)
        self.assertEqual(run_cli(["import-results", run, "--artifacts", real])[0], 0)
        out = os.path.join(base, "d.json")
        code, stdout, err = run_cli(["compare", real, pred, "--out", out])
        self.assertEqual(code, 0, err)
        record = json.loads(read(out))
        self.assertEqual(record["units"], "ms")
        self.assertTrue(record["contract"]["comparable"])
        measured = nearest_rank([(r["first_token_ts"] - r["queued_ts"]) * 1000 for r in raw], 95)
        predicted = nearest_rank([r["ttft_ms"] for r in lines_of(os.path.join(pred, "requests.jsonl"))], 95)
        self.assertAlmostEqual(record["deltas"]["p95_ttft"], predicted - measured, delta=0.002)

    # --- diff ----------------------------------------------------------------------------------

    def test_diff_of_two_step_model_runs_is_in_ms_throughout(self):
        code, text, err = run_cli(["diff", self.full, self.wide])
        self.assertEqual(code, 1, err)
        self.assertIn("(B − A in ms, hits in tokens;", text)
        self.assertIn("every time is ms of the step model's clock", text)
        self.assertIn("output tok/s", text)
        a = {r["name"]: r for r in lines_of(os.path.join(self.full, "requests.jsonl"))}
        b = {r["name"]: r for r in lines_of(os.path.join(self.wide, "requests.jsonl"))}
        changed = [name for name in a if a[name]["done_ms"] != b[name]["done_ms"]]
        self.assertTrue(changed)
        for name in changed:
            with self.subTest(request=name):
                x, y = a[name]["done_ms"], b[name]["done_ms"]
                delta = ms_text(y - x)
                self.assertIn(f"end {ms_text(x)} -> {ms_text(y)} ({'' if delta.startswith('-') else '+'}{delta})",
                              text)
                self.assertNotIn(str(a[name]["done_at"]), text)   # no µs tick value

    def test_diff_refuses_a_step_model_run_without_its_ms_fields(self):
        run = self.copy(self.full)
        rows = lines_of(os.path.join(run, "requests.jsonl"))
        with open(os.path.join(run, "requests.jsonl"), "w", encoding="utf-8") as out:
            out.writelines(json.dumps({k: v for k, v in r.items() if k != "done_ms"}) + "\n" for r in rows)
        assert_bad_input(self, ["diff", run, self.wide], "field 'done_ms' is missing")

    def test_diff_refuses_a_step_model_run_against_a_tick_run(self):
        ticks = os.path.join(temp_dir(self), "ticks")
        self.assertEqual(run_cli(TIGHT + ["--artifacts", ticks])[0], 0)
        for pair in ((self.full, ticks), (ticks, self.full)):
            with self.subTest(pair=pair):
                assert_bad_input(self, ["diff", *pair], "--step-model run (times in ms)")


if __name__ == "__main__":
    unittest.main()
