"""``--async-scheduling`` on the run command and on a step-model run (vllm-engine.md §7).

The run command must give the async oracle's stamps (lab ticks: step + 1) in requests.jsonl, record
``async_scheduling`` in manifest.json and say so in the table header only when on (so every
existing run keeps its bytes), and refuse the flag on the lab engine. A step-model run keeps
vLLM's async time model on a millisecond clock; its expected times are computed by hand below.
"""

import json
import os
import unittest

from sched.timing.msrun import settle_knobs
from sched.timing.replay import knobs_from_settings
from sched.timing.stepmodel import StepModel, step_model_to_json
from tests.helpers import assert_bad_input, run_cli, temp_dir
from tests.test_vllm_oracle_async import CORPUS, manifest

SETTINGS = {"num_gpu_blocks": 100, "block_size": 16, "max_num_batched_tokens": 64, "max_num_seqs": 4,
            "long_prefill_token_threshold": 0, "enable_prefix_caching": False, "policy": "fcfs"}


def read_jsonl(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


class AsyncRunCommandTest(unittest.TestCase):
    def run_case(self, case_id, *extra):
        entry = next(e for e in manifest() if e["id"] == case_id)
        with open(os.path.join(CORPUS, entry["output"]), encoding="utf-8") as handle:
            doc = json.load(handle)
        k = doc["knobs"]
        out = temp_dir(self)
        argv = ["--engine", "vllm", "--workload", os.path.join(CORPUS, entry["workload"]), "--artifacts", out,
                "--force", "--max-num-batched-tokens", str(k["max_num_batched_tokens"]),
                "--max-num-seqs", str(k["max_num_seqs"]), "--num-gpu-blocks", str(k["num_gpu_blocks"]),
                "--policy", k["policy"], *extra]
        code, stdout, stderr = run_cli(argv)
        self.assertEqual(code, 0, stderr)
        return doc, out, stdout

    def test_the_flag_gives_the_oracle_stamps_and_is_recorded(self):
        doc, out, stdout = self.run_case("baseline-t0-apc0-kv36", "--async-scheduling")
        rows = {row["name"]: row for row in read_jsonl(os.path.join(out, "requests.jsonl"))}
        for want in doc["requests"]:
            got = rows[want["name"]]
            self.assertEqual((got["admitted_at"], got["first_token_at"], got["done_at"]),
                             (want["first_scheduled_step"], want["first_token_step"] + 1, want["finish_step"] + 1),
                             want["name"])
        with open(os.path.join(out, "manifest.json"), encoding="utf-8") as handle:
            self.assertIs(json.load(handle)["config"]["async_scheduling"], True)
        self.assertTrue(stdout.splitlines()[0].endswith("| async scheduling"), stdout.splitlines()[0])

    def test_off_by_default_and_not_in_the_header(self):
        doc, out, stdout = self.run_case("baseline-t0-apc0-kv36")
        with open(os.path.join(out, "manifest.json"), encoding="utf-8") as handle:
            self.assertIs(json.load(handle)["config"]["async_scheduling"], False)
        self.assertNotIn("async", stdout.splitlines()[0])
        rows = {row["name"]: row for row in read_jsonl(os.path.join(out, "requests.jsonl"))}
        # The synchronous engine differs from the async oracle on this case (rule 1: a later start).
        self.assertNotEqual([rows[w["name"]]["first_token_at"] for w in doc["requests"]],
                            [w["first_token_step"] + 1 for w in doc["requests"]])

    def test_explain_and_diff_read_a_preemption_at_the_end(self):
        """In the async oracle's baseline-t0-apc1-kv36, S1's last token is in flight when the next
        step preempts it (preempted at 24, done at 24): the readers accept that only for an async run."""
        doc, out, _ = self.run_case("baseline-t0-apc1-kv36", "--async-scheduling", "--enable-prefix-caching")
        s1 = next(r for r in doc["requests"] if r["name"] == "S1")
        self.assertEqual((s1["num_preemptions"], s1["finish_step"] + 1), (1, 24))
        code, stdout, stderr = run_cli(["explain", "--artifacts", out, "S1"])
        self.assertEqual(code, 0, stderr)
        self.assertIn("preemptions  1 (at tick 24)", stdout)
        code, _, stderr = run_cli(["diff", out, out])
        self.assertEqual(code, 0, stderr)
        manifest_path = os.path.join(out, "manifest.json")
        with open(manifest_path, encoding="utf-8") as handle:
            manifest_doc = json.load(handle)
        manifest_doc["config"]["async_scheduling"] = False   # the same lines from a sync run: impossible
        with open(manifest_path, "w", encoding="utf-8") as handle:
            json.dump(manifest_doc, handle)
        assert_bad_input(self, ["explain", "--artifacts", out, "S1"], "is not before done_at 24")

    def test_bad_combinations_are_one_line_exit_2(self):
        assert_bad_input(self, ["--async-scheduling"], "--async-scheduling is a knob of the vllm engine")
        assert_bad_input(self, ["--engine", "vllm", "--async-scheduling", "--timeout-ticks", "9"],
                         "--timeout-ticks with --async-scheduling")


class AsyncStepModelTest(unittest.TestCase):
    def test_settings_carry_the_mode_and_a_flag_overrides(self):
        model = StepModel(10.0, 1.0, 0.0, dict(SETTINGS, async_scheduling=True), {})
        knobs, overridden = settle_knobs(model, {}, None, None)
        self.assertTrue(knobs.async_scheduling)
        self.assertEqual(overridden, [])
        knobs, overridden = settle_knobs(model, {"async_scheduling": False}, None, None)
        self.assertFalse(knobs.async_scheduling)
        self.assertEqual(overridden, ["--no-async-scheduling (fitted with async scheduling)"])
        knobs, _ = settle_knobs(StepModel(10.0, 1.0, 0.0, dict(SETTINGS), {}), {}, None, None)
        self.assertFalse(knobs.async_scheduling)   # a model without the key: sync, as before
        self.assertTrue(knobs_from_settings(dict(SETTINGS, async_scheduling=True)).async_scheduling)
        self.assertFalse(knobs_from_settings(dict(SETTINGS, async_scheduling=True), async_scheduling=False)
                         .async_scheduling)
        self.assertFalse(knobs_from_settings(SETTINGS).async_scheduling)

    def test_a_step_model_run_keeps_the_async_clock(self):
        """step_ms = 10 + 1·prompt; A (10 prompt, 3 output) arrives at 0 ms, B (10, 1) at 5 ms.

        Sync: [0, 20) A's prefill (token 1 at 20); at 20 B has arrived: [20, 40) A decode + B's
        prefill (11 tokens, 10 of them prompt: 20 ms), A's token 2 and B's token at 40; [40, 50) A's
        last decode: A done at 50, B's TTFT 35 ms.
        Async: at 0 the loop schedules A's prefill [0, 20) and at once A's decode [20, 30) (B not
        yet there); at 20 (A's prefill output processed) B has arrived: A's next decode + B's
        prefill run [30, 50); so A's tokens come at 20, 30, 50 and B's at 50: TTFT 45 ms."""
        out = temp_dir(self)
        workload = os.path.join(out, "workload.json")
        with open(workload, "w", encoding="utf-8") as handle:
            json.dump({"requests": [
                {"name": "A", "arrival": 0, "prefix_key": None, "prefix_tokens": 0, "suffix_tokens": 10,
                 "output_tokens": 3},
                {"name": "B", "arrival": 5, "prefix_key": None, "prefix_tokens": 0, "suffix_tokens": 10,
                 "output_tokens": 1}]}, handle)
        model = os.path.join(out, "step-model.json")
        with open(model, "w", encoding="utf-8") as handle:
            handle.write(step_model_to_json(StepModel(10.0, 1.0, 0.0, dict(SETTINGS), {"model": "m"})))
        got = {}
        for mode in ("--no-async-scheduling", "--async-scheduling"):
            target = os.path.join(out, mode)
            code, _, stderr = run_cli(["--engine", "vllm", "--workload", workload, "--step-model", model,
                                       mode, "--artifacts", target])
            self.assertEqual(code, 0, stderr)
            rows = {row["name"]: row for row in read_jsonl(os.path.join(target, "requests.jsonl"))}
            got[mode] = {name: (row["ttft_ms"], row["e2e_ms"]) for name, row in rows.items()}
        self.assertEqual(got["--no-async-scheduling"], {"A": (20, 50), "B": (35, 35)})
        self.assertEqual(got["--async-scheduling"], {"A": (20, 50), "B": (45, 45)})


if __name__ == "__main__":
    unittest.main()
