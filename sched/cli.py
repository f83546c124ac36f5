"""Command line: ``python3 infer_sched_lab.py [--scenario S | --workload FILE] [--artifacts DIR] ...``.

``main(argv)`` parses, runs the library, turns a domain error into one line on stderr and an
exit code, and returns. Exit codes: 0 ok, 2 bad input or usage, 3 internal error, 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM); an interrupted write leaves nothing, every write being atomic.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import os
import sys
import textwrap
import time

import importlib

from . import __version__
from .artifacts import (ArtifactError, LabRun, check_target, refuse_kind_file, render_artifacts, stream_artifacts,
                        write_artifacts, write_text_file)
from .cmdline import (EXIT_BAD_INPUT, EXIT_OK, EXIT_TERMINATED, LineParser, SpellingsAgree, StreamError,
                      guarded_stream, interrupts_raise, one_line)
from .cmdline import decimal, integer
from .files import reset_written, written
from .config import ConfigError, EngineConfig, cases_for
from .engine import estimate_walked_ticks, run_cases
from .invariants import check_cases
from .policy import POLICIES
from .profiles import PROFILES, profile_knobs
from .records import TIMELINE_DETAILS, SimulationError
from .vllm_config import VLLM_POLICIES, VllmKnobs, check_fits
from .vllm_engine import simulate_vllm
from .workload import SCENARIOS, WorkloadError, load_workload, scenario, workload_to_json

__all__ = ["main", "run_lab", "default_timeline", "scale_warnings", "config_from_args", "vllm_knobs_from_args",
           "FULL_TIMELINE_MAX_REQUESTS",
           "FULL_TIMELINE_MAX_TOKENS", "FULL_TIMELINE_MAX_NAMES", "LAB_PROFILE_MAX_REQUESTS", "long_run_warning",
           "LONG_RUN_TICKS"]

EXIT_DIFFERENT, EXIT_INTERNAL, EXIT_INTERRUPTED = 1, 3, 130  # 130: the shell's code for Ctrl-C (128 + SIGINT)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout closed the pipe

#: Largest workload whose timeline is written in full by default: 1,000 requests keeps
#: ``timeline.jsonl`` readable by hand (tens of MB at most) while every lab scenario stays full.
FULL_TIMELINE_MAX_REQUESTS = 1000
#: ... and at most this many prompt + output tokens: every walked tick advances at least one
#: token, so this bounds the number of per-tick records (about 1 KB each in memory, per case).
FULL_TIMELINE_MAX_TOKENS = 50_000
#: ... and at most this many requests × tokens: a full record lists every waiting and active
#: request by name, so this bounds the names written (about 1 million names ~ 10 MB of JSON).
FULL_TIMELINE_MAX_NAMES = 1_000_000
#: Above this many requests the ``lab`` profile draws a warning (a teaching scale).
LAB_PROFILE_MAX_REQUESTS = 5000
#: Above this many estimated walked ticks (all cases, all sweep points) a run draws a warning with
#: the estimate: at the roughly 2 × 10⁵ ticks per second of a small laptop, 10⁸ is some minutes.
LONG_RUN_TICKS = 10**8
WALKED_TICKS_PER_SECOND = 200_000

#: Most problems of one workload printed, one line each; the rest are counted.
MAX_REPORTED_PROBLEMS = 20


def _positive_int(text: str) -> int:
    digits = text.strip().lstrip("+")
    if not (digits.isascii() and digits.isdigit()):  # int() would also read "1_0" as ten
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    value = int(digits)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """The engine's flags (deadline, profile, knobs, policy), shared by the run and ``sweep``."""
    parser.add_argument("--timeout-ticks", type=_positive_int, metavar="N",
                        help="deadline: a request not finished N ticks after its arrival times out")
    parser.add_argument("--profile", choices=tuple(PROFILES), default=None,
                        help="the lab engine's knob defaults: lab (64/8/4/32, lab.md §3) or vllm "
                             "(2048/1/256/512: vLLM-sized knobs under the lab's rules, not vLLM's "
                             "scheduling; for that use --engine vllm); explicit knob flags override it "
                             "(default lab)")
    parser.add_argument("--budget", type=_positive_int, default=None, metavar="UNITS",
                        help="budget units per tick (profile lab: 64)")
    parser.add_argument("--decode-cost", type=_positive_int, default=None, metavar="UNITS",
                        help="budget units per decode token; a prefill token costs 1 (profile lab: 8)")
    parser.add_argument("--max-active", type=_positive_int, default=None, metavar="N",
                        help="most requests active (admitted, not ended) at once (profile lab: 4)")
    parser.add_argument("--chunk-tokens", type=_positive_int, default=None, metavar="TOKENS",
                        help="per-request prefill cap per tick in the chunked case (profile lab: 32)")
    parser.add_argument("--policy", "--scheduling-policy", dest="policy", choices=tuple(POLICIES),
                        default="fcfs", action=SpellingsAgree,
                        help="admission order of the waiting queue: fcfs (arrival), shortest (least "
                             "prompt + decode_cost x output work), priority (lowest 'priority' field "
                             "first; with --engine vllm also the preemption victim); default fcfs")


