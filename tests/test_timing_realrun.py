"""Real measurements (compare.md §4, formats.md): export, import-results, compare on imported runs.

Fixtures: vLLM serving-benchmark results are written here to the documented schema (formats.md);
the per-request JSONL is a 20-line excerpt of a real run in ``tests/data/`` (see its SOURCES.md).
"""

import json
import os
import unittest

from sched.analysis.compare import compare
from sched.analysis.compare_sides import load_side
from sched.timing.export import export_rows
from sched.workload.specs import scenario
from tests.helpers import PROJECT, read, run_cli, temp_dir

EXCERPT = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090")


def vllm_run(**overrides):
    """A 4-request ``--save-result --save-detailed`` object (seconds per request, ms aggregates).

    r0: sent at 100.0, TTFT 0.1, ITLs [0.05, 0.15] -> tokens at 100, 150, 300 ms; TPOT 100 ms.
    r1: sent at 100.5, TTFT 0.2, ITL [0.1] -> tokens at 700, 800 ms.
    r2: sent at 100.6, failed ("Bad Request"): no latency sample.
    r3: sent at 101.0, TTFT 0.3, one token at 1300 ms.
    """
    run = {"date": "20260101-000000", "endpoint_type": "openai", "backend": "vllm", "label": None,
           "model_id": "meta-llama/Llama-3.1-8B", "tokenizer_id": "meta-llama/Llama-3.1-8B", "num_prompts": 4,
           "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None, "scheduling_policy": "fcfs",
           "revision": "main", "vllm_version": "0.19.0",
           "duration": 1.4, "completed": 3, "failed": 1, "total_input_tokens": 40, "total_output_tokens": 6,
           "request_throughput": 2.1, "request_goodput": None, "output_throughput": 4.3,
           "total_token_throughput": 32.9, "mean_ttft_ms": 200.0, "median_ttft_ms": 200.0,
           "std_ttft_ms": 81.6, "p99_ttft_ms": 298.0,
           "input_lens": [10, 10, 10, 10], "output_lens": [3, 2, 0, 1], "start_times": [100.0, 100.5, 100.6, 101.0],
           "ttfts": [0.1, 0.2, 0.0, 0.3], "itls": [[0.05, 0.15], [0.1], [], []],
           "generated_texts": ["a b c", "d e", "", "f"], "errors": ["", "", "Bad Request", ""]}
    run.update(overrides)
    return run


