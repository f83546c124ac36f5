"""``bench``: the engine's speed and memory on real traces and synthetic sizes (docs/handbook/real-traffic.md §14.7).

Prints figures and asserts nothing (performance is measured, never tested):

1. The Azure conversation trace (19,366 requests; default path the course's data folder, skipped
   when absent): imported at 30 ms per tick, all four cases under ``--profile vllm``, every
   artifact written to a temporary directory (the CLI's own path: stream for large runs).
2. The Mooncake conversation trace (12,031 requests, skipped when absent) under the ``lab``
   profile with ``--timeline counts``: the bounded counts timeline's peak memory and bytes written.
3. Synthetic workloads of each size under ``--profile vllm``: seeded lengths (prompt 50-2000,
   output 10-500 tokens, uniform) with Poisson arrivals at 1 request per tick, about 60 % of the
   profile's capacity (2048 tokens per tick / ~1,280 tokens of work per request); all four cases,
   one at a time, timeline ``off``, no artifacts.

With ``--engine vllm`` (vllm-engine.md): 1. the Azure trace under ``--engine vllm
--max-num-batched-tokens 2048 --max-num-seqs 256 --num-gpu-blocks 2589`` (heavily overloaded:
about 3,000 preemptions), every artifact; 2. is skipped; 3. the same synthetic workloads as one
``vllm`` case (2048 tokens, 256 seqs, ample KV), timeline ``off``.

Wall time is measured with ``time.perf_counter``; peak memory is the process's maximum resident
set size (``resource.getrusage``), which only grows, so each figure comes from a fresh process
(the CLI again, ``bench --child WHAT``). The traces go through the CLI's own ``main`` (import, then
a run writing every artifact), which the CLI hands in: this module never imports the CLI.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from ..base.cmdline import EXIT_BAD_INPUT, EXIT_OK, InputError, LineParser, run_command
from ..core.config import EngineConfig, cases_for
from ..lab.engine import simulate
from ..workload.importers import arrival_offsets_ms
from ..core.metrics import summarize
from ..lab.profiles import PROFILES
from ..vllm.config import VllmKnobs
from ..vllm.engine import simulate_vllm
from ..workload.specs import RequestSpec

__all__ = ["command", "synthetic", "parse_sizes", "MAX_SIZE"]

_PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The course's data folder sits beside the project (../shared/data/traces from the project root).
_TRACES = os.path.join(_PROJECT, "..", "shared", "data", "traces")
AZURE = os.path.normpath(os.path.join(_TRACES, "AzureLLMInferenceTrace_conv.csv"))
MOONCAKE = os.path.normpath(os.path.join(_TRACES, "conversation_trace.jsonl"))

#: The vLLM engine's Azure run: heavily overloaded, about 3,000 preemptions.
VLLM_AZURE_FLAGS = ["--engine", "vllm", "--max-num-batched-tokens", "2048", "--max-num-seqs", "256",
                    "--num-gpu-blocks", "2589"]

#: Largest synthetic size accepted (10^7 requests: about 10 GB of memory, an hour of simulation).
MAX_SIZE = 10**7


def _peak_mb() -> float:
    import resource  # POSIX only; imported here so the module loads everywhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def synthetic(num_requests: int, seed: int = 1) -> list[RequestSpec]:
    """Seeded synthetic workload of ``num_requests`` requests: Poisson arrivals at 1 request per
    tick (1 ms ticks at 1000 requests/s), prompt 50-2000 and output 10-500 tokens, uniform."""
    rng = random.Random(seed)
    arrivals = arrival_offsets_ms(num_requests, 1000.0, "poisson", 1.0, rng)  # 1000 req/s, 1 ms ticks
    return [RequestSpec(f"s{i}", int(at), None, 0, rng.randint(50, 2000), rng.randint(10, 500))
            for i, at in enumerate(arrivals)]


def parse_sizes(text: str) -> list[int]:
    """``"1000,10000"`` -> ``[1000, 10000]``; raises :class:`InputError` naming ``--sizes`` for
    anything but comma-separated whole numbers from 1 to :data:`MAX_SIZE`."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()) or not 1 <= int(part) <= MAX_SIZE:   # not "١٠"
            raise InputError(f"--sizes: each size must be a whole number of requests from 1 to {MAX_SIZE:,}, "
                             f"got {part!r}")
        sizes.append(int(part))
    return sizes


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


def _trace(lab_main, fmt: str, path: str, run_flags: list[str]) -> dict:
    """Import ``path`` and run it with ``run_flags`` writing every artifact, both through the CLI's
    ``lab_main(argv) -> int``: times (s), peak (MB), artifacts (MB)."""
    work = tempfile.mkdtemp(prefix="isl-bench-")
    try:
        workload = os.path.join(work, "trace.json")
        start = time.perf_counter()
        with open(os.devnull, "w") as sink:
            problems = io.StringIO()
            stdout, stderr, sys.stdout, sys.stderr = sys.stdout, sys.stderr, sink, problems
            try:
                if lab_main(["import", fmt, path, "-o", workload]) != EXIT_OK:  # an unusable trace file
                    raise InputError(f"--{fmt} {_after_error(problems.getvalue())}")
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


