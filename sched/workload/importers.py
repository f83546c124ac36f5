"""Importers: real request traces to lab workloads (formats.md "Request traces"; docs/handbook/real-traffic.md §14).

Each importer reads one trace file and returns an :class:`Import`: the workload (request specs in
arrival order) and what was read, kept and dropped, with reasons. Times become ticks:
``arrival = floor(milliseconds since the window start / tick_ms)``.

``tick_ms`` (milliseconds one tick stands for) defaults to :data:`DEFAULT_TICK_MS` = 30: one tick is
one engine step, and the lab's real vLLM run (``data/results/llmservingsim-vllm-rtx4090-llama3.1-8b``,
Llama-3.1-8B on one RTX 4090, vLLM 0.19.0) decoded at a median of 31 ms per output token (fastest
request 21 ms). The mapping only matters for arrivals; every simulated duration stays in ticks.

Formats:

- ``azure``: Azure LLM inference trace CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``; the 2023
  timestamps carry 7 fractional digits (the seventh is cut: ``%f`` takes six), the 2024 ones a
  time zone. arrival = time since the first row; prompt = ContextTokens (no known shared prefix).
- ``mooncake``: JSONL with ``timestamp`` (ms), ``input_length``, ``output_length`` and
  ``hash_ids`` (ids of 512-token blocks): requests get ``prefix_blocks`` with block size 512.
- ``lengths``: CSV with ``num_prefill_tokens,num_decode_tokens`` (more columns ignored) and no
  times: arrivals come from a seeded Poisson or gamma process at ``rate`` requests per second.

Windows: ``start`` and ``duration`` in seconds select arrivals in ``[start, start + duration)``
measured from the first row, in every format (arrivals are then counted from ``start``); ``limit``
keeps the first N requests of the window. A row earlier than the first row is dropped with the reason
"earlier than the first row (out of order)"; later rows out of order are sorted (stable).

Option ranges (:data:`OPTION_RANGES`): every number must be finite; ``tick_ms`` in (0, 3,600,000],
``start`` >= 0, ``duration`` > 0, ``rate`` in [1e-6, 1e6] requests per second, ``cv`` (gamma only) in
[0.01, 100]. A row the lab cannot run is dropped with its reason: token counts above
:data:`sched.workload.rules.MAX_TOKENS`, an arrival beyond :data:`sched.workload.rules.MAX_ARRIVAL` ticks, a block
id outside :data:`sched.workload.rules.MAX_BLOCK_ID`. The produced workload is then validated by the
workload loader's own rules, so ``import`` never writes what ``run`` refuses.

Files: only regular files are read (a FIFO or device is refused, never waited on);
text is UTF-8, a leading BOM is accepted, a bad byte is reported with its line.
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from ..base.files import open_regular
from .specs import RequestSpec, WorkloadError, workload_to_json
from .rules import MAX_ARRIVAL, MAX_BLOCK_ID, MAX_TICK_MS, MAX_TOKENS
from .validation import parse_workload

__all__ = ["DEFAULT_TICK_MS", "MOONCAKE_BLOCK_TOKENS", "FORMATS", "Import", "ImportOptions",
           "import_trace", "arrival_offsets_ms", "OPTION_RANGES", "MAX_TICK_MS"]

DEFAULT_TICK_MS = 30.0
MOONCAKE_BLOCK_TOKENS = 512
FORMATS = ("azure", "mooncake", "lengths")
_MAX_SHOWN = 10

#: Float option -> (flag, lowest, highest, lowest allowed?) (milliseconds, seconds, requests/s).
OPTION_RANGES = {
    "tick_ms": ("--tick-ms", 0.0, MAX_TICK_MS, False),
    "start": ("--start", 0.0, math.inf, True),
    "duration": ("--duration", 0.0, math.inf, False),
    "rate": ("--rate", 1e-6, 1e6, True),
    "cv": ("--cv", 0.01, 100.0, True),
}


@dataclass(frozen=True)
class ImportOptions:
    """Knobs of an import. Times in seconds except ``tick_ms`` (milliseconds per tick);
    ``rate`` in requests per second; ``cv`` the gamma process's coefficient of variation of
    inter-arrival gaps (1 is Poisson; larger is burstier)."""

    tick_ms: float = DEFAULT_TICK_MS
    limit: int | None = None
    start: float = 0.0
    duration: float | None = None
    rate: float | None = None
    process: str = "poisson"
    cv: float = 1.0
    seed: int = 0


@dataclass
class Import:
    """The imported workload and the account of what was read: ``dropped`` maps a reason to a
    count; ``problems`` lists the first bad rows as ``file:line: field 'x': reason``."""

    source: str
    workload: list[RequestSpec] = field(default_factory=list)
    num_rows: int = 0
    dropped: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """Human-readable account (several lines, no trailing newline)."""
        lines = [f"read {self.num_rows} rows from {self.source}; kept {len(self.workload)} requests"]
        if self.workload:
            prompts = sum(s.prompt_tokens for s in self.workload)
            outputs = sum(s.output_tokens for s in self.workload)
            lines.append(f"arrivals ticks {self.workload[0].arrival}..{self.workload[-1].arrival}; "
                         f"{prompts} prompt tokens, {outputs} output tokens")
        for reason, count in sorted(self.dropped.items()):
            lines.append(f"dropped {count}: {reason}")
        if self.problems:
            lines.append(f"bad rows ({len(self.problems)}; each was dropped):")
        lines.extend(f"  {problem}" for problem in self.problems[:_MAX_SHOWN])
        if len(self.problems) > _MAX_SHOWN:
            lines.append(f"  ... {len(self.problems) - _MAX_SHOWN} more bad rows")
        return "\n".join(lines)

    def _bad(self, line: int, field_name: str, reason: str) -> None:
        self.dropped[f"bad {field_name}"] += 1
        self.problems.append(f"{self.source}:{line}: field {field_name!r}: {reason}")


def _count(text, name: str, low: int) -> int:
    """A token count from a CSV cell or JSON value; raises ValueError with the reason."""
    if isinstance(text, str):
        text = text.strip()
        if not text.lstrip("-").isdigit():
            raise ValueError(f"not an integer: {text!r}")
        value = int(text)
    elif isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        raise ValueError(f"not an integer: {json.dumps(text)}")
    if value < low:
        raise ValueError(f"must be at least {low}, got {value}")
    return value


def _counts(result: "Import", line: int, row: dict, fields) -> list[int] | None:
    """The row's counts for ``fields`` (pairs of name and lowest value), or None after recording
    the first bad one in ``result`` (a missing field is reported as missing)."""
    values = []
    for name, low in fields:
        try:
            values.append(_count(row.get(name), name, low))
        except ValueError as exc:
            result._bad(line, name, str(exc) if name in row else "missing")
            return None
    return values


def _parse_azure_time(text: str) -> datetime:
    """2023: ``2023-11-16 18:17:03.9799600`` (7 digits: cut to 6); 2024: ``...+00:00``, maybe no fraction."""
    text = text.strip()
    zone = ""
    if len(text) > 19 and text[-6] in "+-" and text[-3] == ":":
        text, zone = text[:-6], text[-6:]
    if "." in text:
        head, fraction = text.split(".", 1)
        text = f"{head}.{fraction[:6].ljust(6, '0')}"  # exactly six digits (Python 3.10's fromisoformat)
    return datetime.fromisoformat(text + zone)


def _text_lines(path: str):
    """Yield the decoded lines of a regular UTF-8 file (a BOM on line 1 is dropped).

    A FIFO, device or directory is refused without waiting on it (:func:`sched.base.files.open_regular`); a
    byte that is not UTF-8 raises :class:`WorkloadError` naming the file and its line.
    """
    try:
        handle = open_regular(path, "rb")
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such trace file", source=path) from None
    except OSError as exc:  # a directory, FIFO, socket or device, or unreadable
        raise WorkloadError(f"{path}: cannot read trace file ({exc.strerror or exc})", source=path) from None
    with handle:
        for number, raw in enumerate(handle, 1):
            try:
                yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise WorkloadError(f"{path}: line {number}: not UTF-8 text (byte {exc.start + 1} of the line)",
                                    source=path) from None


def _csv_rows(path: str, needed: tuple[str, ...]):
    """Yield (line number, row dict) of a CSV with the ``needed`` header columns."""
    reader = csv.DictReader(_text_lines(path))
    try:
        header = reader.fieldnames
    except csv.Error as exc:
        raise WorkloadError(f"{path}: line 1: cannot read the CSV header ({exc})", source=path) from None
    missing = [name for name in needed if name not in (header or ())]
    if missing:
        raise WorkloadError(f"{path}: line 1: header lacks column {missing[0]!r} "
                            f"(expected {','.join(needed)})", source=path)
    previous_end, span = 1, None  # the header ends on line 1
    try:
        for row in reader:
            first, last = previous_end + 1, reader.line_num
            previous_end = last
            # A quoted cell holding line breaks: when it runs to the end of the file, its quote was never closed.
            broken = last > first and any(isinstance(v, str) and "\n" in v for v in row.values())
            span = (first, last) if broken else None
            yield last, row
        if span is not None:
            raise WorkloadError(f"{path}: line {span[0]}: a quote opened here is never closed; it swallowed lines "
                                f"{span[0]}-{span[1]} ({span[1] - span[0] + 1} lines) into one cell", source=path)
    except csv.Error as exc:
        raise WorkloadError(f"{path}: line {reader.line_num}: unreadable CSV ({exc})", source=path) from None


def _azure(path: str, result: Import):
    """Yield (line, arrival ms after the first row, prompt tokens, output tokens, blocks) of an Azure trace."""
    first = None
    for line, row in _csv_rows(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        result.num_rows += 1
        try:
            stamp = _parse_azure_time(row["TIMESTAMP"] or "")
        except ValueError as exc:
            result._bad(line, "TIMESTAMP", str(exc))
            continue
        counts = _counts(result, line, row, (("ContextTokens", 1), ("GeneratedTokens", 1)))
        if counts is None:
            continue
        prompt, output = counts
        if first is None:
            first = stamp
        try:
            offset = (stamp - first).total_seconds() * 1000
        except TypeError:
            result._bad(line, "TIMESTAMP", "mixes time-zone-aware and naive timestamps")
            continue
        yield line, offset, prompt, output, None


def _mooncake(path: str, result: Import):
    """Yield (line, ms after the first row, prompt tokens, output tokens, block ids) of a Mooncake trace."""
    first = None
    for line, text in enumerate(_text_lines(path), 1):
        if not text.strip():
            continue
        result.num_rows += 1
        try:
            row = json.loads(text)
        except ValueError as exc:
            result._bad(line, "(line)", f"not JSON ({exc})")
            continue
        except RecursionError:
            result._bad(line, "(line)", "JSON nested too deeply")
            continue
        if not isinstance(row, dict):
            result._bad(line, "(line)", "not a JSON object")
            continue
        values = _counts(result, line, row, (("timestamp", 0), ("input_length", 1), ("output_length", 1)))
        if values is None:
            continue
        blocks = row.get("hash_ids")
        if not isinstance(blocks, list) or not blocks or not all(
                isinstance(b, int) and not isinstance(b, bool) for b in blocks):
            result._bad(line, "hash_ids", "must be a non-empty list of integers")
            continue
        if len(blocks) != math.ceil(values[1] / MOONCAKE_BLOCK_TOKENS):
            result._bad(line, "hash_ids", f"{len(blocks)} blocks for {values[1]} tokens; "
                        f"expected ceil(input_length / {MOONCAKE_BLOCK_TOKENS})")
            continue
        if first is None:
            first = values[0]
        yield line, values[0] - first, values[1], values[2], tuple(blocks)


def arrival_offsets_ms(count: int, rate: float, process: str, cv: float, rng: random.Random):
    """``count`` arrival times in ms from 0 of a renewal process at ``rate`` requests per second.

    ``poisson``: exponential gaps; ``gamma``: gamma gaps with mean 1/rate and coefficient of
    variation ``cv`` (shape 1/cv²; cv 1 is Poisson). The first request arrives at 0.
    """
    mean_ms = 1000.0 / rate
    shape = 1.0 / (cv * cv) if process == "gamma" else None  # cv means nothing to a Poisson process
    now = 0.0
    for _ in range(count):
        yield now
        if process == "poisson":
            now += rng.expovariate(1.0 / mean_ms)
        else:
            now += rng.gammavariate(shape, mean_ms / shape)


def _lengths(path: str, result: Import, options: ImportOptions):
    rows = []
    for line, row in _csv_rows(path, ("num_prefill_tokens", "num_decode_tokens")):
        result.num_rows += 1
        counts = _counts(result, line, row, (("num_prefill_tokens", 1), ("num_decode_tokens", 1)))
        if counts is None:
            continue
        prompt, output = counts
        rows.append((line, prompt, output))
    rng = random.Random(options.seed)
    for (line, prompt, output), at in zip(rows, arrival_offsets_ms(len(rows), options.rate, options.process,
                                                                   options.cv, rng)):
        yield line, at, prompt, output, None


def _check_options(fmt: str, options: ImportOptions) -> None:
    """Refuse unknown formats and numbers outside :data:`OPTION_RANGES` (one line naming the flag)."""
    if fmt not in FORMATS:
        raise WorkloadError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")
    for name, (flag, low, high, closed) in OPTION_RANGES.items():
        value = getattr(options, name)
        if value is None or (name == "cv" and (fmt != "lengths" or options.process != "gamma")):
            continue
        if name in ("rate", "cv") and fmt != "lengths":
            continue
        below = value < low if closed else value <= low
        if not math.isfinite(value) or below or value > high:
            bound = f"{'at least' if closed else 'above'} {low:g}" + ("" if high == math.inf else f" and at most {high:g}")
            raise WorkloadError(f"{flag} must be a finite number {bound}, got {value!r}")
    if options.limit is not None and options.limit < 1:
        raise WorkloadError(f"--limit must be a positive integer, got {options.limit}")
    if fmt == "lengths":
        if options.rate is None:
            raise WorkloadError("lengths: --rate (requests per second) is required")
        if options.process not in ("poisson", "gamma"):
            raise WorkloadError(f"lengths: --process is poisson or gamma, got {options.process!r}")


def _row_problem(prompt: int, output: int, arrival: int, blocks) -> str | None:
    """Why the lab's workload validator would refuse this row, or None (formats.md; validation.py bounds)."""
    if prompt > MAX_TOKENS:
        return f"prompt over {MAX_TOKENS} tokens"
    if output > MAX_TOKENS:
        return f"output over {MAX_TOKENS} tokens"
    if arrival > MAX_ARRIVAL:
        return f"arrival beyond {MAX_ARRIVAL} ticks (raise --tick-ms or narrow the window)"
    if blocks is not None and any(abs(block) > MAX_BLOCK_ID for block in blocks):
        return f"block id beyond {MAX_BLOCK_ID}"
    return None


