"""``--engine vllm`` on the command line: flags, bad input, artifacts, explain, picture (vllm-engine.md)."""

import json
import os
import re
import unittest

from tests.helpers import assert_bad_input, read, run_cli, temp_dir

#: The baseline under a tight KV cache (the corpus's baseline-t32-apc1-kv41 case).
TIGHT = ["--engine", "vllm", "--max-num-batched-tokens", "64", "--max-num-seqs", "4",
         "--long-prefill-token-threshold", "32", "--enable-prefix-caching", "--num-gpu-blocks", "41"]


class BadInputTest(unittest.TestCase):
    def test_each_bad_input_is_one_line_and_exit_2(self):
        cases = [
            (["--engine", "vllm", "--num-gpu-blocks", "20"], "L0"),                 # 34 blocks needed, 19 usable
            (["--engine", "vllm", "--num-gpu-blocks", "1"], "--num-gpu-blocks"),
            (["--engine", "vllm", "--num-gpu-blocks", "0"], "--num-gpu-blocks"),
            (["--engine", "vllm", "--block-size", "0"], "--block-size"),
            (["--engine", "vllm", "--block-size", "1.5"], "--block-size"),
            (["--engine", "vllm", "--long-prefill-token-threshold", "-1"], "--long-prefill-token-threshold"),
            (["--num-gpu-blocks", "100"], "--engine vllm"),                         # vLLM flag, lab engine
            (["--enable-prefix-caching"], "--enable-prefix-caching"),
            (["--max-num-seqs", "4"], "--max-num-seqs"),
            (["--engine", "vllm", "--budget", "64"], "--budget"),                   # lab flag, vLLM engine
            (["--engine", "vllm", "--profile", "vllm"], "--profile"),
            (["--engine", "vllm", "--chunk-tokens", "8"], "--chunk-tokens"),
            (["--engine", "vllm", "--policy", "shortest"], "shortest"),
            (["--engine", "vllm", "--timeout-ticks", "0"], "--timeout-ticks"),
            (["--engine", "tgi"], "--engine"),
        ]
        for argv, mention in cases:
            with self.subTest(argv=argv):
                assert_bad_input(self, argv, mention)

    def test_mixed_engine_flags_say_what_to_do_instead(self):
        """Each refusal names the flag and a different, real remedy: never "with --engine vllm use
        --engine vllm" (the --profile line once said so), never the KV-capacity reason for a flag
        that has nothing to do with capacity."""
        cases = {  # argv -> the whole stderr line after "infer_sched_lab.py: error: "
            ("--engine", "vllm", "--profile", "vllm"): "--profile is a knob of the lab engine; with --engine vllm "
                "drop it: the vllm engine starts from vLLM's own defaults (2048 tokens, 256 seqs)",
            ("--engine", "vllm", "--budget", "64"): "--budget is a knob of the lab engine; with --engine vllm use "
                "--max-num-batched-tokens",
            ("--engine", "vllm", "--decode-cost", "2"): "--decode-cost is a knob of the lab engine; with --engine "
                "vllm drop it: a decode there costs 1 token of --max-num-batched-tokens",
            ("--engine", "vllm", "--max-active", "2"): "--max-active is a knob of the lab engine; with --engine vllm "
                "use --max-num-seqs",
            ("--engine", "vllm", "--chunk-tokens", "8"): "--chunk-tokens is a knob of the lab engine; with --engine "
                "vllm use --long-prefill-token-threshold",
            ("--max-num-batched-tokens", "64"): "--max-num-batched-tokens is a knob of the vllm engine; add --engine "
                "vllm (the lab engine's is --budget)",
            ("--max-num-seqs", "4"): "--max-num-seqs is a knob of the vllm engine; add --engine vllm (the lab "
                "engine's is --max-active)",
            ("--long-prefill-token-threshold", "8"): "--long-prefill-token-threshold is a knob of the vllm engine; "
                "add --engine vllm (the lab engine's is --chunk-tokens)",
            ("--enable-prefix-caching",): "--enable-prefix-caching is a knob of the vllm engine; add --engine vllm "
                "(the lab engine always runs an APC case of its own)",
            ("--block-size", "4"): "--block-size is a knob of the vllm engine; add --engine vllm (the lab engine "
                "has no KV blocks)",
            ("--engine", "lab", "--num-gpu-blocks", "100"): "--num-gpu-blocks is a knob of the vllm engine; add "
                "--engine vllm (the lab engine has no KV-cache capacity)",
        }
        for argv, line in cases.items():
            with self.subTest(argv=argv):
                self.assertEqual(run_cli(list(argv)), (2, "", f"infer_sched_lab.py: error: {line}\n"))

    def test_nothing_is_written_when_the_kv_cache_is_too_small(self):
        target = os.path.join(temp_dir(self), "run")
        assert_bad_input(self, ["--engine", "vllm", "--num-gpu-blocks", "20", "--artifacts", target], "L0")
        self.assertFalse(os.path.exists(target))