class RealrunMixin:
    def setUp(self):
        self.base = temp_dir(self)

    def write(self, name, text):
        path = os.path.join(self.base, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def imported(self, name, text, *args, filename="bench.json"):
        source = self.write(name + "-" + filename, text)
        out = os.path.join(self.base, name)
        code, stdout, err = run_cli(["import-results", source, "--artifacts", out, *args])
        self.assertEqual(code, 0, err)
        return out

    def summary(self, directory):
        return json.loads(read(os.path.join(directory, "summary.json")))["cases"][0]


class ExportTest(RealrunMixin, unittest.TestCase):
    def test_rows_carry_lengths_offsets_and_priorities(self):
        """baseline, tick 100 ms: S1 arrives at tick 1 -> 0.1 s; 144-token prompt = 144 words."""
        rows = {r["name"]: r for r in export_rows(scenario("baseline"), tick_ms=100)}
        s1 = rows["S1"]
        self.assertEqual((s1["arrival_s"], s1["prompt_tokens"], s1["output_tokens"], s1["priority"]), (0.1, 144, 16, 0))
        self.assertEqual(len(s1["prompt"].split()), 144)
        self.assertEqual(rows["S7"]["arrival_s"], 1.2)
        # Same prefix_key -> the same first 128 words; the suffixes differ.
        self.assertEqual(s1["prompt"].split()[:128], rows["S4"]["prompt"].split()[:128])
        self.assertNotEqual(s1["prompt"].split()[128:], rows["S4"]["prompt"].split()[128:])
        self.assertNotEqual(rows["U3"]["prompt"].split()[:10], s1["prompt"].split()[:10])
        pm = {r["name"]: r["priority"] for r in export_rows(scenario("priority-mix"), tick_ms=250)}
        self.assertEqual((pm["B0"], pm["I0"]), (1, 0))

    def test_export_directory(self):
        out = os.path.join(self.base, "exp")
        code, stdout, err = run_cli(["export", "--scenario", "priority-mix", "--tick-ms", "250", "--out", out])
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(os.listdir(out)), ["export.json", "requests.jsonl", "workload.json"])
        meta = json.loads(read(os.path.join(out, "export.json")))
        self.assertEqual((meta["tick_ms"], meta["num_requests"]), (250, 12))
        lines = [json.loads(line) for line in read(os.path.join(out, "requests.jsonl")).splitlines()]
        self.assertEqual(lines[-1]["arrival_s"], 2.5)            # B7 arrives at tick 10
        self.assertEqual(run_cli(["export", "--out", out])[0], 2)   # no overwrite without --force
        self.assertEqual(run_cli(["export", "--out", out, "--tick-ms", "0"])[0], 2)


    def test_block_prompts_share_exactly_their_full_leading_blocks(self):
        """Block size 4 (docs/handbook/real-traffic.md §14.1, sched/lab/cache.py: only full blocks are shared).
        A [1, 2, 3], 12 tokens: 3 full blocks. B [1, 2, 9], 10 tokens: floor(10 / 4) = 2 full blocks,
        its 2-token block 9 is its own. C [1, "2"], 9 tokens: block "2" is not block 2, 1 own word.
        D [9], 6 tokens: 1 full block, 2 own words. So A and B share words 0-7, A and C words 0-3
        only, and B's partial block 9 (words 8-9) is not D's block 9 (words 0-1)."""
        def request(name, blocks, tokens):
            return {"name": name, "arrival": 0, "prefix_key": None, "prefix_tokens": 0, "suffix_tokens": tokens,
                    "output_tokens": 2, "prefix_blocks": blocks}
        path = self.write("blocks.json", json.dumps({"block_size": 4, "requests": [
            request("A", [1, 2, 3], 12), request("B", [1, 2, 9], 10), request("C", [1, "2"], 9),
            request("D", [9], 6)]}))
        out = os.path.join(self.base, "exp")
        code, _, err = run_cli(["export", "--workload", path, "--out", out])
        self.assertEqual(code, 0, err)
        rows = {row["name"]: row for row in map(json.loads, read(os.path.join(out, "requests.jsonl")).splitlines())}
        words = {name: row["prompt"].split() for name, row in rows.items()}
        self.assertEqual({name: len(w) for name, w in words.items()}, {"A": 12, "B": 10, "C": 9, "D": 6})
        self.assertEqual(words["A"][:8], words["B"][:8])        # blocks 1, 2
        self.assertNotEqual(words["A"][8:10], words["B"][8:10])  # block 3 vs B's own partial block 9
        self.assertEqual(words["A"][:4], words["C"][:4])        # block 1
        self.assertNotEqual(words["A"][4:8], words["C"][4:8])    # block 2 vs block "2"
        self.assertNotEqual(words["B"][8:10], words["D"][:2])    # a partial block is never shared
        self.assertEqual((rows["B"]["prefix_blocks"], rows["B"]["block_size"]), ([1, 2, 9], 4))
        self.assertNotIn("prefix_blocks", export_rows(scenario("baseline"))[0])

    def test_workload_tick_ms_is_the_default(self):
        """A workload recording tick_ms 12.5 (written by import): arrival tick 8 -> 8 x 12.5 / 1000 =
        0.1 s; an explicit --tick-ms 250 wins: 8 x 250 / 1000 = 2.0 s."""
        path = self.write("ticked.json", '{"tick_ms": 12.5, "requests": [{"name": "A", "arrival": 8, '
                                         '"prefix_key": null, "prefix_tokens": 0, "suffix_tokens": 4, '
                                         '"output_tokens": 2}]}')
        for extra, expected, source in (([], 0.1, "workload tick_ms"), (["--tick-ms", "250"], 2.0, "--tick-ms")):
            with self.subTest(extra=extra):
                out = os.path.join(temp_dir(self), "exp")
                code, stdout, err = run_cli(["export", "--workload", path, "--out", out, *extra])
                self.assertEqual(code, 0, err)
                tick_ms = float(extra[1]) if extra else 12.5
                self.assertIn(f"tick = {tick_ms:g} ms ({source})", stdout)
                meta = json.loads(read(os.path.join(out, "export.json")))
                self.assertEqual((meta["tick_ms"], meta["tick_ms_from"]), (tick_ms, source))
                row = json.loads(read(os.path.join(out, "requests.jsonl")))
                self.assertEqual(row["arrival_s"], expected)
                self.assertEqual(json.loads(read(os.path.join(out, "workload.json")))["tick_ms"], 12.5)