def _child(what: str, azure: str, mooncake: str, engine: str) -> dict:
    """One figure measured in a fresh process (peak memory only grows within a process)."""
    # Run where the user is (a relative --azure path stays valid), with the project importable.
    argv = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); from sched.commands.main import main; "
            "sys.exit(main(sys.argv[1:]))", _PROJECT, "bench", "--child", what, "--azure", azure,
            "--mooncake", mooncake, "--engine", engine]
    child = subprocess.run(argv, capture_output=True, text=True)
    if child.returncode == EXIT_BAD_INPUT:  # bad input (e.g. an empty trace file): its one line, as ours
        raise InputError(_after_error(child.stderr))
    child.check_returncode()  # anything else is a bug: exit 3
    return json.loads(child.stdout.splitlines()[-1])


def _after_error(stderr: str) -> str:
    """The last error line of a nested command without its ``infer_sched_lab.py ...: error:`` prefix."""
    lines = stderr.strip().splitlines() or ["failed without a message"]
    return lines[-1].split(": error: ", 1)[-1]


def _parser() -> argparse.ArgumentParser:
    parser = LineParser(prog="infer_sched_lab.py bench",
                        description="Benchmark of the event-driven engine: the Azure and Mooncake traces (when "
                                    "present) and synthetic sizes; prints wall time and peak memory, asserts nothing.")
    parser.add_argument("--azure", default=AZURE, metavar="PATH", help="path of AzureLLMInferenceTrace_conv.csv "
                        "(default: the course data folder beside the project)")
    parser.add_argument("--mooncake", default=MOONCAKE, metavar="PATH",
                        help="path of Mooncake's conversation_trace.jsonl (default: the course data folder)")
    parser.add_argument("--sizes", default="1000,10000,100000,1000000", metavar="N,N,...",
                        help="synthetic sizes in requests, comma-separated (default 1000,10000,100000,1000000)")
    parser.add_argument("--engine", choices=("lab", "vllm"), default="lab",
                        help="lab: four cases under --profile vllm; vllm: the vLLM engine, one case (default lab)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


def _bench(argv: list[str], lab_main) -> int:
    args = _parser().parse_args(argv)
    sizes = parse_sizes(args.sizes)  # refused before anything runs
    vllm = args.engine == "vllm"
    cases = 1 if vllm else 4
    if args.child == "azure":
        print(json.dumps(_trace(lab_main, "azure", args.azure, VLLM_AZURE_FLAGS if vllm else ["--profile", "vllm"])))
        return EXIT_OK
    if args.child == "mooncake":
        print(json.dumps(_trace(lab_main, "mooncake", args.mooncake, ["--profile", "lab", "--timeline", "counts"])))
        return EXIT_OK
    if args.child:
        print(json.dumps(_one_size(parse_sizes(args.child)[0], args.engine)))
        return EXIT_OK

    if os.path.exists(args.azure):
        a = _child("azure", args.azure, args.mooncake, args.engine)
        total = a["import_s"] + a["run_s"]
        what = "--engine vllm, 2048 tokens, 256 seqs, 2,589 blocks" if vllm else "4 cases"
        print(f"Azure conv trace, 19,366 requests, {what} + artifacts ({a['artifacts_mb']:.0f} MB): "
              f"import {a['import_s']:.2f} s, run {a['run_s']:.2f} s, total {total:.2f} s, "
              f"{cases * 19366 / a['run_s']:,.0f} simulated requests/s, peak {a['peak_mb']:.0f} MB", flush=True)
    else:
        print(f"Azure conv trace not found at {args.azure}: skipped")
    if vllm:
        pass  # the Mooncake figure is the lab engine's counts timeline
    elif os.path.exists(args.mooncake):
        m = _child("mooncake", args.azure, args.mooncake, args.engine)
        print(f"Mooncake conversation trace, 12,031 requests, lab profile, --timeline counts: run {m['run_s']:.1f} s, "
              f"artifacts {m['artifacts_mb']:.0f} MB, peak {m['peak_mb']:.0f} MB", flush=True)
    else:
        print(f"Mooncake trace not found at {args.mooncake}: skipped")
    print(f"{'requests':>10} {'build s':>8} {'vllm s' if vllm else '4 cases s':>10} {'sim req/s':>10} {'makespan':>10} "
          f"{'peak MB':>8} {'time ×':>7}")
    previous = None
    for size in sizes:
        r = _child(str(size), args.azure, args.mooncake, args.engine)
        growth = "" if previous is None else f"{r['simulate_s'] / previous['simulate_s']:.1f}"
        print(f"{size:>10,} {r['build_s']:>8.2f} {r['simulate_s']:>10.2f} {cases * size / r['simulate_s']:>10,.0f} "
              f"{r['makespan']:>10,} {r['peak_mb']:>8.0f} {growth:>7}", flush=True)
        previous = r
    return EXIT_OK


def command(argv: list[str], lab_main) -> int:
    """``bench`` handler: argv -> exit code (0, or 2 with one stderr line for bad input); ``lab_main``
    is the CLI's ``main(argv) -> int``, through which the traces are imported and run."""
    try:
        return run_command("infer_sched_lab.py bench", lambda args: _bench(args, lab_main), argv)
    except SystemExit as exc:  # argparse: --help or a usage error (already one line)
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT

