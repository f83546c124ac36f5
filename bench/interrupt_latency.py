#!/usr/bin/env python3
"""How long a large run takes to end after Ctrl-C: prints the figure, asserts nothing.

    python3 bench/interrupt_latency.py [--requests 1000000] [--after 20] [--repeat 3]
                                       [--engine lab|vllm]

Writes a synthetic workload of N requests (``sched.runs.bench.synthetic``), starts a run on it in
its own process group (``--engine lab``: ``--profile vllm``, four cases, worker processes when the
machine has two cores; ``--engine vllm``: the vLLM engine's one case in one process), waits ``--after`` seconds (the run is then simulating), sends SIGINT to the whole
group as a terminal's Ctrl-C does, and prints the seconds from the signal to the exit of the
main process, its exit code and its stderr line (and whether any process of the run's group, a
worker, outlived it). Times are wall-clock seconds of one machine.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT)

from sched.runs.bench import synthetic  # noqa: E402
from sched.workload.specs import workload_to_json  # noqa: E402


def one(workload: str, out: str, after: float, engine: str = "lab") -> tuple[float, int, str]:
    """Seconds from SIGINT to the exit of a run on ``workload``; its exit code and stderr."""
    flags = ["--profile", "vllm"] if engine == "lab" else ["--engine", "vllm"]
    process = subprocess.Popen([sys.executable, os.path.join(PROJECT, "infer_sched_lab.py"), "--workload", workload,
                                *flags, "--artifacts", out], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(after)
    if process.poll() is not None:
        raise SystemExit(f"the run ended before the signal (exit {process.returncode}); use a smaller --after")
    sent = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    process.wait()
    ended = time.monotonic() - sent
    err = process.stderr.read().strip()   # EOF once every process holding stderr (a worker too) has ended
    process.stderr.close()
    try:
        os.killpg(process.pid, 0)
        err += " [a process of the run's group is still alive]"
    except ProcessLookupError:
        pass
    return ended, process.returncode, err


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--after", type=float, default=20.0, help="seconds of running before the signal")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engine", choices=("lab", "vllm"), default="lab")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="isl-interrupt-")
    try:
        workload = os.path.join(base, "workload.json")
        with open(workload, "w", encoding="utf-8") as handle:
            handle.write(workload_to_json(synthetic(args.requests)))
        for attempt in range(args.repeat):
            ended, code, err = one(workload, os.path.join(base, f"run{attempt}"), args.after, args.engine)
            print(f"{args.requests} requests ({args.engine} engine), SIGINT after {args.after:g} s: exited "
                  f"{ended:.2f} s after the signal, exit {code}, stderr {err!r}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
