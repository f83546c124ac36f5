"""The vLLM engine's async scheduling against vLLM 0.33.0's own ``AsyncScheduler`` driven through
its batch-queue engine loop: the async oracle corpus (``tests/data/vllm-oracle/async``, a copy of
the course corpus, see its README; vllm-engine.md §7).

Every one of the 30 cases is replayed with the case's knobs and ``async_scheduling`` on. Per request
the engine must give vLLM's admission step, prefix-hit tokens, first-token and finish stamps (oracle
step + 1) and number of preemptions; per step the same requests scheduled in the same order with
the same tokens, the same preempted requests and the same KV blocks in use (right after
scheduling). A failure names the case, the requests and the steps that differ. The decisions came
from vLLM itself, never from this code; the synchronous corpus is held by tests/test_vllm_oracle.py.
"""

import json
import os
import random
import unittest
from dataclasses import replace
from fractions import Fraction

from sched.core.config import ConfigError
from sched.core.records import Status
from sched.engines import check_case
from sched.vllm.async_step import AsyncVllmSimulation, make_simulation, simulate
from sched.vllm.config import VllmKnobs
from sched.vllm.engine import VllmSimulation, simulate_vllm
from sched.workload.specs import RequestSpec
from sched.workload.validation import load_workload
from tests.helpers import FULL, full_only
from tests.test_vllm_oracle import MAX_SHOWN, request_diffs, step_diffs

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vllm-oracle", "async")


def manifest(corpus: str = CORPUS) -> list:
    """The cases of a corpus folder's ``MANIFEST.json``."""
    with open(os.path.join(corpus, "MANIFEST.json"), encoding="utf-8") as handle:
        return json.load(handle)["cases"]


def load_case(entry: dict, corpus: str = CORPUS):
    """(workload, knobs, oracle document) of one MANIFEST entry of ``corpus``; the knobs as the case
    file states them (async scheduling on in this folder)."""
    with open(os.path.join(corpus, entry["output"]), encoding="utf-8") as handle:
        doc = json.load(handle)
    k = doc["knobs"]
    knobs = VllmKnobs(max_num_batched_tokens=k["max_num_batched_tokens"], max_num_seqs=k["max_num_seqs"],
                      long_prefill_token_threshold=k["long_prefill_token_threshold"],
                      enable_prefix_caching=k["enable_prefix_caching"], block_size=k["block_size"],
                      num_gpu_blocks=k["num_gpu_blocks"], policy=k["policy"], async_scheduling=k["async_scheduling"])
    return load_workload(os.path.join(corpus, entry["workload"])), knobs, doc


def differences(doc, result) -> str:
    problems = request_diffs(doc, result) + step_diffs(doc, result)
    shown = problems[:MAX_SHOWN] + ([f"... and {len(problems) - MAX_SHOWN} more"] if len(problems) > MAX_SHOWN else [])
    return "\n  ".join(shown)


class AsyncOracleCorpusTest(unittest.TestCase):
    def test_every_async_case_matches_vllm(self):
        cases = manifest()
        self.assertEqual(len(cases), 30)
        for entry in cases:
            with self.subTest(case=entry["id"]):
                workload, knobs, doc = load_case(entry)
                self.assertTrue(knobs.async_scheduling)
                result = simulate(workload, knobs, timeline="full")
                shown = differences(doc, result)
                self.assertEqual(shown, "", f"{entry['id']} differs from vLLM's async scheduler:\n  {shown}")
                self.assertEqual(sum(r.num_preemptions for r in result.requests), doc["summary"]["total_preemptions"])
                self.assertEqual(max(r.done_at for r in result.requests) - 1, doc["summary"]["last_step"])
                check_case(result)   # the engine's invariants hold under async scheduling too

    def test_counts_timeline_gives_the_same_requests(self):
        """The per-request stamps do not depend on the timeline detail kept (every fifth case; all
        with ISL_FULL)."""
        for entry in manifest()[::1 if FULL else 5]:   # all 30 with ISL_FULL
            with self.subTest(case=entry["id"]):
                workload, knobs, doc = load_case(entry)
                self.assertEqual(request_diffs(doc, simulate(workload, knobs, timeline="counts")), [])
                self.assertEqual(request_diffs(doc, simulate(workload, knobs, timeline="off")), [])

    @full_only("all 30 cases replayed again under the synchronous rules")
    def test_sync_scheduling_differs_where_the_corpus_says(self):
        """The corpus tells the modes apart: the synchronous rules miss 26 of the 30 cases; the 4 it
        keeps are those its README names (one slot, or one request: no step is lost)."""
        same = []
        for entry in manifest():
            workload, knobs, doc = load_case(entry)
            if not request_diffs(doc, simulate_vllm(workload, replace(knobs, async_scheduling=False))):
                same.append(entry["id"])
        self.assertEqual(sorted(same), sorted(["baseline-s1", "async-decode-a-b128-s1", "edge-single-t32",
                                               "prio-tight-kv-prio-kv29"]))


