"""Hostile inputs to ``--async-scheduling`` and ``serving-bench simulate``/``decide``: one test per case
that got through before (each fails without its fix).

Expected behaviour (the project's bad-input rule): one stderr line naming the file, request or
flag and the field, exit 2, nothing written; never a wrong result accepted silently. The expected
values are the spec's (vllm-engine.md §7, compare.md §3.1, serving-bench.md) or computed by hand
in the test.
"""

import json
import os
import shutil
import tempfile
import unittest

from sched.timing.stepmodel import parse_step_model, step_model_to_json
from tests.helpers import assert_bad_input, read, run_cli, temp_dir
from tests.test_vllm_oracle_async import CORPUS, manifest

SETTINGS = {"num_gpu_blocks": 2588, "block_size": 16, "max_num_batched_tokens": 2048, "max_num_seqs": 256,
            "long_prefill_token_threshold": 0, "enable_prefix_caching": True, "policy": "fcfs"}
#: The step model of serving-bench simulate's default (handbook 16.8), with every digit the file keeps.
STEP_MS = {"a": 24.527162, "b": 0.086245136, "c": 0.0}
#: The baseline scenario on the vLLM engine with a tight KV cache (README 17.5), a few steps long.
RUN = ("--engine", "vllm", "--max-num-batched-tokens", "64", "--max-num-seqs", "4",
       "--long-prefill-token-threshold", "32", "--enable-prefix-caching", "--num-gpu-blocks", "41")


def step_model_text(**settings) -> str:
    return json.dumps({"kind": "step-model", "engine": "vllm", "step_ms": STEP_MS,
                       "settings": dict(SETTINGS, **settings), "fitted_on": {}})


class AsyncRunsFixture(unittest.TestCase):
    """A synchronous and an async run of the same workload and knobs, made once for the class."""

    @classmethod
    def setUpClass(cls):
        cls.base = tempfile.mkdtemp(prefix="isl-test-")
        cls.sync_dir, cls.async_dir = (os.path.join(cls.base, n) for n in ("sync", "async"))
        for path, extra in ((cls.sync_dir, ()), (cls.async_dir, ("--async-scheduling",))):
            code, _, err = run_cli([*RUN, *extra, "--artifacts", path])
            assert code == 0, err

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.base, ignore_errors=True)

    def tampered(self, async_value) -> str:
        """A copy of the async run whose manifest.json says ``config.async_scheduling: async_value``."""
        path = os.path.join(temp_dir(self), "run")
        shutil.copytree(self.async_dir, path)
        manifest_path = os.path.join(path, "manifest.json")
        doc = json.loads(read(manifest_path))
        doc["config"]["async_scheduling"] = async_value
        with open(manifest_path, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=2)
        return path


class CompareSeesAsyncTest(AsyncRunsFixture):
    def test_sync_against_async_is_one_change_not_none(self):
        # compare.md §3.1: the contract holds when exactly one scheduler setting differs; the two runs
        # differ in async scheduling only (was: "the two sides differ in no scheduler setting").
        out = os.path.join(temp_dir(self), "decision.json")
        code, stdout, err = run_cli(["compare", self.sync_dir, self.async_dir, "--out", out])
        self.assertEqual(code, 0, err)
        contract = json.loads(read(out))["contract"]
        self.assertTrue(contract["ok"], contract["problems"])
        self.assertEqual(contract["change"]["field"], "async_scheduling")
        self.assertIs(contract["change"]["candidate"], True)
        self.assertIn("one change", stdout)

    def test_two_sync_runs_still_differ_in_nothing(self):
        out = os.path.join(temp_dir(self), "decision.json")
        run_cli(["compare", self.sync_dir, self.sync_dir, "--out", out])
        self.assertEqual(json.loads(read(out))["contract"]["num_scheduler_changes"], 0)


