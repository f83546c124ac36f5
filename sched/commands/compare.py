"""The ``compare`` subcommand (compare.md §3): flags, the ``--out`` rules, the printed report.

It reads two sides with :func:`sched.analysis.compare_sides.load_side`, decides with
:func:`sched.analysis.compare.compare` and writes the decision record (``./decision.json`` by default, never
into a run directory unless ``--out`` names such a path).
"""

from __future__ import annotations

import json
import os

from ..base.cmdline import EXIT_OK, InputError, LineParser, fraction_arg, run_command, write_text_atomically
from ..analysis.compare import Thresholds, compare, render_report
from ..analysis.compare_sides import load_side

__all__ = ["command"]

def _parser() -> LineParser:
    t = Thresholds()
    parser = LineParser(
        prog="infer_sched_lab.py compare",
        description="Decide whether a candidate should replace a baseline (compare.md §3): two cases "
                    "of one run (BASELINE only, with --baseline-case and --candidate-case), one case "
                    "of each of two runs, or two runs imported with import-results. Writes "
                    "the decision record (default ./decision.json) and prints a short report.",
        epilog="Exit codes: 0 a decision was made (accept, tune or reject), 2 unusable input. Learners of the "
               "serving-bench chapter deciding on its runner's result files (repeats, failure records): use "
               "'serving-bench decide BASELINE.json CANDIDATE.json --out EVIDENCE.json'. The chapter's rules "
               "differ: its helper functions call a lost request missing evidence (tune); its decision has no "
               "TPOT gate and rejects any failed request.",
    )
    parser.add_argument("baseline", metavar="BASELINE_DIR", help="run directory of the baseline")
    parser.add_argument("candidate", metavar="CANDIDATE_DIR", nargs="?",
                        help="run directory of the candidate (default: the baseline's directory)")
    parser.add_argument("--case", help="the case to compare on both sides, e.g. continuous")
    parser.add_argument("--baseline-case", help="the baseline's case (overrides --case)")
    parser.add_argument("--candidate-case", help="the candidate's case (overrides --case)")
    parser.add_argument("--change", metavar="SETTING",
                        help="the declared scheduler change (e.g. policy, apc); refused if the runs differ otherwise")
    parser.add_argument("--out", metavar="FILE",
                        help="where to write the decision record (default: decision.json in the current "
                             "directory, refused when that directory holds a run; any path you name is used)")
    parser.add_argument("--force", action="store_true", help="replace an existing decision record")
    gates = parser.add_argument_group("gates (fractions of the baseline unless said otherwise)")
    for flag, default, text in (
            ("--max-ttft-growth", t.max_ttft_growth, "largest P95 TTFT growth"),
            ("--max-tpot-growth", t.max_tpot_growth, "largest P95 TPOT growth"),
            ("--min-throughput-gain", t.min_throughput_gain, "smallest throughput gain"),
            ("--min-completion-rate", t.min_completion_rate, "smallest candidate completion rate (absolute)"),
            ("--min-fairness", t.min_fairness, "smallest candidate fairness (absolute, 0..1)"),
            ("--min-order-score-gain", t.min_order_score_gain,
             "priority experiment: smallest rise of the first-token order score (absolute)"),
            ("--max-throughput-drop", t.max_throughput_drop, "priority experiment: largest throughput drop"),
            ("--max-priority-ttft-growth", t.max_priority_ttft_growth,
             "priority experiment: largest overall P95 TTFT growth"),
            ("--max-low-class-e2e-growth", t.max_low_class_e2e_growth,
             "priority experiment: largest P95 E2E growth of the lowest-priority class"),
            ("--throughput-noise", t.throughput_noise,
             "below saturation: a throughput change within +-X is noise, not a regression"),
            ("--saturation-margin", t.saturation_margin,
             "a side is below saturation when its arrival span / makespan is at least 1 - X")):
        gates.add_argument(flag, type=fraction_arg, default=default, metavar="X", help=f"{text} (default {default})")
    return parser


#: The files compare reads from a run directory; ``--out`` may never name one of them.
_RUN_INPUTS = ("manifest.json", "summary.json", "requests.jsonl", "workload.json")


def _refuse_input_file(out: str, run_dirs) -> None:
    """Refuse an ``--out`` that is one of the files the compared runs consist of (even with --force)."""
    target = os.path.realpath(out)
    for run_dir in run_dirs:
        inputs = {os.path.realpath(os.path.join(run_dir, name)) for name in _RUN_INPUTS}
        if target in inputs:
            raise InputError(f"--out {out}: is one of the compared run's own files; choose another path")


def _command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.candidate is None and (args.baseline_case or args.case) == (args.candidate_case or args.case):
        raise InputError("comparing two cases of one run needs --baseline-case and --candidate-case "
                         "naming different cases")
    candidate_dir = args.candidate or args.baseline
    baseline = load_side(args.baseline, args.baseline_case or args.case)
    candidate = load_side(candidate_dir, args.candidate_case or args.case)
    thresholds = Thresholds(**{name: getattr(args, name) for name in Thresholds.__dataclass_fields__})
    record = compare(baseline, candidate, thresholds, args.change)
    out = args.out
    if out is None:
        if os.path.exists("manifest.json"):
            raise InputError("the current directory holds a run (manifest.json): compare writes into a run "
                             "directory only when --out names the path; give --out FILE")
        out = "decision.json"
    _refuse_input_file(out, (args.baseline, candidate_dir))
    # ASCII escapes in the record and in the report: a directory or case name may hold bytes
    # that are not UTF-8 (Python keeps them as lone surrogates, which no UTF-8 file can hold).
    write_text_atomically(out, json.dumps(record, indent=2, allow_nan=False) + "\n", force=args.force)
    report = render_report(record) + f"wrote {out}\n"
    print(report.encode("utf-8", "backslashreplace").decode("utf-8"), end="")
    return EXIT_OK


def command(argv: list[str]) -> int:
    """The ``compare`` subcommand: exit 0 for any decision made, 2 for unusable input or usage."""
    return run_command("infer_sched_lab.py compare", _command, argv)
