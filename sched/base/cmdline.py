# One piece (~420 lines): the small helpers every command shares (flag types, input errors, one-line failures, atomic writes); each is short and a split would only scatter them.
"""Small command-line helpers shared by the subcommand modules (``compare``, ``export``, ``realrun``).

Kept apart from :mod:`sched.commands.main` so a library module can offer its own ``command(argv)`` handler
without importing the CLI (imports flow one way). Besides the parser and the error type it holds
the boundary checks those modules apply to every value they read from a file, so that malformed
input of any shape becomes one :class:`InputError` line (exit 2), never a traceback (exit 3).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import sys
import tempfile
import threading

from .files import note_written, refuse_non_regular, staging_prefix

__all__ = ["LineParser", "InputError", "EXIT_OK", "EXIT_BAD_INPUT", "fraction_arg", "run_command", "one_line",
           "Interrupted", "interrupts_raise", "StreamError", "guarded_stream", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "plain_decimal", "integer", "decimal",
           "write_text_atomically", "parse_json", "need", "number_or_none", "count_or_none",
           "normal_permissions", "MAX_COUNT", "NON_FINITE_AS_NONE", "read_failure", "SpellingsAgree",
           "SwitchAgrees"]

EXIT_OK, EXIT_BAD_INPUT = 0, 2
#: 128 + the signal's number, as a shell reports a process ended by it: Ctrl-C (SIGINT), SIGTERM.
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143

#: Largest token or request count accepted from a file (a real run never comes near it).
MAX_COUNT = 10**9


class InputError(ValueError):
    """Unusable input for a subcommand; the message names the file, the request and the field."""


def one_line(text: str) -> str:
    """``text`` made safe for one line of a terminal: every character that is not printable (a line
    break, a tab, an escape, a lone surrogate left by a file name that is not UTF-8) becomes its
    Python escape (``\\n``, ``\\x1b``, ``\\udcff``), so a name read from a file can never forge a
    second error line or recolour the terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT), SIGTERM or SIGHUP, raised where the program was; ``signum`` says which.
    ``what`` names it for the error line (default: from the signal)."""

    def __init__(self, signum: int, what: str | None = None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        named = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)"}
        if hasattr(signal, "SIGHUP"):
            named[signal.SIGHUP] = "hung up (SIGHUP: the terminal closed)"
        self.what = what or named.get(signum, f"ended by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a process ended by it: :data:`EXIT_INTERRUPTED`
        (130) for Ctrl-C, :data:`EXIT_TERMINATED` (143) for SIGTERM, 129 for SIGHUP."""
        return 128 + self.signum


#: The signals a command turns into :class:`Interrupted` (SIGHUP: the terminal closed).
_CAUGHT = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def interrupts_raise():
    """While inside, SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` where the program is, so
    every ``finally`` and ``except BaseException`` clean-up runs (staging directories are removed)
    for ``kill``, ``timeout``, CI cancellation and a closed terminal exactly as for Ctrl-C. After
    the first signal all three are ignored until the block ends: a second Ctrl-C cannot cut the clean-up short or print a
    traceback. The previous handlers are restored on exit unless a signal came (the process is
    then ending, and a late Ctrl-C during its shutdown must not turn exit 130 into a kill).
    Outside the main thread: no effect."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = _CAUGHT
    previous = {signum: signal.getsignal(signum) for signum in signals}
    received, owner = [], os.getpid()

    def raise_interrupted(signum, _frame):
        if os.getpid() != owner:  # a forked child (a worker before its own set-up) ends quietly
            if signum != signal.SIGINT:
                os._exit(128 + signum)
            return
        for other in signals:
            signal.signal(other, signal.SIG_IGN)
        received.append(signum)
        raise Interrupted(signum)
    for signum in signals:
        signal.signal(signum, raise_interrupted)
    try:
        yield
    finally:
        if not received:  # once interrupted, the process is ending: later signals stay ignored
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


class StreamError(OSError):
    """Writing to standard output failed (a full disk, a closed descriptor); names the stream."""


class _GuardedStream:
    """A text stream whose write failures name the stream (:class:`StreamError`) and whose text
    that the stream's encoding cannot hold (a file name that is not UTF-8) is written escaped."""

    def __init__(self, stream, name: str) -> None:
        self._stream, self._name = stream, name
        self._failed = None   # the first StreamError, raised again by flush: argparse swallows OSError

    def _guard(self, action, *args):
        try:
            return action(*args)
        except BrokenPipeError:
            raise  # the reader went away: the documented exit 141, not an error line
        except OSError as exc:
            self._failed = StreamError(f"{self._name}: cannot write ({exc.strerror or exc})")
            raise self._failed from None

    def write(self, text: str):
        try:
            return self._guard(self._stream.write, text)
        except UnicodeEncodeError:
            encoding = getattr(self._stream, "encoding", None) or "utf-8"
            return self._guard(self._stream.write, text.encode(encoding, "backslashreplace").decode(encoding))

    def flush(self) -> None:
        self._guard(self._stream.flush)
        if self._failed is not None:   # e.g. --help text argparse wrote and lost (it ignores OSError)
            raise self._failed

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_stream(name: str = "stdout"):
    """While inside, ``sys.<name>`` is wrapped by :class:`_GuardedStream` (and flushed at the end,
    so a full disk is reported here, not by the interpreter at exit). Raises :class:`StreamError`
    at once when the stream is closed (``>&-``: Python then has no such stream)."""
    stream = getattr(sys, name)
    if stream is None:
        raise StreamError(f"{name}: is closed; run the command with {name} open (e.g. > FILE or > /dev/null)")
    setattr(sys, name, _GuardedStream(stream, name))
    try:
        yield
        getattr(sys, name).flush()
    except SystemExit:   # argparse's --help exits: its text is flushed (and checked) like any output
        getattr(sys, name).flush()
        raise
    finally:
        setattr(sys, name, stream)


class LineParser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line (exit 2) without the usage block."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {one_line(message)}\n")

    def _print_message(self, message: str, file=None) -> None:
        # argparse drops a write error silently; --help into a closed pipe or a full disk must not
        # exit 0 as if it had been shown (the CLI's main turns the error into 141 or one line).
        file = file or sys.stderr
        if not message:
            return
        try:
            file.write(message)
        except (AttributeError, OSError):
            if file is sys.stdout:  # stderr stays best effort (2>&-), as argparse has it
                raise


class SpellingsAgree(argparse.Action):
    """Store an option given under several spellings (``--policy`` / ``--scheduling-policy``); refuse
    two spellings with different values (which one wins would be a guess). One spelling given twice
    keeps argparse's rule: the last wins."""

    def __call__(self, parser, namespace, values, option_string=None):
        _spellings_agree(parser, namespace, self.dest, option_string, values, repr(values))
        setattr(namespace, self.dest, values)


def _spellings_agree(parser, namespace, dest: str, option_string: str, value, shown: str) -> None:
    """Record ``option_string`` giving ``value`` for ``dest``; ``parser.error`` when another spelling
    of the same setting gave a different value (the rule of :class:`SpellingsAgree`)."""
    seen = getattr(namespace, "_spellings", None)
    if seen is None:
        seen = {}
        setattr(namespace, "_spellings", seen)
    given = seen.setdefault(dest, {})
    given[option_string] = (value, shown)
    others = {o: v for o, v in given.items() if o != option_string and v[0] != value}
    if others:
        other, (_, other_shown) = next(iter(others.items()))
        said = " ".join(part for part in (shown, "contradicts", other, other_shown) if part)
        parser.error(f"argument {option_string}: {said} (the same setting; give it once)")


