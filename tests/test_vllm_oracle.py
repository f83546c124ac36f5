"""The vLLM engine against vLLM 0.33.0's own scheduler: the oracle corpus (vllm-engine.md).

Every case of ``tests/data/vllm-oracle`` (a copy of the course corpus, see its README) is replayed
with the case's knobs. Per request the engine must give vLLM's admission step, prefix-hit tokens,
first-token and finish stamps (oracle step + 1, the lab's t + 1 convention) and number of
preemptions; per step, the same requests scheduled in the same order with the same tokens, the
same preempted requests and the same KV blocks in use. Each case is a ``subTest`` whose failure
names the requests and steps that differ. The corpus's decisions came from vLLM itself, never from
this code. The learner's ``python3 -m unittest`` replays every third case step by step (and every
case without prefix caching through the fast path); ``ISL_FULL=1`` (``.ci/run``) replays all 35.
"""

import json
import os
import unittest

from sched.vllm.config import VllmKnobs
from sched.vllm.engine import simulate_vllm
from sched.workload.validation import load_workload
from tests.helpers import FULL

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vllm-oracle")
MAX_SHOWN = 8


def load_case(entry: dict):
    """(workload, knobs, oracle document) of one MANIFEST entry."""
    with open(os.path.join(CORPUS, entry["output"]), encoding="utf-8") as handle:
        doc = json.load(handle)
    k = doc["knobs"]
    knobs = VllmKnobs(max_num_batched_tokens=k["max_num_batched_tokens"], max_num_seqs=k["max_num_seqs"],
                      long_prefill_token_threshold=k["long_prefill_token_threshold"],
                      enable_prefix_caching=k["enable_prefix_caching"], block_size=k["block_size"],
                      num_gpu_blocks=k["num_gpu_blocks"], policy=k["policy"])
    return load_workload(os.path.join(CORPUS, entry["workload"])), knobs, doc


def request_diffs(doc: dict, result) -> list[str]:
    """One line per request field that differs from the oracle (in lab ticks: step + 1 for tokens)."""
    diffs = []
    for want, r in zip(doc["requests"], result.requests):
        got = {"first_scheduled_step": r.admitted_at, "prefix_hit_tokens": r.hit_tokens,
               "first_token_step": None if r.first_token_at is None else r.first_token_at - 1,
               "finish_step": None if r.done_at is None else r.done_at - 1, "num_preemptions": r.num_preemptions}
        for field, value in got.items():
            if want[field] != value:
                diffs.append(f"request {want['name']}: {field} oracle {want[field]}, engine {value}")
    return diffs


def step_diffs(doc: dict, result) -> list[str]:
    """One line per step whose scheduled tokens (in order), preemptions or KV blocks differ."""
    want = {s["step"]: (list(s["scheduled"].items()), s["preempted"], s["kv_blocks_used"]) for s in doc["steps"]}
    got = {k.step: ([tuple(p) for p in k.scheduled], k.preempted, k.kv_blocks_used)
           for k in result.ticks if k.scheduled or k.preempted}
    return [f"step {step}: oracle {want.get(step)}, engine {got.get(step)}"
            for step in sorted(set(want) | set(got)) if want.get(step) != got.get(step)]


class OracleCorpusTest(unittest.TestCase):
    def test_every_case_matches_vllm(self):
        with open(os.path.join(CORPUS, "MANIFEST.json"), encoding="utf-8") as handle:
            manifest = json.load(handle)
        self.assertEqual(len(manifest["cases"]), 35)
        for number, entry in enumerate(manifest["cases"]):
            if not FULL and number % 3:
                continue   # the learner's run: every third case (12 of 35); ISL_FULL=1 (CI): all
            with self.subTest(case=entry["id"]):
                workload, knobs, doc = load_case(entry)
                result = simulate_vllm(workload, knobs, timeline="full")
                problems = request_diffs(doc, result) + step_diffs(doc, result)
                shown = problems[:MAX_SHOWN] + ([f"... and {len(problems) - MAX_SHOWN} more"]
                                                if len(problems) > MAX_SHOWN else [])
                self.assertEqual(problems, [], f"{entry['id']} differs from vLLM:\n  " + "\n  ".join(shown))
                self.assertEqual(sum(r.num_preemptions for r in result.requests), doc["summary"]["total_preemptions"])

    def test_the_jumping_engine_matches_too(self):
        """The open runs and decode jumps (timeline counts) give vLLM's requests too. With prefix
        caching the engine always walks step by step (the path the first test checks), so only the
        cases without it are run again."""
        with open(os.path.join(CORPUS, "MANIFEST.json"), encoding="utf-8") as handle:
            manifest = json.load(handle)
        for entry in manifest["cases"]:
            if entry["knobs"]["enable_prefix_caching"]:
                continue
            with self.subTest(case=entry["id"]):
                workload, knobs, doc = load_case(entry)
                result = simulate_vllm(workload, knobs, timeline="counts")
                self.assertEqual(request_diffs(doc, result), [])


if __name__ == "__main__":
    unittest.main()
