#!/usr/bin/env python3
"""Benchmark of the event-driven engine (README §14): prints figures, asserts nothing.

    python3 bench/bench.py [--engine lab|vllm] [--azure PATH] [--mooncake PATH] [--sizes 1000,10000,100000,1000000]

1. The Azure conversation trace (19,366 requests; default path the shared data folder, skipped
   when absent): imported at 30 ms per tick, all four cases under ``--profile vllm``, every
   artifact written to a temporary directory (the CLI's own path: stream for large runs).
2. The Mooncake conversation trace (12,031 requests, skipped when absent) under the ``lab``
   profile with ``--timeline counts``: the bounded counts timeline's peak memory and bytes written.
3. Synthetic workloads of each size under ``--profile vllm``: seeded lengths (prompt 50-2000,
   output 10-500 tokens, uniform) with Poisson arrivals at 1 request per tick, about 60 % of the
   profile's capacity (2048 tokens per tick / ~1,280 tokens of work per request); all four cases,
   one at a time, timeline ``off``, no artifacts.

With ``--engine vllm`` (issue 9 item 6): 1. the Azure trace under ``--engine vllm
--max-num-batched-tokens 2048 --max-num-seqs 256 --num-gpu-blocks 2589`` (heavily overloaded:
about 3,000 preemptions), every artifact; 2. is skipped; 3. the same synthetic workloads as one
``vllm`` case (2048 tokens, 256 seqs, ample KV), timeline ``off``.

Wall time is measured with ``time.perf_counter``; peak memory is the process's maximum resident
set size (``resource.getrusage``), which only grows, so each size runs in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from sched.cli import main as lab_main  # noqa: E402
from sched.config import EngineConfig, cases_for  # noqa: E402
from sched.engine import simulate  # noqa: E402
from sched.importers import arrival_offsets_ms  # noqa: E402
from sched.metrics import summarize  # noqa: E402
from sched.profiles import PROFILES  # noqa: E402
from sched.vllm_config import VllmKnobs  # noqa: E402
from sched.vllm_engine import simulate_vllm  # noqa: E402
from sched.workload import RequestSpec  # noqa: E402

# The course's data folder sits beside the project (../shared/data/traces from the project root).
_TRACES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data", "traces")
AZURE = os.path.normpath(os.path.join(_TRACES, "AzureLLMInferenceTrace_conv.csv"))
MOONCAKE = os.path.normpath(os.path.join(_TRACES, "conversation_trace.jsonl"))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def synthetic(num_requests: int, seed: int = 1) -> list[RequestSpec]:
    """Seeded synthetic workload: Poisson arrivals at 1 request per tick (tick_ms = 1000 / rate)."""
    rng = random.Random(seed)
    arrivals = arrival_offsets_ms(num_requests, 1000.0, "poisson", 1.0, rng)  # 1000 req/s, 1 ms ticks
    return [RequestSpec(f"s{i}", int(at), None, 0, rng.randint(50, 2000), rng.randint(10, 500))
            for i, at in enumerate(arrivals)]


#: The vLLM engine's Azure run of issue 9 item 6.
VLLM_AZURE_FLAGS = ["--engine", "vllm", "--max-num-batched-tokens", "2048", "--max-num-seqs", "256",
                    "--num-gpu-blocks", "2589"]


def _one_size(num_requests: int, engine: str = "lab") -> dict:
    start = time.perf_counter()
    workload = synthetic(num_requests)
    built = time.perf_counter()
    ticks = 0
    if engine == "vllm":
        ticks = summarize(simulate_vllm(workload, VllmKnobs(2048, 256), timeline="off"))["makespan"]
    config = EngineConfig(**PROFILES["vllm"])
    for case in cases_for(config) if engine == "lab" else ():
        summary = summarize(simulate(workload, config, case, timeline="off"))
        ticks = max(ticks, summary["makespan"])
    done = time.perf_counter()
    return {"requests": num_requests, "build_s": built - start, "simulate_s": done - built,
            "makespan": ticks, "peak_mb": _peak_mb()}


def _trace(fmt: str, path: str, run_flags: list[str]) -> dict:
    """Import ``path`` and run it with ``run_flags`` writing every artifact: times, peak, artifact MB."""
    work = tempfile.mkdtemp(prefix="isl-bench-")
    try:
        workload = os.path.join(work, "trace.json")
        start = time.perf_counter()
        with open(os.devnull, "w") as sink:
            stdout, stderr, sys.stdout, sys.stderr = sys.stdout, sys.stderr, sink, sink
            try:
                lab_main(["import", fmt, path, "-o", workload])
                imported = time.perf_counter()
                code = lab_main(["--workload", workload, *run_flags, "--artifacts", os.path.join(work, "run")])
            finally:
                sys.stdout, sys.stderr = stdout, stderr
        done = time.perf_counter()
        size = sum(os.path.getsize(os.path.join(work, "run", f)) for f in os.listdir(os.path.join(work, "run")))
        return {"exit": code, "import_s": imported - start, "run_s": done - imported, "peak_mb": _peak_mb(),
                "artifacts_mb": size / 2**20}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--azure", default=AZURE, help="path of AzureLLMInferenceTrace_conv.csv")
    parser.add_argument("--mooncake", default=MOONCAKE, help="path of Mooncake's conversation_trace.jsonl")
    parser.add_argument("--sizes", default="1000,10000,100000,1000000", help="synthetic sizes, comma-separated")
    parser.add_argument("--engine", choices=("lab", "vllm"), default="lab",
                        help="lab: four cases under --profile vllm; vllm: the vLLM engine (issue 9)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    vllm = args.engine == "vllm"
    if args.child == "azure":
        print(json.dumps(_trace("azure", args.azure, VLLM_AZURE_FLAGS if vllm else ["--profile", "vllm"])))
        return 0
    if args.child == "mooncake":
        print(json.dumps(_trace("mooncake", args.mooncake, ["--profile", "lab", "--timeline", "counts"])))
        return 0
    if args.child:
        print(json.dumps(_one_size(int(args.child), args.engine)))
        return 0

    def child(what: str) -> dict:
        out = subprocess.run([sys.executable, __file__, "--child", what, "--azure", args.azure,
                              "--mooncake", args.mooncake, "--engine", args.engine],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out.splitlines()[-1])

    cases = 1 if vllm else 4
    if os.path.exists(args.azure):
        a = child("azure")
        total = a["import_s"] + a["run_s"]
        what = "--engine vllm, 2048 tokens, 256 seqs, 2,589 blocks" if vllm else "4 cases"
        print(f"Azure conv trace, 19,366 requests, {what} + artifacts ({a['artifacts_mb']:.0f} MB): "
              f"import {a['import_s']:.2f} s, run {a['run_s']:.2f} s, total {total:.2f} s, "
              f"{cases * 19366 / a['run_s']:,.0f} simulated requests/s, peak {a['peak_mb']:.0f} MB")
    else:
        print(f"Azure conv trace not found at {args.azure}: skipped")
    if vllm:
        pass
    elif os.path.exists(args.mooncake):
        m = child("mooncake")
        print(f"Mooncake conversation trace, 12,031 requests, lab profile, --timeline counts: run {m['run_s']:.1f} s, "
              f"artifacts {m['artifacts_mb']:.0f} MB, peak {m['peak_mb']:.0f} MB")
    else:
        print(f"Mooncake trace not found at {args.mooncake}: skipped")
    print(f"{'requests':>10} {'build s':>8} {'vllm s' if vllm else '4 cases s':>10} {'sim req/s':>10} {'makespan':>10} "
          f"{'peak MB':>8} {'time ×':>7}")
    previous = None
    for size in (int(x) for x in args.sizes.split(",")):
        r = child(str(size))
        growth = "" if previous is None else f"{r['simulate_s'] / previous['simulate_s']:.1f}"
        print(f"{size:>10,} {r['build_s']:>8.2f} {r['simulate_s']:>10.2f} {cases * size / r['simulate_s']:>10,.0f} "
              f"{r['makespan']:>10,} {r['peak_mb']:>8.0f} {growth:>7}", flush=True)
        previous = r
    return 0


if __name__ == "__main__":
    sys.exit(main())
