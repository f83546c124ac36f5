"""Command line: ``python3 infer_sched_lab.py [--scenario S | --workload FILE] [--artifacts DIR] ...``.

``main(argv)`` parses, runs the library, turns a domain error into one line on stderr and an
exit code, and returns. Exit codes: 0 ok, 2 bad input or usage, 3 internal error, 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM); an interrupted write leaves nothing, every write being atomic.

The entry point only: the plain run lives in :mod:`sched.commands.run`, the small sub-commands
(import, sweep, explain, check, zip) in :mod:`sched.commands.tools`; both are dispatched from here.
"""

from __future__ import annotations

import difflib
import gc
import os
import sys

import importlib

from . import run as run_cli
from ..base.safe_write import ArtifactError
from ..base.cmdline import EXIT_BAD_INPUT, EXIT_OK, StreamError, guarded_stream, interrupts_raise, one_line
from ..base.files import reset_written, written
from ..core.config import ConfigError
from ..core.records import SimulationError
from ..workload.specs import WorkloadError

__all__ = ["main"]

EXIT_DIFFERENT, EXIT_INTERNAL, EXIT_INTERRUPTED = 1, 3, 130  # 130: the shell's code for Ctrl-C (128 + SIGINT)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout closed the pipe

#: Most problems of one workload printed, one line each; the rest are counted.
MAX_REPORTED_PROBLEMS = 20


def _main_run(argv: list[str]) -> int:
    """The plain run (:mod:`sched.commands.run`), its ``--help`` listing the sub-commands."""
    return run_cli._main_run(argv, commands_text())


def _main_help(argv: list[str]) -> int:
    """``help [COMMAND [SUBCOMMAND]]``: the overview, or one command's own ``--help``
    (``help serving-bench run`` shows ``serving-bench run --help``; ``help run``, the overview
    whose second half is the run's flags)."""
    if not argv or argv[0].startswith("-") or argv[0] in ("help", "run"):  # "run": the lab's own flags
        return _main_run(["--help"])
    if argv[0].lower() == "gpus":   # a topic, not a command: the GPU table of --gpu
        from ..timing.gpus import render_gpus
        sys.stdout.write(render_gpus())
        return 0
    if _command(argv[0]) is None and difflib.get_close_matches(argv[0].lower(), ["gpus", *SUBCOMMANDS], n=1,
                                                               cutoff=0.6) == ["gpus"]:   # the topic mistyped: the commands' list would not name it
        raise ConfigError(f"unknown command or topic '{argv[0]}'; did you mean 'gpus'? (help gpus: the GPU table of "
                          "--gpu)")
    words = [word for word in argv[1:2] if not word.startswith("-")]
    return _dispatch(argv[0], [*words, "--help"])


def _lazy(module: str, attr: str):
    """A handler that imports ``sched.<module>`` on its first call: a plain run loads none of the
    other commands' modules (a few hundred ms of start-up on every run)."""
    def handler(argv):
        return getattr(importlib.import_module(f"..{module}", __package__), attr)(argv)
    return handler


#: Sub-command name -> (handler(argv) -> exit code, one-line summary shown by ``--help``), in the
#: order ``--help`` lists them. Without a sub-command, the lab runs. A new command adds one entry.
SUBCOMMANDS: dict = {
    "explain": (_lazy("commands.tools", "_main_explain"), "tell one request's life in every case of a run, from its artifacts"),
    "diff": (_lazy("analysis.rundiff", "command"), "two runs request by request: who got faster or slower, and by how many ticks"),
    "check": (_lazy("commands.tools", "_main_check"), "compare a run with a reference directory, field by field (instructors)"),
    "zip": (_lazy("commands.tools", "_main_zip"), "build the lab ZIP (instructors)"),
    "handin": (_lazy("commands.course", "handin_command"), "bundle your runs and notes into one hand-in ZIP (learners)"),
    "grade": (_lazy("commands.course", "grade_command"), "grade a class: every hand-in against the reference, re-simulated; a CSV (instructors)"),
    "compare": (_lazy("commands.compare", "command"), "decide whether a candidate scheduler should replace a baseline"),
    "export": (_lazy("timing.export", "export_command"), "write a workload for a real serving engine's benchmark client"),
    "import-results": (_lazy("timing.realrun", "import_command"), "bring a real engine's per-request results back as a run"),
    "import": (_lazy("commands.tools", "_main_import"), "turn a real request trace (azure, mooncake, lengths) into a workload"),
    "sweep": (_lazy("commands.tools", "_main_sweep"), "run one workload at several load factors; table and chart"),
    "plan": (_lazy("commands.plan", "command"), "which vLLM settings carry the most traffic under an SLO: a capacity search"),
    "calibrate": (_lazy("timing.calibrate", "command"), "fit the vLLM engine's step time (ms) to a real run and predict requests it never saw"),
    "serving-bench": (_lazy("commands.serving", "command"), "the serving-scheduler benchmark chapter: window model runs and its decision"),
    "bench": (lambda argv: importlib.import_module("..runs.bench", __package__).command(argv, main),
              "benchmark of the engine: speed and peak memory (prints, asserts nothing)"),
    "help": (_main_help, "this overview, `help COMMAND` for one command's flags, or `help gpus` for the GPU table"),
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
    143 SIGTERM, 129 SIGHUP).

    Without ``argv`` (the process's own command line, as ``infer_sched_lab.py`` calls it) an
    interrupted command ends the process right after its one line (``os._exit``, streams flushed):
    every clean-up has run by then, and freeing the millions of objects of a large run would
    delay the exit by seconds. With ``argv`` (a caller in the same process) it returns the code.
    """
    at_once = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    reset_written()
    collecting = gc.isenabled()
    try:
        with interrupts_raise():  # SIGTERM cleans up like Ctrl-C; a second signal cannot interrupt that
            return _main(argv, at_once)
    finally:
        if collecting:   # a run leaves the collector paused when interrupted (sched.commands.run)
            gc.enable()


def _main(argv: list[str], at_once: bool = False) -> int:
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
        code = getattr(exc, "exit_code", EXIT_INTERRUPTED)  # sched.base.cmdline.Interrupted: 128 + signal
        done, what = written(), getattr(exc, "what", "interrupted")
        _report([f"{what} after writing {', '.join(done)} (complete)" if done else f"{what}; nothing was written"])
        if at_once:   # the traceback still holds the run's objects: end before freeing them (main)
            _end_now(code)
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
    except MemoryError:  # the environment (a memory or address-space limit such as ulimit -v), not a bug
        done = written()
        _report(["out of memory (the process reached its memory or address-space limit); "
                 + (f"{', '.join(done)} was written completely" if done else "nothing was written")
                 + "; try a smaller workload, --timeline counts or off, or a higher limit"], prog)
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


def _end_now(code: int) -> None:
    """End the process with ``code`` at once, after flushing stdout and stderr (nothing else is
    pending: every write is atomic and every clean-up has run)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _command_errors() -> tuple:
    """The bad-input errors of the explain, check and zip commands whose modules are loaded. They
    load with their command only (a plain run starts faster); one never loaded raised nothing.
    (An ``except`` clause evaluates its classes only when an exception is on its way.)"""
    loaded = ((f"sched.{module}", name) for module, name in
              (("analysis.explain", "ExplainError"), ("analysis.check", "CheckError"), ("runs.labzip", "LabZipError")))
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

