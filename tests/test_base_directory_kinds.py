"""--force replaces a directory's files only when it holds the same kind of output (run or sweep),
and a sweep checks its own file names before simulating."""

import json
import os
import unittest

from tests.helpers import PROJECT, read, run_cli, temp_dir
from tests.test_timing_realrun import vllm_run

REQUESTS = os.path.join(PROJECT, "tests", "data", "serving-bench", "requests.json")
CALIBRATION_RUN = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090-run", "requests.jsonl")
AZURE = os.path.join(PROJECT, "tests", "data", "azure_conv_2023_head.csv")


class DirectoryKindTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.run_dir = os.path.join(self.base, "run")
        self.sweep_dir = os.path.join(self.base, "sweep")
        self.assertEqual(run_cli(["--artifacts", self.run_dir])[0], 0)
        self.assertEqual(run_cli(["sweep", "--loads", "1", "--workers", "1", "--out", self.sweep_dir])[0], 0)

    def test_sweep_never_replaces_a_runs_manifest(self):
        before = read(os.path.join(self.run_dir, "manifest.json"))
        code, _, err = run_cli(["sweep", "--loads", "1", "--workers", "1", "--out", self.run_dir, "--force"])
        self.assertEqual(code, 2, err)
        self.assertIn("manifest.json", err)
        self.assertEqual(read(os.path.join(self.run_dir, "manifest.json")), before)
        self.assertNotIn("sweep.txt", os.listdir(self.run_dir))

    def test_run_never_replaces_a_sweeps_manifest(self):
        before = read(os.path.join(self.sweep_dir, "manifest.json"))
        code, _, err = run_cli(["--artifacts", self.sweep_dir, "--force"])
        self.assertEqual(code, 2, err)
        self.assertEqual(read(os.path.join(self.sweep_dir, "manifest.json")), before)

    def test_same_kind_with_force_is_replaced(self):
        self.assertEqual(run_cli(["--artifacts", self.run_dir, "--force", "--scenario", "output-heavy"])[0], 0)
        self.assertIn("scenario:output-heavy", read(os.path.join(self.run_dir, "manifest.json")))
        self.assertEqual(run_cli(["sweep", "--loads", "2", "--workers", "1", "--out", self.sweep_dir,
                                  "--force"])[0], 0)
        self.assertIn("load", read(os.path.join(self.sweep_dir, "sweep.txt")))

    def test_sweep_checks_its_own_file_names(self):
        """A directory named like a sweep file is refused (before simulating); one named like a
        run's file (report.html) is none of the sweep's business."""
        os.mkdir(os.path.join(self.sweep_dir, "report.html"))
        code, _, err = run_cli(["sweep", "--loads", "1", "--workers", "1", "--out", self.sweep_dir, "--force"])
        self.assertEqual(code, 0, err)
        os.remove(os.path.join(self.sweep_dir, "sweep.svg"))
        os.mkdir(os.path.join(self.sweep_dir, "sweep.svg"))
        code, stdout, err = run_cli(["sweep", "--loads", "1", "--workers", "1", "--out", self.sweep_dir, "--force"])
        self.assertEqual(code, 2, err)
        self.assertIn("sweep.svg", err)
        self.assertEqual(stdout, "")  # refused before the table was simulated and printed

    def test_small_load_factors_print_exactly(self):
        code, stdout, err = run_cli(["sweep", "--loads", "0.001,0.004", "--workers", "1"])
        self.assertEqual(code, 0, err)
        loads = {line.split()[0] for line in stdout.splitlines()[1:] if line.strip()}
        self.assertEqual(loads, {"0.001", "0.004"})


