"""``.ci/run``: its closing line "N passed, N failed, N skipped" comes from unittest's own summary.

Each test copies ``.ci/run`` into a temporary project holding a tiny suite with known outcomes,
so the expected counts are written here by hand.
"""

import os
import shutil
import subprocess
import unittest

from tests.helpers import PROJECT, temp_dir

SUITE = '''import unittest


class Known(unittest.TestCase):
    def test_pass_one(self):
        pass

    def test_pass_two(self):
        pass

    @unittest.skip("on purpose")
    def test_skipped(self):
        pass
'''
BROKEN = '''

    def test_fails(self):
        self.assertEqual(1, 2)

    def test_errors(self):
        raise RuntimeError("on purpose")
'''


@unittest.skipUnless(shutil.which("bash"), "needs bash")
class CiRunTest(unittest.TestCase):
    def run_ci(self, suite: str) -> subprocess.CompletedProcess:
        project = temp_dir(self)
        os.makedirs(os.path.join(project, ".ci"))
        os.makedirs(os.path.join(project, "tests"))
        shutil.copy(os.path.join(PROJECT, ".ci", "run"), os.path.join(project, ".ci", "run"))
        with open(os.path.join(project, "tests", "__init__.py"), "w", encoding="utf-8"):
            pass
        with open(os.path.join(project, "tests", "test_known.py"), "w", encoding="utf-8") as handle:
            handle.write(suite)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return subprocess.run(["bash", os.path.join(project, ".ci", "run")], capture_output=True, text=True,
                              timeout=60, env=env)

    def test_a_skipped_test_is_not_counted_as_passed(self):
        """3 tests: 2 pass, 1 skipped. Before, the line said "3 passed, 0 failed"."""
        run = self.run_ci(SUITE)
        self.assertEqual(run.returncode, 0, run.stdout[-2000:])
        self.assertEqual(run.stdout.splitlines()[-1], "2 passed, 0 failed, 1 skipped")

    def test_failures_and_errors_are_failed(self):
        """5 tests: 2 pass, 1 skipped, 1 failure, 1 error; the exit status is unittest's (1)."""
        run = self.run_ci(SUITE + BROKEN)
        self.assertNotEqual(run.returncode, 0)
        self.assertEqual(run.stdout.splitlines()[-1], "2 passed, 2 failed, 1 skipped")


if __name__ == "__main__":
    unittest.main()
