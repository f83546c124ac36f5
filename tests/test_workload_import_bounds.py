"""Real-traffic boundaries (docs/handbook/real-traffic.md §14): import options and rows the run would refuse, trace
encodings, block sharing of full blocks only, ``tick_ms`` provenance, bounded ``counts`` timelines
and the sweep's own checks.

Every expected value is computed by hand in the test's docstring.
"""

import json
import os
import stat
import unittest
from unittest import mock

from sched.lab import engine
from sched.core import records as records_module
from sched.lab.cache import PrefixCache
from sched.runs.scale import scale_warnings
from sched.runs.scale import LAB_PROFILE_MAX_REQUESTS
from sched.core.config import EngineConfig, cases_for
from sched.workload.importers import ImportOptions, import_trace
from sched.runs.sweep import parse_loads
from sched.workload.specs import RequestSpec, WorkloadError, scenario
from sched.workload.validation import load_workload, parse_workload
from tests.helpers import PROJECT, read, run_cli, temp_dir

DATA = os.path.join(PROJECT, "tests", "data")
AZURE = os.path.join(DATA, "azure_conv_2023_head.csv")
MOONCAKE = os.path.join(DATA, "mooncake_conversation_head.jsonl")
LENGTHS = os.path.join(DATA, "sharegpt_lengths_head.csv")
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _write(test, name, data):
    path = os.path.join(temp_dir(test), name)
    with open(path, "wb") as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def _moon(stamp, length=10, output=2, blocks="[1]"):
    return f'{{"timestamp": {stamp}, "input_length": {length}, "output_length": {output}, "hash_ids": {blocks}}}\n'


class ImportOptionTest(unittest.TestCase):
    def test_bad_numbers_exit_2_naming_the_flag(self):
        """Every float option must be finite and in its range (importers.OPTION_RANGES):
        NaN, inf, 1e-300 requests/s and cv 1e-200 (shape 1/cv² overflows) are refused."""
        cases = [(["azure", AZURE, "--start", "nan"], "--start"),
                 (["azure", AZURE, "--duration", "nan"], "--duration"),
                 (["azure", AZURE, "--tick-ms", "inf"], "--tick-ms"),
                 (["azure", AZURE, "--tick-ms", "0"], "--tick-ms"),
                 (["lengths", LENGTHS, "--rate", "inf"], "--rate"),
                 (["lengths", LENGTHS, "--rate", "1e-300"], "--rate"),
                 (["lengths", LENGTHS, "--rate", "5", "--process", "gamma", "--cv", "inf"], "--cv"),
                 (["lengths", LENGTHS, "--rate", "5", "--process", "gamma", "--cv", "1e-200"], "--cv")]
        for argv, flag in cases:
            with self.subTest(argv=argv):
                out = os.path.join(temp_dir(self), "w.json")
                code, _, err = run_cli(["import", *argv, "-o", out])
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn(flag, err)
                self.assertFalse(os.path.exists(out))

    def test_cv_is_only_checked_for_gamma(self):
        """--cv 0 means nothing to a Poisson process: accepted there (10 rows imported)."""
        out = os.path.join(temp_dir(self), "w.json")
        code, _, err = run_cli(["import", "lengths", LENGTHS, "--rate", "5", "--cv", "0", "-o", out])
        self.assertEqual(code, 0, err)

    def test_output_file_gets_ordinary_permissions(self):
        """umask 022: 0666 & ~022 = 0644, not the staging file's 0600."""
        out = os.path.join(temp_dir(self), "w.json")
        old = os.umask(0o022)
        self.addCleanup(os.umask, old)
        self.assertEqual(run_cli(["import", "azure", AZURE, "-o", out])[0], 0)
        self.assertEqual(stat.S_IMODE(os.stat(out).st_mode), 0o644)


