"""The lab's vLLM bench metrics against vLLM 0.33.0's own ``calculate_metrics`` on the same requests.

``tests/data/vllm-bench-oracle/metrics.json`` was written by ``tools/vllm_bench_oracle.py`` with vLLM's
own code (``vllm.benchmarks.serve.calculate_metrics``, numpy 2.3.5; provenance in
``tests/data/SOURCES.md``). Each case names its source and the ``--metric-percentiles`` and
``--goodput`` it used; the lab computes the same keys through its own paths:

- ``rtx4090-run``: ``import-results`` of the imported RTX 4090 run's ``requests.jsonl`` (the file
  has no per-token times: the lab reports its ITL statistics as ``None`` where vLLM, fed no ITL
  samples, reports 0.0);
- ``step-overload``, ``step-timeouts``: the lab's ``--step-model`` runs, made again here with the
  fixture's own commands (their ``requests.jsonl`` must be the bytes vLLM was fed);
- ``hand/...``: edge cases saved as ``vllm bench serve --save-detailed`` lists, read by the
  importer's own function (and one through ``import-results``).

Every number must agree within a relative difference of 1e-9; they are in fact the same doubles
(the lab sums in numpy's pairwise order). ``slo_attainment`` (the lab's own key) must equal vLLM's
good requests (``request_goodput × duration``) over ``completed``. About 1 s of CPU in all.
"""

import hashlib
import json
import os
import unittest

from sched.core.bench_metrics import bench_fields
from sched.timing.bench_rows import BenchSettings
from sched.timing.real_bench import bench_of_vllm_result
from tests.helpers import read, run_cli, temp_dir

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
FIXTURE = os.path.join(HERE, "data", "vllm-bench-oracle", "metrics.json")
TOLERANCE = 1e-9

with open(FIXTURE, encoding="utf-8") as _handle:
    ORACLE = json.load(_handle)


def relative_difference(a: float, b: float) -> float:
    """|a − b| / max(|a|, |b|); 0 when equal (both 0 included)."""
    return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))


def cases_of(source: str) -> list:
    return [case for case in ORACLE["cases"] if case["source"] == source]


def flags_of(case: dict) -> list[str]:
    """The lab's command-line flags for a case: vLLM's syntax, limits written back exactly (repr)."""
    flags = ["--metric-percentiles", ",".join(repr(p) for p in case["metric_percentiles"])]
    if case["goodput"]:
        flags += ["--goodput", *(f"{key}:{limit!r}" for key, limit in case["goodput"].items())]
    return flags


