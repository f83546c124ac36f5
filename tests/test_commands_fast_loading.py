"""The quick ways through large workloads give exactly what the careful ones give (speed).

Workload files in the canonical layout are read column by column (sched.workload.file); every bad
value must leave that shortcut and get the careful path's one-line message. Expected messages
are written out by hand from the rules in sched.workload.validation (lab.md §2, §7).
"""

import json
import random
import unittest

from sched.workload import plain, validation
from sched.output.picture import lane_segments
from sched.core.records import Request, Status
from sched.workload.specs import RequestSpec, WorkloadError, scenario, workload_to_json
from sched.workload.file import canonical_columns, decode_json


def _line(name="a", arrival=0, key=None, prefix=0, suffix=8, output=4, priority=None) -> str:
    """One request line as the canonical layout writes it, formatted here by hand."""
    key_text = "null" if key is None else f'"{key}"'
    tail = "" if priority is None else f', "priority": {priority}'
    return (f'    {{"name": "{name}", "arrival": {arrival}, "prefix_key": {key_text}, "prefix_tokens": {prefix}, '
            f'"suffix_tokens": {suffix}, "output_tokens": {output}{tail}}}')


def _text(*lines: str, header: str = '  "tick_ms": 30.0,\n') -> str:
    return "{\n" + header + '  "requests": [\n' + ",\n".join(lines) + "\n  ]\n}\n"


def _careful(text: str):
    """The careful path alone: decode every object, check every field."""
    return validation.validate_workload(decode_json(text), "w.json")


