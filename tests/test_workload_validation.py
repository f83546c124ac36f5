"""Nothing bad gets in: malformed workloads and configurations are refused with one line each,
exit code 2 and no artifact directory; an empty workload is a valid run (README "输入校验与退出码")."""

import json
import os
import unittest

from sched.workload.specs import WorkloadError
from sched.workload.validation import parse_workload
from sched.workload.rules import MAX_TOKENS
from tests.helpers import read, run_cli, temp_dir


def _request(**changes) -> dict:
    """A valid request (R0: 8 prompt tokens sharing 4 with key K, 2 output tokens), changed."""
    request = {"name": "R0", "arrival": 0, "prefix_key": "K", "prefix_tokens": 4, "suffix_tokens": 4,
               "output_tokens": 2}
    request.update(changes)
    return {field: value for field, value in request.items() if value is not _DROP}


_DROP = object()


def _workload(*requests) -> str:
    return json.dumps({"requests": list(requests)})


def _with(field: str, literal: str) -> str:
    """A one-request workload whose ``field`` is the raw JSON ``literal`` (NaN, huge numbers...)."""
    return _workload(_request(**{field: "@@"})).replace('"@@"', literal)


#: label -> (file text, words the error must contain besides the file name). Request-level rows
#: name the request as "request 0 (R0)" and the field in quotes.
BAD_WORKLOADS = {
    "empty file": ("", ["empty"]),
    "only whitespace": ("  \n\t\n", ["empty"]),
    "not JSON": ('{"requests": [', ["not valid JSON", "line 1 column"]),
    "trailing comma": (_workload(_request())[:-2] + ",]}", ["not valid JSON", "line 1 column"]),
    "second line broken": ('{"requests":\n  [}', ["line 2 column 4"]),
    "top level is a list": ("[]", ["top level", "'requests'"]),
    "top level is a string": ('"requests"', ["top level", "'requests'"]),
    "requests missing": ("{}", ["field 'requests': missing"]),
    "requests is an object": ('{"requests": {}}', ["field 'requests'", "list"]),
    "unknown top-level field": ('{"requests": [], "request": []}', ["field 'request'", "did you mean 'requests'?"]),
    "description not a string": ('{"requests": [], "description": 3}', ["field 'description'", "string"]),
    "request not an object": ('{"requests": [7]}', ["request 0", "JSON object"]),
    "name missing": (_workload(_request(name=_DROP)), ["request 0", "field 'name': missing"]),
    "output_tokens missing": (_workload(_request(output_tokens=_DROP)), ["request 0 (R0)", "field 'output_tokens': missing"]),
    "misspelt field": (_workload(_request(arival=3)), ["request 0 (R0)", "field 'arival'", "did you mean 'arrival'?"]),
    "misspelt required field, reported once": (_workload(_request(arrival=_DROP, arival=0)),
                                               ["request 0 (R0)", "field 'arival'", "did you mean 'arrival'?"]),
    "requests misspelt": ('{"request": []}', ["field 'request'", "did you mean 'requests'?"]),
    "wrong case field": (_workload(_request(Priority=1)), ["field 'Priority'", "did you mean 'priority'?"]),
    "unrelated field": (_workload(_request(colour="red")), ["field 'colour'", "valid fields are name, arrival"]),
    "field given twice": (_workload(_request())[:-3] + ', "arrival": 5}]}', ["request 0 (R0)", "field 'arrival'", "more than once"]),
    "boolean arrival": (_workload(_request(arrival=True)), ["request 0 (R0)", "field 'arrival'", "boolean"]),
    "fractional arrival": (_workload(_request(arrival=1.5)), ["request 0 (R0)", "field 'arrival'", "1.5"]),
    "float output_tokens": (_workload(_request(output_tokens=2.0)), ["field 'output_tokens'", "write 2"]),
    "string suffix_tokens": (_workload(_request(suffix_tokens="16")), ["field 'suffix_tokens'", "string"]),
    # A lone surrogate cannot be written to requests.jsonl or workload.json (it crashed the writer).
    "prefix_key with a lone surrogate": (_with("prefix_key", '"K\\ud800"'),
                                         ["request 0 (R0)", "field 'prefix_key'", "UTF-8", "\\ud800"]),
    "null output_tokens": (_workload(_request(output_tokens=None)), ["field 'output_tokens'", "null"]),
    "NaN": (_with("prefix_tokens", "NaN"), ["request 0 (R0)", "field 'prefix_tokens'", "NaN"]),
    "Infinity": (_with("output_tokens", "Infinity"), ["field 'output_tokens'", "Infinity"]),
    "-Infinity": (_with("arrival", "-Infinity"), ["field 'arrival'", "-Infinity"]),
    "negative arrival": (_workload(_request(arrival=-1)), ["field 'arrival'", "at least 0"]),
    "negative prefix_tokens": (_workload(_request(prefix_tokens=-4)), ["field 'prefix_tokens'", "at least 0"]),
    "output_tokens above the bound": (_workload(_request(output_tokens=MAX_TOKENS + 1)),
                                      ["field 'output_tokens'", f"at most {MAX_TOKENS}"]),
    "50-digit integer": (_with("suffix_tokens", "9" * 50), ["field 'suffix_tokens'", f"at most {MAX_TOKENS}", "50 digits"]),
    "5000-digit integer": (_with("arrival", "9" * 5000), ["field 'arrival'", "5000 digits"]),
    "negative 5000-digit integer": (_with("arrival", "-" + "9" * 5000), ["field 'arrival'", "at least 0"]),
    "float beyond the float range": (_with("output_tokens", "1e400"), ["field 'output_tokens'", "got 1e400"]),
    "priority above the bound": (_workload(_request(priority=10**12)), ["field 'priority'", "at most 1000000000"]),
    "priority a string": (_workload(_request(priority="high")), ["field 'priority'", "string"]),
    "output_tokens zero": (_workload(_request(output_tokens=0)), ["field 'output_tokens'", "at least 1"]),
    "prompt of zero tokens": (_workload(_request(prefix_key=None, prefix_tokens=0, suffix_tokens=0)),
                              ["request 0 (R0)", "field 'suffix_tokens'", "0 tokens"]),
    "prefix tokens without a key": (_workload(_request(prefix_key=None)), ["field 'prefix_key'", "needs a key"]),
    "key with zero prefix tokens": (_workload(_request(prefix_tokens=0)), ["field 'prefix_tokens'", "'K'"]),
    "empty name": (_workload(_request(name="")), ["request 0", "field 'name'", "non-empty string"]),
    "name with a line break": (_workload(_request(name="R\n0")), ['request 0 ("R\\n0")', "field 'name'", "printable"]),
    "numeric name": (_workload(_request(name=7)), ["request 0", "field 'name'", "7"]),
    "empty prefix_key": (_workload(_request(prefix_key="")), ["field 'prefix_key'", "non-empty string or null"]),
    "duplicate names": (_workload(_request(), _request(arrival=3)), ["request 1 (R0)", "field 'name'", "request 0 (R0)"]),
    "one key, two lengths": (_workload(_request(), _request(name="R1", prefix_tokens=6)),
                             ["request 1 (R1)", "field 'prefix_tokens'", "'K'", "one length"]),
}

