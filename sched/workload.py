"""Workload records, loading and validation, and the lab's scenarios (lab.md §2, §7).

A workload is an ordered list of :class:`RequestSpec`. On disk it is a JSON object::

    {"requests": [{"name": "L0", "arrival": 0, "prefix_key": "SYS", "prefix_tokens": 128,
                   "suffix_tokens": 384, "output_tokens": 24}, ...]}

Times are ticks, lengths are tokens. The order of the list is the *workload order* that breaks
ties between requests arriving in the same tick.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace

__all__ = [
    "RequestSpec",
    "WorkloadError",
    "SCENARIOS",
    "REQUEST_FIELDS",
    "scenario",
    "load_workload",
    "parse_workload",
    "workload_to_json",
    "workload_sha256",
]

#: Request fields in the order they are written (lab.md §7); ``priority`` is optional.
REQUEST_FIELDS = ("name", "arrival", "prefix_key", "prefix_tokens", "suffix_tokens", "output_tokens")
OPTIONAL_FIELDS = ("priority", "prefix_blocks")


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
    ``prefix_blocks`` (block-level sharing, issue 6) lists the ids of the prompt's leading blocks
    of ``block_size`` tokens (the workload header's); it replaces ``prefix_key`` (then ``None``).
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


#: Scenario name -> builder of its workload (lab.md §2; ``priority-mix`` for compare.md §1).
SCENARIOS = {
    "baseline": _baseline,
    "prefix-broken": _prefix_broken,
    "output-heavy": _output_heavy,
    "priority-mix": _priority_mix,
}


def scenario(name: str) -> list[RequestSpec]:
    """The workload of a named scenario; raises :class:`WorkloadError` for an unknown name."""
    try:
        return SCENARIOS[name]()
    except KeyError:
        raise WorkloadError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}") from None


# --- reading and writing -----------------------------------------------------------------------

#: Largest count accepted for any integer field: beyond it a value is a typo, not a workload.
MAX_INT = 10**9


def _reject_constant(token: str):
    raise ValueError(f"{token} is not a number JSON allows")


def load_workload(path: str) -> list[RequestSpec]:
    """Read and validate a workload file (JSON, see module docstring).

    Raises :class:`WorkloadError` naming ``path``, the request and the field for every problem.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such workload file", source=path) from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory, not a workload file", source=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{path}: cannot read workload file ({exc})", source=path) from None
    return parse_workload(text, source=path)


def parse_workload(text: str, source: str = "<workload>") -> list[RequestSpec]:
    """Parse and validate workload JSON text; ``source`` names it in messages."""
    if not text.strip():
        raise WorkloadError(f"{source}: file is empty; expected a JSON object with a 'requests' list",
                            source=source)
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{source}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                            source=source) from None
    except ValueError as exc:
        raise WorkloadError(f"{source}: {exc}", source=source) from None
    return validate_workload(data, source)


def validate_workload(data, source: str) -> list[RequestSpec]:
    """Validate decoded JSON as a workload; every problem is collected, then raised together."""
    if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
        raise WorkloadError(f"{source}: top level must be an object with a 'requests' list", source=source)
    unknown = sorted(set(data) - {"requests", "description", "units", "block_size"})
    if unknown:
        raise WorkloadError(f"{source}: unknown top-level field {unknown[0]!r}", source=source)
    problems: list[str] = []
    specs: list[RequestSpec] = []
    for index, raw in enumerate(data["requests"]):
        spec = _validate_request(raw, index, source, problems)
        if spec is not None:
            specs.append(spec)
    names: dict[str, int] = {}
    for index, spec in enumerate(specs):
        if spec.name in names:
            problems.append(f"{source}: request {index} ({spec.name}): field 'name': duplicate of request {names[spec.name]}")
        names.setdefault(spec.name, index)
    if not problems:
        specs = _with_blocks(data, specs, source, problems)
    if problems:
        raise WorkloadError(problems[0] if len(problems) == 1 else
                            f"{len(problems)} problems; first: {problems[0]}", source=source, problems=problems)
    return specs