class SwitchAgrees(argparse.BooleanOptionalAction):
    """An on/off switch ``--x`` / ``--no-x`` (e.g. vLLM's ``--async-scheduling``): giving both is
    refused as contradictory (which wins would be a guess), as for :class:`SpellingsAgree`; the same
    spelling twice keeps argparse's rule."""

    def __call__(self, parser, namespace, values, option_string=None):
        value = not option_string.startswith("--no-")
        _spellings_agree(parser, namespace, self.dest, option_string, value, "")
        setattr(namespace, self.dest, value)


def fraction_arg(text: str) -> float:
    """A non-negative number given on the command line (e.g. a gate threshold such as 0.15)."""
    try:
        value = float(text) if plain_decimal(text) else float("nan")
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def run_command(prog: str, body, argv: list[str]) -> int:
    """Run ``body(argv) -> int``; an :class:`InputError` or ``OSError`` becomes one stderr line and exit 2.

    Trouble with standard output is not the command's: a closed pipe (``BrokenPipeError``, exit 141
    without a message) and a stream error (exit 2 saying what was written) go on to the CLI's ``main``."""
    try:
        return body(argv)
    except (BrokenPipeError, StreamError):
        raise  # the CLI's main reports it (with what was written) and silences the stream
    except (InputError, OSError) as exc:
        print(f"{prog}: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT


def read_failure(exc: Exception) -> str:
    """Why a file could not be read, without repeating its path: ``is a directory, not a file``
    rather than ``[Errno 21] is a directory, not a file: '/abs/path'`` (the caller names the file
    as the user gave it)."""
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else None) or str(exc)


#: A number as people write it: ASCII digits, one optional decimal point, an optional exponent.
#: Python also reads ``1_0`` (ten), ``nan``, ``infinity`` and other scripts' digits (``١٠``, ``１０``:
#: ``str.isdigit`` and ``\d`` accept them too); on a command line those are typos.
_PLAIN_DECIMAL = re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*")
_PLAIN_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


def plain_decimal(text: str) -> bool:
    """Whether ``text`` is a plain decimal number (``2``, ``0.5``, ``1e3``; not ``1_0``, ``0x1``, ``nan``, ``١٠``)."""
    return _PLAIN_DECIMAL.fullmatch(text) is not None


def integer(text: str) -> int:
    """A command-line integer in ASCII digits (``10``, ``-3``); raises ``ValueError`` for ``1_0``,
    ``0x10``, ``١٠`` (Arabic-Indic digits) and the like, which ``int()`` would read. Usable as an
    argparse ``type``."""
    if _PLAIN_INTEGER.fullmatch(text) is None:
        raise ValueError(f"not an integer in ASCII digits: {text!r}")
    return int(text)


def decimal(text: str) -> float:
    """A command-line number that is :func:`plain_decimal`; raises ``ValueError`` otherwise (argparse ``type``)."""
    if not plain_decimal(text):
        raise ValueError(f"not a plain decimal number: {text!r}")
    return float(text)


# --- boundary checks -----------------------------------------------------------------------------

def _show(value) -> str:
    """A short JSON-ish rendering of a bad value for an error line."""
    text = json.dumps(value, ensure_ascii=True, default=str) if not isinstance(value, float) or not math.isfinite(
        value) else repr(value)  # NaN and the infinities as the file spells them (NaN, Infinity)
    return text if len(text) <= 40 else text[:37] + "..."


def _finite_or_none(text: str):
    value = float(text)
    return value if math.isfinite(value) else None


#: ``json.loads`` options that decode NaN, Infinity and numbers too large for a float as ``None``.
NON_FINITE_AS_NONE = {"parse_constant": lambda _: None, "parse_float": _finite_or_none}


def parse_json(text: str, where: str, non_finite_as_none: bool = False):
    """Decode JSON ``text``; syntax errors and absurd nesting become one :class:`InputError` naming ``where``.

    With ``non_finite_as_none`` the constants ``NaN``/``Infinity`` and numbers too large for a float
    decode as ``None`` (no measurable value), so they can never reach a record as a number.
    """
    options = NON_FINITE_AS_NONE if non_finite_as_none else {}
    try:
        return json.loads(text, **options)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON at line {exc.lineno}: {exc.msg}") from None
    except ValueError:  # the only other ValueError json raises: an integer of thousands of digits
        raise InputError(f"{where}: holds an integer with too many digits to be a measurement") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None