class CanonicalShortcutTest(unittest.TestCase):
    def test_a_canonical_file_takes_the_shortcut_with_the_same_requests(self):
        """priority-mix has keys, priorities and shared prefixes; the header's tick_ms lands on every
        request, as lab.md §7 reads it."""
        text = _text(*(_line(s.name, s.arrival, s.prefix_key, s.prefix_tokens, s.suffix_tokens, s.output_tokens,
                             s.priority) for s in scenario("priority-mix")))
        want = [RequestSpec(s.name, s.arrival, s.prefix_key, s.prefix_tokens, s.suffix_tokens, s.output_tokens,
                            s.priority, tick_ms=30.0) for s in scenario("priority-mix")]
        self.assertEqual(plain.canonical_specs(text, "w.json"), want)
        self.assertEqual(validation.parse_workload(text, "w.json"), want)
        self.assertEqual(_careful(text), want)
        written = workload_to_json(scenario("baseline"), units=True)   # a run's workload.json
        self.assertEqual(plain.canonical_specs(written, "w.json"), scenario("baseline"))

    def test_every_bad_value_gets_the_careful_message(self):
        long_name = "n" * 65
        cases = {
            # label: (lines, header or None for the default, the one expected problem)
            "arrival above bound": ((_line("a"), _line("b", arrival=1_000_000_001)), None,
                                    "w.json: request 1 (b): field 'arrival': must be at most 1000000000 (ticks), "
                                    "got 1000000001"),
            "arrival of 17 digits": ((_line("a", arrival=12345678901234567),), None,
                                     "w.json: request 0 (a): field 'arrival': must be at most 1000000000 (ticks), "
                                     "got 12345678901234567"),
            "prefix above bound": ((_line("a", key="K", prefix=1_000_001),), None,
                                   "w.json: request 0 (a): field 'prefix_tokens': must be at most 1000000 "
                                   "(tokens per request), got 1000001"),
            "suffix above bound": ((_line("a", suffix=1_000_001),), None,
                                   "w.json: request 0 (a): field 'suffix_tokens': must be at most 1000000 "
                                   "(tokens per request), got 1000001"),
            "no output": ((_line("a", output=0),), None,
                          "w.json: request 0 (a): field 'output_tokens': must be at least 1, got 0"),
            "output above bound": ((_line("a", output=1_000_001),), None,
                                   "w.json: request 0 (a): field 'output_tokens': must be at most 1000000 "
                                   "(tokens per request), got 1000001"),
            "priority above": ((_line("a", priority=1_000_000_001),), None,
                               "w.json: request 0 (a): field 'priority': must be at most 1000000000 "
                               "(priority range), got 1000000001"),
            "priority below": ((_line("a", priority=-1_000_000_001),), None,
                               "w.json: request 0 (a): field 'priority': must be at least -1000000000, "
                               "got -1000000001"),
            "name too long": ((_line(long_name),), None,
                              'w.json: request 0 ("' + "n" * 36 + "...): field 'name': must be at most 64 "
                              "characters, got 65"),
            "blank name": ((_line("  "),), None,
                           "w.json: request 0: field 'name': must be a non-empty string, got \"  \""),
            "empty name": ((_line(""),), None,
                           "w.json: request 0: field 'name': must be a non-empty string, got \"\""),
            "DEL in name": ((_line("a\x7fb"),), None,
                            "w.json: request 0 (\"a\x7fb\"): field 'name': must be printable (no tabs, line "
                            "breaks or control characters), got \"a\x7fb\""),
            "duplicate name": ((_line("a"), _line("a", arrival=3)), None,
                               "w.json: request 1 (a): field 'name': duplicate of request 0 (a); names must be unique"),
            "blank key": ((_line("a", key=" ", prefix=16),), None,
                          "w.json: request 0 (a): field 'prefix_key': must be a non-empty string or null, got \" \""),
            "null key, prefix": ((_line("a", prefix=16),), None,
                                 "w.json: request 0 (a): field 'prefix_key': is null but prefix_tokens is 16; "
                                 "a shared prefix needs a key"),
            "key, no prefix": ((_line("a", key="K"),), None,
                               "w.json: request 0 (a): field 'prefix_tokens': is 0 but prefix_key is 'K'; "
                               "a shared prefix needs at least 1 token"),
            "empty prompt": ((_line("a", suffix=0),), None,
                             "w.json: request 0 (a): field 'suffix_tokens': the prompt has 0 tokens; "
                             "prefix_tokens + suffix_tokens must be at least 1"),
            "two prefix lengths": ((_line("a", key="K", prefix=16), _line("b", key="K", prefix=32)), None,
                                   "w.json: request 1 (b): field 'prefix_tokens': is 32 but request 0 (a) gives "
                                   "prefix_key 'K' 16 tokens; an exact shared prefix has one length"),
            "tick_ms zero": ((_line("a"),), '  "tick_ms": 0,\n',
                             "w.json: field 'tick_ms': must be a number of milliseconds above 0 and at most "
                             "3.6e+06, got 0"),
            "units not text": ((_line("a"),), '  "units": 5,\n', "w.json: field 'units': must be a string, got 5"),
            "unknown header": ((_line("a"),), '  "tick": 30,\n',
                               "w.json: field 'tick': unknown field; did you mean 'tick_ms'?"),
            "requests twice": ((_line("a"),), '  "requests": [],\n',
                               "w.json: field 'requests': given more than once (JSON keeps only the last)"),
        }
        for label, (lines, header, problem) in cases.items():
            with self.subTest(label):
                text = _text(*lines) if header is None else _text(*lines, header=header)
                if label != "arrival of 17 digits":   # longer numbers than the layout reads go the careful way
                    self.assertIsNotNone(canonical_columns(text))   # the lines are read, their values refused
                self.assertIsNone(plain.canonical_specs(text, "w.json"))
                with self.assertRaises(WorkloadError) as fast:
                    validation.parse_workload(text, "w.json")
                with self.assertRaises(WorkloadError) as careful:
                    _careful(text)
                self.assertEqual(fast.exception.problems, [problem])
                self.assertEqual(careful.exception.problems, [problem])

    def test_chunks_of_any_size_read_the_same_columns(self):
        """The lines are matched a chunk at a time: chunks of a few characters (every line its own
        chunk, or cut anywhere) give the columns of one chunk holding all, and a bad line in any
        chunk still leaves the shortcut."""
        from sched.workload import file as workload_file
        text = _text(*(_line(f"r{i}", i, "K" if i % 3 else None, 16 if i % 3 else 0, 8 + i, 1 + i % 5,
                             i % 4 or None) for i in range(40)))
        bad = text.replace('"r17", "arrival": 17', '"r17", "arrival": 017')
        saved = workload_file._CHUNK
        try:
            workload_file._CHUNK = 1 << 30
            whole = canonical_columns(text)
            for size in (1, 7, 100, 113, 1000):
                workload_file._CHUNK = size
                with self.subTest(chunk=size):
                    self.assertEqual(canonical_columns(text), whole)
                    self.assertIsNone(canonical_columns(bad))
        finally:
            workload_file._CHUNK = saved
        self.assertEqual(whole[1][0], [f"r{i}" for i in range(40)])
        self.assertEqual(whole[1][6][:5], [None, 1, 2, 3, None])

    def test_other_layouts_are_decoded_in_full(self):
        """Escapes, null priority, block lists, other spacing: valid, but not the canonical lines."""
        texts = {
            "escaped name": _text(_line('a\\"b')),
            "null priority": _text(_line("a").replace("}", ', "priority": null}')),
            "blocks": _text(_line("a").replace("}", ', "prefix_blocks": [1]}'), header='  "block_size": 16,\n'),
            "compact": _text(_line("a").replace(": ", ":")),
            "no requests": '{\n  "requests": [\n  ]\n}\n',
        }
        for label, text in texts.items():
            with self.subTest(label):
                self.assertIsNone(plain.canonical_specs(text, "w.json"))
                self.assertEqual(validation.parse_workload(text, "w.json"), _careful(text))

    def test_the_shortcut_agrees_with_the_careful_path_on_random_files(self):
        """Seeded canonical files of 1-4 requests mixing good and bad values: the shortcut accepts
        exactly the files the careful path accepts, with the same requests."""
        rng = random.Random(7)
        values = {"name": [None, "a", " ", "", "c" * 64, "c" * 65, "é", "\x7f"],   # None: a unique name
                  "arrival": [0, 5, 10**9, 10**9 + 1], "key": [None, "K", "L", " "],
                  "prefix": [0, 16, 32, 10**6, 10**6 + 1], "suffix": [8, 0, 10**6 + 1],
                  "output": [4, 1, 0, 10**6, 10**6 + 1], "priority": [None, 0, -3, 10**9, -10**9 - 1]}
        accepted = 0
        for _ in range(600):
            rows = [{field: options[0] if rng.random() < 0.8 else rng.choice(options)
                     for field, options in values.items()} for _ in range(rng.randint(1, 4))]
            lines = [_line(**{**row, "name": f"r{i}" if row["name"] is None else row["name"]})
                     for i, row in enumerate(rows)]
            text = _text(*lines)
            try:
                want = _careful(text)
            except WorkloadError:
                want = None
            self.assertEqual(plain.canonical_specs(text, "w.json"), want, text)
            accepted += want is not None
        self.assertGreater(accepted, 100)


