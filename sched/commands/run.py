"""The lab run, the default command: ``python3 infer_sched_lab.py [--scenario S | --workload FILE] [--artifacts DIR] ...``.

Its flags (``_run_parser``, the engine flag helpers shared with ``sweep``), the knobs they give,
the flag-mixing refusals of the two engines and the progress line; then one call each to build the
run (:func:`sched.runs.build.run_lab`, or :mod:`sched.timing.msrun` with ``--step-model``), warn
about its scale (:mod:`sched.runs.scale`), render and write it. The entry point
(:mod:`sched.commands.main`) dispatches here; this module never imports it.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import textwrap
import time

from .. import __version__
from ..base.cmdline import EXIT_OK, LineParser, SpellingsAgree, SwitchAgrees, integer
from ..base.safe_write import check_target, write_artifacts
from ..core.config import ConfigError, EngineConfig
from ..timing.bench_rows import (add_bench_flags, add_load_flags, bench_flags_given, bench_settings_from_args,
                                 load_flags_problem, load_of_args)
from ..core.records import TIMELINE_DETAILS
from ..lab.policy import POLICIES
from ..lab.profiles import PROFILES, profile_knobs
from ..output.artifacts import render_artifacts, stream_artifacts
from ..runs.build import (FULL_TIMELINE_MAX_NAMES, FULL_TIMELINE_MAX_REQUESTS, FULL_TIMELINE_MAX_TOKENS,  # noqa: F401
                          default_timeline, run_lab)
from ..runs.scale import long_run_warning, scale_warnings
from ..vllm.config import VLLM_POLICIES, VllmKnobs, check_fits
from ..workload.specs import SCENARIOS, scenario
from ..workload.validation import load_workload

#: Defined in the domain packages (sched.runs.build, sched.runs.scale), importable here as before.
__all__ = ["config_from_args", "vllm_knobs_from_args"]


def positive_int(text: str) -> int:
    """A flag value (argparse type): ASCII digits, at least 1 (``+3`` and spaces accepted, ``1_0`` refused)."""
    digits = text.strip().lstrip("+")
    if not (digits.isascii() and digits.isdigit()):  # int() would also read "1_0" as ten
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    value = int(digits)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _weights_gib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 10**6:   # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a positive number of GiB below 1e6, got {text!r}")
    return value


def _positive_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of ms > 0, got {text!r}") from None
    if not 0.001 <= value <= 3.6e9:   # one µs (the clock's tick) to about six weeks
        raise argparse.ArgumentTypeError(f"must be a number of ms from 0.001 to 3.6e9, got {text!r}")
    return value


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """The engine's flags (deadline, profile, knobs, policy), shared by the run and ``sweep``."""
    parser.add_argument("--timeout-ticks", type=positive_int, metavar="N",
                        help="deadline: a request not finished N ticks after its arrival times out")
    parser.add_argument("--profile", choices=tuple(PROFILES), default=None,
                        help="the lab engine's knob defaults: lab (64/8/4/32, lab.md §3) or vllm "
                             "(2048/1/256/512: vLLM-sized knobs under the lab's rules, not vLLM's "
                             "scheduling; for that use --engine vllm); explicit knob flags override it "
                             "(default lab)")
    parser.add_argument("--budget", type=positive_int, default=None, metavar="UNITS",
                        help="budget units per tick (profile lab: 64)")
    parser.add_argument("--decode-cost", type=positive_int, default=None, metavar="UNITS",
                        help="budget units per decode token; a prefill token costs 1 (profile lab: 8)")
    parser.add_argument("--max-active", type=positive_int, default=None, metavar="N",
                        help="most requests active (admitted, not ended) at once (profile lab: 4)")
    parser.add_argument("--chunk-tokens", type=positive_int, default=None, metavar="TOKENS",
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
              "--num-gpu-blocks": "num_gpu_blocks", "--async-scheduling": "async_scheduling"}
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
                    "--num-gpu-blocks": "the lab engine has no KV-cache capacity",
                    "--async-scheduling": "the lab engine's step always knows the last step's tokens"}


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
    vllm.add_argument("--max-num-batched-tokens", type=positive_int, metavar="TOKENS",
                      help="tokens scheduled per step, prompt and output alike: the lab's --budget with a "
                           "decode costing 1 (default 2048)")
    vllm.add_argument("--max-num-seqs", type=positive_int, metavar="N",
                      help="most requests running at once: the lab's --max-active (default 256)")
    vllm.add_argument("--long-prefill-token-threshold", type=_non_negative_int, metavar="TOKENS",
                      help="most tokens one request gets per step, applied only while more than one request is "
                           "running or waiting: the lab's --chunk-tokens; 0 = none (default 0)")
    vllm.add_argument("--enable-prefix-caching", action="store_true", default=None,
                      help="block-level prefix cache (the lab's APC case, in blocks of --block-size)")
    vllm.add_argument("--block-size", type=positive_int, metavar="TOKENS", help="tokens per KV block (default 16)")
    vllm.add_argument("--num-gpu-blocks", type=positive_int, metavar="N",
                      help="KV cache blocks, vLLM's null block included (N - 1 usable), at least 2; default: "
                           "enough that capacity never binds (the lab's KV cache is infinite)")
    vllm.add_argument("--async-scheduling", action=SwitchAgrees, default=None,
                      help="vLLM's async scheduling (its GPU default since 0.14): the next step is scheduled "
                           "before the last step's tokens are known, so outputs, finishes and freed slots "
                           "come one step later (vllm-engine.md §7); default off, or the step model's setting")


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
            given = "--no-" + flag[2:] if getattr(args, field) is False else flag   # the spelling typed
            raise ConfigError(f"{given} is a knob of the vllm engine; add --engine vllm ({VLLM_FLAG_IN_LAB[flag]})")