class OneKindRuleTest(unittest.TestCase):
    """Every writer refuses, even with --force, a directory of another kind (export, run, sweep,
    import-results, serving-bench, calibrate): the export's requests.jsonl and workload.json are the
    frozen workload sent to a GPU, and a half-replaced directory is readable by no command."""

    @classmethod
    def setUpClass(cls):
        cls.base = temp_dir(cls._Holder())
        cls.source = os.path.join(cls.base, "bench.json")
        with open(cls.source, "w", encoding="utf-8") as out:
            json.dump(vllm_run(), out)
        made = {"export": ["export", "--out", "{dir}"], "simulated": ["--artifacts", "{dir}"],
                "real": ["import-results", cls.source, "--artifacts", "{dir}"],
                "serving-bench": ["serving-bench", "run", REQUESTS, "--artifacts", "{dir}"]}
        cls.dirs = {}
        for kind, argv in made.items():
            cls.dirs[kind] = os.path.join(cls.base, kind)
            code, _, err = run_cli([a.format(dir=cls.dirs[kind]) for a in argv])
            assert code == 0, err
        cls.dirs["calibrate"] = os.path.join(cls.base, "calibrate")   # the marker calibrate writes
        os.mkdir(cls.dirs["calibrate"])
        with open(os.path.join(cls.dirs["calibrate"], "calibration.json"), "w", encoding="utf-8") as out:
            json.dump({"step_ms": {"a": 1, "b": 0, "c": 0}}, out)

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.base, ignore_errors=True)

    class _Holder:
        def addCleanup(self, *args, **kwargs):
            pass

    WRITERS = {
        "export": ["export", "--out", "{dir}", "--force"],
        "simulated": ["--artifacts", "{dir}", "--force"],
        "sweep": ["sweep", "--loads", "1", "--workers", "1", "--out", "{dir}", "--force"],
        "real": ["import-results", "{source}", "--artifacts", "{dir}", "--force"],
        "serving-bench": ["serving-bench", "run", REQUESTS, "--artifacts", "{dir}", "--force"],
        "calibrate": ["calibrate", CALIBRATION_RUN, "--train-first", "150", "--out", "{dir}", "--force"],
    }

    def snapshot(self, directory):
        return {name: read(os.path.join(directory, name)) for name in sorted(os.listdir(directory))}

    def test_force_never_writes_into_another_kind(self):
        for writer, argv in self.WRITERS.items():
            for kind, directory in self.dirs.items():
                if kind == writer:
                    continue
                with self.subTest(writer=writer, target=kind):
                    before = self.snapshot(directory)
                    code, _, err = run_cli([a.format(dir=directory, source=self.source) for a in argv])
                    self.assertEqual(code, 2, err)
                    self.assertIn(f"already holds files of another kind ({kind})", err)
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
                    self.assertEqual(self.snapshot(directory), before)

    def test_force_replaces_the_same_kind(self):
        for writer in ("export", "real", "serving-bench"):
            with self.subTest(writer=writer):
                argv = [a.format(dir=self.dirs[writer], source=self.source) for a in self.WRITERS[writer]]
                code, _, err = run_cli(argv)
                self.assertEqual(code, 0, err)

    def test_import_never_replaces_a_file_of_a_kind_directory(self):
        for kind in ("export", "simulated"):
            with self.subTest(target=kind):
                path = os.path.join(self.dirs[kind], "workload.json")
                before = read(path)
                code, _, err = run_cli(["import", "azure", AZURE, "-o", path, "--force", "--limit", "3"])
                self.assertEqual(code, 2, err)
                self.assertIn(f"belongs to a directory of another kind ({kind})", err)
                self.assertEqual(read(path), before)


class CompareOutTest(unittest.TestCase):
    def test_out_never_names_a_compared_runs_file(self):
        run = os.path.join(temp_dir(self), "run")
        self.assertEqual(run_cli(["--artifacts", run])[0], 0)
        before = read(os.path.join(run, "summary.json"))
        code, _, err = run_cli(["compare", run, "--baseline-case", "continuous", "--candidate-case",
                                "continuous+APC", "--out", os.path.join(run, "summary.json"), "--force"])
        self.assertEqual(code, 2, err)
        self.assertIn("compared run's own files", err)
        self.assertEqual(read(os.path.join(run, "summary.json")), before)


if __name__ == "__main__":
    unittest.main()