def sha256_of(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


class OracleCase(unittest.TestCase):
    def assert_same_as_vllm(self, row: dict, case: dict, skip: tuple = ()) -> None:
        """Every key of the lab's bench row for the case's percentiles against vLLM's number."""
        vllm = case["vllm"]
        label = f"{case['source']} {case['metric_percentiles']} {case['goodput']}"
        for key in bench_fields(case["metric_percentiles"]):
            if key in skip:
                continue
            with self.subTest(case=label, key=key):
                if key == "slo_attainment":
                    self.assert_attainment(row, vllm, case["goodput"])
                elif vllm[key] is None:
                    self.assertIsNone(row[key])
                else:
                    self.assertIsNotNone(row[key])
                    self.assertLess(relative_difference(row[key], vllm[key]), TOLERANCE, (row[key], vllm[key]))

    def assert_attainment(self, row: dict, vllm: dict, goodput) -> None:
        if not goodput or not vllm["completed"]:
            self.assertIsNone(row["slo_attainment"])
            return
        good = round(vllm["request_goodput"] * vllm["duration"])
        self.assertEqual(row["slo_attainment"], good / vllm["completed"])


class FixtureTest(unittest.TestCase):
    def test_fixture_is_vllms_and_covers_the_edges(self):
        """Made by vLLM 0.33.0; the 4090 run it read is the file in tests/data; every hand case and
        variant the task asks for is present (failures, 1-token outputs, zero gaps, one request, all
        failed, limits on a value, several keys, P99.9)."""
        self.assertEqual(ORACLE["vllm_version"], "0.33.0")
        source = ORACLE["sources"]["rtx4090-run"]
        self.assertEqual(sha256_of(os.path.join(PROJECT, source["path"])), source["sha256"])
        names = set(ORACLE["sources"])
        for name in ("hand/mixed", "hand/one-token-outputs", "hand/zero-itl-gaps", "hand/single-request",
                     "hand/all-failed", "hand/on-the-limit", "step-overload", "step-timeouts"):
            self.assertIn(name, names)
        self.assertTrue(any(99.9 in case["metric_percentiles"] for case in ORACLE["cases"]))
        self.assertTrue(any(case["goodput"] and len(case["goodput"]) == 3 for case in ORACLE["cases"]))


class HandCasesTest(OracleCase):
    """Edge cases as ``vllm bench serve --save-detailed`` keeps them, read by the importer's function."""

    def test_every_hand_case_and_variant(self):
        hand = [case for case in ORACLE["cases"] if case["source"].startswith("hand/")]
        self.assertGreaterEqual(len(hand), 40)
        for case in hand:
            result = ORACLE["sources"][case["source"]]["result"]
            settings = BenchSettings(tuple(case["metric_percentiles"]), case["goodput"])
            row, notes = bench_of_vllm_result(result, case["source"], settings)
            self.assertEqual(notes, [])
            self.assert_same_as_vllm(row, case)

    def test_edges_mean_what_vllm_says(self):
        """Spot checks of the fixture itself: all failed -> zeros; a 1-token sample -> TPOT 0; a limit
        exactly on a value passes; a request whose usage count is missing counts as 1 token."""
        by_key = {(c["source"], json.dumps(c["goodput"]), tuple(c["metric_percentiles"])): c["vllm"]
                  for c in ORACLE["cases"]}
        failed = by_key[("hand/all-failed", "null", (99.0,))]
        self.assertEqual((failed["completed"], failed["failed"], failed["mean_ttft_ms"]), (0, 3, 0.0))
        ones = by_key[("hand/one-token-outputs", "null", (99.0,))]
        self.assertEqual((ones["mean_tpot_ms"], ones["p99_itl_ms"]), (0.0, 0.0))
        on = by_key[("hand/on-the-limit", json.dumps({"ttft": 250.0, "tpot": 250.0, "e2el": 1250.0}),
                     (0.0, 1.0, 33.3, 50.0, 99.9, 100.0))]
        # the first request sits on all three limits and is good; two more are under; two are over 250 ms TTFT
        self.assertEqual(on["request_goodput"] * 1.5, 3.0)
        self.assertEqual(ORACLE["sources"]["hand/missing-usage"]["result"]["output_lens"], [1, 4])

    def test_through_import_results(self):
        """One case end to end: the saved file through ``import-results`` and its summary.json."""
        case = next(c for c in cases_of("hand/random-200") if len(c["metric_percentiles"]) > 4)
        doc = dict(ORACLE["sources"]["hand/random-200"]["result"], backend="vllm",
                   num_prompts=len(ORACLE["sources"]["hand/random-200"]["result"]["errors"]))
        base = temp_dir(self)
        path = os.path.join(base, "result.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(doc, out)
        code, _, err = run_cli(["import-results", path, "--artifacts", os.path.join(base, "run"), *flags_of(case)])
        self.assertEqual(code, 0, err)
        row = json.loads(read(os.path.join(base, "run", "summary.json")))["cases"][0]
        self.assert_same_as_vllm(row, case)
        # the failures whose HTTP reason was empty (0 output tokens) are failed requests too, as in vLLM
        lines = [json.loads(line) for line in read(os.path.join(base, "run", "requests.jsonl")).splitlines()]
        self.assertEqual(sum(line["status"] == "error" for line in lines), case["vllm"]["failed"])
        self.assertGreater(sum(1 for e, n in zip(doc["errors"], doc["output_lens"]) if not e and not n), 0)


class ImportedRunTest(OracleCase):
    """The real RTX 4090 run through ``import-results``."""

    def test_rtx4090_run(self):
        source = ORACLE["sources"]["rtx4090-run"]
        cases = cases_of("rtx4090-run")
        self.assertEqual(len(cases), 3)
        base = temp_dir(self)
        for index, case in enumerate(cases):
            target = os.path.join(base, str(index))
            code, _, err = run_cli(["import-results", os.path.join(PROJECT, source["path"]), "--artifacts", target,
                                    *flags_of(case)])
            self.assertEqual(code, 0, err)
            row = json.loads(read(os.path.join(target, "summary.json")))["cases"][0]
            itl = tuple(key for key in bench_fields(case["metric_percentiles"]) if "_itl_" in key)
            self.assert_same_as_vllm(row, case, skip=itl)
            for key in itl:   # no per-token times: the lab says None; vLLM, fed no ITL samples, 0.0
                self.assertIsNone(row[key])
                self.assertEqual(case["vllm"][key], 0.0)


class StepModelRunTest(OracleCase):
    """The lab's ``--step-model`` runs, made again with the fixture's own commands."""

    def run_source(self, name: str) -> None:
        source = ORACLE["sources"][name]
        base = temp_dir(self)
        importing = list(source["import_command"][1:])
        workload = os.path.join(base, importing[-1])
        code, _, err = run_cli([os.path.join(PROJECT, part) if part.startswith("tests/") else part
                                for part in importing[:-1]] + [workload])
        self.assertEqual(code, 0, err)
        command = source["run_command"][1:]
        command = [workload if part == importing[-1] else
                   os.path.join(PROJECT, part) if part.startswith("tests/") else part
                   for part in command[:command.index("--artifacts")]]
        cases = cases_of(name)
        self.assertEqual(len(cases), 3)
        for index, case in enumerate(cases):
            target = os.path.join(base, f"run{index}")
            code, _, err = run_cli([*command, "--artifacts", target, *flags_of(case)])
            self.assertEqual(code, 0, err)
            self.assertEqual(sha256_of(os.path.join(target, "requests.jsonl")), source["requests_jsonl_sha256"],
                             f"{name}: the run's requests.jsonl is not the one vLLM was fed; if the simulator "
                             "changed on purpose, make the fixture again with tools/vllm_bench_oracle.py")
            row = json.loads(read(os.path.join(target, "summary.json")))["cases"][0]
            self.assert_same_as_vllm(row, case)

    def test_overloaded_async_run(self):
        self.run_source("step-overload")

    def test_run_with_timeouts_and_max_concurrency(self):
        self.run_source("step-timeouts")


if __name__ == "__main__":
    unittest.main()
