"""A workload's canonical text (lab.md §7) in chunks, as a large run's ``workload.json`` is written
and its sha256 hashed: joined, the chunks are :func:`workload_to_json`'s text byte for byte, with
and without the units note, for every built-in scenario, an empty workload, a large one (several
chunks) and one with block-level prefixes, priorities and ``tick_ms`` in its header."""

import hashlib
import unittest
from dataclasses import replace

from sched.runs.bench import synthetic
from sched.workload import specs as workload_specs
from sched.workload.specs import (SCENARIOS, scenario, workload_json_and_sha256, workload_json_chunks,
                                  workload_sha256, workload_to_json)


class StreamedWorkloadTextTest(unittest.TestCase):
    def workloads(self):
        blocks = [replace(s, block_size=16, prefix_key=None, prefix_tokens=0, tick_ms=2.5,
                          prefix_blocks=(1, 2) if i % 3 == 0 else None, priority=i % 2 or None)
                  for i, s in enumerate(synthetic(50))]
        return {**{name: scenario(name) for name in SCENARIOS}, "empty": [],
                "large": synthetic(3 * workload_specs._LINES_PER_CHUNK + 5), "blocks": blocks}

    def test_chunks_join_into_the_canonical_text(self):
        for label, workload in self.workloads().items():
            for units in (True, False):
                with self.subTest(label, units=units):
                    chunks = list(workload_json_chunks(workload, units))
                    self.assertEqual("".join(chunks), workload_to_json(workload, units))
                    if label == "large":
                        self.assertGreater(len(chunks), 3)

    def test_sha256_of_the_whole_text(self):
        for label, workload in self.workloads().items():
            with self.subTest(label):
                expected = hashlib.sha256(workload_to_json(workload).encode("utf-8")).hexdigest()
                self.assertEqual(workload_sha256(workload), expected)
                self.assertEqual(workload_json_and_sha256(workload)[1], expected)


if __name__ == "__main__":
    unittest.main()