class TraceFileTest(unittest.TestCase):
    def test_fifo_is_refused_without_waiting(self):
        """Reading a FIFO with no writer blocks forever: import and sweep --workload refuse it (exit 2)."""
        path = os.path.join(temp_dir(self), "pipe.csv")
        os.mkfifo(path)
        for argv in (["import", "azure", path, "-o", os.path.join(temp_dir(self), "w.json")],
                     ["sweep", "--workload", path, "--workers", "1"]):
            with self.subTest(command=argv[0]):
                code, _, err = run_cli(argv)
                self.assertEqual(code, 2)
                self.assertIn("not a regular file", err)

    def test_bom_is_accepted(self):
        """A UTF-8 BOM before the header (CSV) or the first object (JSONL) is dropped: 1 request each."""
        for fmt, text in (("azure", AZURE_HEADER + "2023-11-16 18:15:46.6805900,374,44\n"),
                          ("mooncake", _moon(0))):
            with self.subTest(fmt=fmt):
                path = _write(self, "t", b"\xef\xbb\xbf" + text.encode())
                self.assertEqual(len(import_trace(fmt, path).workload), 1)

    def test_bad_byte_named_at_its_line(self):
        """Byte 0xff on line 3 (header, one good row, then the bad one): 'line 3', exit 2, one line."""
        good_csv = AZURE_HEADER.encode() + b"2023-11-16 18:15:46.6,1,1\n"
        cases = {"azure": good_csv + b"2023-11-16 18:15:47.\xff,1,1\n",
                 "mooncake": _moon(0).encode() + _moon(1).encode() + b'{"timestamp": \xff}\n'}
        for fmt, data in cases.items():
            with self.subTest(fmt=fmt):
                path = _write(self, "t", data)
                code, _, err = run_cli(["import", fmt, path, "-o", os.path.join(temp_dir(self), "w.json")])
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn(f"{path}: line 3: not UTF-8", err)

    def test_nothing_left_is_one_line(self):
        code, _, err = run_cli(["import", "azure", _write(self, "t.csv", AZURE_HEADER + "x,1,1\n"),
                                "-o", os.path.join(temp_dir(self), "w.json")])
        self.assertEqual(code, 2)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("no request left to import (read 1 rows; dropped bad TIMESTAMP: 1)", err)


class RowsTheRunRefusesTest(unittest.TestCase):
    def test_rows_beyond_the_run_limits_are_dropped_with_reasons(self):
        """MAX_TOKENS = 10^6 and MAX_ARRIVAL = 10^9 ticks (workload.py). Azure: ContextTokens 1e23
        and GeneratedTokens 2,000,000 are over; a row 3,600 s after the first at 0.001 ms per tick
        arrives at 3.6e9 ticks. Mooncake: timestamp 99999999999999999 ms -> 3.3e15 ticks at 30 ms;
        a 31-digit hash id is beyond 2^63 - 1. Each case keeps only its first row, which run loads."""
        t0 = "2023-11-16 18:00:00.0"
        cases = [("azure", AZURE_HEADER + f"{t0},5,1\n{t0},{10**23},1\n", [], "prompt over 1000000 tokens"),
                 ("azure", AZURE_HEADER + f"{t0},5,1\n{t0},5,2000000\n", [], "output over 1000000 tokens"),
                 ("azure", AZURE_HEADER + f"{t0},5,1\n2023-11-16 19:00:00.0,5,1\n", ["--tick-ms", "0.001"],
                  "arrival beyond 1000000000 ticks"),
                 ("mooncake", _moon(0) + _moon(99999999999999999), [], "arrival beyond 1000000000 ticks"),
                 ("mooncake", _moon(0) + _moon(0, blocks="[" + "9" * 31 + "]"), [], "block id beyond")]
        for fmt, text, flags, reason in cases:
            with self.subTest(reason=reason, fmt=fmt):
                out = os.path.join(temp_dir(self), "w.json")
                code, stdout, err = run_cli(["import", fmt, _write(self, "t", text), "-o", out, *flags])
                self.assertEqual(code, 0, err)
                self.assertIn(f"dropped 1: {reason}", stdout)
                self.assertEqual(len(load_workload(out)), 1)

    def test_lengths_row_over_the_token_bound(self):
        """num_prefill_tokens 2,000,000 > 10^6: dropped; the 5-token row is kept."""
        path = _write(self, "l.csv", "num_prefill_tokens,num_decode_tokens\n2000000,3\n5,3\n")
        result = import_trace("lengths", path, ImportOptions(rate=1))
        self.assertEqual([s.prompt_tokens for s in result.workload], [5])
        self.assertEqual(result.dropped["prompt over 1000000 tokens"], 1)

    def test_azure_rows_before_the_first_are_out_of_order_not_outside_a_window(self):
        """Rows at +5 s, +0 s, +6 s (first row at +5 s): the +0 s row is 5,000 ms before the first;
        it is dropped as out of order; the +6 s row arrives 1,000 ms / 30 = tick 33."""
        path = _write(self, "a.csv", AZURE_HEADER + "2023-11-16 18:00:05.0,5,1\n2023-11-16 18:00:00.0,5,1\n"
                                                    "2023-11-16 18:00:06.0,5,1\n")
        result = import_trace("azure", path)
        self.assertEqual([s.arrival for s in result.workload], [0, 33])
        self.assertEqual(dict(result.dropped), {"earlier than the first row (out of order)": 1})

    def test_mooncake_window_counts_from_the_first_row(self):
        """Timestamps 1000, 1500, 4000 ms; --start 0 --duration 1 is [0, 1000) ms after the first row:
        offsets 0 and 500 kept (ticks 0 and floor(500 / 30) = 16), offset 3000 outside."""
        path = _write(self, "m.jsonl", _moon(1000) + _moon(1500) + _moon(4000))
        result = import_trace("mooncake", path, ImportOptions(start=0, duration=1))
        self.assertEqual([s.arrival for s in result.workload], [0, 16])
        self.assertEqual(result.dropped["outside the --start/--duration window"], 1)


