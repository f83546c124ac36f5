"""Settings whose runs are provably the same (sched.planning.same_runs), and the searches a plan skips.

The two rules of the module docstring are checked on runs that preempt (a KV cache far too small
for the load, prefix caching on, async scheduling): every request's stamps, preemptions and cache
hits and every timeline record are equal (1) under ``fcfs`` and ``priority`` when every request has
one priority, (2) under two ``max_num_seqs`` above the run's ``peak_num_running``. Each check can
fail: with two priorities the runs differ, and so they do with ``max_num_seqs`` at the peak (the
tests show both). End to end, a plan searches one setting per group and gives the same results,
hence the same ``plan.json``, as searching every setting; its table says which row shares whose runs.
"""

import copy
import dataclasses
import json
import os
import re
import unittest

from sched.planning.plan import PlanSpec, _search_task, run_plan, settle_settings
from sched.planning.same_runs import SharedSearches, policies_same_runs
from sched.timing.msrun import run_with_step_model
from sched.timing.stepmodel import StepModel
from sched.vllm.config import VllmKnobs
from sched.workload.bench_arrivals import retime
from sched.workload.specs import RequestSpec
from tests.helpers import full_only, read, run_cli, temp_dir

SETTINGS = {"num_gpu_blocks": 60, "block_size": 16, "max_num_batched_tokens": 512, "max_num_seqs": 16,
            "long_prefill_token_threshold": 0, "enable_prefix_caching": True, "policy": "fcfs",
            "async_scheduling": True}
MODEL_JSON = {"kind": "step-model", "engine": "vllm", "step_ms": {"a": 5.0, "b": 0.05, "c": 0.5},
              "settings": SETTINGS, "fitted_on": {"model": "a hand-written model", "device": "GPU-X"}}


def workload(priorities=(None,)):
    """60 requests, a third sharing a 64-token prefix, lengths cycling; priorities cycle too."""
    return [RequestSpec(name=f"r{i}", arrival=0, prefix_key="sys" if i % 3 == 0 else None,
                        prefix_tokens=64 if i % 3 == 0 else 0, suffix_tokens=60 + 41 * (i % 5),
                        output_tokens=30 + 23 * (i % 4), priority=priorities[i % len(priorities)])
            for i in range(60)]


def model():
    return StepModel(5.0, 0.05, 0.5, dict(SETTINGS), {"model": "a hand-written model", "device": "GPU-X"})


def fingerprint(result):
    """Everything a run hands on: each request's stamps, and every timeline record (compared field by
    field by the records' own dataclass equality; ``dataclasses.astuple`` would deep-copy each one)."""
    requests = [(r.name, r.status, r.admitted_at, r.hit_tokens, r.done_at, r.num_preemptions, tuple(r.preempted_at),
                 tuple(r.token_times)) for r in result.requests]
    return requests, list(result.ticks)


def run(specs, policy, rate, max_concurrency=None, max_num_seqs=16):
    knobs = VllmKnobs(**{k: v for k, v in SETTINGS.items() if k not in ("policy", "max_num_seqs")}, policy=policy,
                      max_num_seqs=max_num_seqs)
    return run_with_step_model(retime(specs, rate, 1.0, 0), knobs, model(), "test", "counts",
                               max_concurrency=max_concurrency).results[0]


class SameRunsTest(unittest.TestCase):
    def test_one_priority_same_runs_with_preemptions(self):
        specs = workload()
        for rate in (float("inf"), 40.0, 12.0):
            with self.subTest(rate=rate):
                fcfs, priority = run(specs, "fcfs", rate), run(specs, "priority", rate)
                self.assertGreater(sum(r.num_preemptions for r in fcfs.requests), 0)   # the interesting case
                self.assertEqual(fingerprint(fcfs), fingerprint(priority))
        knobs = VllmKnobs(**{k: v for k, v in SETTINGS.items() if k != "policy"}, policy="priority")
        self.assertTrue(policies_same_runs(specs, knobs, None))
        same_value = [dataclasses.replace(s, priority=3) for s in specs]
        self.assertTrue(policies_same_runs(same_value, knobs, None))

    def test_two_priorities_differ_and_are_not_merged(self):
        specs = workload(priorities=(0, 1))
        self.assertNotEqual(fingerprint(run(specs, "fcfs", 40.0)), fingerprint(run(specs, "priority", 40.0)))
        knobs = VllmKnobs(**{k: v for k, v in SETTINGS.items() if k != "policy"})
        self.assertFalse(policies_same_runs(specs, knobs, None))

    def test_conditions(self):
        specs = workload()
        knobs = VllmKnobs(**{k: v for k, v in SETTINGS.items() if k != "policy"})
        self.assertFalse(policies_same_runs(specs, knobs, 4))   # the client's gate re-stamps arrivals
        self.assertFalse(policies_same_runs(specs, dataclasses.replace(knobs, async_scheduling=False), None))
        self.assertFalse(policies_same_runs(specs, dataclasses.replace(knobs, enable_prefix_caching=False), None))

    def test_max_num_seqs_above_the_peak_same_runs(self):
        specs = workload()
        for rate in (float("inf"), 40.0):
            with self.subTest(rate=rate):
                wide = run(specs, "fcfs", rate, max_num_seqs=64)
                peak = max(record.num_running for record in wide.ticks)
                self.assertGreater(sum(r.num_preemptions for r in wide.requests), 0)
                self.assertLess(peak, 16)
                self.assertEqual(fingerprint(run(specs, "fcfs", rate, max_num_seqs=peak + 1)), fingerprint(wide))
                self.assertNotEqual(fingerprint(run(specs, "fcfs", rate, max_num_seqs=peak - 1)), fingerprint(wide))