def import_trace(fmt: str, path: str, options: ImportOptions = ImportOptions()) -> Import:
    """Read the trace ``path`` of format ``fmt`` (one of :data:`FORMATS`) into a workload.

    Rows that cannot be used are dropped and counted by reason (the first are listed with file,
    line and field). Raises :class:`WorkloadError` (one line) for an unreadable file or header,
    bad options, or when no request is left. Every kept request carries ``tick_ms``, and the
    workload passes :func:`sched.workload.validation.parse_workload`.
    """
    _check_options(fmt, options)
    result = Import(path)
    if fmt == "azure":
        rows = _azure(path, result)
    elif fmt == "mooncake":
        rows = _mooncake(path, result)
    else:
        rows = _lengths(path, result, options)
    start_ms = options.start * 1000
    end_ms = None if options.duration is None else start_ms + options.duration * 1000
    prefix = fmt[0]
    specs = result.workload
    for line, at_ms, prompt, output, blocks in rows:
        if at_ms < 0:
            result.dropped["earlier than the first row (out of order)"] += 1
            continue
        if at_ms < start_ms or (end_ms is not None and at_ms >= end_ms):
            result.dropped["outside the --start/--duration window"] += 1
            continue
        if options.limit is not None and len(specs) >= options.limit:
            result.dropped["beyond --limit"] += 1
            continue
        arrival = int((at_ms - start_ms) // options.tick_ms)
        problem = _row_problem(prompt, output, arrival, blocks)
        if problem:
            result.dropped[problem] += 1
            continue
        size = None if blocks is None else MOONCAKE_BLOCK_TOKENS
        specs.append(RequestSpec(f"{prefix}{line}", arrival, None, 0, prompt, output, prefix_blocks=blocks,
                                 block_size=size, tick_ms=options.tick_ms))
    unsorted = any(a.arrival > b.arrival for a, b in zip(specs, specs[1:]))
    if unsorted:
        specs.sort(key=lambda spec: spec.arrival)  # stable: ties keep file order
    if not specs:
        dropped = "; ".join(f"{reason}: {count}" for reason, count in sorted(result.dropped.items()))
        raise WorkloadError(f"{path}: no request left to import (read {result.num_rows} rows"
                            + (f"; dropped {dropped})" if dropped else ")"), source=path)
    try:  # the run's own rules: import never writes a workload that run refuses
        parse_workload(workload_to_json(specs), source=path)
    except WorkloadError as exc:
        raise WorkloadError(f"{path}: the imported workload would be refused: {exc.problems[0]}",
                            source=path) from None
    return result