class FullBlocksTest(unittest.TestCase):
    def test_only_full_blocks_are_cached(self):
        """Block size 16. A 20-token producer [A, B] holds one full block (floor(20/16) = 1): A.
        A later 48-token [A, B, D] hits 1 × 16 = 16 tokens, not 32."""
        cache = PrefixCache()
        cache.insert(RequestSpec("p", 0, None, 0, 20, 1, prefix_blocks=("A", "B"), block_size=16))
        later = RequestSpec("q", 0, None, 0, 48, 1, prefix_blocks=("A", "B", "D"), block_size=16)
        self.assertEqual(cache.hit_tokens(later), 16)

    def test_blocks_beyond_the_prompt_are_refused(self):
        """A 100-token prompt covers ceil(100/512) = 1 block of 512: 4 blocks are refused; 1 passes."""
        row = ('{"block_size": 512, "requests": [{"name": "a", "arrival": 0, "prefix_key": null, '
               '"prefix_tokens": 0, "suffix_tokens": 100, "output_tokens": 1, "prefix_blocks": %s}]}')
        with self.assertRaises(WorkloadError) as caught:
            parse_workload(row % "[7, 7, 7, 7]", "w.json")
        self.assertIn("at most ceil(100 / 512) = 1 blocks", str(caught.exception))
        self.assertEqual(parse_workload(row % "[7]", "w.json")[0].prefix_blocks, (7,))

    def test_block_size_zero_is_one_problem(self):
        """block_size 0 is named once; no second line claiming the header field is missing."""
        text = ('{"block_size": 0, "requests": [{"name": "a", "arrival": 0, "prefix_key": null, '
                '"prefix_tokens": 0, "suffix_tokens": 9, "output_tokens": 1, "prefix_blocks": [1]}]}')
        with self.assertRaises(WorkloadError) as caught:
            parse_workload(text, "w.json")
        self.assertEqual(len(caught.exception.problems), 1, caught.exception.problems)
        self.assertIn("'block_size'", caught.exception.problems[0])

    def test_block_id_beyond_64_bits_is_refused(self):
        text = ('{"block_size": 4, "requests": [{"name": "a", "arrival": 0, "prefix_key": null, '
                '"prefix_tokens": 0, "suffix_tokens": 9, "output_tokens": 1, "prefix_blocks": [%d]}]}')
        self.assertEqual(parse_workload(text % (2**63 - 1), "w.json")[0].prefix_blocks, (2**63 - 1,))
        with self.assertRaises(WorkloadError):
            parse_workload(text % 2**63, "w.json")


