"""Trace importers (formats.md "Request traces") and block-level prefix sharing (docs/handbook/real-traffic.md §14).

The excerpts in ``tests/data/`` are the first lines of the real traces (see ``tests/data/SOURCES.md``);
expected values are computed by hand from those lines in each docstring.
"""

import json
import os
import unittest

from sched.lab.cache import PrefixCache
from sched.core.config import EngineConfig, cases_for
from sched.lab.engine import run_cases
from sched.workload.importers import ImportOptions, import_trace
from sched.core.metrics import summarize
from sched.workload.specs import RequestSpec, WorkloadError, scenario, workload_to_json
from sched.workload.validation import load_workload, parse_workload
from tests.helpers import PROJECT, read, run_cli, temp_dir

DATA = os.path.join(PROJECT, "tests", "data")
AZURE = os.path.join(DATA, "azure_conv_2023_head.csv")
MOONCAKE = os.path.join(DATA, "mooncake_conversation_head.jsonl")
LENGTHS = os.path.join(DATA, "sharegpt_lengths_head.csv")


def _write(test, name, text):
    path = os.path.join(temp_dir(test), name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


class AzureImportTest(unittest.TestCase):
    def test_seven_fractional_digits_and_ticks(self):
        """Rows 1-3: 18:15:46.6805900, :50.9951690, :51.2224670 -> offsets 0, 4314.579 ms and
        4541.877 ms; with 30 ms per tick: ticks 0, 143, 151. Prompt = ContextTokens, no prefix."""
        result = import_trace("azure", AZURE)
        first = result.workload[:3]
        self.assertEqual([s.arrival for s in first], [0, 143, 151])
        self.assertEqual([(s.prefix_key, s.prefix_tokens, s.suffix_tokens, s.output_tokens) for s in first],
                         [(None, 0, 374, 44), (None, 0, 396, 109), (None, 0, 879, 55)])
        self.assertEqual((result.num_rows, len(result.workload)), (20, 20))
        self.assertEqual(len({s.name for s in result.workload}), 20)

    def test_2024_time_zone_timestamps_with_and_without_fraction(self):
        """00:00:00.009930+00:00 then 00:00:01+00:00: 990.07 ms apart -> tick 33 at 30 ms/tick."""
        path = _write(self, "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                     "2024-05-10 00:00:00.009930+00:00,10,2\n2024-05-10 00:00:01+00:00,20,3\n")
        self.assertEqual([s.arrival for s in import_trace("azure", path).workload], [0, 33])

    def test_window_limit_and_tick_ms(self):
        """Window [4 s, 5 s): rows 2-3 (4.31 s, 4.54 s) and more; arrivals count from 4 s: row 2 at
        314.579 ms -> tick 3 with 100 ms per tick; --limit 2 keeps two and drops the rest."""
        options = ImportOptions(tick_ms=100, start=4, duration=1, limit=2)
        result = import_trace("azure", AZURE, options)
        self.assertEqual([(s.name, s.arrival) for s in result.workload], [("a3", 3), ("a4", 5)])
        self.assertEqual(result.dropped["outside the --start/--duration window"] + result.dropped["beyond --limit"], 18)

    def test_bad_rows_are_dropped_and_named_by_file_line_and_field(self):
        rows = [("2023-11-16 18:15:46.6805900,x,4", "ContextTokens"), ("2023-11-16 18:15:47.0,5,0", "GeneratedTokens"),
                ("yesterday,5,4", "TIMESTAMP")]
        for row, field in rows:
            with self.subTest(field=field):
                path = _write(self, "bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:40.0,1,1\n"
                              + row + "\n")
                result = import_trace("azure", path)
                self.assertEqual(len(result.workload), 1)
                self.assertIn(f"{path}:3: field {field!r}", result.summary())

    def test_unusable_files_raise(self):
        cases = {"no header": "a,b\n1,2\n", "no rows": "TIMESTAMP,ContextTokens,GeneratedTokens\n"}
        for label, text in cases.items():
            with self.subTest(label), self.assertRaises(WorkloadError):
                import_trace("azure", _write(self, "x.csv", text))


class MooncakeImportTest(unittest.TestCase):
    def test_blocks_and_arrivals(self):
        """Line 1: 6758 tokens -> ceil(6758/512) = 14 ids [0..13], block size 512; line 11 at
        3000 ms -> tick 100. Every request of the conversation trace starts with block 0."""
        workload = import_trace("mooncake", MOONCAKE).workload
        self.assertEqual(workload[0].prefix_blocks, tuple(range(14)))
        self.assertEqual((workload[0].block_size, workload[0].suffix_tokens, workload[0].output_tokens), (512, 6758, 500))
        self.assertEqual([s.arrival for s in workload[9:]], [0, 100, 100])
        self.assertTrue(all(s.prefix_blocks[0] == 0 for s in workload))

    def test_block_count_must_match_the_length(self):
        path = _write(self, "m.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1]}\n'
                                       '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]}\n')
        result = import_trace("mooncake", path)
        self.assertEqual(len(result.workload), 1)
        self.assertIn(f"{path}:1: field 'hash_ids'", result.summary())

    def test_round_trip_through_workload_json(self):
        workload = import_trace("mooncake", MOONCAKE).workload
        text = workload_to_json(workload)
        self.assertTrue(text.startswith('{\n  "block_size": 512,\n  "tick_ms": 30.0,\n  "requests": [\n'))
        self.assertEqual(parse_workload(text), workload)


class LengthsImportTest(unittest.TestCase):
    def test_seeded_arrivals(self):
        """Same seed, same arrivals; first arrival at 0; lengths from the CSV in file order."""
        options = ImportOptions(rate=5, seed=3)
        first, again = import_trace("lengths", LENGTHS, options).workload, import_trace("lengths", LENGTHS, options).workload
        self.assertEqual(first, again)
        self.assertEqual(first[0].arrival, 0)
        self.assertEqual((first[0].suffix_tokens, first[0].output_tokens), (74, 918))
        gamma = import_trace("lengths", LENGTHS, ImportOptions(rate=5, seed=3, process="gamma", cv=3)).workload
        self.assertNotEqual([s.arrival for s in gamma], [s.arrival for s in first])

    def test_rate_is_required(self):
        with self.assertRaises(WorkloadError):
            import_trace("lengths", LENGTHS)


class ImportCliTest(unittest.TestCase):
    def test_writes_a_replayable_workload_and_refuses_to_overwrite(self):
        out = os.path.join(temp_dir(self), "w.json")
        code, stdout, err = run_cli(["import", "azure", AZURE, "-o", out, "--limit", "5"])
        self.assertEqual(code, 0, err)
        self.assertIn("read 20 rows", stdout)
        self.assertIn("dropped 15: beyond --limit", stdout)
        self.assertEqual(len(load_workload(out)), 5)
        before = read(out)
        code, _, err = run_cli(["import", "azure", AZURE, "-o", out])
        self.assertEqual((code, read(out)), (2, before))
        self.assertIn("--force", err)
        self.assertEqual(run_cli(["import", "azure", AZURE, "-o", out, "--force"])[0], 0)
        self.assertEqual(len(load_workload(out)), 20)


class BlockPrefixTest(unittest.TestCase):
    def test_prefix_key_is_the_one_block_case(self):
        """Baseline with SYS as one 128-token block ([\"SYS\"], block size 128): same results."""
        blocks = [RequestSpec(s.name, s.arrival, None, 0, s.prompt_tokens, s.output_tokens,
                              prefix_blocks=None if s.prefix_key is None else (s.prefix_key,), block_size=128)
                  for s in scenario("baseline")]
        config = EngineConfig()
        for keyed, blocked in zip(run_cases(scenario("baseline"), config, cases_for(config)),
                                  run_cases(blocks, config, cases_for(config))):
            with self.subTest(case=keyed.case.name):
                self.assertEqual([(r.hit_tokens, r.token_times, r.done_at) for r in keyed.requests],
                                 [(r.hit_tokens, r.token_times, r.done_at) for r in blocked.requests])
                self.assertEqual(summarize(keyed), summarize(blocked))

    def test_longest_leading_run_capped(self):
        """Cached {1, 2, 7}: blocks [1, 2, 3, 7] of 16 hit 32; [1, 2] with a 20-token prompt hits
        min(32, 19) = 19; [3] hits 0."""
        cache = PrefixCache()
        cache.insert(RequestSpec("p", 0, None, 0, 40, 1, prefix_blocks=(1, 2, 7), block_size=16))
        hit = lambda blocks, prompt: cache.hit_tokens(RequestSpec("q", 0, None, 0, prompt, 1,
                                                                   prefix_blocks=blocks, block_size=16))
        self.assertEqual((hit((1, 2, 3, 7), 100), hit((1, 2), 20), hit((3,), 100)), (32, 19, 0))

    def test_bad_block_fields(self):
        row = '{"name": "a", "arrival": 0, "prefix_key": %s, "prefix_tokens": %d, "suffix_tokens": 9, ' \
              '"output_tokens": 1, "prefix_blocks": %s}'
        cases = [('"block_size": 16, ', row % ("null", 0, "[]"), "non-empty list"),
                 ('"block_size": 16, ', row % ("null", 0, "[true]"), "non-empty list"),
                 ('"block_size": 16, ', row % ('"K"', 4, "[1]"), "replaces prefix_key"),
                 ('', row % ("null", 0, "[1]"), "block_size"),
                 ('"block_size": 0, ', row % ("null", 0, "[1]"), "block_size")]
        for header, request, message in cases:
            with self.subTest(message=message, request=request):
                with self.assertRaises(WorkloadError) as caught:
                    parse_workload("{" + header + '"requests": [' + request + "]}", "w.json")
                self.assertIn(message, str(caught.exception))
                self.assertIn("w.json", str(caught.exception))

    def test_workload_without_blocks_is_written_as_before(self):
        self.assertEqual(workload_to_json(scenario("baseline"), units=True), read(os.path.join(PROJECT, "expected", "baseline",
                                                                                   "workload.json")))
        self.assertNotIn("block_size", json.loads(workload_to_json(scenario("baseline"))))


if __name__ == "__main__":
    unittest.main()


class ProfileTest(unittest.TestCase):
    def test_profiles_and_overrides(self):
        """vllm: budget 2048, decode cost 1, max active 256, chunk 512 (sched/lab/profiles.py); an
        explicit --max-active wins over the profile; the lab profile is the default table header."""
        code, out, err = run_cli(["--profile", "vllm", "--max-active", "8"])
        self.assertEqual(code, 0, err)
        self.assertIn("budget 2048, decode cost 1, max active 8, chunk 512", out.splitlines()[0])
        self.assertIn("continuous+APC+chunk512", out)
        self.assertEqual(run_cli([])[1], run_cli(["--profile", "lab"])[1])
