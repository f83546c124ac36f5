"""The course's commands: ``handin --out NAME.zip`` (a learner) and ``grade HANDIN... --out
grades.csv`` (an instructor). Flags here; the work in :mod:`sched.course`."""

from __future__ import annotations

import os
import sys
from collections import Counter

from ..base.cmdline import (EXIT_BAD_INPUT, EXIT_OK, LineParser, one_line, refuse_output, run_command,
                            write_text_atomically)
from ..course.grade import grade_class, render_csv
from ..course.handin import HandinError, collect_handin, write_handin
from ..course.plan import COURSE_RUNS

_PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _handin(argv: list[str]) -> int:
    parser = LineParser(prog="infer_sched_lab.py handin",
                        description="Bundle your hand-in: prediction.md, diagnosis.md, the course's runs under "
                                    "runs/ (each re-simulated from its own workload.json and manifest.json to "
                                    "make sure it is what the lab wrote), my-workload.json, and HANDIN.json.",
                        epilog="Required runs: " + ", ".join(r.directory for r in COURSE_RUNS if r.required)
                               + "; packed when present: " + ", ".join(r.directory for r in COURSE_RUNS if not r.required)
                               + ". A note still the unchanged template is packed with a warning. Exit codes: 0 written, 2 "
                                 "something missing or edited (nothing written).")
    parser.add_argument("--out", required=True, metavar="NAME.zip", help="the hand-in ZIP, named after you")
    parser.add_argument("--lab", default=".", metavar="DIR", help="the lab folder you worked in (default: here)")
    parser.add_argument("--force", action="store_true", help="replace an existing NAME.zip")
    args = parser.parse_args(argv)
    try:
        handin = collect_handin(args.lab)
        top = write_handin(handin, args.out, force=args.force)
    except HandinError as exc:
        for problem in exc.problems:
            print(f"infer_sched_lab.py handin: error: {one_line(problem)}", file=sys.stderr)
        print("infer_sched_lab.py handin: error: nothing was written", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {args.out}: {len(handin.files) + 1} files under {top}/ "
          f"(runs: {', '.join(handin.runs)}; each re-simulated and identical)")
    for note in handin.unfilled:   # handed in all the same: the learner's choice, and grade reports it too
        print(f"infer_sched_lab.py handin: warning: {note} is the unchanged template (packed as it is); fill it in "
              "(README, course steps 2 and 10) and run handin again with --force", file=sys.stderr)
    return EXIT_OK


def handin_command(argv: list[str]) -> int:
    """``handin``: exit 0 written, 2 a file missing or a run edited (nothing written)."""
    return run_command("infer_sched_lab.py handin", _handin, argv)


def _grade(argv: list[str]) -> int:
    parser = LineParser(prog="infer_sched_lab.py grade",
                        description="Grade a class: every hand-in (ZIP or folder) checked run by run against "
                                    "the reference and re-simulated from its own inputs; one CSV row per learner "
                                    "and run. A bad hand-in is a row with its reason, never a stop.",
                        epilog="Columns: learner, handin, run, required, verdict (same, different, missing, "
                               "unusable, bad hand-in), differences, first_difference, authentic, tampered, notes, "
                               "lab_version, reason. Exit codes: 0 grades written, 2 unusable flags or --out.")
    parser.add_argument("handins", nargs="+", metavar="HANDIN", help="hand-in ZIPs or folders")
    parser.add_argument("--out", required=True, metavar="FILE", help="the grade sheet to write, e.g. grades.csv")
    parser.add_argument("--force", action="store_true", help="replace an existing grade sheet")
    args = parser.parse_args(argv)
    refuse_output(args.out, args.force, "grades.csv")   # before grading: refusing later would waste the work
    if any(os.path.realpath(path) == os.path.realpath(args.out) for path in args.handins):
        raise HandinError([f"--out {args.out}: is one of the hand-ins; choose another file"])
    rows = grade_class(args.handins, _PROJECT)
    write_text_atomically(args.out, render_csv(rows), force=args.force, example="grades.csv")
    learners = len({row["handin"] for row in rows})
    counts = Counter(row["verdict"] for row in rows)
    not_authentic = sum(1 for row in rows if row["authentic"] == "no")
    print(f"graded {learners} hand-in{'s' if learners != 1 else ''}, {len(rows)} row{'s' if len(rows) != 1 else ''}: "
          + ", ".join(f"{counts[v]} {v}" for v in ("same", "different", "missing", "unusable", "bad hand-in") if counts[v])
          + f"; {not_authentic} not authentic; wrote {args.out}")
    return EXIT_OK


def grade_command(argv: list[str]) -> int:
    """``grade``: exit 0 when the grade sheet is written (whatever the hand-ins hold), 2 for bad flags."""
    return run_command("infer_sched_lab.py grade", _grade, argv)
