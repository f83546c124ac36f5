"""serving-bench at its boundaries: requests files, result files and the chapter's functions (handbook 16.6).

Each table row is one input a learner can write by accident; the expectation is the handbook's
rule, never the code's own output. Hand-computed values:
- one request, ``service_ms`` 5, ``output_tokens`` 1 (or 0): one window 0–5 ms → makespan 5.0 ms.
- ``service_ms`` 0.0001 ms (the smallest allowed) with 10^12 tokens: 10^12 / (0.0001 / 1000 s)
  = 1e19 tok/s, shown as ``1e+19`` (4 significant digits beyond a billion).
- the synthetic groups (tests/data/serving-bench): 8 requests per repeat (h0–h3, l0–l3), 5 repeats.
"""

import json
import os
import unittest
import xml.etree.ElementTree as ET

from sched.chapter.artifacts import Setting, render_windows_svg
from sched.serving_bench import (compare_scheduler_to_baseline, select_next_batch, simulate_serving_scheduler,
                                 summarize_serving_scheduler_runs)
from tests.helpers import PROJECT, assert_bad_input, read, run_cli, temp_dir

DATA = os.path.join(PROJECT, "tests", "data", "serving-bench")
BASELINE, CANDIDATE = os.path.join(DATA, "baseline.json"), os.path.join(DATA, "candidate.json")
REQUESTS = os.path.join(DATA, "requests.json")
ONE = '{"request_id": "a", "arrival_ms": 0, "service_ms": 5, "output_tokens": 1}'


class Files(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)

    def write(self, name, text, encoding="utf-8"):
        path = os.path.join(self.base, name)
        with open(path, "w", encoding=encoding, newline="") as handle:
            handle.write(text)
        return path


class RequestsFileTest(Files):
    def test_refused_with_the_true_reason(self):
        table = [
            ("t02 NaN", "nan.json", '[{"request_id": "a", "service_ms": NaN}]',
             "request 0 (a): field 'service_ms': must be a finite number, got NaN"),
            ("t11 Infinity", "inf.json", '[{"request_id": "a", "service_ms": Infinity}]',
             "field 'service_ms': must be a finite number, got Infinity"),
            ("t13 1e400", "big.json", '[{"request_id": "a", "service_ms": 5, "output_tokens": 1e400}]',
             "field 'output_tokens': must be a finite number, got 1e400"),
            ("t16 typo", "typo.json", '[{"request_id": "a", "arival_ms": 0, "service_ms": 5}]',
             "request 0: field 'arival_ms': unknown field; did you mean 'arrival_ms'?"),
            ("top-level typo", "top.json", '{"reqeusts": []}', "field 'reqeusts': unknown field; did you mean 'requests'?"),
            ("t17 key twice", "dupkey.json", '[{"request_id": "a", "service_ms": 5, "service_ms": 6}]',
             "key 'service_ms' given more than once"),
            ("t53 requests twice", "dupreq.json", '{"requests": [{"service_ms": 5}], "requests": []}',
             "key 'requests' given more than once"),
            ("t43 control character in an id", "ctrl.json", '[{"request_id": "a\\u0001b", "service_ms": 5}]',
             "request 0: field 'request_id': must be printable"),
            ("t24 5e-324 ms", "tiny.json", '[{"request_id": "a", "service_ms": 5e-324}]',
             "field 'service_ms': must be between 0.0001 and 1e+12, got 5e-324"),
            ("blank JSON lines", "blank.jsonl", "\n\n", "is empty"),
        ]
        for name, file_name, text, mention in table:
            with self.subTest(name):
                path = self.write(file_name, text)
                assert_bad_input(self, ["serving-bench", "run", path], mention)

    def test_speedup_bounds(self):
        for value in ("1e-320", "0", "1001"):
            with self.subTest(value):
                assert_bad_input(self, ["serving-bench", "run", REQUESTS, "--batch-speedups", value],
                                 "batch speed-up must be a number between 0.001 and 1000")

    def test_accepted_like_lab_workloads(self):
        table = [
            ("t09 BOM, JSON", "bom.json", "\ufeff[" + ONE + "]"),
            ("t31 BOM, JSON lines", "bom.jsonl", "\ufeff" + ONE + "\n" + ONE.replace('"a"', '"b"') + "\n"),
            ("t50 one JSON line", "one.jsonl", ONE + "\n\n"),
        ]
        for name, file_name, text in table:
            with self.subTest(name):
                code, stdout, err = run_cli(["serving-bench", "run", self.write(file_name, text)])
                self.assertEqual(code, 0, err)
                row = stdout.splitlines()[1].split()
                self.assertEqual(row[6], "5.0" if "b" not in text else "10.0")   # windows 0–5 (and 5–10)

    def test_huge_rates_are_short_cells(self):
        path = self.write("fast.json", '[{"request_id": "a", "service_ms": 0.0001, "output_tokens": 1000000000000}]')
        code, stdout, err = run_cli(["serving-bench", "run", path])
        self.assertEqual(code, 0, err)
        row = stdout.splitlines()[1].split()
        self.assertEqual(row[7], "1e+19")
        self.assertTrue(all(len(cell) <= 12 for cell in row), row)


class ArtifactsTest(Files):
    def test_replay_and_labels_are_exact(self):
        out, again = os.path.join(self.base, "rp"), os.path.join(self.base, "rp2")
        code, _, err = run_cli(["serving-bench", "run", REQUESTS, "--arrivals", "spaced:0.1234567890123",
                                "--batch-speedups", "1.1234567890123", "--artifacts", out])
        self.assertEqual(code, 0, err)
        replay = json.loads(read(os.path.join(out, "manifest.json")))["replay"]
        self.assertIn("--arrivals spaced:0.1234567890123", replay)
        self.assertIn("--batch-speedups 1.1234567890123", replay)
        argv = replay.split()[2:]
        argv[argv.index("DIR/requests.json")] = os.path.join(out, "requests.json")
        self.assertEqual(run_cli(argv + ["--artifacts", again])[0], 0)
        for name in sorted(os.listdir(out)):
            with self.subTest(name):
                self.assertEqual(read(os.path.join(again, name)), read(os.path.join(out, name)))

    def test_close_speedups_get_distinct_labels(self):
        out = os.path.join(self.base, "two")
        code, _, err = run_cli(["serving-bench", "run", REQUESTS, "--batch-speedups", "1.0000001,1.0000002",
                                "--artifacts", out])
        self.assertEqual(code, 0, err)
        labels = json.loads(read(os.path.join(out, "manifest.json")))["runs"]
        self.assertEqual(labels, ["given/fifo/b1/x1.0000001", "given/fifo/b1/x1.0000002"])

    def test_windows_svg_is_well_formed_whatever_the_ids(self):
        for rid in ('a<b>&"c"', "a\x01b", "tab\tid"):
            with self.subTest(repr(rid)):
                run = simulate_serving_scheduler([{"request_id": rid, "service_ms": 5}])
                svg = render_windows_svg([(Setting("given", "fifo", 1, 1.0), run)])
                ET.fromstring(svg)    # raises on a control character or unescaped markup


class ChapterFunctionErrorsTest(unittest.TestCase):
    def test_errors_name_the_argument_or_index_and_field(self):
        reqs = [{"request_id": "r1", "service_ms": 10}, {"request_id": "r2", "service_ms": 2}]
        run = {"name": "a", "ttft_ms": 1.0, "throughput_tps": 2.0}
        metrics = {"ttft_ms": 1, "tpot_ms": 1, "throughput_tps": 1, "fairness": 1, "utilization": 1}
        table = [
            ("policy given as a list", lambda: simulate_serving_scheduler(reqs, ["fifo"]), TypeError, "policy"),
            ("5e-324 ms service", lambda: simulate_serving_scheduler([{"service_ms": 5e-324}]), ValueError,
             "request 0 (request-0): field 'service_ms'"),
            ("speed-up 1e-320", lambda: simulate_serving_scheduler(reqs, batch_speedup=1e-320), ValueError,
             "batch_speedup"),
            ("text service, shortest", lambda: select_next_batch([reqs[0], {"service_ms": "2"}], "shortest", 1),
             TypeError, "queue[1]: field 'service_ms'"),
            ("text priority", lambda: select_next_batch([{"priority": "high"}, {"priority": 1}], "priority", 1),
             TypeError, "queue[0]: field 'priority'"),
            ("ttft 'a'", lambda: summarize_serving_scheduler_runs([run, dict(run, ttft_ms="a")]), TypeError,
             "runs[1]: field 'ttft_ms'"),
            ("text fairness", lambda: compare_scheduler_to_baseline(metrics, dict(metrics, fairness="0.8")), TypeError,
             "candidate: field 'fairness'"),
        ]
        for name, call, error, mention in table:
            with self.subTest(name):
                with self.assertRaises(error) as caught:
                    call()
                self.assertIn(mention, str(caught.exception))


def changed(path, change):
    data = json.loads(read(path))
    change(data)
    return data


def set_row(k, i, **fields):
    def change(d):
        d["runs"][k]["results"][i].update(fields)
    return change


