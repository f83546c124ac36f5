"""--force replaces a directory's files only when it holds the same kind of output (run or sweep),
and a sweep checks its own file names before simulating."""

import os
import unittest

from tests.helpers import read, run_cli, temp_dir


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


if __name__ == "__main__":
    unittest.main()