class TickMsProvenanceTest(unittest.TestCase):
    def test_import_records_tick_ms_and_run_and_sweep_repeat_it(self):
        """--tick-ms 50 -> header "tick_ms": 50.0; the run's manifest and workload.json and the sweep
        manifest carry 50.0 unchanged; the lab scenarios' manifests have no tick_ms (goldens)."""
        base = temp_dir(self)
        out = os.path.join(base, "w.json")
        self.assertEqual(run_cli(["import", "azure", AZURE, "-o", out, "--tick-ms", "50", "--limit", "3"])[0], 0)
        self.assertEqual(json.loads(read(out))["tick_ms"], 50.0)
        code, _, err = run_cli(["--workload", out, "--artifacts", os.path.join(base, "run")])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(read(os.path.join(base, "run", "manifest.json")))["tick_ms"], 50.0)
        self.assertEqual(json.loads(read(os.path.join(base, "run", "workload.json")))["tick_ms"], 50.0)
        code, _, err = run_cli(["sweep", "--workload", out, "--loads", "1", "--workers", "1",
                                "--out", os.path.join(base, "sweep")])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(read(os.path.join(base, "sweep", "manifest.json")))["tick_ms"], 50.0)
        self.assertNotIn("tick_ms", read(os.path.join(PROJECT, "expected", "baseline", "manifest.json")))


class CountsTimelineBoundTest(unittest.TestCase):
    def test_counts_records_stay_bounded_and_keep_totals(self):
        """With the bound at 4 records, each case of the baseline keeps at most 4; the records stay in
        tick order without overlap, their budget sums to budget_spent and 8 requests finish."""
        config = EngineConfig()
        with mock.patch.object(records_module, "MAX_COUNTS_RECORDS", 4):   # the bound CountsKeeper reads
            results = engine.run_cases(scenario("baseline"), config, cases_for(config), timeline="counts")
        for result in results:
            with self.subTest(case=result.case.name):
                records = result.ticks
                self.assertLessEqual(len(records), 4)
                self.assertEqual(sum(k.budget_used for k in records), result.budget_spent)
                self.assertEqual(sum(k.num_finished for k in records), 8)
                for before, after in zip(records, records[1:]):
                    self.assertLessEqual(before.tick + before.num_ticks, after.tick)


class ScaleWarningTest(unittest.TestCase):
    def test_lab_profile_and_full_timeline_warnings(self):
        """Above LAB_PROFILE_MAX_REQUESTS the lab profile warns; vllm does not. --timeline full on
        more than 1,000 requests warns; the baseline (8 requests) draws no warning."""
        big = [RequestSpec(f"r{i}", i, None, 0, 4, 1) for i in range(LAB_PROFILE_MAX_REQUESTS + 1)]
        self.assertEqual(len(scale_warnings(big, "lab", None)), 1)
        self.assertEqual(scale_warnings(big, "vllm", None), [])
        self.assertIn("--timeline full", scale_warnings(big, "vllm", "full")[0])
        self.assertEqual(scale_warnings(scenario("baseline"), "lab", "full"), [])


class SweepChecksTest(unittest.TestCase):
    def test_bad_loads_and_workers_exit_2_before_simulating(self):
        cases = [(["--loads", "1,1.0"], "given twice"), (["--loads", "1e300"], "--loads"),
                 (["--loads", "nan"], "--loads"), (["--loads", "0"], "--loads"),
                 (["--workers", "100000"], "--workers")]
        for argv, message in cases:
            with self.subTest(argv=argv):
                code, _, err = run_cli(["sweep", *argv])
                self.assertEqual(code, 2, err)
                self.assertIn(message, err)

    def test_out_is_checked_first(self):
        """--out naming a file is refused before anything runs: nothing on stdout."""
        path = _write(self, "file", "x")
        code, out, err = run_cli(["sweep", "--out", path, "--workers", "1"])
        self.assertEqual((code, out), (2, ""))
        self.assertIn("not a directory", err)

    def test_parse_loads_exact(self):
        """'0.5,1,2' -> Fractions 1/2, 1, 2 in order."""
        self.assertEqual([str(f) for f in parse_loads("0.5,1,2")], ["1/2", "1", "2"])


if __name__ == "__main__":
    unittest.main()