#: The vLLM engine's flags (vLLM's own names) -> the VllmKnobs field they set.
VLLM_FLAGS = {"--max-num-batched-tokens": "max_num_batched_tokens", "--max-num-seqs": "max_num_seqs",
              "--long-prefill-token-threshold": "long_prefill_token_threshold",
              "--enable-prefix-caching": "enable_prefix_caching", "--block-size": "block_size",
              "--num-gpu-blocks": "num_gpu_blocks"}
#: The lab engine's own flags -> what to do instead with ``--engine vllm`` (the error's second half).
LAB_FLAGS = {"--profile": "drop it: the vllm engine starts from vLLM's own defaults (2048 tokens, 256 seqs)",
             "--budget": "use --max-num-batched-tokens",
             "--decode-cost": "drop it: a decode there costs 1 token of --max-num-batched-tokens",
             "--max-active": "use --max-num-seqs", "--chunk-tokens": "use --long-prefill-token-threshold"}
#: The vllm engine's flags -> the lab engine's nearest knob, or why it has none.
VLLM_FLAG_IN_LAB = {"--max-num-batched-tokens": "the lab engine's is --budget",
                    "--max-num-seqs": "the lab engine's is --max-active",
                    "--long-prefill-token-threshold": "the lab engine's is --chunk-tokens",
                    "--enable-prefix-caching": "the lab engine always runs an APC case of its own",
                    "--block-size": "the lab engine has no KV blocks",
                    "--num-gpu-blocks": "the lab engine has no KV-cache capacity"}


