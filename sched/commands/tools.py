"""The small sub-commands: ``import``, ``sweep``, ``explain``, ``check`` and ``zip``.

Each parses its own flags and loads its library module on its first call (a plain run loads
none of them). :mod:`sched.commands.main` dispatches here lazily; this module never imports it.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..base.safe_write import check_target, refuse_kind_file, write_artifacts, write_text_file
from .. import __version__
from ..base.cmdline import EXIT_OK, LineParser
from ..base.cmdline import decimal, integer
from ..core.config import ConfigError
from .run import add_engine_flags, positive_int, config_from_args
from ..runs.scale import long_run_warning, scale_warnings
from ..workload.specs import SCENARIOS, WorkloadError, scenario, workload_to_json
from ..workload.validation import load_workload

EXIT_DIFFERENT = 1  # check: the run differs from the reference


def _import_parser() -> argparse.ArgumentParser:
    from ..workload.importers import DEFAULT_TICK_MS, FORMATS   # loaded with the command only (a run's start-up)
    parser = LineParser(prog="infer_sched_lab.py import",
                         description="Turn a real request trace into a lab workload (formats.md). Arrival "
                                     "times become ticks of --tick-ms milliseconds.")
    parser.add_argument("format", choices=FORMATS, help="azure (CSV), mooncake (JSONL) or lengths (CSV)")
    parser.add_argument("file", help="the trace file")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="workload JSON to write")
    parser.add_argument("--force", action="store_true", help="replace an existing output file")
    parser.add_argument("--tick-ms", type=decimal, default=DEFAULT_TICK_MS, metavar="MS",
                        help=f"milliseconds one tick stands for (default {DEFAULT_TICK_MS:g}: one "
                             "vLLM-like engine step, see docs/handbook/real-traffic.md §14.3)")
    parser.add_argument("--limit", type=positive_int, metavar="N", help="keep at most N requests")
    parser.add_argument("--start", type=decimal, default=0.0, metavar="SECONDS",
                        help="window start, seconds after the first row (default 0)")
    parser.add_argument("--duration", type=decimal, metavar="SECONDS", help="window length in seconds")
    parser.add_argument("--rate", type=decimal, metavar="REQ_PER_S", help="lengths: arrival rate (requests/s)")
    parser.add_argument("--process", choices=("poisson", "gamma"), default="poisson",
                        help="lengths: arrival process (default poisson)")
    parser.add_argument("--cv", type=decimal, default=1.0,
                        help="lengths, gamma: coefficient of variation of the gaps (shape 1/cv²; default 1)")
    parser.add_argument("--seed", type=integer, default=0, help="lengths: seed of the arrival process (default 0)")
    return parser


def _main_import(argv: list[str]) -> int:
    from ..workload.importers import ImportOptions, import_trace
    args = _import_parser().parse_args(argv)
    if os.path.exists(args.output) and not args.force:
        raise WorkloadError(f"{args.output}: already exists; choose another file or pass --force")
    refuse_kind_file(args.output)   # before importing: --force never replaces a run's or export's file
    options = ImportOptions(tick_ms=args.tick_ms, limit=args.limit, start=args.start, duration=args.duration,
                            rate=args.rate, process=args.process, cv=args.cv, seed=args.seed)
    result = import_trace(args.format, args.file, options)
    write_text_file(workload_to_json(result.workload, units=True), args.output)
    print(result.summary())
    print(f"wrote {len(result.workload)} requests to {args.output} (1 tick = {args.tick_ms:g} ms)")
    return EXIT_OK


def _sweep_parser() -> argparse.ArgumentParser:
    parser = LineParser(prog="infer_sched_lab.py sweep",
                         description="Run one workload at several load factors (arrival times divided by the "
                                     "factor), every case, in parallel; print and write a table and an SVG chart.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--scenario", choices=tuple(SCENARIOS), default=None, help="built-in workload")
    source.add_argument("--workload", metavar="FILE", help="a workload JSON file")
    parser.add_argument("--loads", default="0.5,1,2,4", metavar="F,F,...",
                        help="load factors, comma-separated (default 0.5,1,2,4)")
    parser.add_argument("--out", metavar="DIR", help="write sweep.txt, sweep.csv and sweep.svg into DIR")
    parser.add_argument("--force", action="store_true", help="replace the sweep's files in an existing DIR")
    parser.add_argument("--workers", type=positive_int, metavar="N", help="processes (default: all cores)")
    parser.add_argument("--executor", metavar="dask://HOST:PORT",
                        help="run the points on an existing Dask cluster, given its scheduler's address "
                             "(needs the optional dask.distributed package; default: processes here)")
    add_engine_flags(parser)
    return parser


def _main_sweep(argv: list[str]) -> int:
    from ..runs.cluster import dask_executor, parse_dask_address
    from ..runs.sweep import (SWEEP_FILES, max_workers_allowed, parse_loads, render_sweep_csv, render_sweep_manifest,
                        render_sweep_svg, render_sweep_table, run_sweep)
    args = _sweep_parser().parse_args(argv)
    try:
        loads = parse_loads(args.loads)
    except ValueError as exc:
        raise ConfigError(f"--loads: {exc}") from None
    if args.workers is not None and args.workers > max_workers_allowed():
        raise ConfigError(f"--workers: at most {max_workers_allowed()} (4 x CPU count, at most 64), got {args.workers}")
    if args.out:
        check_target(args.out, force=args.force, names=SWEEP_FILES, kind="sweep")  # refuse before simulating
    if args.executor is not None and args.workers is not None:
        raise ConfigError("--workers: counts local processes; with --executor the cluster's workers run the points")
    if args.executor is not None:
        parse_dask_address(args.executor)  # refuse a bad address before loading anything
    workload = load_workload(args.workload) if args.workload is not None else scenario(args.scenario or "baseline")
    for warning in scale_warnings(workload, args.profile, None):  # as the run warns: lab profile on a trace
        print(f"infer_sched_lab.py: warning: {warning}", file=sys.stderr)
    config = config_from_args(args)
    warning = long_run_warning(workload, config, points=len(loads))
    if warning:
        print(f"infer_sched_lab.py sweep: warning: {warning}", file=sys.stderr)
    if args.executor is not None:
        with dask_executor(args.executor) as executor:
            rows = run_sweep(workload, config, loads, args.policy, executor=executor)
    else:
        rows = run_sweep(workload, config, loads, args.policy, max_workers=args.workers)
    files = {"sweep.txt": render_sweep_table(rows), "sweep.csv": render_sweep_csv(rows),
             "sweep.svg": render_sweep_svg(rows, config.timeout_ticks),
             "manifest.json": render_sweep_manifest(workload, config, args.policy, loads)}
    sys.stdout.write(files["sweep.txt"])
    if args.out:
        write_artifacts(files, args.out, force=args.force)
        print(f"wrote {', '.join(files)} to {args.out}/")
    return EXIT_OK


def _main_explain(argv: list[str]) -> int:
    parser = LineParser(prog="infer_sched_lab.py explain",
                         description="Tell one request's life in every case of a run, read from its artifacts "
                                     "(requests.jsonl, timeline.jsonl).")
    parser.add_argument("name", metavar="NAME", help="request name, e.g. S7")
    parser.add_argument("--artifacts", metavar="DIR", required=True, help="a run's artifacts directory")
    parser.add_argument("--case", metavar="CASE", help="only this case, e.g. continuous+APC+chunk32")
    args = parser.parse_args(argv)
    from ..analysis.explain import explain_request   # each command's module loads with it (a run's start-up)
    sys.stdout.write(explain_request(args.name, args.artifacts, args.case))
    return EXIT_OK


def _main_check(argv: list[str]) -> int:
    parser = LineParser(prog="infer_sched_lab.py check",
                         description="Compare a run directory with a reference directory: workload and "
                                     "configuration first, then every artifact.",
                         epilog="Exit codes: 0 no differences, 1 differences, 2 unusable input.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run to check, e.g. runs/x")
    parser.add_argument("ref_dir", metavar="REF_DIR", help="the reference, e.g. expected/baseline")
    args = parser.parse_args(argv)
    from ..analysis.check import compare_runs, format_report
    results = compare_runs(args.run_dir, args.ref_dir)
    sys.stdout.write(format_report(args.run_dir, args.ref_dir, results))
    return EXIT_DIFFERENT if results else EXIT_OK


def _main_zip(argv: list[str]) -> int:
    from ..runs.labzip import (COURSE_DATA, DATA_FOLDER, build_lab_zip, course_data_dir, course_data_files,
                               default_zip_name, sections_needing, source_commit)
    parser = LineParser(prog="infer_sched_lab.py zip",
                         description="Build the lab ZIP (top folder inference-scheduler-lab/: code, workloads, "
                                     "expected outputs, tests, templates, README, LAB.json with the version and "
                                     "source commit; beside it shared/data/: the course data the handbook uses); "
                                     "same sources, same bytes.",
                         epilog="Exit codes: 0 written (and verified with --verify), 1 written but the "
                                "verification failed, 2 bad input.")
    parser.add_argument("-o", "--output", metavar="PATH", default=None,
                        help="where to write the ZIP (default inference-scheduler-lab-VERSION[-COMMIT].zip; must not "
                             "exist unless --force; never one of the lab's own files)")
    parser.add_argument("--force", action="store_true", help="replace an existing ZIP at PATH")
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--data", metavar="DIR", help="the course data folder (default: ../shared/data beside the project)")
    data.add_argument("--no-data", action="store_true", help="leave the course data out (LAB.json says what is missing)")
    parser.add_argument("--verify", action="store_true",
                        help="then extract the ZIP, run the baseline there and check it against its expected/baseline")
    args = parser.parse_args(argv)
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if args.data is not None and not os.path.isdir(args.data):
        raise ConfigError(f"--data {args.data}: not a folder; give the course data folder (holding traces/ and results/)")
    folder = None if args.no_data else args.data if args.data is not None else course_data_dir(project)
    commit = source_commit(project)
    output = args.output or default_zip_name(commit)
    files = build_lab_zip(project, output, force=args.force, data=folder, commit=commit)
    included = course_data_files(folder)
    print(f"wrote {output}: {len(files)} files under inference-scheduler-lab/, {len(included)} of course data under "
          f"{DATA_FOLDER}/; lab version {__version__}, source commit {commit or 'unknown'}")
    left_out = [path for path in COURSE_DATA if path not in included]
    if left_out:
        sections = ", ".join(sections_needing(left_out))
        print(f"left out (not found{'' if folder is None else ' in ' + folder}): {', '.join(left_out)}; "
              f"handbook sections needing them: {sections} (LAB.json lists them)")
    if not args.verify:
        return EXIT_OK
    from ..runs.labverify import verify_lab_zip
    lines = verify_lab_zip(output)
    print("\n".join(lines))
    return EXIT_OK if lines[-1].startswith("verified") else EXIT_DIFFERENT