class ImportVllmTest(RealrunMixin, unittest.TestCase):
    def test_detailed_result_in_milliseconds(self):
        out = self.imported("v", json.dumps(vllm_run()))
        s = self.summary(out)
        # TTFTs of the 3 successes: 100, 200, 300 ms; nearest-rank P50 = 200, P95 = 300.
        self.assertEqual((s["p50_ttft"], s["p95_ttft"]), (200.0, 300.0))
        self.assertEqual(s["p95_itl"], 150.0)                  # gaps 50, 150, 100 pooled
        self.assertEqual(s["p95_tpot"], 100.0)                 # r0 (300-100)/2, r1 (800-700)/1
        self.assertEqual((s["succeeded"], s["arrived"], s["failed"], s["completion_rate"]), (3, 4, 1, 0.75))
        self.assertEqual(s["makespan"], 1300.0)                 # last end 1300 ms - first send 0
        self.assertEqual(s["throughput"], round(6 / 1.3, 6))    # output tokens per second
        self.assertEqual(s["fairness"], 0.0)                    # 1 - (300-100)/200
        for field in ("p95_queue_wait", "hit_tokens", "budget_utilization", "priority_first_token_order_score"):
            self.assertIsNone(s[field])
            self.assertIn(field, s["missing"])
        lines = [json.loads(line) for line in read(os.path.join(out, "requests.jsonl")).splitlines()]
        self.assertEqual(lines[0]["token_times"], [100.0, 150.0, 300.0])
        self.assertEqual((lines[2]["status"], lines[2]["ttft"], lines[2]["error"]), ("error", None, "Bad Request"))
        manifest = json.loads(read(os.path.join(out, "manifest.json")))
        self.assertEqual(manifest["engine"]["model"], "meta-llama/Llama-3.1-8B")
        self.assertEqual(manifest["scheduler"]["policy"], "fcfs")
        self.assertEqual(manifest["reported"]["p99_ttft_ms"], 298.0)     # the file's own, kept apart

    def test_without_detailed_lists_everything_per_request_is_missing(self):
        run = {k: v for k, v in vllm_run().items() if k not in ("input_lens", "output_lens", "start_times",
                                                               "ttfts", "itls", "generated_texts", "errors")}
        out = self.imported("agg", json.dumps(run))
        s = self.summary(out)
        self.assertIsNone(s["p95_ttft"])                         # never the file's interpolated p99
        self.assertIn("per_request", s["missing"])
        self.assertIsNone(s["fairness"])                         # unknown, not "1 for no sample"
        self.assertEqual((s["succeeded"], s["arrived"], s["completion_rate"], s["error_rate"]), (3, 4, 0.75, 0.25))
        self.assertEqual(s["throughput"], 4.3)                   # the file's output_throughput
        # compare: the trace is missing evidence (tune), not four lost requests (reject).
        side = load_side(out)
        ok = load_side(self.imported("full", json.dumps(vllm_run(scheduling_policy="priority"))))
        record = compare(ok, side)
        self.assertEqual(record["evidence"]["candidate"]["num_lost"], 0)
        self.assertIn("candidate: per-request trace missing", record["missing_evidence"])

    def test_failed_backend_run_is_rejected(self):
        """Every request errored (completed 0): the run failed, a hard failure whatever the gates say."""
        failed = vllm_run(scheduling_policy="priority", completed=0, failed=4, errors=["Server down"] * 4)
        baseline = load_side(self.imported("ok", json.dumps(vllm_run())))
        candidate = load_side(self.imported("down", json.dumps(failed)))
        record = compare(baseline, candidate)
        self.assertEqual(record["decision"], "reject")
        self.assertIn("candidate: the backend run failed", record["hard_failures"])

    def test_append_result_needs_run_index(self):
        text = json.dumps(vllm_run()) + "\n" + json.dumps(vllm_run(scheduling_policy="priority")) + "\n"
        source = self.write("two.jsonl", text)
        code, _, err = run_cli(["import-results", source, "--artifacts", os.path.join(self.base, "x")])
        self.assertEqual(code, 2)
        self.assertIn("--run-index", err)
        out = self.imported("second", text, "--run-index", "1")
        self.assertEqual(json.loads(read(os.path.join(out, "manifest.json")))["scheduler"]["policy"], "priority")

    def test_bad_files_exit_2(self):
        table = [
            ("short.json", json.dumps(vllm_run(ttfts=[0.1])), "field 'ttfts'"),
            ("text.json", json.dumps(vllm_run(ttfts=[0.1, "x", 0, 0.3])), "request 1 (r1): field 'ttfts'"),
            ("junk.json", "not json", "cannot detect"),
            ("policy.json", json.dumps(vllm_run()), "--policy says"),
        ]
        for name, text, words in table:
            with self.subTest(name=name):
                source = self.write(name, text)
                out = os.path.join(self.base, "out-" + name)
                args = ["--policy", "priority"] if name == "policy.json" else []
                code, _, err = run_cli(["import-results", source, "--artifacts", out, *args])
                self.assertEqual(code, 2)
                self.assertIn(words, err)
                self.assertFalse(os.path.exists(out))


