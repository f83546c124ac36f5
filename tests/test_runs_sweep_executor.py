"""``sweep --executor``: the address and the missing-Dask path, without Dask (sched/runs/cluster.py).

The sweep on a real Dask cluster is tests/test_runs_sweep_dask.py (run where Dask is installed).
"""

import os
import subprocess
import sys
import unittest
from unittest import mock

from sched.runs.cluster import parse_dask_address
from sched.core.config import ConfigError
from tests.helpers import PROJECT, assert_bad_input


class ExecutorAddressTest(unittest.TestCase):
    def test_good_addresses(self):
        self.assertEqual(parse_dask_address("dask://127.0.0.1:8786"), "tcp://127.0.0.1:8786")
        self.assertEqual(parse_dask_address("dask://node-3.lab:1"), "tcp://node-3.lab:1")

    def test_bad_addresses_are_one_line_exit_2(self):
        for text in ("127.0.0.1:8786", "tcp://h:8786", "dask://", "dask://h", "dask://h:", "dask://:8786",
                     "dask://h:0", "dask://h:65536", "dask://h:port", "dask://h:87/x", "dask://a/b:1"):
            with self.subTest(address=text):
                with self.assertRaises(ConfigError):
                    parse_dask_address(text)
                assert_bad_input(self, ["sweep", "--executor", text], "dask://HOST:PORT")

    def test_workers_and_executor_together_are_refused(self):
        assert_bad_input(self, ["sweep", "--executor", "dask://h:8786", "--workers", "2"], "--workers")


class MissingDaskTest(unittest.TestCase):
    def test_missing_dask_is_one_clear_line(self):
        """Dask hidden (as where it is not installed): one line naming the package, exit 2."""
        with mock.patch.dict(sys.modules, {"dask": None, "dask.distributed": None}):
            assert_bad_input(self, ["sweep", "--executor", "dask://127.0.0.1:8786"], "dask.distributed")

    def test_the_lab_never_imports_dask_unasked(self):
        code = "import sys, sched.commands.main, sched.runs.sweep, sched.runs.cluster; print(sorted(m for m in sys.modules if m.startswith(('dask', 'distributed'))))"
        out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.stdout.strip(), "[]", out.stderr)


if __name__ == "__main__":
    unittest.main()