class TamperedAsyncManifestTest(AsyncRunsFixture):
    """``config.async_scheduling`` is read back as input: true or false, else exit 2 in every reader."""

    def test_every_reader_refuses_a_value_that_is_not_true_or_false(self):
        for value in ("true", 1, None, [True]):
            run = self.tampered(value)
            where = os.path.join(run, "manifest.json")
            for argv in (["explain", "U3", "--artifacts", run], ["diff", self.sync_dir, run],
                         ["compare", self.sync_dir, run, "--out", os.path.join(temp_dir(self), "d.json")]):
                with self.subTest(value=value, command=argv[0]):
                    assert_bad_input(self, argv, f"{where}: field 'config.async_scheduling'")

    def test_check_tells_1_from_true(self):
        # JSON 1 is not true: check must not call the manifests identical (Python's 1 == True).
        code, out, err = run_cli(["check", self.tampered(1), self.async_dir])
        self.assertEqual(code, 1, err)
        self.assertIn("config.async_scheduling: got 1, expected true", out)

    def test_check_tells_1_0_from_1(self):
        run = self.tampered(True)
        manifest_path = os.path.join(run, "manifest.json")
        doc = json.loads(read(manifest_path))
        doc["config"]["max_num_seqs"] = 4.0
        with open(manifest_path, "w", encoding="utf-8") as handle:
            json.dump(doc, handle)
        code, out, _ = run_cli(["check", run, self.async_dir])
        self.assertEqual(code, 1)
        self.assertIn("config.max_num_seqs: got 4.0, expected 4", out)


class AsyncFlagsTest(unittest.TestCase):
    def test_on_and_off_together_are_refused(self):
        # Two spellings of one setting with different values: refused, as --policy/--scheduling-policy.
        for flags in (("--async-scheduling", "--no-async-scheduling"), ("--no-async-scheduling", "--async-scheduling")):
            with self.subTest(flags=flags):
                out = os.path.join(temp_dir(self), "run")
                assert_bad_input(self, ["--engine", "vllm", *flags, "--artifacts", out], f"argument {flags[1]}: contradicts {flags[0]}")
                self.assertFalse(os.path.exists(out))

    def test_the_same_switch_twice_is_fine(self):
        code, _, err = run_cli(["--engine", "vllm", "--async-scheduling", "--async-scheduling",
                                "--artifacts", os.path.join(temp_dir(self), "run")])
        self.assertEqual(code, 0, err)

    def test_the_lab_engine_refusal_names_the_flag_typed(self):
        assert_bad_input(self, ["--no-async-scheduling"], "--no-async-scheduling is a knob of the vllm engine")