class ImportRequestJsonlTest(RealrunMixin, unittest.TestCase):
    def test_two_clocks_ttft_from_queued_ts(self):
        """bench-0: first_token_ts 27537.350135653 - queued_ts 27536.660701067 = 0.689434586 s.
        Its arrival_time (epoch 1787267980.08) is another clock and must not be used."""
        out = os.path.join(self.base, "llmss")
        code, stdout, err = run_cli(["import-results", os.path.join(EXCERPT, "requests.jsonl"), "--artifacts", out])
        self.assertEqual(code, 0, err)
        lines = [json.loads(line) for line in read(os.path.join(out, "requests.jsonl")).splitlines()]
        self.assertEqual(len(lines), 20)
        first = lines[0]
        self.assertEqual(first["name"], "bench-0")
        self.assertAlmostEqual(first["ttft"], 689.434586, delta=0.002)
        self.assertAlmostEqual(first["queue_wait"], 0.020579, delta=0.002)
        self.assertAlmostEqual(first["tpot"], (27554.231018618 - 27537.350135653) * 1000 / 530, delta=0.002)
        self.assertTrue(all(0 < line["ttft"] < 60_000 for line in lines))   # never ~1.7e12 ms
        s = self.summary(out)
        self.assertIsNone(s["p95_itl"])                     # no per-token times in this format
        self.assertIn("p95_itl", s["missing"])
        # meta.json says 300 requests; the excerpt holds 20: the other 280 arrived but are absent.
        self.assertEqual((s["arrived"], s["succeeded"]), (300, 20))
        manifest = json.loads(read(os.path.join(out, "manifest.json")))
        self.assertEqual(manifest["engine"]["engine_version"], "0.19.0")
        self.assertEqual(manifest["engine"]["device"], "NVIDIA GeForce RTX 4090")
        self.assertEqual(manifest["scheduler"]["policy"], "fcfs")
        evidence_side = load_side(out)
        record = compare(evidence_side, evidence_side)
        self.assertEqual(record["decision"], "reject")      # no change, and 280 requests lost
        self.assertEqual(record["evidence"]["candidate"]["num_lost"], 280)

    def test_line_without_last_token_never_ended(self):
        text = read(os.path.join(EXCERPT, "requests.jsonl")).splitlines()[:3]
        broken = json.loads(text[2])
        broken["last_token_ts"] = None
        out = self.imported("cut", "\n".join(text[:2] + [json.dumps(broken)]) + "\n", "--policy", "fcfs",
                            filename="requests.jsonl")
        lines = [json.loads(line) for line in read(os.path.join(out, "requests.jsonl")).splitlines()]
        self.assertEqual(lines[2]["status"], "unfinished")
        self.assertEqual(load_side(out).rows[2]["status"], "unfinished")


