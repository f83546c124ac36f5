"""The streamed readers against straightforward in-memory computations, on random runs.

``summarize`` moves its rows into columns a chunk at a time (sched/core/metrics.py), ``compare``
reduces each requests.jsonl to a :class:`sched.analysis.trace.Trace` in one pass, ``diff`` streams
run B past A's few values per request and keeps the ``--top`` largest changes. Here each is checked
against the plainest computation of the same definitions, with every record in memory:

- summarize: nearest-rank percentiles (compare.md §2: the ``ceil(p/100 · n)``-th of the sorted
  sample) of TTFT, E2E, queue wait, ITL and TPOT of the successful requests, their means, the token,
  request and makespan counts (lab.md §6), with chunks of 1, 3 and 65,536 rows;
- compare: every field of the Trace from the parsed lines of requests.jsonl;
- diff: every changed request of every case (README §12.5: fields that differ, a status change
  first, then a field that appeared or vanished, then the largest absolute delta; ties in A's line
  order), and with ``top`` the first ``top`` of that list plus the count of the rest.

The runs are random vLLM-engine workloads of tests/test_vllm_differential.py (preemption, deadlines,
prefix caching), two configurations per workload, and the lab engine's four cases.
``ISL_FULL=1`` runs 40 workloads instead of 4.
"""

import json
import math
import os
import random
import unittest
from collections import Counter
from fractions import Fraction
from unittest import mock

from sched.analysis.rundiff import REQUEST_FIELDS, diff_runs
from sched.analysis.trace import read_trace
from sched.core import metrics
from sched.vllm.async_step import simulate
from sched.workload.specs import workload_to_json
from tests.helpers import run_cli, temp_dir
from tests.test_vllm_differential import random_knobs, random_workload

WORKLOADS = 40 if os.environ.get("ISL_FULL") == "1" else 4


def nearest_rank(values, p):
    ordered = sorted(values)
    return ordered[max(1, math.ceil(Fraction(p) * len(ordered) / 100)) - 1] if ordered else None


def plain_summary(result) -> dict:
    """The summary columns below, from the request records one at a time (module docstring)."""
    ok = [r for r in result.requests if r.status.value == "ok"]
    ttfts = [r.token_times[0] - r.spec.arrival for r in ok]
    e2es = [r.done_at - r.spec.arrival for r in ok]
    waits = [r.admitted_at - r.spec.arrival for r in ok]
    gaps = [b - a for r in ok for a, b in zip(r.token_times, r.token_times[1:])]
    tpots = [Fraction(r.token_times[-1] - r.token_times[0], len(r.token_times) - 1) for r in ok
             if len(r.token_times) >= 2]
    emitted = sum(len(r.token_times) for r in result.requests)
    makespan = max(r.done_at for r in result.requests) - min(r.spec.arrival for r in result.requests)
    row = {"output_tokens": emitted, "hit_tokens": sum(r.hit_tokens for r in result.requests),
           "succeeded": len(ok), "arrived": len(result.requests), "timed_out": len(result.requests) - len(ok),
           "makespan": makespan, "throughput": Fraction(emitted, makespan) if makespan else None,
           "completed_output_tps": Fraction(sum(len(r.token_times) for r in ok), makespan) if makespan else None}
    for name, sample in (("ttft", ttfts), ("e2e", e2es), ("queue_wait", waits), ("itl", gaps), ("tpot", tpots)):
        row[f"median_{name}"] = nearest_rank(sample, 50)
        if name in ("ttft", "queue_wait"):
            row[f"p50_{name}"] = row[f"median_{name}"]
        for p in (90, 95, 99):
            row[f"p{p}_{name}"] = nearest_rank(sample, p)
        row[f"{name}_samples"] = len(sample)
        if name != "tpot":   # the TPOT mean is a float (metrics._tpot_stats); the others are exact
            row[f"mean_{name}"] = Fraction(sum(sample), len(sample)) if sample else None
    return row


