"""What ``diff`` and ``compare`` keep of a large run: a few numbers per request, by request index.

- ``diff``: :class:`sched.analysis.rundiff_input.RequestValues` keeps run A's status and compared
  fields (README §12.5) in integer arrays; each value read back must be the value written (a ``null``,
  a number beyond 32 or 64 bits, a float of ms), a second line refused, a line taken once.
- ``compare``: :class:`sched.analysis.trace.Expected` counts each line against the workload's
  requests by index (compare.md §3.2: arrived, duplicated, lost, unknown ids); the evidence must be
  the one the plain reading by name gives, for lines in order, out of order, repeated, missing and
  unknown.
- the workload readers: ``canonical_columns(text, keep=...)`` fills only the columns asked for,
  each equal to the full read's.
"""

import json
import os
import unittest
from dataclasses import replace

from sched.analysis.compare_sides import Side, check_evidence
from sched.analysis.rundiff_input import TAKEN, RequestValues, name_index
from sched.analysis.trace import Expected, read_trace
from sched.runs.bench import synthetic
from sched.workload.file import canonical_columns
from sched.workload.specs import workload_to_json
from tests.helpers import temp_dir


class RequestValuesTest(unittest.TestCase):
    """Values read back exactly as written, whatever the array had to become to hold them."""

    def test_values_come_back_exactly(self):
        for big in (5, 2**31, 2**40, 2**63, 2**70, 2.5):
            with self.subTest(big=big):
                values = RequestValues(["vllm"], name_index(["a", "b", "c", "d"]))
                self.assertTrue(values.add("vllm", "b", ("timeout", 1, 2, 3, 4, 5, 6, 7), 1))
                self.assertTrue(values.add("vllm", "a", ("ok", None, big, 3, 3, None, 0, 7), 0))
                self.assertTrue(values.add("vllm", "d", ("ok", 0, 1, 1, 1, 1, 1, 0), 2))
                self.assertFalse(values.add("vllm", "a", ("ok", 1, 1, 1, 1, 1, 1, 1), 3))   # a second line
                self.assertEqual(values.count, 3)
                self.assertEqual(values.take("vllm", "a"), ("ok", None, big, 3, 3, None, 0, 7, 0))
                self.assertIs(type(values.take("vllm", "d")[2]), int)
                self.assertEqual(values.take("vllm", "b"), ("timeout", 1, 2, 3, 4, 5, 6, 7, 1))
                self.assertIs(values.take("vllm", "a"), TAKEN)
                self.assertIsNone(values.take("vllm", "c"))      # no line
                self.assertIsNone(values.take("other", "a"))     # no such case
                self.assertIsNone(values.take("vllm", "zz"))     # no such request
                self.assertTrue(values.taken(("vllm", "a")))
                self.assertFalse(values.taken(("vllm", "c")))

    def test_name_index_keeps_the_first_place(self):
        self.assertEqual(name_index(["x", "y", "x", "z"]), {"x": 0, "y": 1, "z": 2})


def _line(name, status="ok", e2e=5, case="vllm"):
    return json.dumps({"case": case, "name": name, "arrival": 0, "status": status, "ttft": 1, "e2e": e2e,
                       "queue_wait": 0, "output_tokens_emitted": 2, "hit_tokens": 0})


class ExpectedTraceTest(unittest.TestCase):
    """Counting by index gives the evidence counting by name gives (compare.md §3.2)."""

    CASES = {
        "in order": ["a", "b", "c", "d"],
        "out of order": ["c", "a", "d", "b"],
        "repeated, missing, unknown": ["a", "a", "x", "c", "x", "d"],
        "other case lines": ["a", "b", ("c", "other"), "d"],
        "never ended": ["a", ("b", "vllm", "running"), "c", "d"],
    }

    def test_evidence_equals_the_reading_by_name(self):
        names, priorities = ["a", "b", "c", "d"], [None, 2, None, 0]
        for label, lines in self.CASES.items():
            with self.subTest(label):
                directory = temp_dir(self)
                path = os.path.join(directory, "requests.jsonl")
                with open(path, "w", encoding="utf-8") as handle:
                    for item in lines:
                        name, case, status = (item + ("vllm", "ok")[len(item) - 1:]) if isinstance(item, tuple) \
                            else (item, "vllm", "ok")
                        handle.write(_line(name, status, e2e=ord(name[0]), case=case) + "\n")
                by_name = read_trace(path, "vllm", {n: p or 0 for n, p in zip(names, priorities)})
                by_index = read_trace(path, "vllm", expected=Expected(names, priorities))
                sides = [Side("x", "ticks", {}, {}, {}, trace, names, len(names), {0, 2})
                         for trace in (by_name, by_index)]
                self.assertEqual(check_evidence(sides[1]), check_evidence(sides[0]))
                self.assertEqual(by_index.e2e_by_priority, by_name.e2e_by_priority)
                self.assertEqual(by_index.num_ids, len(by_name.counts))
                self.assertEqual(set(by_index.counts), set(by_name.counts) - set(names))

    def test_by_hand(self):
        path = os.path.join(temp_dir(self), "requests.jsonl")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("".join(_line(n) + "\n" for n in ["b", "b", "zz", "a"]))
        trace = read_trace(path, "vllm", expected=Expected(["a", "b", "c"], None))
        evidence = check_evidence(Side("x", "ticks", {}, {}, {}, trace, ["a", "b", "c"], 3, {0}))
        self.assertEqual(list(trace.seen), [1, 2, 0])
        self.assertEqual(trace.counts, {"zz": 1})
        self.assertEqual((evidence["arrived"], evidence["in_trace"]), (3, 3))
        self.assertEqual((evidence["duplicated"], evidence["lost"], evidence["unknown"]), (["b"], ["c"], ["zz"]))


class CanonicalColumnsTest(unittest.TestCase):
    def test_kept_columns_equal_the_full_read(self):
        specs = synthetic(300)
        text = workload_to_json([s if i % 3 else replace(s, priority=i % 5) for i, s in enumerate(specs)])
        header, full = canonical_columns(text)
        for keep in ((0,), (0, 6), (1, 2, 3), tuple(range(7))):
            with self.subTest(keep=keep):
                kept_header, kept = canonical_columns(text, keep=keep)
                self.assertEqual(kept_header, header)
                for at in range(7):
                    self.assertEqual(list(kept[at]), list(full[at]) if at in keep else [])


if __name__ == "__main__":
    unittest.main()
