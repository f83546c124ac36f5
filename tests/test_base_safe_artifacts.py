"""Nothing is lost: artifacts are written whole or not at all (lab.md §7, README "输入校验与退出码").

We may run as root, for whom ``chmod`` does not make a directory read-only; failures are then
simulated by a parent that is a file and by an ``open`` that fails part-way (a full disk).
"""

import builtins
import errno
import os
import unittest
from unittest import mock

from sched.base.safe_write import ARTIFACT_FILES, ArtifactError, write_artifacts, write_text_file
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
        with mock.patch("sched.base.safe_write.os.listdir", side_effect=denied):
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


class ForceIsAllOrNothingTest(unittest.TestCase):
    """--force replaces the lab's nine files together or not at all (README "产物的安全写入")."""

    def earlier_run(self) -> tuple[str, dict]:
        out = os.path.join(temp_dir(self), "run")
        self.assertEqual(run_cli(["--artifacts", out])[0], 0)
        return out, {name: read(os.path.join(out, name)) for name in ARTIFACT_FILES if name != "report.html"}

    def test_a_target_name_that_is_a_directory_is_refused_before_anything_is_replaced(self):
        """The tester's case: report.html is a directory; before the fix 8 files were already replaced."""
        out, before = self.earlier_run()
        os.remove(os.path.join(out, "report.html"))
        os.mkdir(os.path.join(out, "report.html"))
        code, stdout, err = run_cli(["--artifacts", out, "--force", "--scenario", "output-heavy"])
        self.assertEqual(code, 2)
        self.assertEqual(stdout, "", "refused before the simulation ran")
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn(os.path.join(out, "report.html"), err)
        self.assertEqual({name: read(os.path.join(out, name)) for name in before}, before)
        self.assertTrue(os.path.isdir(os.path.join(out, "report.html")))

    def test_a_failure_while_moving_the_new_files_in_restores_every_old_file(self):
        """The 5th move of a new file fails (as if the disk went away): all nine old files are back,
        no backup or staging directory is left, and other files in the directory are untouched."""
        out, before = self.earlier_run()
        before["report.html"] = read(os.path.join(out, "report.html"))
        with open(os.path.join(out, "notes.txt"), "w", encoding="utf-8") as handle:
            handle.write("mine")
        real_rename, moved_in = os.rename, []

        def failing_rename(source, destination):
            if os.path.dirname(destination) == out and os.path.basename(destination) in ARTIFACT_FILES:
                moved_in.append(destination)
                if len(moved_in) == 5:
                    raise OSError(errno.EIO, os.strerror(errno.EIO), destination)
            return real_rename(source, destination)
        new = {name: f"new {name}\n" for name in ARTIFACT_FILES}
        with mock.patch("sched.base.safe_write.os.rename", failing_rename):
            with self.assertRaises(ArtifactError):
                write_artifacts(new, out, force=True)
        self.assertEqual({name: read(os.path.join(out, name)) for name in ARTIFACT_FILES}, before)
        self.assertEqual(sorted(os.listdir(out)), sorted([*ARTIFACT_FILES, "notes.txt"]))
        self.assertEqual(os.listdir(os.path.dirname(out)), ["run"])

    def test_a_successful_forced_rewrite_leaves_no_backup(self):
        out, _ = self.earlier_run()
        self.assertEqual(run_cli(["--artifacts", out, "--force", "--scenario", "output-heavy"])[0], 0)
        self.assertEqual(sorted(os.listdir(out)), sorted(ARTIFACT_FILES))
        self.assertIn('"scenario:output-heavy"', read(os.path.join(out, "manifest.json")))

    def test_interrupt_while_writing_leaves_nothing(self):
        """Ctrl-C part-way (KeyboardInterrupt from the 4th open): no run dir, no staging dir."""
        base = temp_dir(self)
        real_open, opened = builtins.open, []

        def interrupted_open(path, mode="r", *args, **kwargs):
            if "w" in mode:
                opened.append(path)
                if len(opened) == 4:
                    raise KeyboardInterrupt
            return real_open(path, mode, *args, **kwargs)
        with mock.patch("builtins.open", interrupted_open):
            with self.assertRaises(KeyboardInterrupt):
                write_artifacts(FILES, os.path.join(base, "new", "run"))
        self.assertEqual(os.listdir(base), [])


class PermissionsTest(unittest.TestCase):
    def test_new_run_directory_and_files_get_the_umask_permissions(self):
        """0777 & ~umask for the directory (mkdtemp alone gives 0700), 0666 & ~umask for files."""
        old = os.umask(0o022)
        self.addCleanup(os.umask, old)
        out = os.path.join(temp_dir(self), "run")
        write_artifacts(FILES, out)
        self.assertEqual(os.stat(out).st_mode & 0o777, 0o755)
        for name in ARTIFACT_FILES:
            with self.subTest(name=name):
                self.assertEqual(os.stat(os.path.join(out, name)).st_mode & 0o777, 0o644)
        os.umask(0o027)
        other = os.path.join(temp_dir(self), "run")
        write_artifacts(FILES, other)
        self.assertEqual(os.stat(other).st_mode & 0o777, 0o750)
        self.assertEqual(os.stat(os.path.join(other, "table.txt")).st_mode & 0o777, 0o640)

    def test_single_text_file_is_not_private(self):
        old = os.umask(0o022)
        self.addCleanup(os.umask, old)
        path = os.path.join(temp_dir(self), "workload.json")
        write_text_file("{}\n", path)
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o644)


class UsageTest(unittest.TestCase):
    def test_empty_artifacts_and_force_alone_are_usage_errors(self):
        """--artifacts '' used to exit 0 having written nothing; --force alone did nothing."""
        for argv in (["--artifacts", ""], ["--force"], ["--scenario", "baseline", "--force"]):
            with self.subTest(argv=argv):
                code, stdout, err = run_cli(argv)
                self.assertEqual(code, 2)
                self.assertEqual(stdout, "")
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn("--artifacts" if argv[0] == "--artifacts" else "--force", err)

    def test_ctrl_c_is_one_line_and_exit_130(self):
        base = temp_dir(self)
        out = os.path.join(base, "run")
        with mock.patch("sched.commands.run.run_lab", side_effect=KeyboardInterrupt):
            code, stdout, err = run_cli(["--artifacts", out])
        self.assertEqual(code, 130)
        self.assertEqual(err, "infer_sched_lab.py: error: interrupted; nothing was written\n")
        self.assertEqual(os.listdir(base), [])


if __name__ == "__main__":
    unittest.main()