class AsyncStepModelFileTest(unittest.TestCase):
    """vllm-engine.md §7: a step model whose settings carry async_scheduling runs in that mode."""

    def test_the_file_may_carry_the_mode(self):
        model = parse_step_model(step_model_text(async_scheduling=True), "m.json")
        self.assertIs(model.settings["async_scheduling"], True)
        self.assertIn('"async_scheduling": true', step_model_to_json(model))
        plain = parse_step_model(step_model_text(), "m.json")
        self.assertNotIn("async_scheduling", plain.settings)
        self.assertNotIn("async_scheduling", step_model_to_json(plain))   # calibrate's files keep their bytes

    def test_a_mode_that_is_not_true_or_false_is_refused(self):
        path = os.path.join(temp_dir(self), "m.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(step_model_text(async_scheduling="yes"))
        assert_bad_input(self, ["serving-bench", "simulate", "--step-model", path,
                                "--out-dir", os.path.join(temp_dir(self), "o")], "field 'settings.async_scheduling'")

    def test_simulate_with_an_async_step_model(self):
        # Was exit 3 (the synchronous engine was handed async knobs). Hand computation, FCFS group,
        # max_num_seqs 2, all 8 requests at 0 ms: step 0 runs h0 (32) and l0 (256 prompt tokens):
        # a + 288 b; h0's 16th token 15 decode steps later at t = a + 288 b + 15 a. Async (§7.3-4): the
        # next batch skips h0 (its last token in flight) and holds its slot, so h1 is admitted one
        # batch later: a decode-only batch (a), then h1's 48-token prefill (a + 48 b).
        a, b = STEP_MS["a"], STEP_MS["b"]
        h0_last = a + 288 * b + 15 * a
        path = os.path.join(temp_dir(self), "m.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(step_model_text(async_scheduling=True))
        out = os.path.join(temp_dir(self), "sim")
        code, stdout, err = run_cli(["serving-bench", "simulate", "--step-model", path, "--out-dir", out,
                                     "--warmup", "0", "--repeats", "1"])
        self.assertEqual(code, 0, err)
        self.assertIn("async scheduling", stdout.splitlines()[0])
        rows = {r["request_id"]: r for r in json.loads(read(os.path.join(out, "g0_fcfs.json")))["runs"][0]["results"]}
        self.assertAlmostEqual(rows["h0"]["e2e_ms"], h0_last, delta=0.005)    # µs clock: ≤ 0.5 µs a step
        self.assertAlmostEqual(rows["h1"]["ttft_ms"], h0_last + a + (a + 48 * b), delta=0.005)


class SimulateAndDecideInputsTest(unittest.TestCase):
    def test_early_names_a_request_once(self):
        out = os.path.join(temp_dir(self), "sim")
        assert_bad_input(self, ["serving-bench", "simulate", "--early", "l0:2,l0:5", "--out-dir", out],
                         "argument --early: l0 is given twice")
        self.assertFalse(os.path.exists(out))

    def test_decide_reads_simulated_and_evidence_level_as_their_types(self):
        # A simulated file whose "simulated" is "yes" and evidence_level gone was read as real evidence.
        base = temp_dir(self)
        code, _, err = run_cli(["serving-bench", "simulate", "--out-dir", base, "--force", "--warmup", "0",
                                "--repeats", "1"])
        self.assertEqual(code, 0, err)
        for field, value in (("simulated", "yes"), ("simulated", 1), ("evidence_level", 5)):
            with self.subTest(field=field, value=value):
                doc = json.loads(read(os.path.join(base, "g1_priority.json")))
                doc[field] = value
                doc.pop("evidence_level" if field == "simulated" else "simulated")
                path = os.path.join(base, "tampered.json")
                with open(path, "w", encoding="utf-8") as handle:
                    json.dump(doc, handle)
                out = os.path.join(base, "evidence.json")
                assert_bad_input(self, ["serving-bench", "decide", os.path.join(base, "g0_fcfs.json"), path,
                                        "--out", out], f"{path}: field '{field}'")
                self.assertFalse(os.path.exists(out))


class ExplainEndPreemptionTest(unittest.TestCase):
    def test_a_victim_whose_last_token_was_in_flight_is_told_so(self):
        # vllm-engine.md §7 rule 5: in the async oracle's baseline-t0-apc1-kv36 S1 is preempted at 24
        # with its last token in flight and ends at 24 when that token arrives; explain said only
        # "never scheduled again" next to "end tick 24, ok".
        entry = next(e for e in manifest() if e["id"] == "baseline-t0-apc1-kv36")
        knobs = json.loads(read(os.path.join(CORPUS, entry["output"])))["knobs"]
        out = os.path.join(temp_dir(self), "run")
        code, _, err = run_cli(["--engine", "vllm", "--async-scheduling", "--enable-prefix-caching",
                                "--workload", os.path.join(CORPUS, entry["workload"]), "--artifacts", out,
                                "--max-num-batched-tokens", str(knobs["max_num_batched_tokens"]),
                                "--max-num-seqs", str(knobs["max_num_seqs"]),
                                "--num-gpu-blocks", str(knobs["num_gpu_blocks"]), "--policy", knobs["policy"]])
        self.assertEqual(code, 0, err)
        code, stdout, err = run_cli(["explain", "S1", "--artifacts", out])
        self.assertEqual(code, 0, err)
        line = next(l for l in stdout.splitlines() if l.strip().startswith("preempted"))
        self.assertIn("at tick 24", line)
        self.assertIn("its last token was already in flight", line)
        self.assertNotIn("never scheduled again", line)


class ExplainReadsTheTimelineTest(AsyncRunsFixture):
    """A full timeline is evidence explain must agree with (vllm-engine.md §2, §7): a truncated
    timeline.jsonl or an edited preempted_at was told as "never scheduled again"."""

    def copy(self, source) -> str:
        path = os.path.join(temp_dir(self), "run")
        shutil.copytree(source, path)
        return path

    def test_a_truncated_timeline_is_refused(self):
        for source in (self.sync_dir, self.async_dir):
            with self.subTest(run=os.path.basename(source)):
                run = self.copy(source)
                timeline = os.path.join(run, "timeline.jsonl")
                lines = read(timeline).splitlines(keepends=True)
                with open(timeline, "w", encoding="utf-8") as handle:
                    handle.writelines(lines[:25])   # U3 runs until tick 30 (sync) or 39 (async)
                assert_bad_input(self, ["explain", "U3", "--artifacts", run], f"{timeline} that schedules it")

    def test_an_edited_preemption_tick_is_refused(self):
        for source in (self.sync_dir, self.async_dir):
            with self.subTest(run=os.path.basename(source)):
                run = self.copy(source)
                path = os.path.join(run, "requests.jsonl")
                rows = [json.loads(line) for line in read(path).splitlines()]
                u3 = next(r for r in rows if r["name"] == "U3")
                self.assertEqual(u3["preempted_at"][0], 12)   # README 17.5: U3 preempted at tick 12 for L0
                u3["preempted_at"][0] = 13
                with open(path, "w", encoding="utf-8") as handle:
                    handle.writelines(json.dumps(r) + "\n" for r in rows)
                assert_bad_input(self, ["explain", "U3", "--artifacts", run],
                                 "field 'preempted_at': tick 13 is no step of")

    def test_untouched_runs_are_told(self):
        for source in (self.sync_dir, self.async_dir):
            for name in ("L0", "S1", "U3", "S4", "S7"):
                code, _, err = run_cli(["explain", name, "--artifacts", source])
                self.assertEqual(code, 0, err)


class DecidePrioritiesTest(unittest.TestCase):
    """The fourth gate compares the low-priority class (the largest priority, handbook 16.6) of the
    two groups: a priority that is not an integer, that changes between repeats, or a class that
    differs between the groups made it compare different requests, silently."""

    SAMPLES = os.path.join(os.path.dirname(__file__), "data", "serving-bench")

    def decide(self, edit) -> tuple:
        doc = json.loads(read(os.path.join(self.SAMPLES, "candidate.json")))
        edit(doc)
        base = temp_dir(self)
        path = os.path.join(base, "candidate.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(doc, handle)
        out = os.path.join(base, "evidence.json")
        return [os.path.join(self.SAMPLES, "baseline.json"), path, "--out", out], path, out

    def assert_refused(self, edit, mention):
        argv, path, out = self.decide(edit)
        assert_bad_input(self, ["serving-bench", "decide", *argv], mention.format(path=path))
        self.assertFalse(os.path.exists(out))

    def test_a_priority_is_an_integer(self):
        self.assert_refused(lambda d: d["runs"][0]["results"][0].__setitem__("priority", 0.5),
                            "{path}: runs[0]: results[0]: field 'priority': must be a whole number")

    def test_a_request_keeps_its_priority_in_every_repeat(self):
        def edit(doc):
            row = next(r for r in doc["runs"][2]["results"] if r["priority"] == 5)
            row["priority"] = 9
        self.assert_refused(edit, "{path}: runs[2]: request")

    def test_both_groups_have_one_low_class(self):
        def edit(doc):
            for run in doc["runs"]:
                for row in run["results"]:
                    row["priority"] = 7 if row["priority"] == 5 else row["priority"]
        self.assert_refused(edit, "{path}: field 'priority': its low-priority class (the largest priority) is 7")

    def test_the_samples_still_decide(self):
        argv, _, out = self.decide(lambda d: None)
        code, stdout, err = run_cli(["serving-bench", "decide", *argv])
        self.assertEqual(code, 0, err)
        self.assertIn("decision: ACCEPT", stdout)   # handbook 16.4


if __name__ == "__main__":
    unittest.main()
