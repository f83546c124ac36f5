"""A workload's canonical text (lab.md §7) in chunks, as a large run's ``workload.json`` is written
and its sha256 hashed: joined, the chunks are :func:`workload_to_json`'s text byte for byte, with
and without the units note, for every built-in scenario, an empty workload, a large one (several
chunks) and one with block-level prefixes, priorities and ``tick_ms`` in its header; written to a
file once while its sha256 is hashed, as a streamed run spools it."""

import hashlib
import io
import unittest
from dataclasses import replace
from unittest import mock

from sched.output.artifacts import LabRun, render_artifacts, stream_artifacts
from sched.runs.bench import synthetic
from sched.vllm.async_step import simulate
from sched.vllm.config import VllmKnobs
from sched.workload import specs as workload_specs
from sched.workload.specs import (SCENARIOS, scenario, workload_json_and_sha256, workload_json_chunks,
                                  workload_sha256, workload_to_json, write_workload_json)


class StreamedWorkloadTextTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.built = None   # workloads() builds them once for the class (frozen specs, read only)

    @classmethod
    def tearDownClass(cls):
        cls.built = None   # 24,000 specs not carried through the rest of the run

    def workloads(self):
        if self.built is None:
            type(self).built = self.build()
        return self.built

    @staticmethod
    def build():
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

    def test_written_once_and_hashed_as_it_goes(self):
        """write_workload_json: the text with its units line, byte for byte, and the sha256 of the
        canonical text (without it), from one formatting."""
        for label, workload in self.workloads().items():
            with self.subTest(label):
                handle = io.BytesIO()
                sha256 = write_workload_json(workload, handle)
                self.assertEqual(handle.getvalue().decode("utf-8"), workload_to_json(workload, units=True))
                self.assertEqual(sha256, hashlib.sha256(workload_to_json(workload).encode("utf-8")).hexdigest())

    def test_a_run_spools_its_workload_once(self):
        """A streamed run's workload.json is read back from where it was written while hashed: the
        same text, the same sha256 in the table, and the text is formatted once."""
        workload = synthetic(3 * workload_specs._LINES_PER_CHUNK + 5)
        results = [simulate(workload, VllmKnobs(), timeline="counts")]
        expected = render_artifacts(LabRun(workload, VllmKnobs(), "fcfs", "test", results, "counts"))
        run = LabRun(workload, VllmKnobs(), "fcfs", "test", results, "counts")
        with mock.patch.object(workload_specs, "_request_lines", side_effect=workload_specs._request_lines) as lines:
            files = stream_artifacts(run)
            text = "".join(files["workload.json"])
        self.assertEqual(lines.call_count, 1)
        self.assertEqual(text, expected["workload.json"])
        self.assertEqual((files["table.txt"], files["manifest.json"]), (expected["table.txt"], expected["manifest.json"]))
        self.assertEqual(len(run._spool), 1)
        handle = run._spool[0]
        run.close()
        self.assertTrue(handle.closed)


if __name__ == "__main__":
    unittest.main()