def _run_parser(commands: str = "") -> argparse.ArgumentParser:
    """The run's parser; ``commands``: the sub-command table its ``--help`` shows (:func:`sched.commands.main.commands_text`)."""
    parser = LineParser(
        prog="infer_sched_lab.py",
        usage="%(prog)s [COMMAND ...] | [--scenario S | --workload FILE] [--artifacts DIR] [flags]",
        description=textwrap.fill(
            "Simulate four LLM-serving configurations (static, continuous, continuous+APC, "
            "continuous+APC+chunked prefill) on one workload and write the lab's artifacts. "
            "Time is in abstract ticks, work in abstract budget units. With --engine vllm: one "
            "configuration under vLLM 0.33.0's scheduler rules (a tick is one engine step, work is tokens).", 100)
                    + ("\n\n" + commands if commands else ""),
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
    add_engine_flags(parser)
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
    parser.add_argument("--gpu", metavar="NAME",
                        help="with --step-model: carry the step model to another GPU of the lab's table (help gpus): "
                             "the per-step host cost stays, the GPU-bound terms scale with its public figures; the "
                             "result is printed with the band of two bounding carries (help gpus)")
    parser.add_argument("--weights-gb", type=_weights_gib, metavar="G",
                        help="with --gpu: the model's weights in GiB, for the band's weight read per step (default: "
                             "from the parameter count in the step model's model name, 2 bytes each)")
    add_bench_flags(parser, when=" (with --step-model)")
    add_load_flags(parser, when=" (with --step-model)")
    parser.add_argument("--timeout-ms", type=_positive_ms, metavar="MS",
                        help="with --step-model: deadline in ms after each request's arrival (its start, with "
                             "--max-concurrency); a request not finished by then times out at the end of the step "
                             "in flight (to the µs)")
    parser.add_argument("--version", action="version", version=f"infer-sched-lab {__version__}")
    return parser


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


def _main_run(argv: list[str], commands: str = "") -> int:
    """The plain run; ``commands``: the sub-command table its ``--help`` shows."""
    # A run builds millions of long-lived objects (requests, token runs, step records, parsed JSON)
    # and no reference cycles worth collecting. The engines pause the cyclic collector while they
    # simulate; pausing it for the whole run also spares the loading, checks, summaries and
    # artifacts its full passes over those objects (about 0.3 s of a 19,366-request trace). The
    # process ends soon after; a caller in the same process gets the collector back as it was.
    # After Ctrl-C (or SIGTERM, SIGHUP) the collector stays paused: the process is ending, and a first
    # pass over the millions of objects allocated while it was paused would delay the exit by seconds
    # (sched.commands.main.main restores it for a caller in the same process).
    collecting = gc.isenabled()
    gc.disable()
    try:
        code = _run_with_collector_paused(argv, commands)
    except KeyboardInterrupt:
        raise
    except BaseException:
        if collecting:
            gc.enable()
        raise
    if collecting:
        gc.enable()
    return code


def _run_with_collector_paused(argv: list[str], commands: str = "") -> int:
    parser = _run_parser(commands)
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
    if args.gpu is not None and args.step_model is None:
        raise ConfigError("--gpu needs --step-model (it carries a fitted step time to another GPU)")
    if args.weights_gb is not None and args.gpu is None:
        raise ConfigError("--weights-gb needs --gpu (it sizes the weight read of a step carried to another GPU)")
    if load_flags_problem(args):
        raise ConfigError(load_flags_problem(args))
    if args.step_model is None and bench_flags_given(args):
        raise ConfigError(f"{bench_flags_given(args)[0]} needs --step-model: vLLM bench serve's metrics and SLOs are "
                          "in milliseconds, and only a run with a step model keeps time in ms")
    if args.step_model is not None and args.timeout_ticks is not None:
        raise ConfigError("--timeout-ticks with --step-model: the clock is in ms there; give the deadline with --timeout-ms")
    if args.timeout_ms is not None and args.step_model is None:
        raise ConfigError("--timeout-ms needs --step-model (a tick run's deadline is --timeout-ticks)")
    if args.timeout_ms is not None and getattr(args, "async_scheduling", None):
        raise ConfigError("--timeout-ms with --async-scheduling: deadlines are not modelled under async scheduling; "
                          "add --no-async-scheduling")
    if args.engine == "vllm":   # every knob checked before anything runs
        config = vllm_knobs_from_args(args)
        notices = []   # the step model's notes and warnings, said once the checks below pass
        if args.step_model is not None:   # the fitted settings, explicit flags overriding (msrun)
            from ..timing import msrun   # only a run with a step model needs it
            step_model, config, overridden = msrun.knobs_for(args.step_model, args, argv, config, notices)
            if args.timeout_ms is not None:   # the deadline on the step model's µs clock
                from dataclasses import replace
                if config.async_scheduling:
                    raise ConfigError("--timeout-ms with async scheduling (the step model's setting or "
                                      "--async-scheduling): deadlines are not modelled there; add --no-async-scheduling")
                config = replace(config, timeout_ticks=max(1, round(args.timeout_ms * 1000)))
        load = load_of_args(args)
        if load is not None:   # arrivals re-timed as vllm bench serve sends (whole µs, tick_ms 0.001)
            from ..workload.bench_arrivals import check_span, retime
            try:
                check_span(len(workload), load["request_rate"])
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            workload = retime(workload, load["request_rate"], load["burstiness"], load["seed"])
        blocks_from = None   # the step model's settings, unless --num-gpu-blocks changed them
        if args.step_model is not None and not any(o.startswith("--num-gpu-blocks ") for o in overridden):
            blocks_from = f"{args.step_model}'s settings.num_gpu_blocks"
        check_fits(workload, config, source, blocks_from)
        for line in notices:
            print(line, file=sys.stderr)
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
    run = None
    try:
        if step_model is not None:
            run = msrun.run_with_step_model(workload, config, step_model, source,
                                            args.timeline or default_timeline(workload), progress,
                                            max_concurrency=args.max_concurrency)
        else:
            run = run_lab(workload, config, args.policy, source, progress, args.timeline,
                          sections=args.artifacts is not None)
        if progress is not None:
            progress.note("rendering artifacts")
        if step_model is not None:
            files = msrun.render_ms_artifacts(run, step_model, overridden, bench_settings_from_args(args))
            if args.gpu is not None:   # the two bounding carries, replayed on the same workload and settings
                from ..timing.gpu_band import band_text
                files["table.txt"] += band_text(run, step_model, msrun.replay_result(
                    workload, config, source, args.max_concurrency))
        elif run.timeline == "full":
            files = render_artifacts(run)
        else:  # large: each artifact is streamed to disk line by line, never built in memory
            files = stream_artifacts(run)
        if args.artifacts:  # written first: a refused directory must not look like a finished run
            write_artifacts(files, args.artifacts, force=args.force)
    finally:
        if progress is not None:
            progress.close()
        if run is not None:
            run.close()
    sys.stdout.write(files["table.txt"])
    if args.artifacts:
        print(f"wrote {len(files)} artifacts to {args.artifacts}/: {', '.join(files)}")
    return EXIT_OK