class PlainWorkloadLinesTest(unittest.TestCase):
    def test_lines_equal_json_dumps(self):
        """workload.json's request lines are "    " + json.dumps(spec.to_json()) (lab.md §7),
        whatever the values: escapes, non-ASCII, priorities, blocks, booleans and floats."""
        specs = [RequestSpec("a", 0, None, 0, 8, 4), RequestSpec('q"\\\n\t', 3, "K\u00e9", 16, 0, 1, priority=-2),
                 RequestSpec("\u2028\U0001f600", 10**9, "K", 16, 1, 1, priority=0),
                 RequestSpec("b", 0, None, 0, 8, 4, prefix_blocks=(1, "x"), block_size=16),
                 RequestSpec("t", True, None, False, 2.0, 1)]
        want = ",\n".join("    " + json.dumps(spec.to_json()) for spec in specs)
        text = workload_to_json(specs)
        self.assertIn("\n" + want + "\n", text)
        self.assertIn('"arrival": true', text)
        self.assertIn('"suffix_tokens": 2.0', text)


class DecodeRunsTest(unittest.TestCase):
    def test_runs_of_stamps_make_one_decode_segment_each(self):
        """lab.md §5's token-gaps example, W1: token times [2, 3, 4, 14], prefill done at tick 0.
        Prefill [0, 1); the tokens stamped 2-4 are computed in ticks 1-3: decode [1, 4), 3 tokens;
        skipped [4, 13); the token stamped 14 in tick 13: decode [13, 14), 1 token."""
        request = Request(RequestSpec("W1", 0, None, 0, 8, 4), 1, Status.DONE, admitted_at=0, prefill_done_at=0,
                          token_times=[2, 3, 4, 14], done_at=14)
        self.assertEqual([(s.phase, s.start, s.end, s.emitted) for s in lane_segments(request, None, None)],
                         [("prefill", 0, 1, 0), ("decode", 1, 4, 3), ("skipped", 4, 13, 0), ("decode", 13, 14, 1)])


if __name__ == "__main__":
    unittest.main()


class WorkloadTextChunksTest(unittest.TestCase):
    def test_chunked_text_and_hash_equal_the_whole_ones(self):
        """workload.json is built and hashed a chunk of lines at a time: any chunk size gives the
        text workload_to_json writes and the sha256 of the text without its units line."""
        import hashlib
        from sched.workload import specs as specs_module
        blocks = [RequestSpec(f"b{i}", i, None, 0, 20 + i, 3, prefix_blocks=(1, i), block_size=16, tick_ms=30.0)
                  for i in range(5)]
        saved = specs_module._LINES_PER_CHUNK
        try:
            for workload in (scenario("priority-mix"), blocks, scenario("baseline")[:1], []):
                for size in (1, 2, 3, 1000):
                    specs_module._LINES_PER_CHUNK = size
                    with self.subTest(requests=len(workload), chunk=size):
                        text, sha = specs_module.workload_json_and_sha256(workload)
                        self.assertEqual(text, workload_to_json(workload, units=True))
                        self.assertEqual(sha, hashlib.sha256(workload_to_json(workload).encode("utf-8")).hexdigest())
        finally:
            specs_module._LINES_PER_CHUNK = saved
