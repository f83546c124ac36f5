"""The ``serving-bench`` subcommand: ``run`` (the chapter's window model), ``decide`` (its real-engine
decision) and ``simulate`` (the GPU-free stand-in that writes both groups' result files).

Parsing only: the model is :mod:`sched.chapter.window`, the runs and artifacts
:mod:`sched.chapter.artifacts`, the result files and decision :mod:`sched.chapter.decide`, the
evidence record and printed view :mod:`sched.chapter.evidence`.
Exit codes: 0 (any decision), 2 bad input or usage (one line naming the file and field).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from itertools import product

from ..base.safe_write import check_target, write_artifacts
from ..base.cmdline import EXIT_OK, InputError, LineParser, fraction_arg, one_line, run_command, write_text_atomically
from ..base.cmdline import decimal, integer
from ..chapter.artifacts import SERVING_FILES, Setting, load_requests, parse_pattern, render_files, run_settings
from ..chapter.window import MAX_SPEEDUP, MIN_SPEEDUP, POLICIES
from ..chapter.decide import Gates, decide_pair
from ..chapter.groups import check_roles, missing_group, read_group
from ..chapter.evidence import evidence_record, render_view
from ..chapter.stand_in import DEFAULT_STEP_MODEL, Experiment, simulate_pair
from ..core.config import ConfigError

__all__ = ["command"]

PROG = "infer_sched_lab.py serving-bench"
ACTIONS = ("run", "decide", "simulate")


def _listed(convert):
    """An argparse type for a comma-separated list, each item converted; duplicates dropped, order kept."""
    def parse(text: str) -> list:
        items = []
        for part in text.split(","):
            try:
                value = convert(part.strip())
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
            if value not in items:
                items.append(value)
        return items
    return parse


def _policy(text: str) -> str:
    if text not in POLICIES:
        raise ValueError(f"unknown policy {text!r}; choose from {', '.join(POLICIES)}")
    return text


def _batch_size(text: str) -> int:
    try:
        value = integer(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"batch size must be an integer >= 1, got {text!r}")
    return value


def _speedup(text: str) -> float:
    try:
        value = decimal(text)
    except ValueError:
        value = float("nan")
    if not MIN_SPEEDUP <= value <= MAX_SPEEDUP:
        raise ValueError(f"batch speed-up must be a number between {MIN_SPEEDUP:g} and {MAX_SPEEDUP:g}, got {text!r}")
    return value


def _parser() -> LineParser:
    parser = LineParser(prog=PROG, description="The serving-scheduler benchmark chapter (serving-bench.md): its "
                                               "CPU window model (run) and its real-engine decision (decide).")
    sub = parser.add_subparsers(dest="action", required=True, parser_class=LineParser, metavar="{run,decide,simulate}")
    run = sub.add_parser("run", help="the window model on a requests file; several settings in one table",
                         description="Run the chapter's window model (serving-bench.md §1) on REQUESTS (JSON list, "
                                     "{\"requests\": [...]} or JSON lines with request_id, arrival_ms, service_ms, "
                                     "output_tokens, priority). Comma lists compare every combination in one "
                                     "table (the chapter's Step 2). Times in ms, throughput in output tokens/s.",
                         epilog="Example: serving-bench run tests/data/serving-bench/requests.json --policies "
                                "fifo,shortest,priority --batch-sizes 1,2,4 --artifacts runs/sb")
    run.add_argument("requests", metavar="REQUESTS", help="the requests file")
    run.add_argument("--policies", "--policy", type=_listed(_policy), default=["fifo"], metavar="P[,P...]",
                     help=f"window policies: {', '.join(POLICIES)} (default fifo)")
    run.add_argument("--batch-sizes", "--batch-size", type=_listed(_batch_size), default=[1], metavar="N[,N...]",
                     help="requests per window at most (default 1)")
    run.add_argument("--batch-speedups", "--batch-speedup", type=_listed(_speedup), default=[1.0], metavar="X[,X...]",
                     help="the model's batching gain: a window lasts max(service_ms) / X (default 1)")
    run.add_argument("--arrivals", type=_listed(parse_pattern), default=["given"], metavar="PATTERN[,...]",
                     help="arrival patterns: given (the file's), burst (all at 0 ms), spaced:MS (request i at "
                          "i x MS ms); default given")
    run.add_argument("--artifacts", metavar="DIR", help="write the run's files into DIR (new or empty unless --force)")
    run.add_argument("--force", action="store_true", help="replace an earlier serving-bench run's files in DIR")
    decide = sub.add_parser("decide", help="decide FCFS vs priority from two real result files; write evidence",
                            description="Read the two groups' result files of the chapter's real-engine experiment "
                                        "(serving-bench.md §4), print the read-only view, decide in the chapter's "
                                        "order with its four gates and write the inference-benchmark/v1 evidence "
                                        "record (never over either result file).",
                            epilog="Exit codes: 0 a decision was made (accept, tune or reject), 2 unusable input.")
    decide.add_argument("baseline", metavar="BASELINE.json", help="the FCFS group's result file")
    decide.add_argument("candidate", metavar="CANDIDATE.json", help="the priority group's result file")
    decide.add_argument("--out", metavar="EVIDENCE.json", required=True, help="the evidence record to write")
    decide.add_argument("--force", action="store_true", help="replace an existing evidence record")
    for flag, text in (("--project", "the project name"), ("--run-label", "the run's label"),
                       ("--model", "the model served (e.g. its Hugging Face id)"), ("--dtype", "the model's dtype")):
        decide.add_argument(flag, help=f"{text}, written into the evidence record (default: null, never guessed)")
    g = Gates()
    for flag, default, text in (("--min-order-gain", g.min_order_gain, "smallest first-token order score gain"),
                                ("--min-throughput-ratio", g.min_throughput_ratio, "smallest throughput ratio"),
                                ("--max-ttft-ratio", g.max_ttft_ratio, "largest P95 TTFT ratio"),
                                ("--max-low-e2e-ratio", g.max_low_e2e_ratio, "largest low-priority E2E P95 ratio")):
        decide.add_argument(flag, type=fraction_arg, default=default, metavar="X", help=f"{text} (default {default})")
    _simulate_parser(sub)
    return parser


def _count_arg(low: int):
    def parse(text: str) -> int:
        try:
            value = integer(text)
        except ValueError:
            value = low - 1
        if not low <= value <= 1000:
            raise argparse.ArgumentTypeError(f"must be an integer from {low} to 1000, got {text!r}")
        return value
    return parse


def _ms_arg(text: str) -> float:
    try:
        value = decimal(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 3_600_000:
        raise argparse.ArgumentTypeError(f"must be a number of ms from 0 to 3600000, got {text!r}")
    return value


def _early_arg(text: str) -> tuple:
    pairs = []
    for part in text.split(","):
        name, sep, ms = part.partition(":")
        if not sep or name.strip() not in {"h0", "h1", "h2", "h3", "l0", "l1", "l2", "l3"}:
            raise argparse.ArgumentTypeError(f"must be NAME:MS with NAME one of h0-h3, l0-l3, got {part!r}")
        if name.strip() in dict(pairs):   # which of two times would win is a guess
            raise argparse.ArgumentTypeError(f"{name.strip()} is given twice; give each request once")
        pairs.append((name.strip(), _ms_arg(ms)))
    return tuple(pairs)


def _blocks_arg(text: str) -> int:
    try:
        value = integer(text)
    except ValueError:
        value = 0
    if not 2 <= value <= 10**9:
        raise argparse.ArgumentTypeError(f"must be an integer from 2 to 1000000000, got {text!r}")
    return value


def _stream_arg(text: str) -> tuple:
    count, sep, every = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"must be COUNT:EVERY_MS, e.g. 40:100, got {text!r}")
    every_ms = _ms_arg(every)
    if every_ms <= 0:
        raise argparse.ArgumentTypeError(f"EVERY_MS must be above 0, got {every!r}")
    return (_count_arg(1)(count), every_ms)


def _simulate_parser(sub) -> None:
    sim = sub.add_parser("simulate", help="the GPU-free stand-in: run the chapter's experiment on the lab's vLLM "
                                          "engine and write both groups' result files",
                         description="Run the chapter's real-engine experiment (serving-bench.md §4: 8 requests at "
                                     "priorities 0 and 5, concurrency 8 with a synchronised start, max_num_seqs 2, "
                                     "warm-up, repeats; FCFS vs priority) on the lab's vLLM engine (vLLM 0.33.0 "
                                     "scheduler rules) timed by a step model, and write g0_fcfs.json and "
                                     "g1_priority.json in the chapter runner's shape, marked simulated. Times in ms.",
                         epilog="Then: serving-bench decide DIR/g0_fcfs.json DIR/g1_priority.json --out EVIDENCE.json")
    sim.add_argument("--out-dir", metavar="DIR", required=True, help="where to write the two result files")
    sim.add_argument("--force", action="store_true", help="replace the two files of an earlier simulate in DIR")
    sim.add_argument("--step-model", metavar="FILE", help="a step-model.json from calibrate (default: the one "
                                                          f"fitted on the course's RTX 4090 run, {DEFAULT_STEP_MODEL.formula})")
    sim.add_argument("--max-num-seqs", type=_count_arg(1), default=2, metavar="N", help="vLLM's --max-num-seqs (default 2)")
    sim.add_argument("--warmup", type=_count_arg(0), default=2, metavar="N", help="discarded warm-up runs (default 2)")
    sim.add_argument("--repeats", type=_count_arg(1), default=5, metavar="N", help="recorded repeats (default 5)")
    sim.add_argument("--jitter-ms", type=_ms_arg, default=0.0, metavar="MS",
                     help="each request reaches the engine a random 0..MS ms after the start (seeded, per repeat; "
                          "default 0: a perfectly synchronised arrival)")
    sim.add_argument("--early", type=_early_arg, default=(), metavar="NAME:MS[,...]",
                     help="these requests reach the engine MS ms before the others (e.g. l0:2)")
    sim.add_argument("--urgent-stream", type=_stream_arg, metavar="COUNT:EVERY_MS",
                     help="add COUNT urgent requests arriving open-loop, one every EVERY_MS ms from the start")
    sim.add_argument("--seed", type=_count_arg(0), default=0, metavar="N", help="seed of --jitter-ms (default 0)")
    sim.add_argument("--num-gpu-blocks", type=_blocks_arg, metavar="N",
                     help="vLLM's KV blocks, including the null block (default: the step model's)")


SIM_FILES = ("g0_fcfs.json", "g1_priority.json")


def _simulate(args) -> int:
    from ..timing.stepmodel import load_step_model
    model = load_step_model(args.step_model) if args.step_model else DEFAULT_STEP_MODEL
    check_target(args.out_dir, force=args.force, names=SIM_FILES)
    experiment = Experiment(max_num_seqs=args.max_num_seqs, warmup=args.warmup, repeats=args.repeats,
                            jitter_ms=args.jitter_ms, early=args.early, urgent_stream=args.urgent_stream,
                            seed=args.seed, num_gpu_blocks=args.num_gpu_blocks)
    try:
        files = simulate_pair(experiment, model, args.step_model or "built-in")
    except ConfigError as exc:
        raise InputError(f"{args.step_model or 'the built-in step model'}: {exc}") from None
    texts = {name: json.dumps(data, indent=1, allow_nan=False) + "\n" for name, data in files.items()}
    write_artifacts(texts, args.out_dir, force=args.force)
    from types import SimpleNamespace
    from ..timing.msrun import batch_cost_warning
    warning = batch_cost_warning(model, SimpleNamespace(
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=model.settings["max_num_batched_tokens"],
        num_gpu_blocks=args.num_gpu_blocks or model.settings["num_gpu_blocks"]))
    if warning:   # the built-in model names no unidentified term: its output is unchanged
        print(f"infer_sched_lab.py serving-bench simulate: warning: {warning}", file=sys.stderr)
    print(f"simulated the chapter's experiment (SIMULATED, not a measurement): {model.formula}, "
          f"max_num_seqs {args.max_num_seqs}, {args.warmup} warm-up + {args.repeats} repeats"
          + (", async scheduling (the step model's setting)" if model.settings.get("async_scheduling") else ""))
    for name, data in files.items():
        m = data["metrics"]
        preempted = {}
        for run in data["runs"]:
            for row in run["results"]:
                if row["num_preemptions"]:
                    preempted[row["request_id"]] = preempted.get(row["request_id"], 0) + row["num_preemptions"]
        print(f"  {name:17} first-token order score {m['priority_first_token_order_score']}, throughput "
              f"{m['output_token_throughput_per_s']} tok/s, P95 TTFT {m['ttft_ms']['p95']} ms"
              + (f"; preempted (all repeats): {', '.join(f'{k} x{v}' for k, v in preempted.items())}"
                 if preempted else ""))
    print(f"wrote {', '.join(SIM_FILES)} to {args.out_dir}/; next: serving-bench decide "
          f"{os.path.join(args.out_dir, SIM_FILES[0])} {os.path.join(args.out_dir, SIM_FILES[1])} --out EVIDENCE.json")
    return EXIT_OK


def _run(args) -> int:
    if args.artifacts == "":
        raise InputError("--artifacts: needs a directory name, got an empty string")
    if args.force and args.artifacts is None:
        raise InputError("--force: only replaces an earlier run's files; give --artifacts DIR too")
    requests = load_requests(args.requests)
    if args.artifacts is not None:
        check_target(args.artifacts, force=args.force, names=SERVING_FILES, kind="serving-bench")
    settings = [Setting(a, p, b, s) for a, p, b, s in
                product(args.arrivals, args.policies, args.batch_sizes, args.batch_speedups)]
    runs = run_settings(requests, settings)
    grid = {"arrivals": args.arrivals, "policies": args.policies, "batch_sizes": args.batch_sizes,
            "batch_speedups": args.batch_speedups}
    files = render_files(requests, runs, grid)
    if args.artifacts is not None:  # written first: a refused directory must not look like a finished run
        write_artifacts(files, args.artifacts, force=args.force)
    print(files["table.txt"], end="")
    if args.artifacts is not None:
        print(f"wrote {len(files)} artifacts to {args.artifacts}/: {', '.join(files)}")
    return EXIT_OK


def _decide(args) -> int:
    target = os.path.realpath(args.out)
    for path in (args.baseline, args.candidate):
        if os.path.realpath(path) == target:
            raise InputError(f"--out {args.out}: is one of the two result files; choose another path")
    baseline, candidate = (missing_group(path, role) if not os.path.lexists(path) else read_group(path, role)
                           for path, role in ((args.baseline, "baseline"), (args.candidate, "candidate")))
    check_roles(baseline, candidate, args.baseline, args.candidate)
    gates = Gates(args.min_order_gain, args.min_throughput_ratio, args.max_ttft_ratio, args.max_low_e2e_ratio)
    decision = decide_pair(baseline, candidate, gates)
    notebook = {"project": args.project, "run_label": args.run_label, "model": args.model, "dtype": args.dtype}
    record = evidence_record(baseline, candidate, decision, notebook)
    write_text_atomically(args.out, json.dumps(record, indent=2, allow_nan=False) + "\n", force=args.force)
    report = render_view(baseline, candidate, decision) + f"wrote {args.out}\n"
    print(report.encode("utf-8", "backslashreplace").decode("utf-8"), end="")
    return EXIT_OK


def _command(argv: list[str]) -> int:
    if argv and not argv[0].startswith("-") and argv[0] not in ACTIONS:
        close = difflib.get_close_matches(argv[0], ACTIONS, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else f"choose one of {', '.join(ACTIONS)}"
        raise InputError(f"unknown action {one_line(argv[0])!r}; {hint}")
    args = _parser().parse_args(argv)
    return {"run": _run, "decide": _decide, "simulate": _simulate}[args.action](args)


def command(argv: list[str]) -> int:
    """The ``serving-bench`` subcommand: exit 0 (any decision), 2 for unusable input or usage."""
    action = argv[0] if argv and argv[0] in ACTIONS else None  # named like argparse's own lines
    return run_command(f"{PROG} {action}" if action else PROG, _command, argv)