def plain_trace(path: str, case: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    rows = [r for r in rows if r.get("case") == case]
    ok = [r for r in rows if r.get("status") == "ok"]
    by_priority: dict = {}
    for r in ok:
        if r.get("e2e") is not None:
            by_priority.setdefault(r.get("priority"), Counter())[r["e2e"]] += 1
    return {"counts": dict(Counter(r["name"] for r in rows)), "num_rows": len(rows), "num_ok": len(ok),
            "never_ended": {r["name"] for r in rows if r.get("status") not in ("ok", "timeout", "error")},
            "emitted": sum(r.get("output_tokens_emitted") or 0 for r in rows),
            "samples": {key: Counter(r[key] for r in ok if r.get(key) is not None)
                        for key in ("ttft", "e2e", "queue_wait")},
            "e2e_by_priority": by_priority}


def plain_diff(dir_a: str, dir_b: str) -> dict:
    """case -> [(name, status A, status B, {field: (a, b)})], largest change first (module docstring)."""
    def lines(directory):
        with open(os.path.join(directory, "requests.jsonl"), encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]
    a_rows, b_rows = lines(dir_a), lines(dir_b)
    b_by_key = {(r["case"], r["name"]): r for r in b_rows}
    cases_b = {r["case"] for r in b_rows}
    found: dict = {}
    places = Counter()
    for a in a_rows:
        place = places[a["case"]]
        places[a["case"]] += 1
        b = b_by_key.get((a["case"], a["name"]))
        if a["case"] not in cases_b or b is None:
            continue
        fields = {f: (a.get(f), b.get(f)) for f in REQUEST_FIELDS if a.get(f) != b.get(f)}
        status_a, status_b = str(a.get("status")), str(b.get("status"))
        if not fields and status_a == status_b:
            continue
        deltas = [abs(y - x) for x, y in fields.values() if x is not None and y is not None]
        rank = (status_a != status_b, any((x is None) != (y is None) for x, y in fields.values()), max(deltas or [0]))
        found.setdefault(a["case"], []).append((rank, place, (a["name"], status_a, status_b, fields)))
    return {case: [row for _, _, row in sorted(rows, key=lambda e: (tuple(-x for x in e[0]), e[1]))]
            for case, rows in found.items()}


def write_workload(test, specs) -> str:
    path = os.path.join(temp_dir(test), "workload.json")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(workload_to_json(specs))
    return path


def one_block_size(rng):
    while True:   # a workload file has one block size (its header) and one length per prefix key
        specs, size = random_workload(rng)
        keys = {(s.prefix_key, s.prefix_tokens) for s in specs if s.prefix_key is not None}
        if len({s.block_size for s in specs if s.prefix_blocks is not None}) <= 1 and \
                len(keys) == len({key for key, _ in keys}):
            return specs, size


def vllm_flags(knobs) -> list[str]:
    flags = ["--engine", "vllm", "--max-num-batched-tokens", str(knobs.max_num_batched_tokens),
             "--max-num-seqs", str(knobs.max_num_seqs), "--block-size", str(knobs.block_size),
             "--long-prefill-token-threshold", str(knobs.long_prefill_token_threshold), "--policy", knobs.policy]
    if knobs.num_gpu_blocks is not None:
        flags += ["--num-gpu-blocks", str(knobs.num_gpu_blocks)]
    if knobs.enable_prefix_caching:
        flags.append("--enable-prefix-caching")
    if knobs.timeout_ticks is not None:
        flags += ["--timeout-ticks", str(knobs.timeout_ticks)]
    if knobs.async_scheduling:
        flags.append("--async-scheduling")
    return flags


class StreamedAnalysisTest(unittest.TestCase):

    def test_summarize_equals_the_plain_summary_in_any_chunk_size(self):
        for seed in range(10 * WORKLOADS):
            rng = random.Random(seed)
            specs, size = random_workload(rng)
            knobs = random_knobs(rng, specs, size, rng.random() < 0.7)
            result = simulate(specs, knobs, timeline="off")
            expected = plain_summary(result)
            for chunk in (1, 3, 65536):
                with self.subTest(seed=seed, chunk=chunk), mock.patch.object(metrics, "_ROWS_AT_ONCE", chunk):
                    row = metrics.summarize(result)
                    self.assertEqual({k: row[k] for k in expected}, expected)

    def runs(self, seed):
        """Two vLLM runs and two lab runs of one random workload: (A, B) directory pairs."""
        rng = random.Random(1000 + seed)
        specs, size = one_block_size(rng)
        workload = write_workload(self, specs)
        base = temp_dir(self)
        pairs = []
        for engine in ("vllm", "lab"):
            dirs = []
            for side in "AB":
                directory = os.path.join(base, engine + side)
                if engine == "vllm":
                    flags = vllm_flags(random_knobs(rng, specs, size, rng.random() < 0.7))
                else:
                    flags = ["--budget", str(rng.choice([16, 64])), "--timeout-ticks", str(rng.choice([30, 200]))]
                code, _, err = run_cli(["--workload", workload, "--artifacts", directory, "--timeline", "off",
                                        *flags])
                self.assertEqual(code, 0, err)
                dirs.append(directory)
            pairs.append(tuple(dirs))
        return pairs

    def test_compare_and_diff_equal_the_plain_reading_of_the_files(self):
        for seed in range(WORKLOADS):
            for dir_a, dir_b in self.runs(seed):
                with self.subTest(seed=seed, run=os.path.basename(dir_a)):
                    for directory in (dir_a, dir_b):
                        path = os.path.join(directory, "requests.jsonl")
                        with open(os.path.join(directory, "summary.json"), encoding="utf-8") as handle:
                            cases = json.load(handle)["cases"]
                        for case in cases:
                            trace, plain = read_trace(path, case["case"]), plain_trace(path, case["case"])
                            got = {key: getattr(trace, key) for key in plain}
                            got["samples"] = {k: Counter(v) for k, v in got["samples"].items()}
                            self.assertEqual(got, plain)
                    expected = plain_diff(dir_a, dir_b)
                    whole = diff_runs(dir_a, dir_b)
                    self.assertEqual({c: rows for c, rows in whole.requests.items() if rows}, expected)
                    for top in (1, 2, 5):
                        cut = diff_runs(dir_a, dir_b, top=top)
                        self.assertEqual({c: rows for c, rows in cut.requests.items() if rows},
                                         {c: rows[:top] for c, rows in expected.items()})
                        self.assertEqual({c: n for c, n in cut.more.items() if n},
                                         {c: len(rows) - top for c, rows in expected.items() if len(rows) > top})


if __name__ == "__main__":
    unittest.main()