#: label -> (CLI arguments, words the error must contain). Each is refused before anything runs.
BAD_CONFIGURATIONS = {
    "zero budget": (["--budget", "0"], ["--budget"]),
    "negative budget": (["--budget", "-3"], ["--budget"]),
    "budget not a number": (["--budget", "lots"], ["--budget"]),
    "fractional budget": (["--budget", "6.5"], ["--budget"]),
    "budget above the bound": (["--budget", str(10**10)], ["--budget", "1000000000"]),
    "budget below decode cost": (["--budget", "4"], ["--budget", "--decode-cost"]),
    "zero decode cost": (["--decode-cost", "0"], ["--decode-cost"]),
    "zero max-active": (["--max-active", "0"], ["--max-active"]),
    "zero chunk-tokens": (["--chunk-tokens", "0"], ["--chunk-tokens"]),
    "zero timeout": (["--timeout-ticks", "0"], ["--timeout-ticks"]),
    "unknown policy": (["--policy", "random"], ["--policy"]),
    "unknown scenario": (["--scenario", "nope"], ["--scenario"]),
    "scenario and workload": (["--scenario", "baseline", "--workload", "x.json"], ["--workload"]),
    "misspelt flag": (["--bugdet", "64"], ["--bugdet"]),
}


class BadInputTableTest(unittest.TestCase):
    """Every malformed input: exit 2, the field named, no traceback, no artifact directory."""

    def _refused(self, argv: list[str], needles: list[str], base: str, existing=()) -> str:
        """Run with ``--artifacts base/run``; ``base`` must afterwards hold only ``existing``."""
        out = os.path.join(base, "run")
        code, stdout, err = run_cli([*argv, "--artifacts", out])
        self.assertEqual(code, 2, err)
        for needle in needles:
            self.assertIn(needle, err)
        self.assertNotIn("Traceback", err)
        self.assertTrue(all(line.startswith("infer_sched_lab.py: error: ") for line in err.splitlines()), err)
        self.assertEqual(stdout, "")
        self.assertEqual(sorted(os.listdir(base)), sorted(existing))
        return err

    def test_table_is_large_enough(self):
        self.assertGreaterEqual(len(BAD_WORKLOADS) + len(BAD_CONFIGURATIONS), 30)

    def test_bad_workloads(self):
        for label, (text, needles) in BAD_WORKLOADS.items():
            with self.subTest(label):
                base = temp_dir(self)
                path = os.path.join(base, "workload.json")
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(text)
                err = self._refused(["--workload", path], [path, *needles], base, ["workload.json"])
                self.assertEqual(len(err.splitlines()), 1, err)

    def test_bad_configurations(self):
        for label, (argv, needles) in BAD_CONFIGURATIONS.items():
            with self.subTest(label):
                err = self._refused(argv, needles, temp_dir(self))
                self.assertEqual(len(err.splitlines()), 1, err)

    def test_unreadable_workload_files(self):
        base = temp_dir(self)
        latin1 = os.path.join(base, "latin1.json")
        with open(latin1, "wb") as handle:
            handle.write(b'{"requests": [{"name": "caf\xe9"}]}')
        rows = {
            "missing file": (os.path.join(base, "missing.json"), "no such workload file"),
            "a directory": (base, "is a directory"),
            "not UTF-8": (latin1, "not UTF-8"),
        }
        for label, (path, needle) in rows.items():
            with self.subTest(label):
                out = os.path.join(temp_dir(self), "run")
                code, _, err = run_cli(["--workload", path, "--artifacts", out])
                self.assertEqual(code, 2)
                self.assertIn(path, err)
                self.assertIn(needle, err)
                self.assertFalse(os.path.exists(out))


