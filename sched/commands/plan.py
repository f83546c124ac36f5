"""``plan``: which vLLM settings carry the most traffic under an SLO (a capacity search per setting).

``infer_sched_lab.py plan --workload W --step-model M [M2 ...] --goodput ttft:2000 [--attainment 0.9]
[--max-num-seqs 32,64 ...] [--out DIR]``: flags and their refusals here; the search, the files and the
chart in :mod:`sched.planning`.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from ..base.cmdline import EXIT_OK, LineParser
from ..base.safe_write import check_target, write_artifacts
from ..core.config import ConfigError
from ..timing.bench_rows import burstiness_arg, concurrency_arg, goodput_pair_arg, rate_arg, seed_arg
from ..core.bench_metrics import settle_goodput

__all__ = ["command"]


def _attainment(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1] (a share of completed requests), got {text!r}")
    return value


def _resolution(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1e-4 <= value <= 0.5:
        raise argparse.ArgumentTypeError(f"must be a fraction from 0.0001 to 0.5 (0.01 = 1%), got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    from ..planning.grid import LIST_FLAGS
    parser = LineParser(prog="infer_sched_lab.py plan",
                        description="For every combination of vLLM settings, find the highest request rate (as "
                                    "vllm bench serve sends it) whose SLO attainment reaches the target; print a "
                                    "table sorted by rate, a recommendation and write plan.json and a Pareto chart.")
    parser.add_argument("--workload", metavar="FILE", required=True, help="the workload (its arrivals are re-timed)")
    parser.add_argument("--step-model", metavar="FILE", nargs="+", required=True,
                        help="step-model.json (calibrate); several: one per GPU, each searched with every setting")
    parser.add_argument("--gpu", metavar="NAME,NAME",
                        help="also carry each step model to these GPUs of the lab's table (help gpus) and search "
                             "them too: the per-step host cost stays, the GPU-bound terms scale with the data sheets")
    parser.add_argument("--goodput", type=goodput_pair_arg, nargs="+", metavar="KEY:MS", required=True,
                        help="the SLO in ms, vLLM's syntax: ttft:2000 tpot:100 e2el:20000")
    parser.add_argument("--attainment", type=_attainment, default=0.9, metavar="X",
                        help="share of completed requests that must meet every limit (default 0.9)")
    for flag, (field, low) in LIST_FLAGS.items():
        parser.add_argument(flag, dest=field, metavar="N,N,...",
                            help=f"values to search (whole numbers >= {low}); default: the step model's")
    parser.add_argument("--gpu-memory-utilization", metavar="U,U",
                        help="instead of --num-gpu-blocks: vLLM's share of GPU memory, each in (0, 1]; the KV blocks "
                             "follow as vLLM sizes them on each GPU (memory x U - weights, activations not counted); "
                             "needs --kv-bytes-per-token")
    parser.add_argument("--kv-bytes-per-token", type=int, metavar="B",
                        help="2 x layers x KV heads x head size x bytes per element (Llama-3.1-8B in bf16: 131072)")
    parser.add_argument("--weights-gb", type=float, metavar="G",
                        help="the model's weights in GiB (default: from the parameter count in its name, 2 bytes each)")
    parser.add_argument("--policy", "--scheduling-policy", dest="policy", metavar="P,P",
                        help="fcfs, priority or both (default: the step model's)")
    parser.add_argument("--resolution", type=_resolution, default=0.01, metavar="X",
                        help="bisect until the bracket is within X of the rate (default 0.01 = 1%%)")
    parser.add_argument("--burstiness", type=burstiness_arg, default=1.0, metavar="B", help="gamma shape (default 1)")
    parser.add_argument("--seed", type=seed_arg, default=0, metavar="N", help="arrival seed (default 0)")
    parser.add_argument("--max-concurrency", type=concurrency_arg, metavar="N",
                        help="the benchmark client's limit on requests in flight (default: none)")
    parser.add_argument("--min-rate", type=rate_arg, default=0.01, metavar="R", help="lowest rate tried (default 0.01 req/s)")
    parser.add_argument("--max-rate", type=rate_arg, default=10000.0, metavar="R",
                        help="highest rate tried (default 10000 req/s)")
    parser.add_argument("--target-rate", type=rate_arg, metavar="R",
                        help="also say how many replicas of the recommended setting this rate needs (a lower bound)")
    parser.add_argument("--out", metavar="DIR", help="write plan.txt, plan.json, pareto.svg and manifest.json")
    parser.add_argument("--force", action="store_true", help="replace a previous plan's files in DIR")
    parser.add_argument("--workers", type=int, metavar="N", help="local processes (default: all cores)")
    parser.add_argument("--executor", metavar="dask://HOST:PORT",
                        help="search the settings on an existing Dask cluster (optional dask.distributed)")
    return parser


class _Progress:
    """``plan: 5/24 settings searched, 41 s`` on stderr when it is a terminal."""

    def __init__(self, stream) -> None:
        self.stream, self.started = stream, time.monotonic()
        isatty = getattr(stream, "isatty", None)
        self.shown = bool(isatty and isatty())

    def __call__(self, done: int, total: int) -> None:
        if self.shown:
            self.stream.write(f"\rplan: {done}/{total} settings searched, {time.monotonic() - self.started:.0f} s")
            self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()


def _main(argv: list[str]) -> int:
    from ..planning.grid import LIST_FLAGS, parse_int_list, parse_policies, parse_utilizations, setting_grid
    from ..planning.plan import PLAN_FILES, PlanSpec, plan_document, plan_files, run_plan, settle_settings
    from ..planning.same_runs import SharedSearches
    from ..runs.cluster import dask_executor, parse_dask_address
    from ..runs.sweep import max_workers_allowed
    from ..timing.stepmodel import load_step_model
    from ..base.cmdline import InputError
    from ..workload.validation import load_workload
    args = _parser().parse_args(argv)
    if math.isinf(args.max_rate):
        raise ConfigError("--max-rate: must be a finite number of requests/s (rate inf is always tried first)")
    if args.min_rate >= args.max_rate or math.isinf(args.min_rate):
        raise ConfigError(f"--min-rate {args.min_rate:g} must be below --max-rate {args.max_rate:g} "
                          "(the rates contradict each other)")
    if args.target_rate is not None and math.isinf(args.target_rate):
        raise ConfigError("--target-rate: must be a finite number of requests/s")
    if args.workers is not None and not 1 <= args.workers <= max_workers_allowed():
        raise ConfigError(f"--workers: from 1 to {max_workers_allowed()}, got {args.workers}")
    if args.executor is not None:
        if args.workers is not None:
            raise ConfigError("--workers: counts local processes; with --executor the cluster's workers search")
        parse_dask_address(args.executor)
    lists = {}
    for flag, (field, low) in LIST_FLAGS.items():
        text = getattr(args, field)
        try:
            lists[field] = parse_int_list(text, low) if text is not None else ()
        except ValueError as exc:
            raise ConfigError(f"{flag}: {exc}") from None
    try:
        lists["policy"] = parse_policies(args.policy) if args.policy is not None else ()
    except ValueError as exc:
        raise ConfigError(f"--policy: {exc}") from None
    sizing = None
    if args.gpu_memory_utilization is not None:
        if lists["num_gpu_blocks"]:
            raise ConfigError("--gpu-memory-utilization: give it or --num-gpu-blocks, not both (each sets the KV size)")
        if args.kv_bytes_per_token is None or not 1 <= args.kv_bytes_per_token <= 10**9:
            raise ConfigError("--gpu-memory-utilization needs --kv-bytes-per-token B (a whole number of bytes >= 1)")
        if args.weights_gb is not None and not 0 < args.weights_gb < 10**6:
            raise ConfigError(f"--weights-gb: must be a positive number of GiB, got {args.weights_gb!r}")
        try:
            lists["gpu_memory_utilization"] = parse_utilizations(args.gpu_memory_utilization)
        except ValueError as exc:
            raise ConfigError(f"--gpu-memory-utilization: {exc}") from None
        sizing = {"kv_bytes_per_token": args.kv_bytes_per_token,
                  "weights_bytes": None if args.weights_gb is None else args.weights_gb * 1024 ** 3}
    elif args.kv_bytes_per_token is not None or args.weights_gb is not None:
        raise ConfigError("--kv-bytes-per-token and --weights-gb size the KV cache for --gpu-memory-utilization; "
                          "give that too")
    grid = setting_grid(lists)
    models = []
    gpus = [] if args.gpu is None else [name.strip() for name in args.gpu.split(",")]
    if len(set(gpus)) != len(gpus) or "" in gpus:
        raise ConfigError(f"--gpu: a name is empty or given twice in {args.gpu!r}")
    seen = {}
    for path in args.step_model:
        if os.path.realpath(path) in seen:   # the same searches twice would read as a tie between two GPUs
            raise ConfigError(f"--step-model: {path} is given twice (as {seen[os.path.realpath(path)]} too)")
        seen[os.path.realpath(path)] = path
        try:
            model = load_step_model(path)
            models.append((os.path.basename(path), path, model, None))
            if gpus:
                from ..timing.gpus import carry_to
                models += [(os.path.basename(path), path, carry_to(model, gpu), gpu) for gpu in gpus]
        except InputError as exc:
            raise ConfigError(str(exc)) from None
    workload = load_workload(args.workload)
    spec = PlanSpec(workload, args.workload, models, grid, settle_goodput(args.goodput), args.attainment,
                    args.resolution, args.burstiness, args.seed, args.min_rate, args.max_rate, args.max_concurrency)
    try:
        tasks = settle_settings(spec, sizing)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    from ..vllm.config import check_fits
    for _, _, knobs in tasks:
        check_fits(workload, knobs, f"workload:{os.path.basename(args.workload)}")
    if args.out:
        check_target(args.out, force=args.force, names=PLAN_FILES, kind="plan")
    shared = SharedSearches(workload, tasks, args.max_concurrency)
    progress = _Progress(sys.stderr)
    try:
        if args.executor is not None:
            with dask_executor(args.executor) as executor:
                results = run_plan(spec, tasks, executor=executor, progress=progress, shared=shared)
        else:
            results = run_plan(spec, tasks, max_workers=args.workers, progress=progress, shared=shared)
    finally:
        progress.close()
    document = plan_document(spec, tasks, results, args.target_rate)
    searched = [field for field, values in lists.items() if values]
    if "gpu_memory_utilization" in searched:
        searched.append("num_gpu_blocks")   # what each share gave on its GPU
    files = plan_files(document, searched, shared.table_notes())
    if args.out:
        write_artifacts(files, args.out, force=args.force)
    sys.stdout.write(files["plan.txt"])
    if args.out:
        print(f"wrote {', '.join(files)} to {args.out}/")
    return EXIT_OK


def command(argv: list[str]) -> int:
    """The ``plan`` subcommand (exit 0; 2 for bad input)."""
    return _main(argv)