class DecideFilesTest(Files):
    def dump(self, name, data, prefix=""):
        return self.write(name, prefix + json.dumps(data))

    def test_refused_exit_2(self):
        def p95_nan(d):
            d["metrics"]["ttft_ms"]["p95"] = "NAN"

        def workload_count(value):
            return lambda d: d["workload"].update(request_count=value)

        table = [
            ("d35 NaN e2e", set_row(0, 1, e2e_ms="NAN"), "runs[0]: results[1]: field 'e2e_ms': must be a finite number, got NaN"),
            ("d35 Infinity e2e", set_row(0, 1, e2e_ms="INF"), "runs[0]: results[1]: field 'e2e_ms': must be a finite number, got Infinity"),
            ("d35 null e2e", set_row(0, 1, e2e_ms=None), "runs[0]: results[1]: field 'e2e_ms': missing or null"),
            ("d36 P95 TTFT NaN", p95_nan, "field 'ttft_ms.p95': must be a finite number, got NaN"),
            ("d33 status weird", lambda d: d.update(status="weird"), "field 'status': must be one of ok, success"),
            ("count as text", workload_count("8"), "field 'workload.request_count': must be a whole number"),
            ("negative count", workload_count(-8), "field 'workload.request_count': must be between 1"),
            ("d21 successful beyond every repeat", lambda d: d["metrics"].update(successful_requests=10**6),
             "field 'metrics.successful_requests': says 1000000, more than the 40 requests"),
        ]
        out = os.path.join(self.base, "evidence.json")
        for name, change, mention in table:
            with self.subTest(name):
                text = json.dumps(changed(CANDIDATE, change)).replace('"NAN"', "NaN").replace('"INF"', "Infinity")
                path = self.write("c.json", text)
                assert_bad_input(self, ["serving-bench", "decide", BASELINE, path, "--out", out], mention)
                self.assertFalse(os.path.exists(out))

    def test_bom_result_file_is_read(self):
        out = os.path.join(self.base, "evidence.json")
        path = self.write("bom.json", "\ufeff" + read(CANDIDATE))
        code, stdout, err = run_cli(["serving-bench", "decide", BASELINE, path, "--out", out])
        self.assertEqual(code, 0, err)
        self.assertIn("decision: ACCEPT", stdout)

    def test_trace_and_repeat_decisions(self):
        def lose_h0(d):        # d44: count unknown, h0 lost in every repeat, metrics consistent with it
            d["workload"]["request_count"] = None
            d["metrics"]["successful_requests"] = 7
            for run in d["runs"]:
                run["results"] = [r for r in run["results"] if r["request_id"] != "h0"]
                run["metrics"]["successful_requests"] = 7

        def l0_twice(d):       # d45: l0 twice, h0 missing, still 8 rows and 40 successful
            for run in d["runs"]:
                run["results"][0] = dict(run["results"][1])

        def three_repeats(d):  # d23, made consistent: 3 repeats of 8
            d["runs"] = d["runs"][:3]

        def no_count(d):
            d["workload"]["request_count"] = None

        def short_repeat(d):
            no_count(d)
            del d["runs"][2]["results"][7]

        table = [
            ("count null, h0 lost", no_count, lose_h0, "reject", "candidate: metrics.successful_requests is 7, the workload has 8 requests"),
            ("l0 twice, h0 missing", None, l0_twice, "reject", "more than once: l0; missing: h0"),
            ("3 vs 5 repeats", None, three_repeats, "tune", "repeat counts differ (baseline 5, candidate 3)"),
            ("baseline repeats disagree", short_repeat, no_count, "reject",
             "baseline: its repeats hold different numbers of requests (8, 8, 7, 8, 8)"),
        ]
        for name, base_change, cand_change, decision, mention in table:
            with self.subTest(name):
                base = self.dump("b.json", changed(BASELINE, base_change or (lambda d: None)))
                cand = self.dump("c.json", changed(CANDIDATE, cand_change))
                out = os.path.join(self.base, name.replace(" ", "_") + ".json")
                code, stdout, err = run_cli(["serving-bench", "decide", base, cand, "--out", out])
                self.assertEqual(code, 0, err)
                self.assertIn(f"decision: {decision.upper()}", stdout)
                self.assertIn(mention, stdout)
                record = json.loads(read(out))
                self.assertEqual(record["quality"]["status"], "incomplete")
        record = json.loads(read(os.path.join(self.base, "3_vs_5_repeats.json")))
        self.assertEqual((record["quality"]["paired_runs"], record["quality"]["unpaired_runs"]), (3, 2))


class CommandLineTest(Files):
    def test_misspelt_action_and_check_on_serving_bench_dirs(self):
        assert_bad_input(self, ["serving-bench", "rum"], "unknown action 'rum'; did you mean 'run'?")
        runs = [os.path.join(self.base, name) for name in ("a", "b")]
        for out in runs:
            self.assertEqual(run_cli(["serving-bench", "run", REQUESTS, "--artifacts", out])[0], 0)
        assert_bad_input(self, ["check", *runs], "holds serving-bench output, not a run")


if __name__ == "__main__":
    unittest.main()