def need(value, kind, where: str, what: str, nullable: bool = False):
    """``value`` if it is an instance of ``kind`` (a type or tuple; ``bool`` never counts as a number).

    ``what`` describes the expected shape in the message, e.g. ``"an object"``. ``None`` passes
    when ``nullable``. Raises :class:`InputError` ``"<where>: must be <what>, got <value>"``.
    """
    if value is None and nullable:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise InputError(f"{where}: must be {what}, got {_show(value)}")
    return value


#: Larger integers cannot be measurements (and cannot become floats): refused like NaN.
_LARGEST_NUMBER = 10**300


def number_or_none(value, where: str, low: float | None = None, high: float | None = None):
    """A finite JSON number within ``[low, high]`` (either bound optional), or ``None``.

    NaN and the infinities are refused like any other non-number. Raises :class:`InputError`.
    """
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _LARGEST_NUMBER:
        raise InputError(f"{where}: must be a finite number, got an integer of {len(str(abs(value)))} digits")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{where}: must be a finite number, got {_show(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"between {low:g} and {high:g}" if low is not None and high is not None else (
            f">= {low:g}" if low is not None else f"<= {high:g}")
        raise InputError(f"{where}: must be {bounds}, got {_show(value)}")
    return value


def count_or_none(value, where: str) -> int | None:
    """A whole count 0..:data:`MAX_COUNT` (``3`` or ``3.0``; ``3.7`` is refused, never truncated), or ``None``."""
    value = number_or_none(value, where, 0, MAX_COUNT)
    if value is None:
        return None
    if value != int(value):
        raise InputError(f"{where}: must be a whole number, got {_show(value)}")
    return int(value)


# --- writing -------------------------------------------------------------------------------------

def normal_permissions(path: str, directory: bool = False) -> None:
    """Give ``path`` the mode an ordinary ``open``/``mkdir`` would: 0666 (files) or 0777 (directories)
    minus the process umask (``mkstemp`` and ``mkdtemp`` make them private: 0600 and 0700)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, (0o777 if directory else 0o666) & ~mask)


def refuse_output(path: str, force: bool = False, example: str = "decision.json") -> None:
    """Raise :class:`InputError` (naming ``path`` as given) when :func:`write_text_atomically` would
    refuse ``path``: empty, a directory (the message suggests ``path/example``), existing without
    ``force``, not a regular file, or in a missing directory or one that is a file. Writes nothing:
    a command that works long before it writes calls this first."""
    if not path:
        raise InputError("the output path is empty; give a file name")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; give a file name, e.g. {os.path.join(path, example)}")
    if os.path.lexists(path) and not force:
        raise InputError(f"{path}: already exists; choose another --out or pass --force to replace it")
    refuse_non_regular(path, InputError)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        problem = "is not a directory" if os.path.exists(directory) else "does not exist"
        raise InputError(f"{path}: cannot write: its directory {os.path.dirname(path) or '.'} {problem}")


def write_text_atomically(path: str, text: str, force: bool = False, example: str = "decision.json") -> None:
    """Write ``text`` to ``path`` via a temporary file beside it, so no reader sees half a file.

    The file gets normal permissions (0666 minus the umask). An existing ``path`` is refused
    unless ``force``, and ``force`` replaces only a regular file (never a device node or FIFO); an
    empty path, a directory, a missing parent directory or a parent that is a file are refused too
    (:func:`refuse_output`; ``example``: the file name suggested inside a directory). Every refusal
    is an :class:`InputError` naming ``path`` as given.
    """
    refuse_output(path, force, example)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle, staging = tempfile.mkstemp(prefix=staging_prefix(os.path.basename(path)), suffix=".tmp",
                                           dir=directory)
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as out:
            out.write(text)
        normal_permissions(staging)
        os.replace(staging, path)
        note_written(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
