"""``serving-bench run``: the window model on a requests file, its artifacts, replay and comparison table.

Hand computation on the §3 requests (tests/data/serving-bench/chapter-facts.json: r1 (0 ms, 10 ms,
priority 5), r2 (0, 2, priority 0), r3 (1, 3, priority 2)), waits in ms:
  fifo b1:      [r1] 0–10, [r2] 10–12, [r3] 12–15 → waits 0, 10, 11 (mean 7.00); urgent (r2) 10.00
  fifo b2:      [r1, r2] 0–10, [r3] 10–13 → makespan 13; waits 0, 0, 9 (mean 3.00)
  shortest b1:  [r2] 0–2, [r3] 2–5, [r1] 5–15 → waits 0, 1, 5 (mean 2.00); urgent 0.00
  burst, fifo b1 (all at 0): [r1] 0–10, [r2] 10–12, [r3] 12–15 → waits 0, 10, 12 (mean 7.33)
  spaced:20, fifo b1 (0, 20, 40 ms): windows 0–10, 20–22, 40–43 → makespan 43, busy 15 → 0.349;
                no waits (mean 0.00), fairness 1.
"""

import json
import os
import shlex
import unittest

from sched.chapter.artifacts import SERVING_FILES
from tests.helpers import PROJECT, assert_bad_input, read, run_cli, temp_dir

DATA = os.path.join(PROJECT, "tests", "data", "serving-bench")
FACTS, REQUESTS = os.path.join(DATA, "chapter-facts.json"), os.path.join(DATA, "requests.json")


def rows(stdout):
    """Table rows by (arrivals, policy, batch, speedup) → the remaining cells."""
    table = {}
    for line in stdout.splitlines()[1:]:
        cells = line.split()
        if len(cells) == 12:
            table[tuple(cells[:4])] = cells[4:]
    return table


class RunTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)

    def test_one_setting_artifacts(self):
        out = os.path.join(self.base, "run")
        code, stdout, err = run_cli(["serving-bench", "run", FACTS, "--policy", "fifo", "--batch-size", "1",
                                     "--batch-speedup", "1", "--artifacts", out])
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(os.listdir(out)), sorted(SERVING_FILES))
        summary = json.loads(read(os.path.join(out, "summary.json")))["runs"]
        self.assertEqual(len(summary), 1)
        self.assertEqual({k: summary[0][k] for k in ("run", "makespan_ms", "throughput_tps", "utilization",
                                                     "completed_count", "urgent_avg_queue_wait_ms")},
                         {"run": "given/fifo/b1/x1", "makespan_ms": 15.0, "throughput_tps": 4000.0,
                          "utilization": 1.0, "completed_count": 3, "urgent_avg_queue_wait_ms": 10.0})
        trace = [json.loads(line) for line in read(os.path.join(out, "batch_trace.jsonl")).splitlines()]
        self.assertEqual([t["request_ids"] for t in trace], [["r1"], ["r2"], ["r3"]])
        per_request = [json.loads(line) for line in read(os.path.join(out, "requests.jsonl")).splitlines()]
        self.assertEqual([(r["request_id"], r["queue_wait_ms"], r["e2e_ms"]) for r in per_request],
                         [("r1", 0.0, 10.0), ("r2", 10.0, 12.0), ("r3", 11.0, 14.0)])
        self.assertEqual(read(os.path.join(out, "table.txt")), stdout.split("wrote ")[0])
        svg = read(os.path.join(out, "windows.svg"))
        self.assertTrue(svg.startswith("<svg") and svg.count("<rect") == 2 + 3)   # page, lane, 3 bars
        self.assertEqual(json.loads(read(os.path.join(out, "manifest.json")))["kind"], "serving-bench")

    def test_replay_gives_the_same_bytes(self):
        first = os.path.join(self.base, "first")
        flags = ["--policies", "fifo,priority", "--batch-sizes", "1,2", "--batch-speedups", "1,1.5",
                 "--arrivals", "given,spaced:7.5"]
        self.assertEqual(run_cli(["serving-bench", "run", REQUESTS, *flags, "--artifacts", first])[0], 0)
        replay = json.loads(read(os.path.join(first, "manifest.json")))["replay"]
        argv = shlex.split(replay.replace("DIR", first))[2:]            # drop "python3 infer_sched_lab.py"
        second = os.path.join(self.base, "second")
        code, _, err = run_cli([*argv, "--artifacts", second])
        self.assertEqual(code, 0, err)
        for name in SERVING_FILES:
            with self.subTest(name=name):
                self.assertEqual(read(os.path.join(first, name)), read(os.path.join(second, name)))

    def test_file_shapes_give_the_same_input(self):
        facts = json.loads(read(FACTS))
        shapes = {"list.json": json.dumps(facts), "object.json": json.dumps({"requests": facts}),
                  "lines.jsonl": "".join(json.dumps(r) + "\n" for r in facts)}
        texts = set()
        for name, text in shapes.items():
            path = os.path.join(self.base, name)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            out = os.path.join(self.base, "out-" + name)
            self.assertEqual(run_cli(["serving-bench", "run", path, "--artifacts", out])[0], 0)
            texts.add(tuple(read(os.path.join(out, n)) for n in SERVING_FILES))
        self.assertEqual(len(texts), 1)

    def test_comparison_table(self):
        code, stdout, err = run_cli(["serving-bench", "run", FACTS, "--policies", "fifo,shortest", "--batch-sizes", "1,2",
                                     "--arrivals", "given,burst,spaced:20"])
        self.assertEqual(code, 0, err)
        table = rows(stdout)
        self.assertEqual(len(table), 12)
        # windows, done/req, makespan, tok/s, util, avg wait, urgent wait, fairness
        self.assertEqual(table[("given", "fifo", "1", "1")], ["3", "3/3", "15.0", "4000.0", "1.000", "7.00", "10.00", "0.000"])
        self.assertEqual(table[("given", "fifo", "2", "1")][:3] + table[("given", "fifo", "2", "1")][5:6],
                         ["2", "3/3", "13.0", "3.00"])
        self.assertEqual(table[("given", "shortest", "1", "1")][5:7], ["2.00", "0.00"])
        self.assertEqual(table[("burst", "fifo", "1", "1")][5], "7.33")
        self.assertEqual(table[("spaced:20", "fifo", "1", "1")][2:], ["43.0", "1395.3", "0.349", "0.00", "0.00", "1.000"])

    def test_speedups(self):
        code, stdout, _ = run_cli(["serving-bench", "run", FACTS, "--batch-sizes", "2", "--batch-speedups", "1,2"])
        self.assertEqual(code, 0)
        self.assertEqual(rows(stdout)[("given", "fifo", "2", "2")][2], "6.5")     # [r1, r2] 0–5, [r3] 5–6.5


class RunBadInputTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)

    def write(self, name, text):
        path = os.path.join(self.base, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def test_bad_inputs_exit_2_with_one_line(self):
        table = [
            ([os.path.join(self.base, "none.json")], "none.json: no such requests file"),
            ([self.write("bad.json", "[{")], "bad.json: not valid JSON"),
            ([self.write("zero.json", '[{"request_id": "a", "service_ms": 1}, {"request_id": "b", "service_ms": 0}]')],
             "zero.json: request 1 (b): field 'service_ms': must be > 0"),
            ([self.write("dup.json", '[{"request_id": "a", "service_ms": 1}, {"request_id": "a", "service_ms": 2}]')],
             "request 1 (a): field 'request_id': duplicated"),
            ([self.write("neg.json", '[{"arrival_ms": -1, "service_ms": 1}]')], "request 0 (request-0): field 'arrival_ms'"),
            ([self.write("nan.json", '[{"service_ms": NaN}]')], "field 'service_ms'"),
            ([self.write("obj.json", '{"reqs": []}')], "field 'reqs': unknown field; did you mean 'requests'?"),
            ([self.write("sur.json", '[{"request_id": "\\udc80", "service_ms": 1}]')],
             "request 0: field 'request_id': not valid text"),
            ([self.write("huge.json", '[{"request_id": "a", "arrival_ms": 1e300, "service_ms": 1e300}]')],
             "request 0 (a): field 'arrival_ms': must be at most 1e+12"),
            ([FACTS, "--arrivals", "spaced:1e300"], "unknown arrival pattern 'spaced:1e300'"),
            ([FACTS, "--policies", "fifo,lifo"], "unknown policy 'lifo'"),
            ([FACTS, "--batch-sizes", "0"], "batch size must be an integer >= 1"),
            ([FACTS, "--batch-speedups", "0"], "batch speed-up must be a number between 0.001 and 1000"),
            ([FACTS, "--arrivals", "poisson"], "unknown arrival pattern 'poisson'"),
            ([FACTS, "--artifacts", ""], "--artifacts: needs a directory name"),
            ([FACTS, "--force"], "--force: only replaces"),
        ]
        for args, mention in table:
            with self.subTest(args=args):
                assert_bad_input(self, ["serving-bench", "run", *args], mention)

    def test_directories_are_never_overwritten_unasked(self):
        out = os.path.join(self.base, "run")
        self.assertEqual(run_cli(["serving-bench", "run", FACTS, "--artifacts", out])[0], 0)
        before = read(os.path.join(out, "summary.json"))
        assert_bad_input(self, ["serving-bench", "run", FACTS, "--batch-sizes", "2", "--artifacts", out], "already holds files")
        self.assertEqual(read(os.path.join(out, "summary.json")), before)
        self.assertEqual(run_cli(["serving-bench", "run", FACTS, "--batch-sizes", "2", "--artifacts", out, "--force"])[0], 0)
        self.assertNotEqual(read(os.path.join(out, "summary.json")), before)
        lab = os.path.join(self.base, "lab")
        self.assertEqual(run_cli(["--artifacts", lab])[0], 0)
        assert_bad_input(self, ["serving-bench", "run", FACTS, "--artifacts", lab, "--force"], "another kind (simulated)")
        assert_bad_input(self, ["--artifacts", out, "--force"], "another kind (serving-bench)")


if __name__ == "__main__":
    unittest.main()