def _validate_request(raw, index: int, source: str, problems: list[str]) -> RequestSpec | None:
    where = f"{source}: request {index}"
    if not isinstance(raw, dict):
        problems.append(f"{where}: must be an object, got {type(raw).__name__}")
        return None
    if isinstance(raw.get("name"), str):
        where += f" ({raw['name']})"
    before = len(problems)
    for field in REQUEST_FIELDS:
        if field not in raw:
            problems.append(f"{where}: field {field!r}: missing")
    for field in raw:
        if field not in REQUEST_FIELDS and field not in OPTIONAL_FIELDS:
            problems.append(f"{where}: field {field!r}: unknown field")
    if len(problems) > before:
        return None
    name, key = raw["name"], raw["prefix_key"]
    if not isinstance(name, str) or not name:
        problems.append(f"{where}: field 'name': must be a non-empty string")
    if key is not None and (not isinstance(key, str) or not key):
        problems.append(f"{where}: field 'prefix_key': must be a non-empty string or null")
    for field, low in (("arrival", 0), ("prefix_tokens", 0), ("suffix_tokens", 0), ("output_tokens", 1)):
        _check_int(raw[field], low, f"{where}: field {field!r}", problems)
    if "priority" in raw and raw["priority"] is not None:
        _check_int(raw["priority"], -MAX_INT, f"{where}: field 'priority'", problems)
    if len(problems) > before:
        return None
    if raw["prefix_tokens"] + raw["suffix_tokens"] < 1:
        problems.append(f"{where}: field 'suffix_tokens': the prompt must have at least 1 token")
    if key is None and raw["prefix_tokens"] > 0:
        problems.append(f"{where}: field 'prefix_key': prefix_tokens > 0 needs a prefix_key")
    if key is not None and raw["prefix_tokens"] == 0:
        problems.append(f"{where}: field 'prefix_tokens': prefix_key {key!r} needs prefix_tokens > 0")
    if len(problems) > before:
        return None
    return RequestSpec(name, raw["arrival"], key, raw["prefix_tokens"], raw["suffix_tokens"],
                       raw["output_tokens"], raw.get("priority"))


def _check_int(value, low: int, what: str, problems: list[str]) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{what}: must be an integer, got {json.dumps(value)}")
    elif not low <= value <= MAX_INT:
        problems.append(f"{what}: must be between {low} and {MAX_INT}, got {value}")


#: The note ``workload.json`` carries as its ``units`` field (ignored when read back).
WORKLOAD_UNITS = "arrival in abstract ticks; prefix_tokens, suffix_tokens, output_tokens in tokens"


def workload_to_json(specs: list[RequestSpec], units: bool = False) -> str:
    """The canonical workload text: one request per line, fixed field order, newline at end.

    With ``units`` the object starts with a ``units`` note (as in a run's ``workload.json``). A
    workload with block-level prefixes then has a ``"block_size"`` header line; one without is
    written exactly as before.
    """
    lines = ",\n".join("    " + json.dumps(spec.to_json()) for spec in specs)
    body = f"\n{lines}\n  " if specs else ""
    head = f"  \"units\": {json.dumps(WORKLOAD_UNITS)},\n" if units else ""
    block_size = next((spec.block_size for spec in specs if spec.block_size is not None), None)
    if block_size is not None:
        head += f"  \"block_size\": {block_size},\n"
    return "{\n" + head + "  \"requests\": [" + body + "]\n}\n"


# --- block-level prefixes (issue 6): header ``block_size`` + per-request ``prefix_blocks`` -------

def _with_blocks(data: dict, specs: list[RequestSpec], source: str, problems: list[str]) -> list[RequestSpec]:
    """Attach validated ``prefix_blocks`` and the header's ``block_size`` to already valid specs.

    Rules: ``block_size`` a positive integer (needed as soon as one request has blocks);
    ``prefix_blocks`` a non-empty list of integers or non-empty strings, only with
    ``prefix_key: null`` and ``prefix_tokens: 0`` (the blocks cover the prompt's first tokens).
    """
    block_size = data.get("block_size")
    if "block_size" in data:
        _check_int(block_size, 1, f"{source}: field 'block_size'", problems)
    out = []
    for index, (raw, spec) in enumerate(zip(data["requests"], specs)):
        blocks = raw.get("prefix_blocks")
        if blocks is None:
            out.append(spec if block_size is None else replace(spec, block_size=block_size))
            continue
        where = f"{source}: request {index} ({spec.name}): field 'prefix_blocks'"
        if not isinstance(blocks, list) or not blocks or not all(
                (isinstance(b, int) and not isinstance(b, bool)) or (isinstance(b, str) and b) for b in blocks):
            problems.append(f"{where}: must be a non-empty list of integers or non-empty strings")
        elif spec.prefix_key is not None or spec.prefix_tokens:
            problems.append(f"{where}: replaces prefix_key; needs prefix_key null and prefix_tokens 0")
        elif block_size is None:
            problems.append(f"{where}: needs the workload header field 'block_size'")
        out.append(replace(spec, prefix_blocks=tuple(blocks), block_size=block_size))
    return out


def workload_sha256(specs: list[RequestSpec]) -> str:
    """sha256 (hex) of the canonical workload text (without the units note)."""
    return hashlib.sha256(workload_to_json(specs).encode("utf-8")).hexdigest()
