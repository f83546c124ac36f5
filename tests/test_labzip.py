"""The lab ZIP (lab.md §1): exact contents, reproducible bytes, and a lab that runs from it.

The end-to-end test runs the whole suite again inside the extracted ZIP, with
``INFER_SCHED_LAB_NESTED=1`` so that this file's tests are skipped there (no recursion).
"""

import os
import subprocess
import sys
import unittest
import zipfile

from sched.labzip import TOP_FOLDER, LabZipError, build_lab_zip, lab_files
from tests.helpers import PROJECT, run_cli, temp_dir

NESTED = "INFER_SCHED_LAB_NESTED"


@unittest.skipIf(os.environ.get(NESTED), "already running inside the extracted lab ZIP")
class LabZipTest(unittest.TestCase):
    def test_contents_are_the_lab_and_nothing_else(self):
        path = os.path.join(temp_dir(self), "lab.zip")
        code, out, err = run_cli(["zip", "-o", path])
        self.assertEqual((code, err), (0, ""))
        self.assertIn(f"{TOP_FOLDER}/", out)
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
        names = [info.filename for info in infos]
        self.assertEqual(names, sorted(names))
        self.assertTrue(all(name.startswith(f"{TOP_FOLDER}/") for name in names))
        inside = {name[len(TOP_FOLDER) + 1:] for name in names}
        for required in ("infer_sched_lab.py", "sched/cli.py", "sched/engine.py", "workloads/baseline.json",
                         "expected/baseline/requests.jsonl", "expected/baseline/timeline.svg", "tests/helpers.py",
                         "tests/test_labzip.py", "prediction.md", "diagnosis.md", "README.md", "docs/spec/lab.md", "pyproject.toml",
                         ".ci/run"):
            self.assertIn(required, inside)
        allowed_tops = {"infer_sched_lab.py", "sched", "bench", "workloads", "expected", "tests", "prediction.md",
                        "diagnosis.md", "README.md", "docs", "pyproject.toml", ".ci"}
        for name in inside:
            with self.subTest(entry=name):
                top = name.split("/")[0]
                self.assertTrue(top in allowed_tops or top.upper().startswith(("LICEN", "NOTICE", "COPYING",
                                                                               "ATTRIBUTION", "SOURCES")))
                self.assertNotIn("__pycache__", name)
                self.assertFalse(name.endswith(".pyc"))
                self.assertFalse(any(part.startswith(".") for part in name.split("/") if part != ".ci"))
        for info in infos:
            self.assertEqual(info.date_time, (1980, 1, 1, 0, 0, 0))
            mode = (info.external_attr >> 16) & 0o777
            self.assertEqual(mode, 0o755 if info.filename.endswith(("/infer_sched_lab.py", "/.ci/run")) else 0o644)

    def test_same_sources_same_bytes(self):
        base = temp_dir(self)
        first, second = os.path.join(base, "a.zip"), os.path.join(base, "b.zip")
        build_lab_zip(PROJECT, first)
        build_lab_zip(PROJECT, second)
        with open(first, "rb") as a, open(second, "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_stray_files_are_left_out(self):
        """A copy of the project with a cache, a run directory and a hidden file in it."""
        project = os.path.join(temp_dir(self), "project")
        for path in lab_files(PROJECT):
            os.makedirs(os.path.dirname(os.path.join(project, path)), exist_ok=True)
            with open(os.path.join(PROJECT, path), "rb") as src, open(os.path.join(project, path), "wb") as dst:
                dst.write(src.read())
        for stray in ("sched/__pycache__/cli.cpython-311.pyc", "runs/baseline/table.txt", "tests/.swp",
                      ".git/HEAD", "notes.txt"):
            os.makedirs(os.path.dirname(os.path.join(project, stray)), exist_ok=True)
            with open(os.path.join(project, stray), "w", encoding="utf-8") as handle:
                handle.write("stray")
        self.assertEqual(lab_files(project), lab_files(PROJECT))

    def test_missing_part_of_the_project_is_refused(self):
        project = temp_dir(self)
        with self.assertRaises(LabZipError) as raised:
            build_lab_zip(project, os.path.join(project, "lab.zip"))
        self.assertIn("missing", str(raised.exception))
        self.assertFalse(os.path.exists(os.path.join(project, "lab.zip")))

    def test_extracted_lab_runs_and_its_tests_pass(self):
        base = temp_dir(self)
        path = os.path.join(base, "inference-scheduler-lab.zip")
        build_lab_zip(PROJECT, path)
        target = os.path.join(base, "extracted")
        subprocess.run([sys.executable, "-m", "zipfile", "-e", path, target], check=True, timeout=60)
        lab = os.path.join(target, TOP_FOLDER)
        env = dict(os.environ, **{NESTED: "1", "PYTHONDONTWRITEBYTECODE": "1"})
        env.pop("PYTHONPATH", None)
        run = subprocess.run([sys.executable, "infer_sched_lab.py", "--artifacts", "runs/baseline"], cwd=lab,
                             env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("continuous+APC+chunk32", run.stdout)
        check = subprocess.run([sys.executable, "infer_sched_lab.py", "check", "runs/baseline", "expected/baseline"],
                               cwd=lab, env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        tests = subprocess.run([sys.executable, "-m", "unittest"], cwd=lab, env=env, capture_output=True,
                               text=True, timeout=120)
        self.assertEqual(tests.returncode, 0, tests.stderr[-3000:])
        self.assertIn("OK", tests.stderr)


if __name__ == "__main__":
    unittest.main()