class RealCompareTest(RealrunMixin, unittest.TestCase):
    """The simulated priority-mix runs replayed as if measured: 1 tick = 100 ms, fed through the
    vLLM-bench format and imported with the exported workload. The decision is unit-free, so it
    must equal the simulated one, and every latency must be 100 x the tick value."""

    def fake_bench(self, run_dir, policy, drop=()):
        lines = [json.loads(line) for line in read(os.path.join(run_dir, "requests.jsonl")).splitlines()]
        rows = [r for r in lines if r["case"] == "continuous" and r["name"] not in drop]
        starts = [50.0 + r["arrival"] * 0.1 for r in rows]
        ttfts = [(r["first_token_at"] - r["arrival"]) * 0.1 for r in rows]
        itls = [[(b - a) * 0.1 for a, b in zip(r["token_times"], r["token_times"][1:])] for r in rows]
        return json.dumps(vllm_run(num_prompts=12, scheduling_policy=policy, input_lens=[r["prompt_tokens"] for r in rows],
                                   output_lens=[r["output_tokens_emitted"] for r in rows], start_times=starts,
                                   ttfts=ttfts, itls=itls, generated_texts=["text"] * len(rows), errors=[""] * len(rows)))

    def test_simulated_and_imported_decisions_agree(self):
        sim = {}
        for policy in ("fcfs", "priority"):
            sim[policy] = os.path.join(self.base, "sim-" + policy)
            self.assertEqual(run_cli(["--scenario", "priority-mix", "--policy", policy, "--artifacts", sim[policy]])[0], 0)
        workload = os.path.join(sim["fcfs"], "workload.json")
        real = {p: self.imported("real-" + p, self.fake_bench(sim[p], p), "--workload", workload) for p in sim}
        s_real, s_sim = self.summary(real["fcfs"]), json.loads(read(os.path.join(sim["fcfs"], "summary.json")))["cases"][1]
        self.assertAlmostEqual(s_real["p95_ttft"], 100 * s_sim["p95_ttft"], places=3)
        self.assertAlmostEqual(s_real["p95_e2e"], 100 * s_sim["p95_e2e"], places=3)
        self.assertEqual(s_real["priority_first_token_order_score"], s_sim["priority_first_token_order_score"])
        imported = compare(load_side(real["fcfs"]), load_side(real["priority"]))
        simulated = compare(load_side(sim["fcfs"], "continuous"), load_side(sim["priority"], "continuous"))
        self.assertEqual(imported["units"], "ms")
        self.assertTrue(imported["contract"]["ok"], imported["contract"]["problems"])
        self.assertEqual((imported["decision"], simulated["decision"]), ("accept", "accept"))

    def test_candidate_missing_requests_is_rejected(self):
        """The candidate's file holds 11 of its 12 prompts (num_prompts 12): its latencies may look
        fine, but one request is lost, a hard failure of its own, and the decision is reject. (Without
        --workload the workload identity is unknown too, which the contract also refuses.)"""
        sim = {}
        for policy in ("fcfs", "priority"):
            sim[policy] = os.path.join(self.base, "sim-" + policy)
            self.assertEqual(run_cli(["--scenario", "priority-mix", "--policy", policy, "--artifacts", sim[policy]])[0], 0)
        baseline = self.imported("rf", self.fake_bench(sim["fcfs"], "fcfs"))
        candidate = self.imported("rp", self.fake_bench(sim["priority"], "priority", drop=("B7",)))
        decision = os.path.join(self.base, "decision.json")
        code, out, err = run_cli(["compare", baseline, candidate, "--out", decision])
        self.assertEqual(code, 0, err)
        record = json.loads(read(decision))
        self.assertEqual(record["decision"], "reject")
        self.assertEqual(record["evidence"]["candidate"]["num_lost"], 1)
        self.assertIn("candidate: 1 arrived request(s) lost (ids unknown)", record["hard_failures"])
        self.assertIn("workload identity unknown", " ".join(record["contract"]["problems"]))


if __name__ == "__main__":
    unittest.main()