def knobs_of(**changes):
    return dataclasses.replace(VllmKnobs(**{k: v for k, v in SETTINGS.items()}), **changes)


class SharedSearchesTest(unittest.TestCase):
    """The bookkeeping, with made-up search results (``peak_num_running`` as given)."""

    def tasks(self):
        return [(0, {}, knobs_of(max_num_seqs=8)), (0, {}, knobs_of(max_num_seqs=8, policy="priority")),
                (0, {}, knobs_of(max_num_seqs=64)), (0, {}, knobs_of(max_num_seqs=64, policy="priority")),
                (0, {}, knobs_of(max_num_seqs=32)), (1, {}, knobs_of(max_num_seqs=64)),
                (0, {}, knobs_of(max_num_seqs=64, max_num_batched_tokens=1024))]

    def take_all(self, shared, speculate=False):
        taken = []
        while (number := shared.take(speculate)) is not None:
            taken.append(number)
        return taken

    def test_groups_and_what_each_search_settles(self):
        shared = SharedSearches(workload(), self.tasks(), None)
        self.assertEqual(self.take_all(shared), [2, 5, 6])   # the largest max_num_seqs of each group, fcfs
        shared.resolve(2, {"peak_num_running": 12})   # the other policy and 32 settled; 8 is next
        self.assertEqual(shared.same_as, {3: (2, "one priority"), 4: (2, "peak 12 running")})
        self.assertEqual(self.take_all(shared), [0])
        shared.resolve(0, {"peak_num_running": 8})
        self.assertEqual(shared.same_as[1], (0, "one priority"))
        shared.resolve(5, {"peak_num_running": 3})
        self.assertFalse(shared.done)
        shared.resolve(6, {"peak_num_running": None})
        self.assertTrue(shared.done)
        self.assertEqual(shared.num_searches, 4)
        results = shared.ordered_results()
        self.assertEqual([r["peak_num_running"] for r in results], [8, 8, 12, 12, 12, 3, None])
        self.assertIsNot(results[3], results[2])   # a copy

    def test_speculation_takes_only_what_may_be_needed(self):
        shared = SharedSearches(workload(), self.tasks()[:5], None)
        self.assertEqual(self.take_all(shared), [2])
        # 3 (the other policy at 64) is surely settled by 2: never taken; 32, then 8, may be needed
        self.assertEqual(self.take_all(shared, speculate=True), [4, 0])
        shared.resolve(0, {"peak_num_running": 8})   # a speculative search ends first: settles its twin only
        self.assertEqual(shared.same_as, {1: (0, "one priority")})
        shared.resolve(2, {"peak_num_running": 12})
        self.assertTrue(shared.done)
        self.assertEqual(shared.in_flight, set())   # 4 was settled while its own search runs: not waited for
        shared.resolve(4, {"peak_num_running": 12})   # settled meanwhile: its result is not used
        self.assertEqual(shared.same_as[4], (2, "peak 12 running"))
        self.assertEqual(shared.num_searches, 2)
        self.assertEqual(shared.table_notes(), {1: (0, "one priority"), 3: (2, "one priority"),
                                                4: (2, "peak 12 running")})

    def test_at_the_peak_or_without_a_rule_it_searches(self):
        shared = SharedSearches(workload(priorities=(0, 1)), self.tasks()[:5], None)   # two priorities
        self.assertEqual(self.take_all(shared), [2, 3])   # each policy its own group
        shared.resolve(2, {"peak_num_running": 32})   # 32 is reached: searched
        self.assertEqual(shared.same_as, {})
        self.assertEqual(self.take_all(shared), [4])
        gated = SharedSearches(workload(), self.tasks()[:4], 4)   # the client's gate: policies apart
        self.assertEqual(self.take_all(gated), [2, 3])
        gated.resolve(2, {"peak_num_running": 5})   # the max-num-seqs rule still holds
        self.assertEqual(gated.same_as, {0: (2, "peak 5 running")})