class RunTest(unittest.TestCase):
    def test_one_case_named_vllm_with_preemptions_recorded(self):
        target = os.path.join(temp_dir(self), "run")
        code, out, err = run_cli(TIGHT + ["--artifacts", target])
        self.assertEqual((code, err), (0, ""))
        self.assertIn("engine vllm", out.splitlines()[0])
        manifest = json.loads(read(os.path.join(target, "manifest.json")))
        self.assertEqual((manifest["engine"], [c["case"] for c in manifest["cases"]]), ("vllm", ["vllm"]))
        self.assertEqual(manifest["config"]["num_gpu_blocks"], 41)
        rows = {row["name"]: row for row in map(json.loads, read(os.path.join(target, "requests.jsonl")).splitlines())}
        # The corpus (vLLM 0.33.0): 3 preemptions; U3 preempted once; S1 hits 96 of SYS's 128 tokens.
        self.assertEqual(sum(row["num_preemptions"] for row in rows.values()), 3)
        self.assertEqual(rows["U3"]["num_preemptions"], 1)
        self.assertEqual(len(rows["U3"]["preempted_at"]), 1)
        self.assertEqual(rows["S1"]["hit_tokens"], 96)
        steps = [json.loads(line) for line in read(os.path.join(target, "timeline.jsonl")).splitlines()]
        for field in ("scheduled", "preempted", "kv_blocks_used", "running", "waiting", "prompt_tokens"):
            self.assertIn(field, steps[0])
        self.assertTrue(all(step["kv_blocks_used"] <= 40 and step["budget_used"] <= 64 for step in steps))
        svg = read(os.path.join(target, "timeline.svg"))
        self.assertIn('data-mark="preemption"', svg)
        self.assertIn('data-phase="recompute"', svg)
        self.assertIn('data-phase="preempted"', svg)

    def test_counts_timeline_and_explain(self):
        """counts: one line per step or jump with the same fields counted; explain tells who the
        blocks were freed for and what was recomputed (full timeline)."""
        directory = temp_dir(self)
        full, counts = os.path.join(directory, "full"), os.path.join(directory, "counts")
        self.assertEqual(run_cli(TIGHT + ["--artifacts", full])[0], 0)
        self.assertEqual(run_cli(TIGHT + ["--timeline", "counts", "--artifacts", counts])[0], 0)
        lines = [json.loads(line) for line in read(os.path.join(counts, "timeline.jsonl")).splitlines()]
        self.assertEqual(sum(line["preempted"] for line in lines), 3)
        self.assertTrue(all({"ticks", "kv_blocks_used", "running", "waiting", "decode_tokens"} <= set(line)
                            for line in lines))
        code, story, _ = run_cli(["explain", "S4", "--artifacts", full])
        self.assertEqual(code, 0)
        # S4 (arrives 9) hits 128 tokens of SYS, is preempted at 19 for U3's prefill and recomputes
        # 144 + 1 - 128 = 17 tokens (its own SYS blocks are still cached).
        self.assertIn("preempted    at tick 19 to free KV blocks for U3", story)
        self.assertIn("recomputed 17 tokens", story)
        code, story, _ = run_cli(["explain", "S4", "--artifacts", counts])
        self.assertIn("preemptions  1 (at tick 19)", story)

    def test_explain_tells_every_request_of_a_tight_run(self):
        """The vLLM timeline counts its waiting requests instead of naming them, so a request that
        waited 26 ticks (S7 under 41 blocks: arrives 12, admitted 38) appears on fewer lines than
        it waited: explain must still tell every request, in full and counts detail."""
        directory = temp_dir(self)
        for detail in ("full", "counts"):
            target = os.path.join(directory, detail)
            self.assertEqual(run_cli(TIGHT + ["--timeline", detail, "--artifacts", target])[0], 0)
            rows = [json.loads(line) for line in read(os.path.join(target, "requests.jsonl")).splitlines()]
            for row in rows:
                with self.subTest(detail=detail, request=row["name"]):
                    code, story, err = run_cli(["explain", row["name"], "--artifacts", target])
                    self.assertEqual((code, err), (0, ""))
                    self.assertIn(f"admission    tick {row['admitted_at']}", story)

    def test_counts_picture_draws_a_preemption_before_the_first_token(self):
        """S5 (admitted at 18 with a cache hit, preempted at 19 before its first token at 31, as
        requests.jsonl says): with --timeline counts its lane is prefill [18, 19), then one pink
        preempted segment [19, 31) (queue wait and recompute together, vllm_picture's docstring),
        never 13 ticks of plain prefill; the full picture covers the same window with preempted
        + recompute."""
        directory = temp_dir(self)
        lanes = {}
        for detail in ("counts", "full"):
            target = os.path.join(directory, detail)
            self.assertEqual(run_cli(TIGHT + ["--timeline", detail, "--artifacts", target])[0], 0)
            svg = read(os.path.join(target, "timeline.svg"))
            lane = svg[svg.index('<g data-request="S5">'):]
            lane = lane[:lane.index("</g>")]
            lanes[detail] = re.findall(r'data-phase="(\w+)" data-from="(\d+)" data-to="(\d+)"', lane)
        s5 = next(json.loads(line) for line in read(os.path.join(directory, "counts", "requests.jsonl")).splitlines()
                  if json.loads(line)["name"] == "S5")
        admitted, (preempted,), first = s5["admitted_at"], s5["preempted_at"], s5["first_token_at"]
        self.assertLess(preempted, first)
        self.assertIn(("prefill", str(admitted), str(preempted)), lanes["counts"])
        self.assertIn(("preempted", str(preempted), str(first)), lanes["counts"])
        window = [(phase, int(a), int(b)) for phase, a, b in lanes["full"] if preempted <= int(a) < first]
        self.assertEqual({phase for phase, *_ in window}, {"preempted", "recompute"})
        self.assertEqual((window[0][1], window[-1][2]), (preempted, first))

    def test_first_token_one_tick_earlier_than_the_lab(self):
        """Ample KV, budget 64, 4 seqs, no cap, no APC: L0's first token at 8, the lab's at 9
        (vllm-oracle README: baseline-t0-apc0-ample)."""
        code, out, _ = run_cli(["--engine", "vllm", "--max-num-batched-tokens", "64", "--max-num-seqs", "4"])
        self.assertEqual(code, 0)
        self.assertIn("preemptions", out)
        directory = temp_dir(self)
        run_cli(["--engine", "vllm", "--max-num-batched-tokens", "64", "--max-num-seqs", "4", "--artifacts", directory])
        l0 = json.loads(read(os.path.join(directory, "requests.jsonl")).splitlines()[0])
        self.assertEqual((l0["first_token_at"], l0["done_at"]), (8, 31))

    def test_scheduling_policy_is_vllms_name_for_policy(self):
        code, out, _ = run_cli(["--engine", "vllm", "--scheduling-policy", "priority", "--scenario", "priority-mix"])
        self.assertEqual(code, 0)
        self.assertIn("| policy priority |", out.splitlines()[0])


if __name__ == "__main__":
    unittest.main()