class AllProblemsAtOnceTest(unittest.TestCase):
    def test_every_problem_of_a_file_gets_its_own_line(self):
        """Three broken requests and one good one: three lines, in file order."""
        text = _workload(_request(arrival=-1), _request(name="R1", arrival=1),
                         _request(name="R2", output_tokens=0), _request(name="R3", colour="red"))
        with self.assertRaises(WorkloadError) as caught:
            parse_workload(text, source="w.json")
        self.assertEqual(caught.exception.problems, [
            "w.json: request 0 (R0): field 'arrival': must be at least 0, got -1",
            "w.json: request 2 (R2): field 'output_tokens': must be at least 1, got 0",
            "w.json: request 3 (R3): field 'colour': unknown field; valid fields are name, arrival, prefix_key, "
            "prefix_tokens, suffix_tokens, output_tokens, priority, prefix_blocks",
        ])

    def test_related_fields_are_checked_even_when_another_field_is_broken(self):
        """R0 has a bad arrival *and* a key with 0 prefix tokens: both are reported."""
        with self.assertRaises(WorkloadError) as caught:
            parse_workload(_workload(_request(arrival="soon", prefix_tokens=0)), source="w.json")
        fields = [problem.split("field ")[1].split(":")[0] for problem in caught.exception.problems]
        self.assertEqual(fields, ["'arrival'", "'prefix_tokens'"])

    def test_output_is_capped_at_twenty_lines_plus_a_count(self):
        """30 requests each with a negative arrival: 20 lines, then '... and 10 more problems'."""
        base = temp_dir(self)
        path = os.path.join(base, "many.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(_workload(*[_request(name=f"R{i}", arrival=-1) for i in range(30)]))
        code, _, err = run_cli(["--workload", path])
        lines = err.splitlines()
        self.assertEqual(code, 2)
        self.assertEqual(len(lines), 21)
        self.assertIn("request 19 (R19): field 'arrival'", lines[19])
        self.assertEqual(lines[20], "infer_sched_lab.py: error: ... and 10 more problems")


class ValidWorkloadTest(unittest.TestCase):
    def test_empty_request_list_is_a_run_with_zero_counts_and_null_latencies(self):
        """lab.md §5: empty samples give null in JSON and NA in text, never 0; no ticks are walked."""
        base = temp_dir(self)
        path, out = os.path.join(base, "empty.json"), os.path.join(base, "run")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write('{"requests": [], "description": "nobody came"}')
        code, stdout, err = run_cli(["--workload", path, "--artifacts", out])
        self.assertEqual(code, 0, err)
        summary = json.loads(read(os.path.join(out, "summary.json")))
        self.assertEqual(len(summary["cases"]), 4)
        for row in summary["cases"]:
            for field in ("output_tokens", "hit_tokens", "succeeded", "timed_out", "arrived", "makespan",
                          "latency_samples"):
                self.assertEqual(row[field], 0, field)
            for field in ("p50_ttft", "p95_ttft", "p95_itl", "p95_tpot", "p95_e2e", "p95_queue_wait",
                          "throughput", "completed_output_tps", "error_rate"):
                self.assertIsNone(row[field], field)
        self.assertEqual(read(os.path.join(out, "requests.jsonl")), "")
        self.assertEqual(read(os.path.join(out, "timeline.jsonl")), "")
        self.assertIn("0/0", stdout)
        self.assertIn("NA", stdout)
        replay = os.path.join(base, "replay")
        self.assertEqual(run_cli(["--workload", os.path.join(out, "workload.json"), "--artifacts", replay])[0], 0)
        self.assertEqual(read(os.path.join(out, "table.txt")), read(os.path.join(replay, "table.txt")))

    def test_byte_order_mark_is_accepted(self):
        """Some editors start UTF-8 files with a BOM; the workload is the same."""
        base = temp_dir(self)
        path = os.path.join(base, "bom.json")
        with open(path, "w", encoding="utf-8-sig") as handle:
            handle.write(_workload(_request(priority=None)))
        code, stdout, err = run_cli(["--workload", path])
        self.assertEqual(code, 0, err)
        self.assertIn("1 requests", stdout)

    def test_priority_may_be_negative_or_null(self):
        specs = parse_workload(_workload(_request(priority=-5), _request(name="R1", priority=None)))
        self.assertEqual([spec.priority for spec in specs], [-5, None])


if __name__ == "__main__":
    unittest.main()
