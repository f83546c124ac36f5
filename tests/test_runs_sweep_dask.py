"""``sweep --executor dask://HOST:PORT`` on a real local Dask cluster (docs/handbook/dask.md §19).

Runs only where ``dask.distributed`` is importable (it is never a dependency of the lab); .ci/run
installs it into a throwaway virtual environment and runs this file there. The cluster is started
with the handbook's two commands (``dask scheduler``, ``dask worker``), the worker in an empty
directory without the lab on its path, so it can only run the points with the code the sweep
sends it.
"""

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

from tests.helpers import read, run_cli, temp_dir

HAVE_DASK = importlib.util.find_spec("dask") is not None and importlib.util.find_spec("distributed") is not None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@unittest.skipUnless(HAVE_DASK, "needs dask.distributed (optional; .ci/run installs it in a virtual environment)")
class DaskSweepTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.port = free_port()
        cls.cwd = tempfile.mkdtemp(prefix="isl-dask-test-")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        dask = [sys.executable, "-m", "dask"]
        cls.processes = []
        cls.logs = []
        for args in (["scheduler", "--host", "127.0.0.1", "--port", str(cls.port), "--no-dashboard"],
                     ["worker", f"tcp://127.0.0.1:{cls.port}", "--nworkers", "2", "--nthreads", "1",
                      "--no-dashboard"]):
            log = open(os.path.join(cls.cwd, f"{args[0]}.log"), "w", encoding="utf-8")
            cls.logs.append(log)
            cls.processes.append(subprocess.Popen(dask + args, cwd=cls.cwd, env=env, stdout=log,
                                                  stderr=subprocess.STDOUT))
        from dask.distributed import Client
        deadline = time.monotonic() + 120
        while True:  # the scheduler answers, then both worker processes register
            try:
                with Client(f"tcp://127.0.0.1:{cls.port}", timeout="5s") as client:
                    client.wait_for_workers(2, timeout=max(1, deadline - time.monotonic()))
                break
            except (OSError, TimeoutError):
                if time.monotonic() > deadline:
                    cls.tearDownClass()
                    raise

    @classmethod
    def tearDownClass(cls):
        for process in reversed(cls.processes):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in cls.logs:
            log.close()
        shutil.rmtree(cls.cwd, ignore_errors=True)
        cls.processes = []

    def test_the_cluster_gives_the_local_rows(self):
        """Same workload, loads and deadline: the cluster's sweep.txt and sweep.csv equal the local
        process pool's, byte for byte (rows in load, case order)."""
        base = temp_dir(self)
        args = ["sweep", "--scenario", "baseline", "--loads", "0.5,1,2", "--timeout-ticks", "40"]
        code, local_out, err = run_cli([*args, "--out", os.path.join(base, "local")])
        self.assertEqual(code, 0, err)
        code, cluster_out, err = run_cli([*args, "--executor", f"dask://127.0.0.1:{self.port}",
                                          "--out", os.path.join(base, "cluster")])
        self.assertEqual(code, 0, err)
        self.assertEqual(cluster_out.splitlines()[:-1], local_out.splitlines()[:-1])
        for name in ("sweep.txt", "sweep.csv", "sweep.svg"):
            with self.subTest(file=name):
                self.assertEqual(read(os.path.join(base, "cluster", name)), read(os.path.join(base, "local", name)))
        worker_log = read(os.path.join(self.cwd, "worker.log"))
        self.assertIn("infer_sched_lab_code.zip", worker_log)   # the points ran on the code the sweep sent

    def test_plan_on_the_cluster_gives_the_local_plan(self):
        """plan --executor: the settings searched on the cluster give plan.json, plan.txt and pareto.svg
        equal to the local process pool's, byte for byte (one code path: the sweep's executor)."""
        from tests.test_planning_plan import plan_inputs
        base = temp_dir(self)
        workload, model = plan_inputs(base)
        args = ["plan", "--workload", workload, "--step-model", model, "--goodput", "ttft:300",
                "--max-num-seqs", "2,4,8"]
        code, local_out, err = run_cli([*args, "--out", os.path.join(base, "local")])
        self.assertEqual(code, 0, err)
        code, cluster_out, err = run_cli([*args, "--executor", f"dask://127.0.0.1:{self.port}",
                                          "--out", os.path.join(base, "cluster")])
        self.assertEqual(code, 0, err)
        for name in ("plan.json", "plan.txt", "pareto.svg"):
            with self.subTest(file=name):
                self.assertEqual(read(os.path.join(base, "cluster", name)), read(os.path.join(base, "local", name)))

    def test_no_scheduler_is_one_line_exit_2(self):
        with mock.patch("sched.runs.cluster.CONNECT_TIMEOUT_S", 2):
            code, out, err = run_cli(["sweep", "--executor", f"dask://127.0.0.1:{free_port()}"])
        self.assertEqual((code, out), (2, ""), err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("no Dask scheduler answered", err)


if __name__ == "__main__":
    unittest.main()