class ImportRefusesImpossibleValuesTest(RealrunMixin, unittest.TestCase):
    """Impossible or malformed values are refused with exit 2 and one line naming the file, the
    line or request and the field; nothing is written, nothing is coerced (3.7 is not 3)."""

    def excerpt_lines(self):
        return [json.loads(line) for line in read(os.path.join(EXCERPT, "requests.jsonl")).splitlines()[:3]]

    def refused(self, name, text, words, *args, filename="bench.json"):
        source = self.write(name + "-" + filename, text)
        out = os.path.join(self.base, "out-" + name)
        code, _, err = run_cli(["import-results", source, "--artifacts", out, *args])
        self.assertEqual(code, 2, err)
        self.assertIn(words, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertFalse(os.path.exists(out))

    def test_request_jsonl_values(self):
        """bench-1 (line 2) of the excerpt: queued_ts 27537.047603549; a first token one second
        earlier would be a TTFT of -1000 ms."""
        table = [
            ("first_token_ts", 27536.047603549, "line 2 (bench-1): field 'first_token_ts'", "negative TTFT"),
            ("scheduled_ts", 27537.0, "line 2 (bench-1): field 'scheduled_ts'", "negative queue wait"),
            ("last_token_ts", 27537.1, "line 2 (bench-1): field 'last_token_ts'", "before its first token"),
            ("output_toks", -1, "line 2 (bench-1): field 'output_toks'", "between 0 and"),
            ("output_toks", 3.7, "line 2 (bench-1): field 'output_toks'", "whole number, got 3.7"),
            ("output_toks", 1e300, "line 2 (bench-1): field 'output_toks'", "between 0 and"),
            ("input_toks", "many", "line 2 (bench-1): field 'input_toks'", "finite number"),
            ("queued_ts", 1e308, "line 2 (bench-1): field 'queued_ts'", "between"),
            ("queued_ts", -1e308, "line 2 (bench-1): field 'queued_ts'", "between"),
            ("request_id", [1], "line 2: field 'request_id'", "a string or an integer"),
        ]
        for field, value, where, words in table:
            with self.subTest(field=field, value=value):
                lines = self.excerpt_lines()
                lines[1][field] = value
                text = "".join(json.dumps(line) + "\n" for line in lines)
                self.refused(f"{field}-{value}", text, where, "--policy", "fcfs", filename="requests.jsonl")
                self.refused(f"{field}-{value}-again", text, words, "--policy", "fcfs", filename="requests.jsonl")

    def test_meta_json_shapes(self):
        text = "".join(json.dumps(line) + "\n" for line in self.excerpt_lines())
        table = [
            ("[1, 2]", "meta.json: must be a JSON object"),
            ('{"num_requests": "many"}', "meta.json: field 'num_requests'"),
            ('{"num_requests": 2.5}', "meta.json: field 'num_requests': must be a whole number"),
            ('{"hardware": 5}', "meta.json: field 'hardware': must be an object"),
            ('{"resolved_config": "x"}', "meta.json: field 'resolved_config': must be an object"),
            ("[" * 100_000 + "]" * 100_000, "meta.json: JSON nested too deeply"),
        ]
        for meta, words in table:
            with self.subTest(meta=meta[:30]):
                path = self.write("meta.json", meta)
                self.refused("meta", text, words, "--meta", path, filename="requests.jsonl")

    def test_vllm_bench_values(self):
        table = [
            (vllm_run(ttfts=[1e308, 0.2, 0.0, 0.3]), "request 0 (r0): field 'ttfts'"),
            (vllm_run(ttfts=[-0.1, 0.2, 0.0, 0.3]), "request 0 (r0): field 'ttfts': must be between 0"),
            (vllm_run(itls=[[0.05, -0.15], [0.1], [], []]), "request 0 (r0): field 'itls'"),
            (vllm_run(output_lens=[3.7, 2, 0, 1]), "request 0 (r0): field 'output_lens': must be a whole number"),
            (vllm_run(output_lens=[3, -2, 0, 1]), "request 1 (r1): field 'output_lens'"),
            (vllm_run(output_lens=[3, 1e300, 0, 1]), "request 1 (r1): field 'output_lens'"),
            (vllm_run(start_times=[100.0, 1e308, 100.6, 101.0]), "field 'start_times'"),
            (vllm_run(errors=["", 5, "", ""]), "request 1 (r1): field 'errors'"),
            (vllm_run(num_prompts="four"), "field 'num_prompts'"),
        ]
        for index, (run, words) in enumerate(table):
            with self.subTest(words=words):
                self.refused(f"v{index}", json.dumps(run), words)
        aggregate = {k: v for k, v in vllm_run().items() if k not in ("input_lens", "ttfts")}
        for key, value in (("completed", "3"), ("completed", 9), ("output_throughput", -1), ("duration", "long")):
            with self.subTest(aggregate=key, value=value):
                self.refused(f"agg-{key}-{value}", json.dumps(dict(aggregate, **{key: value})), f"field {key!r}")
        self.refused("nested", "[" * 100_000 + "]" * 100_000, "nested too deeply", "--format", "vllm-bench")


class ImportedRunShapeTest(RealrunMixin, unittest.TestCase):
    def test_units_and_kind_are_explicit(self):
        """An imported run says it is not simulated and gives every summary column's unit: ms and
        output tokens per second, never the simulator's ticks."""
        out = self.imported("v", json.dumps(vllm_run()))
        manifest = json.loads(read(os.path.join(out, "manifest.json")))
        self.assertEqual((manifest["kind"], manifest["simulated"], manifest["time_unit"], manifest["time_base"]),
                         ("real", False, "ms", "client send time"))
        summary = json.loads(read(os.path.join(out, "summary.json")))
        units = summary["field_units"]
        self.assertEqual(units["p95_ttft"], "ms")
        self.assertTrue(units["completed_output_tps"].startswith("output tokens per second"))
        self.assertTrue(units["throughput"].startswith("output tokens per second"))
        self.assertEqual(set(summary["cases"][0]) - {"case", "missing"} - set(units), set())
        self.assertNotIn("tick", json.dumps(units))

    def test_force_never_mixes_an_import_into_another_kind_of_run(self):
        """--force may replace an earlier import, never a simulated run or an export (the directory
        would hold both kinds of files)."""
        sim = os.path.join(self.base, "sim")
        self.assertEqual(run_cli(["--scenario", "priority-mix", "--artifacts", sim])[0], 0)
        exported = os.path.join(self.base, "exp")
        self.assertEqual(run_cli(["export", "--out", exported])[0], 0)
        source = self.write("bench.json", json.dumps(vllm_run()))
        for target in (sim, exported):
            with self.subTest(target=os.path.basename(target)):
                before = {name: read(os.path.join(target, name)) for name in os.listdir(target)}
                code, _, err = run_cli(["import-results", source, "--artifacts", target, "--force"])
                self.assertEqual(code, 2)
                self.assertIn("already holds files of another kind", err)
                self.assertEqual({name: read(os.path.join(target, name)) for name in os.listdir(target)}, before)
        code, _, err = run_cli(["export", "--out", sim, "--force"])
        self.assertEqual(code, 2)
        self.assertIn("already holds files of another kind (simulated)", err)
        again = self.imported("again", json.dumps(vllm_run()))
        self.assertEqual(run_cli(["import-results", source, "--artifacts", again, "--force"])[0], 0)


class ExportBoundsTest(RealrunMixin, unittest.TestCase):
    def test_tick_ms_and_out_are_bounded(self):
        out = os.path.join(self.base, "exp")
        for tick in ("1e308", "inf", "nan", "0", "-5", "3600000.5"):
            with self.subTest(tick_ms=tick):
                code, _, err = run_cli(["export", "--out", out, "--tick-ms", tick])
                self.assertEqual(code, 2)
                self.assertIn("--tick-ms", err)
                self.assertFalse(os.path.exists(out))
        code, _, err = run_cli(["export", "--out", ""])
        self.assertEqual(code, 2)
        self.assertIn("--out: must name a directory", err)
        # The bound itself works: B7 arrives at tick 10 -> 10 x 3,600,000 ms = 36,000 s, valid JSON.
        self.assertEqual(run_cli(["export", "--scenario", "priority-mix", "--out", out, "--tick-ms", "3600000"])[0], 0)
        last = json.loads(read(os.path.join(out, "requests.jsonl")).splitlines()[-1],
                          parse_constant=lambda name: self.fail(name))
        self.assertEqual(last["arrival_s"], 36000.0)

    def test_unwritable_text_in_a_workload_is_refused(self):
        """A prefix_key holding a lone surrogate (JSON "\\udc80") cannot be written as UTF-8."""
        path = self.write("w.json", '{"requests": [{"name": "A", "arrival": 0, "prefix_key": "\\udc80", '
                                    '"prefix_tokens": 4, "suffix_tokens": 4, "output_tokens": 2}]}')
        out = os.path.join(self.base, "exp")
        code, _, err = run_cli(["export", "--workload", path, "--out", out])
        self.assertEqual(code, 2, err)
        # The workload reader refuses it (every command that reads a workload says the same).
        self.assertIn("request 0 (A): field 'prefix_key': must be Unicode text that UTF-8 can write", err)
        self.assertFalse(os.path.exists(out))

    def test_first_word_has_no_leading_space(self):
        """docs/handbook/real-measurements.md §11.5: words are separated by single spaces; the prompt starts with a word."""
        for row in export_rows(scenario("baseline")):
            self.assertEqual(row["prompt"], row["prompt"].strip())
            self.assertEqual(row["prompt"].split(" "), row["prompt"].split())


class NotComparableTest(RealrunMixin, unittest.TestCase):
    def test_ms_run_against_tick_run_is_rejected_without_gates_or_deltas(self):
        """A simulated run (ticks) against an imported one (ms): subtracting 43 ticks from 4300 ms
        means nothing, so the contract fails on units, no gate is evaluated and no delta formed."""
        sim = os.path.join(self.base, "sim")
        self.assertEqual(run_cli(["--scenario", "priority-mix", "--artifacts", sim])[0], 0)
        real = self.imported("real", json.dumps(vllm_run(scheduling_policy="priority")))
        out = os.path.join(self.base, "d.json")
        code, text, err = run_cli(["compare", sim, real, "--baseline-case", "continuous", "--out", out])
        self.assertEqual(code, 0, err)
        record = json.loads(read(out))
        self.assertEqual(record["decision"], "reject")
        self.assertFalse(record["contract"]["comparable"])
        self.assertIn("units", [m["field"] for m in record["contract"]["mismatches"]])
        self.assertEqual((record["gates"], record["deltas"]), ([], {}))
        self.assertIn("gates: not evaluated", text)
        self.assertNotIn("pass ", text)

    def test_different_time_bases_are_not_comparable(self):
        """Both in ms, but TTFT from the client's send time versus from the server's queued_ts."""
        bench = load_side(self.imported("bench", json.dumps(vllm_run())))
        out = os.path.join(self.base, "llmss")
        self.assertEqual(run_cli(["import-results", os.path.join(EXCERPT, "requests.jsonl"), "--artifacts", out])[0], 0)
        record = compare(bench, load_side(out))
        self.assertFalse(record["contract"]["comparable"])
        self.assertIn("time_base", [m["field"] for m in record["contract"]["mismatches"]])
        self.assertEqual((record["decision"], record["gates"], record["deltas"]), ("reject", [], {}))


class BadImportedRunTest(RealrunMixin, unittest.TestCase):
    def test_hand_edited_imported_manifest_exits_2(self):
        """compare reads an imported run's manifest at the boundary: wrong shapes are exit 2."""
        baseline = self.imported("base", json.dumps(vllm_run()))
        table = [
            ("request_ids", 5, "field 'request_ids': must be a list of ids"),
            ("request_ids", ["r0", 7], "field 'request_ids'[1]: must be a string"),
            ("num_requests_expected", "x", "field 'num_requests_expected'"),
            ("scheduler", [1], "field 'scheduler': must be an object"),
            ("engine", "vllm", "field 'engine': must be an object"),
            ("run_failed", "no", "field 'run_failed': must be true or false"),
        ]
        for field, value, words in table:
            with self.subTest(field=field, value=value):
                candidate = self.imported(f"cand-{field}-{len(os.listdir(self.base))}",
                                          json.dumps(vllm_run(scheduling_policy="priority")))
                path = os.path.join(candidate, "manifest.json")
                manifest = json.loads(read(path))
                manifest[field] = value
                with open(path, "w", encoding="utf-8") as handle:
                    json.dump(manifest, handle)
                code, _, err = run_cli(["compare", baseline, candidate, "--out", os.path.join(self.base, "d.json")])
                self.assertEqual(code, 2, err)
                self.assertIn(words, err)
                self.assertIn("manifest.json", err)
                self.assertFalse(os.path.exists(os.path.join(self.base, "d.json")))
