"""Workload records and the lab's scenarios (lab.md §2, §7).

A workload is an ordered list of :class:`RequestSpec`. On disk it is a JSON object::

    {"requests": [{"name": "L0", "arrival": 0, "prefix_key": "SYS", "prefix_tokens": 128,
                   "suffix_tokens": 384, "output_tokens": 24}, ...]}

Times are ticks, lengths are tokens. The order of the list is the *workload order* that breaks
ties between requests arriving in the same tick.

Reading and validating a workload file lives in :mod:`sched.workload.validation`.
"""

from __future__ import annotations

import hashlib
import json
from itertools import islice
from dataclasses import dataclass

__all__ = [
    "RequestSpec",
    "workload_tick_ms",
    "WorkloadError",
    "SCENARIOS",
    "REQUEST_FIELDS",
    "scenario",
    "workload_to_json",
    "workload_sha256",
    "workload_json_and_sha256",
    "workload_json_chunks",
    "write_workload_json",
]


#: Request fields in the order they are written (lab.md §7); ``priority`` is optional.
REQUEST_FIELDS = ("name", "arrival", "prefix_key", "prefix_tokens", "suffix_tokens", "output_tokens")


class WorkloadError(ValueError):
    """A workload that cannot be simulated; the message names file, request and field."""

    def __init__(self, message: str, *, source: str | None = None, problems: list[str] | None = None):
        self.source = source
        self.problems = problems or [message]
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of a workload (lab.md §2).

    ``arrival`` is a tick; the other counts are tokens. ``prefix_key`` names an exactly shared
    prefix of ``prefix_tokens`` tokens (``None`` with 0 tokens when the prompt shares nothing).
    ``priority`` is optional (lower = more urgent, compare.md §1); ``None`` means not given.
    ``prefix_blocks`` (block-level sharing, docs/handbook/real-traffic.md §14.1) lists the ids of the prompt's leading blocks
    of ``block_size`` tokens (the workload header's); it replaces ``prefix_key`` (then ``None``).
    ``tick_ms`` is the workload header's record of how many milliseconds one tick stood for when
    the workload was imported (provenance only: the engine never reads it).
    """

    name: str
    arrival: int
    prefix_key: str | None
    prefix_tokens: int
    suffix_tokens: int
    output_tokens: int
    priority: int | None = None
    prefix_blocks: tuple | None = None
    block_size: int | None = None
    tick_ms: float | None = None

    @property
    def prompt_tokens(self) -> int:
        """Prompt length in tokens: shared prefix plus own suffix."""
        return self.prefix_tokens + self.suffix_tokens

    def to_json(self) -> dict:
        """The request as written in ``workload.json`` (fixed field order; priority only if set)."""
        record = {field: getattr(self, field) for field in REQUEST_FIELDS}
        if self.priority is not None:
            record["priority"] = self.priority
        if self.prefix_blocks is not None:
            record["prefix_blocks"] = list(self.prefix_blocks)
        return record


# --- scenarios (lab.md §2) -------------------------------------------------------------------

_BASELINE = (
    # name, arrival, prefix_key, prefix_tokens, suffix_tokens, output_tokens
    ("L0", 0, "SYS", 128, 384, 24),
    ("S1", 1, "SYS", 128, 16, 16),
    ("S2", 2, "SYS", 128, 16, 16),
    ("U3", 3, None, 0, 96, 16),
    ("S4", 9, "SYS", 128, 16, 16),
    ("S5", 10, "SYS", 128, 16, 16),
    ("U6", 11, None, 0, 160, 16),
    ("S7", 12, "SYS", 128, 16, 16),
)


def _baseline() -> list[RequestSpec]:
    return [RequestSpec(*row) for row in _BASELINE]


def _prefix_broken() -> list[RequestSpec]:
    # A dynamic field in the system prompt makes every shared prefix unique to its request.
    return [
        RequestSpec(r.name, r.arrival, None if r.prefix_key is None else f"{r.prefix_key}/{r.name}",
                    r.prefix_tokens, r.suffix_tokens, r.output_tokens)
        for r in _baseline()
    ]


def _output_heavy() -> list[RequestSpec]:
    return [
        RequestSpec(r.name, r.arrival, r.prefix_key, r.prefix_tokens, r.suffix_tokens, 4 * r.output_tokens)
        for r in _baseline()
    ]


_PRIORITY_MIX = (
    # name, arrival, prefix_key, prefix_tokens, suffix_tokens, output_tokens, priority
    # Batch jobs (priority 1): a shared document prefix, long prompts, 16 output tokens. Six
    # arrive in ticks 0-2 and fill the 4 slots, so a queue forms at once.
    ("B0", 0, "DOC", 128, 128, 16, 1),
    ("B1", 0, "DOC", 128, 64, 16, 1),
    ("B2", 1, "DOC", 128, 96, 16, 1),
    ("B3", 1, "DOC", 128, 64, 16, 1),
    ("B4", 2, "DOC", 128, 128, 16, 1),
    ("B5", 2, "DOC", 128, 96, 16, 1),
    # Interactive chat turns (priority 0, urgent): short prompts and 8 output tokens, arriving
    # behind the batch queue, interleaved with two more batch jobs.
    ("I0", 3, None, 0, 32, 8, 0),
    ("I1", 5, None, 0, 48, 8, 0),
    ("B6", 6, "DOC", 128, 64, 16, 1),
    ("I2", 7, None, 0, 32, 8, 0),
    ("I3", 9, None, 0, 40, 8, 0),
    ("B7", 10, "DOC", 128, 96, 16, 1),
)


def _priority_mix() -> list[RequestSpec]:
    return [RequestSpec(*row) for row in _PRIORITY_MIX]


def _token_gaps() -> list[RequestSpec]:
    """lab.md §5's worked example, run for real: W1's token times are [2, 3, 4, 14] in the chunk32
    case under ``--decode-cost 40`` (gaps [1, 1, 10], TPOT 4, that request's P95 ITL 10).

    Tick by tick (budget 64, decode 40, chunk 32): tick 0 admits L0 then W1; L0 prefills 32, W1
    its 8 (done). Ticks 1-3: W1 decodes (40; stamps 2, 3, 4), L0 prefills the 24 left each tick
    (32 + 3 x 24 = 104, done at tick 3). Ticks 4-12: L0, ahead in the active list, decodes first
    (40) and the 24 left cannot pay W1's 40: W1 waits 9 ticks. Tick 13: L0 has ended (9 tokens,
    stamps 5-13), W1 decodes its last token, stamped 14. Without the chunk cap L0 takes the whole
    budget at tick 0, so the other cases show no such gap.
    """
    return [RequestSpec("L0", 0, None, 0, 104, 9), RequestSpec("W1", 0, None, 0, 8, 4)]


#: Scenario name -> builder of its workload (lab.md §2; ``priority-mix`` for compare.md §1;
#: ``token-gaps`` for the worked example of lab.md §5, run with ``--decode-cost 40``).
SCENARIOS = {
    "baseline": _baseline,
    "prefix-broken": _prefix_broken,
    "output-heavy": _output_heavy,
    "priority-mix": _priority_mix,
    "token-gaps": _token_gaps,
}


def scenario(name: str) -> list[RequestSpec]:
    """The workload of a named scenario; raises :class:`WorkloadError` for an unknown name."""
    try:
        return SCENARIOS[name]()
    except KeyError:
        raise WorkloadError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}") from None



def workload_tick_ms(specs: list[RequestSpec]) -> float | None:
    """The workload header's ``tick_ms`` (ms one tick stood for at import), or None if not recorded.

    The header value is carried on every request of the workload (an empty workload has none).
    """
    return next((spec.tick_ms for spec in specs if spec.tick_ms is not None), None)


#: The note ``workload.json`` carries as its ``units`` field (ignored when read back).
WORKLOAD_UNITS = "arrival in abstract ticks; prefix_tokens, suffix_tokens, output_tokens in tokens"


def workload_to_json(specs: list[RequestSpec], units: bool = False) -> str:
    """The canonical workload text: one request per line, fixed field order, newline at end.

    With ``units`` the object starts with a ``units`` note (as in a run's ``workload.json``). A
    workload with block-level prefixes then has a ``"block_size"`` header line, an imported one a
    ``"tick_ms"`` line; one without either is written exactly as before.
    """
    lines = ",\n".join(_request_lines(specs))
    body = f"\n{lines}\n  " if specs else ""
    head = _head_lines(specs, units)
    return "{\n" + head + "  \"requests\": [" + body + "]\n}\n"


#: ``workload.json``'s ``units`` line.
_UNITS_LINE = f"  \"units\": {json.dumps(WORKLOAD_UNITS)},\n"


def _head_lines(specs: list[RequestSpec], units: bool) -> str:
    """The header lines before ``"requests"``: the units note (with ``units``), then ``block_size``
    and ``tick_ms`` when the workload has them."""
    head = _UNITS_LINE if units else ""
    block_size = next((spec.block_size for spec in specs if spec.block_size is not None), None)
    if block_size is not None:
        head += f"  \"block_size\": {block_size},\n"
    tick_ms = workload_tick_ms(specs)
    if tick_ms is not None:
        head += f"  \"tick_ms\": {json.dumps(tick_ms)},\n"
    return head


_encode = json.JSONEncoder().encode   # json.dumps of one value (ASCII with escapes)


def _request_lines(specs: list[RequestSpec]):
    """``"    " + json.dumps(spec.to_json())`` for each spec. A request whose values are plain
    ``int``, ``str`` and ``None`` (no ``prefix_blocks``) is formatted directly: the same text, several
    times faster for a large trace."""
    for spec in specs:
        name, key, priority = spec.name, spec.prefix_key, spec.priority
        arrival, prefix, suffix, output = spec.arrival, spec.prefix_tokens, spec.suffix_tokens, spec.output_tokens
        if (type(name) is not str or not (key is None or type(key) is str) or spec.prefix_blocks is not None
                or not type(arrival) is type(prefix) is type(suffix) is type(output) is int
                or not (priority is None or type(priority) is int)):
            yield "    " + json.dumps(spec.to_json())
            continue
        yield (f'    {{"name": {_encode(name)}, "arrival": {arrival}, '
               f'"prefix_key": {"null" if key is None else _encode(key)}, "prefix_tokens": {prefix}, '
               f'"suffix_tokens": {suffix}, "output_tokens": {output}'
               + ("}" if priority is None else f', "priority": {priority}}}'))


def workload_sha256(specs: list[RequestSpec]) -> str:
    """sha256 (hex) of the canonical workload text (without the units note), hashed a chunk at a
    time (:func:`workload_json_chunks`): the whole text is never held."""
    hasher = hashlib.sha256()
    for chunk in workload_json_chunks(specs, units=False):
        hasher.update(chunk.encode("utf-8"))
    return hasher.hexdigest()


def workload_json_chunks(specs: list[RequestSpec], units: bool = True):
    """:func:`workload_to_json` ``(specs, units)`` as text chunks, :data:`_LINES_PER_CHUNK` request
    lines each (joined, they are that text, byte for byte): a large workload is streamed to disk or
    hashed without its whole text in memory (a 10^6-request workload is about 120 MB of text)."""
    if not specs:
        yield workload_to_json(specs, units=units)
        return
    head = _head_lines(specs, units)
    yield "{\n" + head + "  \"requests\": [\n"
    lines = _request_lines(specs)
    separator = ""
    while True:
        chunk = ",\n".join(islice(lines, _LINES_PER_CHUNK))
        if not chunk:
            break
        yield separator + chunk
        separator = ",\n"
    yield "\n  ]\n}\n"


def _hashed_chunks(specs: list[RequestSpec], hasher):
    """:func:`workload_json_chunks` ``(specs, units=True)`` as ``(text, its UTF-8 bytes)`` pairs, each
    encoded once, feeding ``hasher`` the canonical text (the same without its ``units`` line) as it goes."""
    chunks = workload_json_chunks(specs, units=True)
    first = next(chunks)   # "{\n" + the units line + the rest of the head (or the whole text of no request)
    data = first.encode("utf-8")
    hasher.update(("{\n" + first[2 + len(_UNITS_LINE):]).encode("utf-8"))
    yield first, data
    for chunk in chunks:
        data = chunk.encode("utf-8")
        hasher.update(data)
        yield chunk, data


def write_workload_json(specs: list[RequestSpec], handle) -> str:
    """Write :func:`workload_to_json` ``(specs, units=True)`` to the binary file ``handle`` as
    UTF-8, a chunk at a time (:func:`workload_json_chunks`), and return :func:`workload_sha256`
    ``(specs)`` hashed from the same chunks: the text is formatted once, never held whole (the
    canonical text hashed is the written one without its ``units`` line). Raises what writing
    ``handle`` raises (``OSError``)."""
    hasher = hashlib.sha256()
    for _, data in _hashed_chunks(specs, hasher):
        handle.write(data)
    return hasher.hexdigest()


def workload_json_and_sha256(specs: list[RequestSpec]) -> tuple[str, str]:
    """``(workload_to_json(specs, units=True), workload_sha256(specs))`` with the text built once
    (the canonical text is the same without its ``units`` line).

    The request lines are joined and hashed a chunk of :data:`_LINES_PER_CHUNK` at a time, then
    the chunks joined once: beyond the text itself, memory holds its chunks, not a string per
    request and several whole copies (a 10^6-request workload is about 120 MB of text)."""
    hasher = hashlib.sha256()
    text = "".join([chunk for chunk, _ in _hashed_chunks(specs, hasher)])
    return text, hasher.hexdigest()


#: Request lines joined (and hashed) at a time by :func:`workload_json_and_sha256`.
_LINES_PER_CHUNK = 8192
