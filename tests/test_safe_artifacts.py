"""Nothing is lost: artifacts are written whole or not at all (lab.md §7, README "输入校验与退出码").

We may run as root, for whom ``chmod`` does not make a directory read-only; failures are then
simulated by a parent that is a file and by an ``open`` that fails part-way (a full disk).
"""

import builtins
import errno
import os
import unittest
from unittest import mock

from sched.artifacts import ARTIFACT_FILES, ArtifactError, write_artifacts
from tests.helpers import read, run_cli, temp_dir

FILES = {name: f"{name}\n" for name in ARTIFACT_FILES}


def _disk_full_after(count: int):
    """An ``open`` that lets ``count`` files be opened for writing, then fails with ENOSPC."""
    real_open, opened = builtins.open, []

    def fake_open(path, mode="r", *args, **kwargs):
        if "w" in mode:
            if len(opened) >= count:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            opened.append(path)
        return real_open(path, mode, *args, **kwargs)
    return fake_open


class FailedWriteLeavesNothingTest(unittest.TestCase):
    def test_parent_is_a_file(self):
        base = temp_dir(self)
        blocker = os.path.join(base, "blocker")
        with open(blocker, "w", encoding="utf-8") as handle:
            handle.write("not a directory")
        out = os.path.join(blocker, "runs", "baseline")
        code, stdout, err = run_cli(["--artifacts", out])
        self.assertEqual(code, 2)
        self.assertEqual(stdout, "", "refused before the simulation ran")
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn(out, err)
        self.assertIn("is a file", err)
        self.assertEqual(os.listdir(base), ["blocker"])

    def test_disk_full_part_way_leaves_no_directory_and_no_created_parents(self):
        """Three of seven files written, then ENOSPC: no run dir, no staging dir, no new parents."""
        base = temp_dir(self)
        out = os.path.join(base, "new", "deeper", "run")
        with mock.patch("builtins.open", _disk_full_after(3)):
            with self.assertRaises(ArtifactError) as caught:
                write_artifacts(FILES, out)
        self.assertIn("No space left on device", str(caught.exception))
        self.assertIn(out, str(caught.exception))
        self.assertEqual(os.listdir(base), [])

    def test_disk_full_through_the_cli_is_one_line_exit_2(self):
        base = temp_dir(self)
        out = os.path.join(base, "run")
        with mock.patch("builtins.open", _disk_full_after(5)):
            code, _, err = run_cli(["--artifacts", out])
        self.assertEqual(code, 2)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("cannot write artifacts", err)
        self.assertEqual(os.listdir(base), [])

    def test_failed_forced_rewrite_keeps_the_earlier_run(self):
        """With --force the new files are staged first: a failure leaves the old run untouched."""
        base = temp_dir(self)
        out = os.path.join(base, "run")
        self.assertEqual(run_cli(["--artifacts", out])[0], 0)
        before = {name: read(os.path.join(out, name)) for name in ARTIFACT_FILES}
        with mock.patch("builtins.open", _disk_full_after(6)):
            code, _, err = run_cli(["--scenario", "output-heavy", "--artifacts", out, "--force"])
        self.assertEqual(code, 2, err)
        self.assertEqual({name: read(os.path.join(out, name)) for name in ARTIFACT_FILES}, before)
        self.assertEqual(os.listdir(base), ["run"])

    @unittest.skipIf(hasattr(os, "geteuid") and os.geteuid() == 0, "root ignores directory permissions")
    def test_read_only_parent(self):
        base = temp_dir(self)
        locked = os.path.join(base, "locked")
        os.mkdir(locked, 0o500)
        self.addCleanup(os.chmod, locked, 0o700)
        code, _, err = run_cli(["--artifacts", os.path.join(locked, "run")])
        self.assertEqual(code, 2)
        self.assertIn("Permission denied", err)
        self.assertEqual(os.listdir(locked), [])


class ExistingRunTest(unittest.TestCase):
    def test_non_empty_directory_is_refused_before_the_simulation(self):
        out = os.path.join(temp_dir(self), "run")
        os.mkdir(out)
        with open(os.path.join(out, "notes.txt"), "w", encoding="utf-8") as handle:
            handle.write("mine")
        code, stdout, err = run_cli(["--artifacts", out])
        self.assertEqual(code, 2)
        self.assertEqual(stdout, "")
        self.assertIn("--force", err)
        self.assertEqual(os.listdir(out), ["notes.txt"])

    def test_empty_directory_is_used(self):
        out = os.path.join(temp_dir(self), "run")
        os.mkdir(out)
        self.assertEqual(run_cli(["--artifacts", out])[0], 0)
        self.assertEqual(sorted(os.listdir(out)), sorted(ARTIFACT_FILES))

    def test_unreadable_existing_directory_is_bad_input_not_a_crash(self):
        out = os.path.join(temp_dir(self), "run")
        os.mkdir(out)
        denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES), out)
        with mock.patch("sched.artifacts.os.listdir", side_effect=denied):
            code, stdout, err = run_cli(["--artifacts", out])
        self.assertEqual(code, 2)
        self.assertEqual(stdout, "")
        self.assertIn("Permission denied", err)
        self.assertEqual(len(err.splitlines()), 1, err)

    def test_target_that_is_a_file(self):
        out = os.path.join(temp_dir(self), "run")
        with open(out, "w", encoding="utf-8") as handle:
            handle.write("mine")
        code, _, err = run_cli(["--artifacts", out, "--force"])
        self.assertEqual(code, 2)
        self.assertIn("not a directory", err)
        self.assertEqual(read(out), "mine")


if __name__ == "__main__":
    unittest.main()