def _non_negative_int(text: str) -> int:
    try:
        value = integer(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def _add_vllm_flags(parser: argparse.ArgumentParser) -> None:
    """``--engine`` and the vLLM engine's knobs under vLLM's flag names (vllm-engine.md §1)."""
    parser.add_argument("--engine", choices=("lab", "vllm"), default="lab",
                        help="scheduling rules: lab (the teaching engine, lab.md §3: four cases) or vllm "
                             "(vLLM 0.33.0's scheduler exactly, vllm-engine.md: one case, KV blocks, "
                             "recompute preemption, block-level prefix cache); default lab")
    vllm = parser.add_argument_group("vllm engine knobs (only with --engine vllm; vLLM's flag names)")
    vllm.add_argument("--max-num-batched-tokens", type=_positive_int, metavar="TOKENS",
                      help="tokens scheduled per step, prompt and output alike: the lab's --budget with a "
                           "decode costing 1 (default 2048)")
    vllm.add_argument("--max-num-seqs", type=_positive_int, metavar="N",
                      help="most requests running at once: the lab's --max-active (default 256)")
    vllm.add_argument("--long-prefill-token-threshold", type=_non_negative_int, metavar="TOKENS",
                      help="most tokens one request gets per step, applied only while more than one request is "
                           "running or waiting: the lab's --chunk-tokens; 0 = none (default 0)")
    vllm.add_argument("--enable-prefix-caching", action="store_true", default=None,
                      help="block-level prefix cache (the lab's APC case, in blocks of --block-size)")
    vllm.add_argument("--block-size", type=_positive_int, metavar="TOKENS", help="tokens per KV block (default 16)")
    vllm.add_argument("--num-gpu-blocks", type=_positive_int, metavar="N",
                      help="KV cache blocks, vLLM's null block included (N - 1 usable), at least 2; default: "
                           "enough that capacity never binds (the lab's KV cache is infinite)")


def vllm_knobs_from_args(args) -> VllmKnobs:
    """The :class:`VllmKnobs` of parsed run flags (``--engine vllm``); lab-only flags are refused.
    Raises :class:`ConfigError` with one line naming the flag."""
    for flag, instead in LAB_FLAGS.items():
        if getattr(args, flag[2:].replace("-", "_")) is not None:
            raise ConfigError(f"{flag} is a knob of the lab engine; with --engine vllm {instead}")
    if args.policy not in VLLM_POLICIES:
        raise ConfigError(f"--policy {args.policy}: the vllm engine orders its queue by {' or '.join(VLLM_POLICIES)}")
    given = {field: getattr(args, field) for field in VLLM_FLAGS.values() if getattr(args, field) is not None}
    return VllmKnobs(policy=args.policy, timeout_ticks=args.timeout_ticks, **given)


def _refuse_vllm_flags(args) -> None:
    for flag, field in VLLM_FLAGS.items():
        if getattr(args, field) is not None:
            raise ConfigError(f"{flag} is a knob of the vllm engine; add --engine vllm ({VLLM_FLAG_IN_LAB[flag]})")


def _run_parser() -> argparse.ArgumentParser:
    parser = LineParser(
        prog="infer_sched_lab.py",
        usage="%(prog)s [COMMAND ...] | [--scenario S | --workload FILE] [--artifacts DIR] [flags]",
        description=textwrap.fill(
            "Simulate four LLM-serving configurations (static, continuous, continuous+APC, "
            "continuous+APC+chunked prefill) on one workload and write the lab's artifacts. "
            "Time is in abstract ticks, work in abstract budget units. With --engine vllm: one "
            "configuration under vLLM 0.33.0's scheduler rules (a tick is one engine step, work is tokens).", 100) + "\n\n" + commands_text(),
        epilog="Exit codes: 0 ok, 1 differences (check, diff), 2 bad input or usage, 3 internal error, "
               "130 interrupted (Ctrl-C), 141 stdout pipe closed, 143 terminated (SIGTERM). Every flag, exit code and file format: docs/reference.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--scenario", choices=tuple(SCENARIOS), default=None,
                        help="built-in workload (lab.md §2); default: baseline")
    source.add_argument("--workload", metavar="FILE",
                        help="replay a workload JSON file, e.g. runs/baseline/workload.json")
    parser.add_argument("--artifacts", metavar="DIR",
                        help="write the run's artifacts into DIR (must be new or empty unless --force)")
    parser.add_argument("--force", action="store_true",
                        help="replace the lab's own files in an existing non-empty DIR (others are kept)")
    _add_engine_flags(parser)
    _add_vllm_flags(parser)
    parser.add_argument("--timeline", choices=TIMELINE_DETAILS, default=None,
                        help="timeline.jsonl detail: full (one record per tick), counts (counts per "
                             f"step or jump; requests.jsonl then gives token_runs) or off; default full "
                             f"up to {FULL_TIMELINE_MAX_REQUESTS} requests, {FULL_TIMELINE_MAX_TOKENS} "
                             f"prompt + output tokens and {FULL_TIMELINE_MAX_NAMES} requests x tokens, "
                             "counts above")
    parser.add_argument("--step-model", metavar="FILE",
                        help="with --engine vllm: a step-model.json written by calibrate; applies the engine "
                             "settings it was fitted with (explicit vLLM flags override them, and the run says so) "
                             "and keeps time in ms (vllm-engine.md §6)")
    parser.add_argument("--version", action="version", version=f"infer-sched-lab {__version__}")
    return parser


def run_lab(workload, config: EngineConfig | VllmKnobs, policy: str = "fcfs", source: str = "scenario:baseline",
            progress=None, timeline: str | None = None) -> LabRun:
    """Simulate the four cases of lab.md §4 on ``workload``; returns the finished :class:`LabRun`.

    With a :class:`VllmKnobs` ``config`` the vLLM engine runs instead (vllm-engine.md): one case
    named ``vllm``, its policy the knobs' own (``policy`` is ignored); a request that could never
    fit the KV cache raises :class:`ConfigError` before anything runs.

    ``progress``: optional display hook, see :meth:`sched.engine.Simulation.run`. ``timeline`` is
    the detail level (``None``: :func:`default_timeline` for the workload's size). Every case is
    checked against the model's invariants (:mod:`sched.invariants`); a broken one raises
    :class:`sched.invariants.InvariantError` (a :class:`SimulationError`), as does a stalled
    simulation. A workload of :data:`sched.parallel.MIN_REQUESTS_FOR_WORKERS` requests or more is
    simulated in worker processes, one case per core (:mod:`sched.parallel`; same results).
    """
    timeline = timeline or default_timeline(workload)
    if isinstance(config, VllmKnobs):
        check_fits(workload, config, source)
        results = [simulate_vllm(workload, config, progress, timeline=timeline)]
        check_cases(results)
        return LabRun(workload, config, config.policy, source, results, timeline)
    from .parallel import run_cases_in_workers, worth_workers   # only a lab-engine run needs it (start-up)
    if worth_workers(workload):  # large: the cases side by side, one per core (same results)
        results, summaries = run_cases_in_workers(workload, config, cases_for(config), policy, progress, timeline)
        return LabRun(workload, config, policy, source, results, timeline, _summaries=summaries)
    results = run_cases(workload, config, cases_for(config), policy, progress, timeline=timeline)
    check_cases(results)
    return LabRun(workload, config, policy, source, results, timeline)


def default_timeline(workload) -> str:
    """``full`` for a small workload, ``counts`` above the bounds.

    Small: at most :data:`FULL_TIMELINE_MAX_REQUESTS` requests, at most
    :data:`FULL_TIMELINE_MAX_TOKENS` prompt + output tokens in all (which bounds the ticks walked),
    and at most :data:`FULL_TIMELINE_MAX_NAMES` requests × tokens (which bounds the names listed).
    """
    if len(workload) > FULL_TIMELINE_MAX_REQUESTS:
        return "counts"
    tokens = sum(spec.prompt_tokens + spec.output_tokens for spec in workload)
    small = tokens <= FULL_TIMELINE_MAX_TOKENS and len(workload) * tokens <= FULL_TIMELINE_MAX_NAMES
    return "full" if small else "counts"


def scale_warnings(workload, profile: str, timeline: str | None) -> list[str]:
    """One-line warnings (stderr only, never in artifacts) for a run at a scale its flags do not
    suit: the ``lab`` profile above :data:`LAB_PROFILE_MAX_REQUESTS` requests, and an explicit
    ``--timeline full`` where :func:`default_timeline` would not choose it (one record per walked
    tick, built in memory: gigabytes on a real trace)."""
    warnings = []
    if profile in ("lab", None) and len(workload) > LAB_PROFILE_MAX_REQUESTS:
        warnings.append(f"the lab profile (budget 64, max active 4) is a teaching scale; with {len(workload)} "
                        "requests consider --profile vllm")
    if timeline == "full" and default_timeline(workload) != "full":
        warnings.append(f"--timeline full on {len(workload)} requests keeps one record per walked tick in memory "
                        "and may write gigabytes; consider --timeline counts")
    return warnings


def long_run_warning(workload, config: EngineConfig, points: int = 1) -> str | None:
    """A one-line warning when the estimated work (:func:`sched.engine.estimate_walked_ticks` × the
    four cases × ``points`` sweep points) exceeds :data:`LONG_RUN_TICKS`, with the estimate in ticks
    and in time at :data:`WALKED_TICKS_PER_SECOND`; ``None`` otherwise. The run is not refused."""
    ticks = estimate_walked_ticks(workload, config) * len(cases_for(config)) * points
    if ticks <= LONG_RUN_TICKS:
        return None
    minutes = ticks / WALKED_TICKS_PER_SECOND / 60
    when = f"{minutes:.0f} minutes" if minutes < 120 else f"{minutes / 60:.0f} hours"
    return (f"about {ticks:.2g} ticks to simulate one by one ({len(workload)} requests, budget {config.budget}, "
            f"decode cost {config.decode_cost}, max active {config.max_active}): roughly {when} at "
            f"{WALKED_TICKS_PER_SECOND:,} ticks per second; a larger --budget, a smaller --decode-cost or "
            "--profile vllm makes it shorter (Ctrl-C stops it cleanly)")


def config_from_args(args) -> EngineConfig:
    """The :class:`EngineConfig` of parsed run flags: the profile's knobs, explicit flags winning."""
    knobs = profile_knobs(args.profile or "lab", budget=args.budget, decode_cost=args.decode_cost,
                          max_active=args.max_active, chunk_tokens=args.chunk_tokens)
    return EngineConfig(timeout_ticks=args.timeout_ticks, **knobs)


class _Progress:
    """Progress on ``stream`` once a run has lasted ``delay`` seconds, refreshed every ``every`` s.

    Built only for a terminal (see :func:`_progress_for`): artifacts and piped output never see it.
    """

    def __init__(self, stream, clock=time.monotonic, delay: float = 1.0, every: float = 0.25) -> None:
        self.stream, self.clock, self.delay, self.every = stream, clock, delay, every
        self.started = clock()
        self.shown_at = None
        self.width = 0

    def _show(self, text: str, force: bool = False) -> None:
        now = self.clock()
        if now - self.started < self.delay or (
                not force and self.shown_at is not None and now - self.shown_at < self.every):
            return
        self.shown_at = now
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def __call__(self, case: str, tick: int, num_ended: int, num_requests: int) -> None:
        self._show(f"simulating {case}: tick {tick}, {num_ended}/{num_requests} requests ended")

    def note(self, text: str) -> None:
        """Show ``text`` now (a change of stage), if the run has lasted long enough."""
        self._show(text, force=True)

    def close(self) -> None:
        """Erase the progress line, if one was shown."""
        if self.shown_at is not None:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


def _progress_for(stream) -> _Progress | None:
    isatty = getattr(stream, "isatty", None)
    return _Progress(stream) if isatty is not None and isatty() else None


def _main_run(argv: list[str]) -> int:
    # A run builds millions of long-lived objects (requests, token runs, step records, parsed JSON)
    # and no reference cycles worth collecting. The engines pause the cyclic collector while they
    # simulate; pausing it for the whole run also spares the loading, checks, summaries and
    # artifacts its full passes over those objects (about 0.3 s of a 19,366-request trace). The
    # process ends soon after; a caller in the same process gets the collector back as it was.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _run_with_collector_paused(argv)
    finally:
        if collecting:
            gc.enable()


def _run_with_collector_paused(argv: list[str]) -> int:
    parser = _run_parser()
    args = parser.parse_args(argv)
    if args.artifacts == "":
        parser.error("argument --artifacts: needs a directory name, got an empty string")
    if args.force and args.artifacts is None:
        parser.error("argument --force: only replaces an earlier run's files; give --artifacts DIR too")
    if args.workload is not None:
        workload = load_workload(args.workload)
        # A file name that is not UTF-8 is recorded with its bad bytes escaped (\xff): JSON holds text only.
        source = f"workload:{os.fsencode(os.path.basename(args.workload)).decode('utf-8', 'backslashreplace')}"
    else:
        name = args.scenario or "baseline"
        workload = scenario(name)
        source = f"scenario:{name}"
    step_model = overridden = None
    if args.step_model is not None and args.engine != "vllm":
        raise ConfigError("--step-model needs --engine vllm (only the vllm engine keeps time in ms)")
    if args.step_model is not None and args.timeout_ticks is not None:
        raise ConfigError("--timeout-ticks with --step-model: deadlines on a millisecond clock are not supported yet")
    if args.engine == "vllm":   # every knob checked before anything runs
        config = vllm_knobs_from_args(args)
        if args.step_model is not None:   # the fitted settings, explicit flags overriding (msrun)
            from . import msrun   # only a run with a step model needs it
            step_model, config, overridden = msrun.knobs_for(args.step_model, args, argv, config)
        check_fits(workload, config, source)
    else:
        _refuse_vllm_flags(args)
        config = config_from_args(args)
    if args.artifacts is not None:
        check_target(args.artifacts, force=args.force, kind="simulated")  # refuse before simulating
    warnings = scale_warnings(workload, args.profile if args.engine == "lab" else "vllm", args.timeline)
    if args.engine == "lab":  # the estimate follows the lab's tick rules
        warnings.append(long_run_warning(workload, config))
    for warning in warnings:
        if warning:
            print(f"infer_sched_lab.py: warning: {warning}", file=sys.stderr)
    progress = _progress_for(sys.stderr)
    try:
        if step_model is not None:
            run = msrun.run_with_step_model(workload, config, step_model, source,
                                            args.timeline or default_timeline(workload), progress)
        else:
            run = run_lab(workload, config, args.policy, source, progress, args.timeline)
        if progress is not None:
            progress.note("rendering artifacts")
        if step_model is not None:
            files = msrun.render_ms_artifacts(run, step_model, overridden)
        elif run.timeline == "full":
            files = render_artifacts(run)
        else:  # large: each artifact is streamed to disk line by line, never built in memory
            files = stream_artifacts(run)
    finally:
        if progress is not None:
            progress.close()
    if args.artifacts:  # written first: a refused directory must not look like a finished run
        write_artifacts(files, args.artifacts, force=args.force)
    sys.stdout.write(files["table.txt"])
    if args.artifacts:
        print(f"wrote {len(files)} artifacts to {args.artifacts}/: {', '.join(files)}")
    return EXIT_OK


def _import_parser() -> argparse.ArgumentParser:
    from .importers import DEFAULT_TICK_MS, FORMATS   # loaded with the command only (a run's start-up)
    parser = LineParser(prog="infer_sched_lab.py import",
                         description="Turn a real request trace into a lab workload (formats.md). Arrival "
                                     "times become ticks of --tick-ms milliseconds.")
    parser.add_argument("format", choices=FORMATS, help="azure (CSV), mooncake (JSONL) or lengths (CSV)")
    parser.add_argument("file", help="the trace file")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="workload JSON to write")
    parser.add_argument("--force", action="store_true", help="replace an existing output file")
    parser.add_argument("--tick-ms", type=decimal, default=DEFAULT_TICK_MS, metavar="MS",
                        help=f"milliseconds one tick stands for (default {DEFAULT_TICK_MS:g}: one "
                             "vLLM-like engine step, see README)")
    parser.add_argument("--limit", type=_positive_int, metavar="N", help="keep at most N requests")
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
    from .importers import ImportOptions, import_trace
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
    parser.add_argument("--workers", type=_positive_int, metavar="N", help="processes (default: all cores)")
    parser.add_argument("--executor", metavar="dask://HOST:PORT",
                        help="run the points on an existing Dask cluster, given its scheduler's address "
                             "(needs the optional dask.distributed package; default: processes here)")
    _add_engine_flags(parser)
    return parser


