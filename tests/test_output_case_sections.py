"""Each case's artifact lines rendered where it was simulated give the bytes of rendering the
whole run in one process (sched/output/case_sections.py with sched/runs/parallel.py)."""

import random
import unittest
from unittest import mock

from sched.output import case_sections
from sched.output.artifacts import LabRun, render_artifacts, stream_artifacts
from sched.output.case_sections import CaseSections, open_case_sections
from sched.core.config import EngineConfig, cases_for
from sched.lab.engine import run_cases
from sched.engines import check_cases
from sched.runs.parallel import worth_workers
from sched.runs.build import run_lab
from sched.workload.specs import RequestSpec
from tests.test_runs_parallel import FORK


def _workload(num_requests: int, seed: int = 11) -> list[RequestSpec]:
    """Bursty arrivals with shared prefixes; names with non-ASCII letters (several UTF-8 bytes each)."""
    rng = random.Random(seed)
    arrival, specs = 0, []
    for i in range(num_requests):
        arrival += rng.choice((0, 1, 2, 3))
        specs.append(RequestSpec(f"请求-{i}-é", arrival, rng.choice(("a", "b", None)), rng.choice((0, 16)),
                                 rng.randint(1, 60), rng.randint(1, 12)))
    return specs


def _text(files: dict) -> dict:
    return {name: text if isinstance(text, str) else "".join(text) for name, text in files.items()}


@unittest.skipUnless(FORK, "needs the fork start method")
class SectionsGiveTheSameBytesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workload = _workload(300)   # split by lowering the bound (run_split): quick
        cls.config = EngineConfig(max_active=8)
        alone = run_cases(cls.workload, cls.config, cases_for(cls.config), timeline="counts")
        check_cases(alone)
        cls.expected = render_artifacts(LabRun(cls.workload, cls.config, "fcfs", "test", alone, "counts"))

    def run_split(self):
        with mock.patch("sched.runs.parallel.usable_cores", return_value=2), \
                mock.patch("sched.runs.parallel.MIN_REQUESTS_FOR_WORKERS", len(self.workload)):
            self.assertTrue(worth_workers(self.workload))
            run = run_lab(self.workload, self.config, "fcfs", "test", timeline="counts")
        self.addCleanup(run.close)
        return run

    def test_rendered_in_two_processes(self):
        run = self.run_split()
        self.assertIsNotNone(run._sections)
        self.assertEqual(_text(stream_artifacts(run)), self.expected)
        self.assertTrue(all(result.ticks == [] for result in run.results))   # rendered, not kept

    def test_workload_json_comes_from_the_worker(self):
        """Written in the worker; here only its sha256 is read, and the text streamed from the file
        when the artifacts are written (never built or held whole in this process)."""
        run = self.run_split()
        self.assertEqual(run._workload_json, [])
        self.assertEqual(run._sha256, [run._sections.workload_sha256()])
        files = stream_artifacts(run)
        self.assertNotIsInstance(files["workload.json"], str)   # chunks read from the file
        self.assertEqual(_text(files), self.expected)
        self.assertEqual(run._workload_json, [])

    def test_a_failed_workload_write_is_rendered_here(self):
        real = CaseSections.write_workload

        def full_disk(self, workload):
            with mock.patch.object(self._workload_file, "write", side_effect=OSError(28, "No space")):
                return real(self, workload)

        with mock.patch.object(CaseSections, "write_workload", full_disk):
            run = self.run_split()
        self.assertEqual((run._workload_json, run._sha256), ([], []))
        self.assertIsNone(run._sections.workload_sha256())
        self.assertEqual(_text(stream_artifacts(run)), self.expected)   # rendered here

    def test_chunks_cut_inside_a_character_are_decoded_whole(self):
        run = self.run_split()
        with mock.patch.object(case_sections, "_READ_SIZE", 7):   # "请" is 3 bytes: cuts fall inside
            self.assertEqual(_text(stream_artifacts(run)), self.expected)

    def test_a_failed_write_falls_back_to_rendering_here(self):
        """A full temporary disk while case 1 is written (in the worker): its files are emptied
        and it keeps its timeline records; it is rendered from its result when written, the
        other cases read from their sections, and the bytes are the same."""
        real = CaseSections.write

        def full_disk(self, run, index, parts=None):
            if index == 1:
                raise_in = mock.patch.object(self._files[index][0], "write", side_effect=OSError(28, "No space"))
                with raise_in:
                    return real(self, run, index, parts)
            return real(self, run, index, parts)

        with mock.patch.object(CaseSections, "write", full_disk):
            run = self.run_split()
        self.assertEqual([run._sections.written(i) for i in range(4)], [True, False, True, True])
        self.assertEqual([bool(result.ticks) for result in run.results], [False, True, False, False])
        self.assertEqual(_text(stream_artifacts(run)), self.expected)

    def test_no_temporary_files_means_the_usual_rendering(self):
        with mock.patch("sched.output.case_sections.tempfile.TemporaryFile", side_effect=OSError(30, "Read-only")):
            self.assertIsNone(open_case_sections(4))
            run = self.run_split()
        self.assertIsNone(run._sections)
        self.assertEqual(_text(stream_artifacts(run)), self.expected)


class SectionsFilesTest(unittest.TestCase):
    def test_an_empty_case_file_is_a_case_not_written(self):
        sections = CaseSections(2)
        self.addCleanup(sections.close)
        self.assertEqual([sections.written(0), sections.written(1)], [False, False])
        sections._files[1][0].write("é\n".encode())
        self.assertEqual([sections.written(0), sections.written(1)], [False, True])
        self.assertEqual("".join(sections.chunks(1, "requests.jsonl")), "é\n")
        self.assertEqual("".join(sections.chunks(1, "timeline.jsonl")), "")


if __name__ == "__main__":
    unittest.main()