class PlanSharedTest(unittest.TestCase):
    def test_fewer_searches_same_results(self):
        """run_plan searches one setting per group and gives every setting the result searching it gives.
        A search is a function of its arguments: the executor hands run_plan a copy of the result
        already computed for the very same arguments (compared with ``==``) instead of searching again;
        any other arguments are searched."""
        specs = workload()
        grid = [{"max_num_seqs": m, "policy": p} for m in (2, 8, 16) for p in ("fcfs", "priority")]
        spec = PlanSpec(specs, "w.json", [("m.json", "m.json", model(), None)], grid, {"ttft": 1000.0}, 0.9, 0.05,
                        1.0, 0, 0.01, 10000.0)
        tasks = settle_settings(spec)
        searched = [((specs, knobs, model(), spec.goodput, spec.target, spec.resolution, spec.burstiness, spec.seed,
                      spec.min_rate, spec.max_rate, None), None) for _, _, knobs in tasks]
        searched = [(args, _search_task(*args)) for args, _ in searched]
        each = [result for _, result in searched]
        calls = []
        shared = SharedSearches(specs, tasks, None)
        self.assertEqual(run_plan(spec, tasks, executor=_Inline(calls, searched), shared=shared), each)
        peak = each[4]["peak_num_running"]
        self.assertLess(peak, 8)   # 8 and 16 share their runs; 2 binds
        self.assertEqual(len(calls), 2)
        self.assertEqual(set(shared.same_as), {1, 2, 3, 5})

    @full_only("two local workers searching ahead: a second whole plan")
    def test_spare_workers_search_ahead_same_files(self):
        """Two workers: a group's smaller max-num-seqs is searched speculatively beside the first search,
        which then settles it; the files are those of one worker, searching in turn."""
        base = temp_dir(self)
        path, model_path = os.path.join(base, "w.json"), os.path.join(base, "m.json")
        self.write_inputs(path, model_path)
        texts = []
        for workers in ("1", "2"):
            out_dir = os.path.join(base, f"plan{workers}")
            code, out, err = run_cli(["plan", "--workload", path, "--step-model", model_path, "--goodput",
                                      "ttft:1000", "--max-num-seqs", "2,8,16", "--policy", "fcfs,priority",
                                      "--resolution", "0.05", "--workers", workers, "--out", out_dir])
            self.assertEqual(code, 0, err)
            texts.append([read(os.path.join(out_dir, name)) for name in ("plan.json", "plan.txt")])
        self.assertEqual(texts[0], texts[1])
        self.assertEqual(len(re.findall(r"same runs as #[0-9]", texts[0][1])), 4)   # 16 and 2 searched, fcfs

    def write_inputs(self, path, model_path):
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"requests": [{"name": s.name, "arrival": 0, "prefix_key": s.prefix_key,
                                     "prefix_tokens": s.prefix_tokens, "suffix_tokens": s.suffix_tokens,
                                     "output_tokens": s.output_tokens} for s in workload()[:30]]}, out)
        with open(model_path, "w", encoding="utf-8") as out:
            json.dump(MODEL_JSON, out)

    def test_the_table_says_so(self):
        base = temp_dir(self)
        path, model_path, out_dir = (os.path.join(base, n) for n in ("w.json", "m.json", "plan"))
        self.write_inputs(path, model_path)
        code, out, err = run_cli(["plan", "--workload", path, "--step-model", model_path, "--goodput", "ttft:1000",
                                  "--policy", "fcfs,priority", "--resolution", "0.05", "--workers", "1",
                                  "--out", out_dir])
        self.assertEqual(code, 0, err)
        rows = out.splitlines()[1:3]
        self.assertIn("same runs as #1 (one priority)", rows[1])
        self.assertIn("same runs as #N: provably the runs of row N", out)
        self.assertNotIn("same runs", rows[0])
        doc = json.loads(read(os.path.join(out_dir, "plan.json")))
        first, second = doc["configs"]
        self.assertEqual((first["settings"]["policy"], second["settings"]["policy"]), ("fcfs", "priority"))
        self.assertEqual(first["points"], second["points"])
        self.assertEqual(first["metrics"], second["metrics"])
        self.assertIn("--policy priority", second["command"])
        self.assertNotIn("peak_num_running", first)


class _Inline:
    """An executor that runs each task at once in this process, counting them; a ``_search_task``
    whose arguments equal those of one of ``searched`` (``(arguments, result)`` pairs) gets a deep
    copy of that result instead of the same search again."""

    def __init__(self, calls, searched=()):
        self.calls = calls
        self.searched = searched

    def submit(self, fn, *args):
        from concurrent.futures import Future
        self.calls.append(fn)
        future = Future()
        known = [result for known_args, result in self.searched if fn is _search_task and known_args == args]
        future.set_result(copy.deepcopy(known[0]) if known else fn(*args))
        return future


if __name__ == "__main__":
    unittest.main()
