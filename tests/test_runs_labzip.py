"""The lab ZIP (lab.md §1): exact contents, reproducible bytes, and a lab that runs from it.

The end-to-end test runs the lab inside the extracted ZIP and checks its run against the packed
golden files; with ``ISL_LABZIP_FULL=1`` (set by ``.ci/run``) it also runs the whole suite there,
with ``INFER_SCHED_LAB_NESTED=1`` so that this file's tests are skipped there (no recursion). The
whole suite twice would double the learner's ``python3 -m unittest``. The ZIP the tests read is
built once for the class (by the ``zip`` command).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile
from unittest import mock

from sched import __version__
from sched.runs.labzip import (COURSE_DATA, DATA_FOLDER, TOP_FOLDER, LabZipError, build_lab_zip, course_data_dir,
                               default_zip_name, lab_files, source_commit)
from sched.runs.labverify import verify_lab_zip
from tests.helpers import PROJECT, full_only, read, run_cli, temp_dir

NESTED = "INFER_SCHED_LAB_NESTED"
FULL = "ISL_LABZIP_FULL"


@unittest.skipIf(os.environ.get(NESTED), "already running inside the extracted lab ZIP")
class LabZipTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = tempfile.mkdtemp(prefix="isl-test-")
        cls.addClassCleanup(shutil.rmtree, cls.base, ignore_errors=True)
        cls.zip_path = os.path.join(cls.base, "inference-scheduler-lab.zip")
        cls.project_copy = None   # copy_of_project() makes it when a test first needs it
        old = os.umask(0o022)  # test_output_permissions_follow_the_umask reads the mode it gives
        try:
            cls.zip_result = run_cli(["zip", "-o", cls.zip_path])
        finally:
            os.umask(old)

    def test_contents_are_the_lab_and_nothing_else(self):
        code, out, err = self.zip_result
        self.assertEqual((code, err), (0, ""))
        self.assertIn(f"{TOP_FOLDER}/", out)
        with zipfile.ZipFile(self.zip_path) as archive:
            infos = archive.infolist()
        names = [info.filename for info in infos]
        self.assertEqual(names, sorted(names))
        data = {name[len(DATA_FOLDER) + 1:] for name in names if name.startswith(f"{DATA_FOLDER}/")}
        self.assertLessEqual(data, set(COURSE_DATA))   # beside the lab: only the course data the handbook uses
        self.assertTrue(all(name.startswith(f"{TOP_FOLDER}/") for name in names if not name.startswith(f"{DATA_FOLDER}/")))
        inside = {name[len(TOP_FOLDER) + 1:] for name in names if name.startswith(f"{TOP_FOLDER}/")}
        for required in ("infer_sched_lab.py", "infer_sched_lab_bench.py", "sched/commands/main.py", "sched/lab/engine.py", "workloads/baseline.json",
                         "expected/baseline/requests.jsonl", "expected/baseline/timeline.svg", "tests/helpers.py",
                         "tests/test_runs_labzip.py", "prediction.md", "diagnosis.md", "README.md", "docs/spec/lab.md", "pyproject.toml",
                         ".ci/run"):
            self.assertIn(required, inside)
        allowed_tops = {"infer_sched_lab.py", "infer_sched_lab_bench.py", "sched", "bench", "workloads", "expected", "tests", "prediction.md",
                        "diagnosis.md", "README.md", "docs", "pyproject.toml", ".ci", "LAB.json"}
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

    def test_lab_record_names_the_version_the_commit_and_the_course_data(self):
        with zipfile.ZipFile(self.zip_path) as archive:
            record = json.loads(archive.read(f"{TOP_FOLDER}/LAB.json"))
            names = archive.namelist()
        self.assertEqual((record["kind"], record["version"]), ("lab-zip", __version__))
        self.assertEqual(record["source_commit"], source_commit(PROJECT))
        included = record["course_data"]["included"]
        self.assertEqual(sorted(f"{DATA_FOLDER}/{p}" for p in included), sorted(n for n in names if n.startswith("shared/")))
        self.assertEqual(sorted(included + record["course_data"]["left_out"]), sorted(COURSE_DATA))
        if course_data_dir(PROJECT) is not None:   # the course workspace: the handbook's traces travel with the lab
            self.assertIn("traces/AzureLLMInferenceTrace_conv.csv", included)
            self.assertIn("traces/SOURCES.md", included)

    def test_default_name_carries_the_version_and_the_commit(self):
        self.assertEqual(default_zip_name(None), f"inference-scheduler-lab-{__version__}.zip")
        self.assertEqual(default_zip_name("0123456789abcdef0123456789abcdef01234567"),
                         f"inference-scheduler-lab-{__version__}-0123456789ab.zip")
        self.assertEqual(default_zip_name("0123456789abcdef0123456789abcdef01234567-dirty"),
                         f"inference-scheduler-lab-{__version__}-0123456789ab-dirty.zip")

    @full_only("a second ZIP without the course data")
    def test_without_course_data_the_record_says_what_is_left_out(self):
        out = os.path.join(temp_dir(self), "lab.zip")
        code, stdout, err = run_cli(["zip", "-o", out, "--no-data"])
        self.assertEqual(code, 0, err)
        self.assertIn("left out", stdout)
        self.assertIn("14.1", stdout)
        with zipfile.ZipFile(out) as archive:
            record = json.loads(archive.read(f"{TOP_FOLDER}/LAB.json"))
            self.assertFalse(any(name.startswith("shared/") for name in archive.namelist()))
        self.assertEqual(record["course_data"]["included"], [])
        self.assertEqual(record["course_data"]["left_out"], list(COURSE_DATA))
        # The sections docs/instructor.md §1 names, each once, in the handbook's order.
        sections = ["11.5", "14.1", "14.2", "14.7", "17.7"]
        self.assertEqual(record["course_data"]["sections_needing_what_is_left_out"], sections)
        self.assertIn(f"handbook sections needing them: {', '.join(sections)} (LAB.json", stdout)

    @full_only("zip --verify: the baseline run from the extracted ZIP")
    def test_verify_runs_the_baseline_from_the_zip(self):
        lines = verify_lab_zip(self.zip_path)
        self.assertTrue(lines[-1].startswith("verified"), lines)
        self.assertIn("no differences", lines[-2])

    @full_only("a damaged golden file in a ZIP fails --verify")
    def test_verify_fails_on_a_damaged_golden_file(self):
        damaged = os.path.join(temp_dir(self), "damaged.zip")
        with zipfile.ZipFile(self.zip_path) as source, zipfile.ZipFile(damaged, "w") as out:
            for info in source.infolist():
                data = source.read(info)
                if info.filename == f"{TOP_FOLDER}/expected/baseline/table.txt":
                    data = data.replace(b"26", b"25", 1)
                out.writestr(info, data)
        lines = verify_lab_zip(damaged)
        self.assertTrue(lines[-1].startswith("NOT verified: check runs/baseline expected/baseline"), lines)
        self.assertIn("table.txt", lines[-1])

    @full_only("a second whole ZIP built")
    def test_same_sources_same_bytes(self):
        """A second build (through the library, not the command) gives the class's ZIP byte for byte."""
        second = os.path.join(temp_dir(self), "b.zip")
        build_lab_zip(PROJECT, second, commit=source_commit(PROJECT))   # the command records the commit
        with open(self.zip_path, "rb") as a, open(second, "rb") as b:
            self.assertEqual(a.read(), b.read())

    def copy_of_project(self) -> str:
        """A copy of the lab's files in a temporary directory (tests that may write stay off the real one),
        made once for the class: the tests that use it add stray files the lab leaves out, or try to
        overwrite one of its files (refused; were it not, only this copy would be changed), so one
        test never changes what another checks."""
        if self.project_copy is None:
            type(self).project_copy = self._copy_project(os.path.join(self.base, "project"))
        return self.project_copy

    @staticmethod
    def _copy_project(project: str) -> str:
        for path in lab_files(PROJECT):
            os.makedirs(os.path.dirname(os.path.join(project, path)), exist_ok=True)
            with open(os.path.join(PROJECT, path), "rb") as src, open(os.path.join(project, path), "wb") as dst:
                dst.write(src.read())
        return project

    def test_stray_files_are_left_out(self):
        """A copy of the project with a cache, a run directory and a hidden file in it."""
        project = self.copy_of_project()
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

    def test_licence_is_packed(self):
        with zipfile.ZipFile(self.zip_path) as archive:
            licence = archive.read(f"{TOP_FOLDER}/LICENSE").decode("utf-8")
            names = archive.namelist()
        self.assertTrue(licence.startswith("MIT License"))
        self.assertIn("Copyright (c) 2026 the infer-sched-lab authors", licence)
        self.assertIn(f"{TOP_FOLDER}/tests/data/SOURCES.md", names)

    @full_only("--force over an existing ZIP: two more ZIPs built")
    def test_existing_output_is_refused_without_force(self):
        base = temp_dir(self)
        path = os.path.join(base, "lab.zip")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("mine")
        code, stdout, err = run_cli(["zip", "-o", path])
        self.assertEqual((code, stdout), (2, ""))
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("--force", err)
        self.assertEqual(read(path), "mine")
        self.assertEqual(os.listdir(base), ["lab.zip"])
        self.assertEqual(run_cli(["zip", "-o", path, "--force"])[0], 0)
        self.assertTrue(zipfile.is_zipfile(path))

    def test_output_that_is_one_of_the_packed_files_is_always_refused(self):
        """The learner's case: ``zip -o prediction.md`` replaced the file and left it out of the ZIP.
        Run on a copy of the project, so a regression cannot damage the real one."""
        project = self.copy_of_project()
        for name in ("prediction.md", "LICENSE", "workloads/baseline.json"):
            for force in (False, True):
                with self.subTest(output=name, force=force):
                    path = os.path.join(project, name)
                    before = read(path)
                    with self.assertRaises(LabZipError) as caught:
                        build_lab_zip(project, path, force=force)
                    self.assertIn("the lab's own file", str(caught.exception))
                    self.assertEqual(read(path), before)

    def test_output_permissions_follow_the_umask(self):
        """The class's ZIP was written under umask 022 (the staging file is private until renamed)."""
        self.assertEqual(os.stat(self.zip_path).st_mode & 0o777, 0o644)

    def test_interrupt_while_packing_leaves_no_temporary_file(self):
        base = temp_dir(self)
        with mock.patch("sched.runs.labzip.zipfile.ZipFile.writestr", side_effect=KeyboardInterrupt):
            with self.assertRaises(KeyboardInterrupt):
                build_lab_zip(PROJECT, os.path.join(base, "lab.zip"))
        self.assertEqual(os.listdir(base), [])

    @full_only("a copy of the project and a third ZIP")
    @unittest.skipUnless(hasattr(os, "mkfifo"), "needs FIFOs")
    def test_a_fifo_under_a_packed_folder_is_skipped_not_waited_on(self):
        """Before the fix ``zip`` blocked forever reading the FIFO (and a kill left a .tmp behind)."""
        project = self.copy_of_project()
        os.mkfifo(os.path.join(project, "workloads", "fifo.json"))
        self.addCleanup(os.remove, os.path.join(project, "workloads", "fifo.json"))   # the copy is the class's
        self.assertNotIn("workloads/fifo.json", lab_files(project))
        out = os.path.join(temp_dir(self), "lab.zip")
        self.assertEqual(build_lab_zip(project, out), lab_files(PROJECT))

    def test_extracted_lab_runs_and_its_tests_pass(self):
        """The learner's steps in the extracted ZIP: run the lab, check it against the packed goldens;
        with ISL_LABZIP_FULL=1 the whole suite runs there too."""
        target = os.path.join(temp_dir(self), "extracted")
        with zipfile.ZipFile(self.zip_path) as archive:  # what `python3 -m zipfile -e` does
            archive.extractall(target)
        lab = os.path.join(target, TOP_FOLDER)
        env = dict(os.environ, **{NESTED: "1", "PYTHONDONTWRITEBYTECODE": "1"})
        env.pop("PYTHONPATH", None)
        for heavy in ("ISL_FUZZ_CASES", "ISL_FULL"):  # the nested suite is the learner's, not CI's heavy set again
            env.pop(heavy, None)
        run = subprocess.run([sys.executable, "infer_sched_lab.py", "--artifacts", "runs/baseline"], cwd=lab,
                             env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("continuous+APC+chunk32", run.stdout)
        # Its run against the goldens packed beside it (in-process: `check` only compares files).
        code, out, err = run_cli(["check", os.path.join(lab, "runs", "baseline"), os.path.join(lab, "expected", "baseline")])
        self.assertEqual(code, 0, out + err)
        self.assertIn("no differences", out)
        if not os.environ.get(FULL):  # learners: the golden check above; CI: the whole suite too
            return
        tests = subprocess.run([sys.executable, "-m", "unittest"], cwd=lab, env=env, capture_output=True,
                               text=True, timeout=300)
        self.assertEqual(tests.returncode, 0, tests.stderr[-3000:])
        self.assertIn("OK", tests.stderr)


if __name__ == "__main__":
    unittest.main()