def _main_sweep(argv: list[str]) -> int:
    from .cluster import dask_executor, parse_dask_address
    from .sweep import (SWEEP_FILES, max_workers_allowed, parse_loads, render_sweep_csv, render_sweep_manifest,
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
    from .explain import explain_request   # each command's module loads with it (a run's start-up)
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
    from .check import compare_runs, format_report
    results = compare_runs(args.run_dir, args.ref_dir)
    sys.stdout.write(format_report(args.run_dir, args.ref_dir, results))
    return EXIT_DIFFERENT if results else EXIT_OK


def _main_zip(argv: list[str]) -> int:
    from .labzip import DEFAULT_ZIP, build_lab_zip
    parser = LineParser(prog="infer_sched_lab.py zip",
                         description="Build the lab ZIP (top folder inference-scheduler-lab/: code, workloads, "
                                     "expected outputs, tests, templates, README); same sources, same bytes.")
    parser.add_argument("-o", "--output", metavar="PATH", default=DEFAULT_ZIP,
                        help=f"where to write the ZIP (default {DEFAULT_ZIP}; must not exist unless --force; "
                             "never one of the lab's own files)")
    parser.add_argument("--force", action="store_true", help="replace an existing ZIP at PATH")
    args = parser.parse_args(argv)
    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = build_lab_zip(project, args.output, force=args.force)
    print(f"wrote {args.output}: {len(files)} files under inference-scheduler-lab/")
    return EXIT_OK


def _main_help(argv: list[str]) -> int:
    """``help [COMMAND [SUBCOMMAND]]``: the overview, or one command's own ``--help``
    (``help serving-bench run`` shows ``serving-bench run --help``; ``help run``, the overview
    whose second half is the run's flags)."""
    if not argv or argv[0].startswith("-") or argv[0] in ("help", "run"):  # "run": the lab's own flags
        return _main_run(["--help"])
    words = [word for word in argv[1:2] if not word.startswith("-")]
    return _dispatch(argv[0], [*words, "--help"])


def _lazy(module: str, attr: str):
    """A handler that imports ``sched.<module>`` on its first call: a plain run loads none of the
    other commands' modules (a few hundred ms of start-up on every run)."""
    def handler(argv):
        return getattr(importlib.import_module(f".{module}", __package__), attr)(argv)
    return handler


#: Sub-command name -> (handler(argv) -> exit code, one-line summary shown by ``--help``), in the
#: order ``--help`` lists them. Without a sub-command, the lab runs. A new command adds one entry.
SUBCOMMANDS: dict = {
    "explain": (_main_explain, "tell one request's life in every case of a run, from its artifacts"),
    "diff": (_lazy("rundiff", "command"), "two runs request by request: who got faster or slower, and by how many ticks"),
    "check": (_main_check, "compare a run with a reference directory, field by field (instructors)"),
    "zip": (_main_zip, "build the lab ZIP (instructors)"),
    "compare": (_lazy("compare", "command"), "decide whether a candidate scheduler should replace a baseline"),
    "export": (_lazy("export", "export_command"), "write a workload for a real serving engine's benchmark client"),
    "import-results": (_lazy("realrun", "import_command"), "bring a real engine's per-request results back as a run"),
    "import": (_main_import, "turn a real request trace (azure, mooncake, lengths) into a workload"),
    "sweep": (_main_sweep, "run one workload at several load factors; table and chart"),
    "calibrate": (_lazy("calibrate", "command"), "fit the vLLM engine's step time (ms) to a real run and predict requests it never saw"),
    "serving-bench": (_lazy("serving_cli", "command"), "the serving-scheduler benchmark chapter: window model runs and its decision"),
    "bench": (lambda argv: importlib.import_module(".bench", __package__).command(argv, main),
              "benchmark of the engine: speed and peak memory (prints, asserts nothing)"),
    "help": (_main_help, "this overview, or `help COMMAND` for one command's flags"),
}


def _command(name: str):
    """``(handler, summary)`` of sub-command ``name`` (a bare handler's summary is its docstring's
    first line), or ``None``."""
    entry = SUBCOMMANDS.get(name)
    if entry is None or isinstance(entry, tuple):
        return entry
    return entry, (entry.__doc__ or "").strip().split("\n")[0]


def commands_text() -> str:
    """The sub-command table of ``--help``: one line per command."""
    width = max(map(len, SUBCOMMANDS))
    lines = ["commands (python3 infer_sched_lab.py COMMAND --help for its flags):"]
    lines += [f"  {name:<{width}}  {_command(name)[1]}" for name in SUBCOMMANDS]
    lines.append("Without a command, the lab runs with the flags below.")
    return "\n".join(lines)


def _dispatch(name: str, argv: list[str]) -> int:
    """Run sub-command ``name``; an unknown one is a usage error naming the closest command."""
    entry = _command(name)
    if entry is None:
        close = difflib.get_close_matches(name, list(SUBCOMMANDS), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else f"choose one of {', '.join(SUBCOMMANDS)}"
        raise ConfigError(f"unknown command '{name}'; {hint} (python3 infer_sched_lab.py --help lists them)")
    return entry[0](argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 ok, 2 bad input or usage, 3 internal error, 130 Ctrl-C,
    143 SIGTERM)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    reset_written()
    with interrupts_raise():  # SIGTERM cleans up like Ctrl-C; a second signal cannot interrupt that
        return _main(argv)


def _main(argv: list[str]) -> int:
    # A sub-command's own error lines name it, as its argparse usage errors and run_command do
    # ("infer_sched_lab.py check: error: ..."); signals and stdout trouble concern the process.
    prog = f"infer_sched_lab.py {argv[0]}" if argv and argv[0] in SUBCOMMANDS else "infer_sched_lab.py"
    try:
        _require_current_directory()
        with guarded_stream("stdout"):  # a full or closed stdout is one line naming it, not a traceback
            if argv and not argv[0].startswith("-"):  # a word first is a command (a flag starts a run)
                return _dispatch(argv[0], argv[1:])
            return _main_run(argv)
    except WorkloadError as exc:
        _report(exc.problems, prog)
        return EXIT_BAD_INPUT
    except (ConfigError, ArtifactError, *_command_errors()) as exc:
        _report(getattr(exc, "problems", None) or [str(exc)], prog)
        return EXIT_BAD_INPUT
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:  # every write is atomic: an interrupted write left nothing behind
        code = getattr(exc, "exit_code", EXIT_INTERRUPTED)  # sched.cmdline.Interrupted: 130 or 143
        done, what = written(), "terminated (SIGTERM)" if code == EXIT_TERMINATED else "interrupted"
        _report([f"{what} after writing {', '.join(done)} (complete)" if done else f"{what}; nothing was written"])
        return code
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head -1`); files are written before anything is
        # printed, so nothing is lost. Exit like a program ended by SIGPIPE, without a message.
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except StreamError as exc:
        _silence_stdout()
        done = written()
        _report([f"{exc}" + (f"; {', '.join(done)} was written completely" if done else "")])
        return EXIT_BAD_INPUT
    except SimulationError as exc:
        _report([f"internal error: {exc}"], prog)
        return EXIT_INTERNAL
    except OSError as exc:  # the environment (a vanished file, an I/O error), not a simulator bug
        _report([f"{exc.filename + ': ' if isinstance(exc.filename, str) else ''}"
                 f"{exc.strerror or exc}"], prog)
        return EXIT_BAD_INPUT
    except Exception as exc:  # a bug: still one line and exit code 3, never a traceback for a learner
        _report([f"internal error: {type(exc).__name__}: {exc}"], prog)
        return EXIT_INTERNAL


def _command_errors() -> tuple:
    """The bad-input errors of the explain, check and zip commands whose modules are loaded. They
    load with their command only (a plain run starts faster); one never loaded raised nothing.
    (An ``except`` clause evaluates its classes only when an exception is on its way.)"""
    loaded = ((f"{__package__}.{module}", name) for module, name in
              (("explain", "ExplainError"), ("check", "CheckError"), ("labzip", "LabZipError")))
    return tuple(getattr(sys.modules[module], name) for module, name in loaded if module in sys.modules)


def _require_current_directory() -> None:
    """Refuse to start in a current directory that was deleted: every relative path would fail."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise ArtifactError("the current directory no longer exists (deleted?); cd to an existing "
                            "directory and run the command again") from None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no descriptor (captured in a test) or no stdout (>&-)
        pass


def _report(problems: list[str], prog: str = "infer_sched_lab.py") -> None:
    """One stderr line per problem (``PROG: error: ...``), at most :data:`MAX_REPORTED_PROBLEMS`, then a
    count of the rest."""
    for problem in problems[:MAX_REPORTED_PROBLEMS]:  # escaped: a name cannot forge a second line
        print(f"{prog}: error: {one_line(problem)}", file=sys.stderr)
    if len(problems) > MAX_REPORTED_PROBLEMS:
        print(f"{prog}: error: ... and {len(problems) - MAX_REPORTED_PROBLEMS} more problems", file=sys.stderr)