def random_case(seed: int):
    """A small random workload and knobs under async scheduling: tight or ample KV, fcfs or
    priority, prefix caching over shared prefixes, chunk caps, 1 to 6 slots."""
    rng = random.Random(f"async/{seed}")
    workload = []
    for i in range(rng.randint(1, 20)):
        key = rng.choice([None, "a", "b"])
        prefix = rng.randint(1, 40) if key else 0
        workload.append(RequestSpec(f"r{i}", rng.randint(0, 30), key, prefix, rng.randint(1, 50), rng.randint(1, 30),
                                    rng.choice([None, 0, 1])))
    size = rng.choice([4, 16])
    need = max(-(-(s.prompt_tokens + s.output_tokens - 1) // size) for s in workload)
    knobs = VllmKnobs(rng.choice([8, 32, 128]), rng.randint(1, 6), rng.choice([0, 8]), rng.random() < 0.5, size,
                      rng.choice([None, need + 1, 2 * need + 1]), rng.choice(["fcfs", "priority"]),
                      async_scheduling=True)
    return workload, knobs


def state(result):
    return [(r.admitted_at, r.token_times, r.done_at, r.status, r.num_preemptions, list(r.preempted_at))
            for r in result.requests]


class AsyncRandomWorkloadTest(unittest.TestCase):
    """Beyond the corpus: on random workloads every request finishes, the engine's invariants hold,
    the timeline detail changes nothing, and a step time of exactly 1 gives the unit clock's stamps."""

    def test_random_workloads(self):
        for seed in range(200 if FULL else 40):
            workload, knobs = random_case(seed)
            with self.subTest(seed=seed, knobs=knobs):
                full = simulate(workload, knobs, timeline="full")
                check_case(full)
                self.assertTrue(all(r.status is Status.DONE for r in full.requests))
                self.assertEqual(state(full), state(simulate(workload, knobs, timeline="counts")))
                self.assertEqual(state(full), state(simulate(workload, knobs, timeline="off", step_time=lambda p, d: 1)))
                timed = simulate(workload, knobs, timeline="full", step_time=lambda p, d: Fraction(3, 2) + Fraction(p, 7))
                check_case(timed)
                self.assertEqual(state(timed), state(simulate(workload, knobs, timeline="off",
                                                              step_time=lambda p, d: Fraction(3, 2) + Fraction(p, 7))))


class AsyncKnobTest(unittest.TestCase):
    def test_the_knob_picks_the_simulation(self):
        workload, knobs, _ = load_case(manifest()[0])
        self.assertIsInstance(make_simulation(workload, knobs), AsyncVllmSimulation)
        self.assertNotIsInstance(make_simulation(workload, replace(knobs, async_scheduling=False)),
                                 AsyncVllmSimulation)
        with self.assertRaises(ValueError):   # the sync class never silently ignores the knob
            VllmSimulation(workload, knobs)

    def test_bad_knob_values_are_refused(self):
        with self.assertRaisesRegex(ConfigError, "--async-scheduling"):
            VllmKnobs(async_scheduling="yes")
        with self.assertRaisesRegex(ConfigError, "--timeout-ticks with --async-scheduling"):
            VllmKnobs(async_scheduling=True, timeout_ticks=10)

    def test_a_step_time_moves_the_clock(self):
        """With a step time every batch lasts its own duration, back to back on the GPU: one request
        of 100 prompt tokens and 3 outputs, budget 64, steps of 10 ms + 1 ms per prompt token:
        chunk 64 (74 ms, ends 74), chunk 36 samples token 1 (46 ms, ends 120), then two decodes of
        10 ms (ends 130 and 140). Hand computation, as in the oracle's time model."""
        spec = RequestSpec("r", 0, None, 0, 100, 3)
        knobs = VllmKnobs(max_num_batched_tokens=64, max_num_seqs=4, async_scheduling=True)
        result = simulate([spec], knobs, timeline="full", step_time=lambda prompt, decode: 10 + prompt)
        request = result.requests[0]
        self.assertEqual(request.token_times, [120, 130, 140])
        self.assertEqual(request.done_at, 140)
        self.assertEqual([(k.tick, k.duration, k.num_prompt_tokens, k.num_decode_tokens) for k in result.ticks],
                         [(0, 74, 64, 0), (74, 46, 36, 0), (120, 10, 0, 1), (130, 10, 0, 1)])
