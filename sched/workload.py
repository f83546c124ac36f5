"""Workload records, loading and validation, and the lab's scenarios (lab.md §2, §7).

A workload is an ordered list of :class:`RequestSpec`. On disk it is a JSON object::

    {"requests": [{"name": "L0", "arrival": 0, "prefix_key": "SYS", "prefix_tokens": 128,
                   "suffix_tokens": 384, "output_tokens": 24}, ...]}

Times are ticks, lengths are tokens. The order of the list is the *workload order* that breaks
ties between requests arriving in the same tick.

Validation (README "输入校验与退出码") collects every problem of a file, one line each naming the
file, the request (index and name) and the field. The fields and their bounds live in two small tables,
:data:`WORKLOAD_RULES` and :data:`REQUEST_RULES`; rules relating fields follow them.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Callable

from .files import read_regular_text

__all__ = [
    "RequestSpec",
    "workload_tick_ms",
    "WorkloadError",
    "SCENARIOS",
    "REQUEST_FIELDS",
    "scenario",
    "MAX_TOKENS",
    "MAX_ARRIVAL",
    "MAX_PRIORITY",
    "MAX_BLOCK_ID",
    "MAX_TICK_MS",
    "MAX_NAME_LENGTH",
    "name_problem",
    "closest_field",
    "REQUEST_RULES",
    "WORKLOAD_RULES",
    "load_workload",
    "parse_workload",
    "validate_workload",
    "workload_to_json",
    "workload_sha256",
    "workload_json_and_sha256",
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
    ``prefix_blocks`` (block-level sharing, README §14.1) lists the ids of the prompt's leading blocks
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


# --- reading and validation ---------------------------------------------------------------------

#: Bounds of the integer fields. Beyond them a value is a typo, not a workload: a million tokens is
#: longer than any model's context, and every walked tick costs simulation time.
MAX_TOKENS = 10**6
MAX_ARRIVAL = 10**9
MAX_PRIORITY = 10**9
#: Largest absolute value of an integer block id (a signed 64-bit hash; ids are compared exactly).
MAX_BLOCK_ID = 2**63 - 1
#: Largest ``tick_ms`` header value (one hour per tick), as ``import --tick-ms`` allows.
MAX_TICK_MS = 3_600_000.0
#: Longest request name in characters. A full timeline names every waiting and active request in
#: every tick, so output grows with name length × ticks: 64 characters holds any real request id
#: (a UUID is 36, vLLM's ``cmpl-`` + 32 hex digits 37) and keeps the full-timeline bound
#: (FULL_TIMELINE_MAX_NAMES mentions) below about 70 MB.
MAX_NAME_LENGTH = 64


def _show(value) -> str:
    """A JSON value as the learner wrote it, shortened for a one-line message."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


class _HugeNumber:
    """A number literal too large to hold: an integer of over 30 digits (Python refuses int() of
    over 4300) or a float beyond the float range such as ``1e400``. Kept so validation can name it."""

    def __init__(self, text: str, integer: bool) -> None:
        self.integer, self.negative = integer, text.startswith("-")
        self.text = f"an integer of {len(text.lstrip('-'))} digits" if integer else text[:30]

    def __str__(self) -> str:
        return self.text


def _parse_int(text: str):
    return int(text) if len(text) <= 30 else _HugeNumber(text, integer=True)


def _parse_float(text: str):
    value = float(text)
    return value if math.isfinite(value) else _HugeNumber(text, integer=False)


class _JsonObject(dict):
    """A decoded JSON object that remembers keys written more than once (JSON keeps the last)."""

    repeated: tuple = ()


def _object(pairs) -> _JsonObject:
    obj = _JsonObject(pairs)
    if len(obj) < len(pairs):
        seen: set = set()
        obj.repeated = tuple(dict.fromkeys(k for k, _ in pairs if k in seen or seen.add(k)))
    return obj


def _integer(low: int, high: int, unit: str):
    """A field rule: an integer in ``[low, high]`` (``unit`` explains the upper bound)."""
    def check(value) -> str | None:
        if isinstance(value, bool):
            return f"must be an integer, got {_show(value)} (a boolean)"
        if isinstance(value, float):
            if not math.isfinite(value):
                return f"must be an integer, got {_show(value)} (not a number JSON allows)"
            hint = f"; write {int(value)}" if value.is_integer() else ""
            return f"must be an integer, got {_show(value)}{hint}"
        if isinstance(value, str):
            return f"must be an integer, got the string {_show(value)}"
        if isinstance(value, _HugeNumber):
            if value.integer and value.negative:
                return f"must be at least {low}, got {value}"
            if value.integer:
                return f"must be at most {high} ({unit}), got {value}"
            return f"must be an integer, got {value}"
        if not isinstance(value, int):
            return f"must be an integer, got {_show(value)}"
        if value < low:
            return f"must be at least {low}, got {value}"
        if value > high:
            return f"must be at most {high} ({unit}), got {value}"
        return None
    return check


def _text(value) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return f"must be a non-empty string, got {_show(value)}"
    if len(value) > MAX_NAME_LENGTH:
        return f"must be at most {MAX_NAME_LENGTH} characters, got {len(value)}"
    if not value.isprintable():
        return f"must be printable (no tabs, line breaks or control characters), got {_show(value)}"
    return None


def name_problem(value) -> str | None:
    """Why ``value`` cannot be a request ``name`` (lab.md §7: a printable string of 1..MAX_NAME_LENGTH
    characters), as the tail of a message ("must be ..."); ``None`` when it can."""
    return _text(value)


def _string(value) -> str | None:
    return None if isinstance(value, str) else f"must be a string, got {_show(value)}"


def _key(value) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        return f"must be a non-empty string or null, got {_show(value)}"
    return None


def _tick_ms(value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TICK_MS:
        return f"must be a number of milliseconds above 0 and at most {MAX_TICK_MS:g}, got {_show(value)}"
    return None


def _request_list(value) -> str | None:
    return None if isinstance(value, list) else f"must be a list of request objects, got {_show(value)}"


@dataclass(frozen=True, slots=True)
class _Rule:
    """How one field is checked: required or optional, may it be null, and its value check."""

    required: bool
    check: Callable[[object], str | None]  # the value -> a problem text, or None when valid
    nullable: bool = False


#: Top-level fields of a workload file (lab.md §7).
WORKLOAD_RULES = {
    "requests": _Rule(True, _request_list),
    "description": _Rule(False, _string),
    "units": _Rule(False, _string),  # the note a run's workload.json carries; ignored when read
    "block_size": _Rule(False, _integer(1, MAX_TOKENS, "tokens per block")),  # with prefix_blocks
    "tick_ms": _Rule(False, _tick_ms),  # milliseconds per tick at import; provenance, carried unchanged
}

#: Fields of one request, in the order they are written (lab.md §2, §7; compare.md §1 for priority).
REQUEST_RULES = {
    "name": _Rule(True, _text),
    "arrival": _Rule(True, _integer(0, MAX_ARRIVAL, "ticks")),
    "prefix_key": _Rule(True, _key),
    "prefix_tokens": _Rule(True, _integer(0, MAX_TOKENS, "tokens per request")),
    "suffix_tokens": _Rule(True, _integer(0, MAX_TOKENS, "tokens per request")),
    "output_tokens": _Rule(True, _integer(1, MAX_TOKENS, "tokens per request")),
    "priority": _Rule(False, _integer(-MAX_PRIORITY, MAX_PRIORITY, "priority range"), nullable=True),
    "prefix_blocks": _Rule(False, lambda value: _blocks(value), nullable=True),
}


def load_workload(path: str) -> list[RequestSpec]:
    """Read and validate a workload file (JSON, see module docstring; a UTF-8 BOM is accepted).

    Returns the requests in workload order. Raises :class:`WorkloadError` whose ``problems`` list
    every problem found, each naming ``path``, the request (index and name) and the field.
    """
    try:
        text = read_regular_text(path, encoding="utf-8-sig")  # a FIFO is refused, never waited on
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such workload file", source=path) from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory, not a workload file", source=path) from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not UTF-8 text (byte {exc.start})", source=path) from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read workload file ({exc.strerror or exc})", source=path) from None
    return parse_workload(text, source=path)


def parse_workload(text: str, source: str = "<workload>") -> list[RequestSpec]:
    """Parse and validate workload JSON text; ``source`` names it in messages.

    ``NaN``, ``Infinity`` and too large numbers are decoded so that validation can name the
    request and field they sit in. Raises :class:`WorkloadError`.
    """
    if not text.strip():
        raise WorkloadError(f"{source}: file is empty; expected a JSON object with a 'requests' list",
                            source=source)
    try:
        data = json.loads(text, object_pairs_hook=_object, parse_int=_parse_int, parse_float=_parse_float)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{source}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                            source=source) from None
    except RecursionError:
        raise WorkloadError(f"{source}: JSON nested too deeply", source=source) from None
    return validate_workload(data, source)


def validate_workload(data, source: str) -> list[RequestSpec]:
    """Validate decoded JSON as a workload (lab.md §2, §7) and build its requests.

    Every problem is collected, then raised together as one :class:`WorkloadError` (its
    ``problems`` hold one line each: file, request index and name, field, what is wrong). A rule
    that relates fields is checked whenever those fields are valid themselves, so one request can
    show several problems. An empty ``requests`` list is valid.
    """
    if not isinstance(data, dict):
        raise WorkloadError(f"{source}: top level must be a JSON object with a 'requests' list, "
                            f"got {_show(data)}", source=source)
    problems, header = _field_problems(data, WORKLOAD_RULES, f"{source}: field")
    requests = []  # (label, fields that passed their rule, problems) per request object
    for index, raw in enumerate(header.get("requests", ())):
        label = f"request {index}"
        if not isinstance(raw, dict):
            problems.append(f"{source}: {label}: must be a JSON object, got {_show(raw)}")
            continue
        if isinstance(raw.get("name"), str) and raw["name"].strip():
            name = raw["name"]
            label += f" ({name})" if name.isprintable() and len(name) <= MAX_NAME_LENGTH else f" ({_show(name)})"
        where = f"{source}: {label}"
        fields = _plain_fields(raw)   # the common case, checked quickly; anything else: every rule
        found = [] if fields is not None else None
        if found is None:
            found, fields = _field_problems(raw, REQUEST_RULES, f"{where}: field")
        requests.append((label, fields, found + _request_problems(fields, where)))
    _add_workload_problems(requests, source)
    _add_block_problems(requests, header, "block_size" in data, source)
    for _, _, found in requests:
        problems += found
    if problems:
        raise WorkloadError(_summary(problems), source=source, problems=problems)
    return [_spec(fields, header.get("block_size"), header.get("tick_ms")) for _, fields, _ in requests]


_PLAIN_KEYS = frozenset(("name", "arrival", "prefix_key", "prefix_tokens", "suffix_tokens", "output_tokens"))


def _plain_fields(raw) -> dict | None:
    """``raw`` as valid fields when it plainly passes every field rule of :data:`REQUEST_RULES`
    (exactly the six required fields, plus ``priority`` or not, no field given twice, plain
    integers in range, a printable name of at most :data:`MAX_NAME_LENGTH` characters, a non-empty
    key or null); ``None`` otherwise, and the
    full check (:func:`_field_problems`) decides. A shortcut only: it never accepts what the full
    check refuses."""
    if getattr(raw, "repeated", ()) or not _PLAIN_KEYS.issubset(raw) or len(raw) > 7:
        return None
    priority = raw.get("priority")
    if len(raw) == 7 and ("priority" not in raw or priority is not None and (
            type(priority) is not int or not -MAX_PRIORITY <= priority <= MAX_PRIORITY)):
        return None
    name, key, arrival = raw["name"], raw["prefix_key"], raw["arrival"]
    prefix, suffix, output = raw["prefix_tokens"], raw["suffix_tokens"], raw["output_tokens"]
    if (type(name) is str and name.strip() and len(name) <= MAX_NAME_LENGTH and name.isprintable()
            and (key is None or type(key) is str and key.strip())
            and type(arrival) is int and 0 <= arrival <= MAX_ARRIVAL
            and type(prefix) is int and 0 <= prefix <= MAX_TOKENS
            and type(suffix) is int and 0 <= suffix <= MAX_TOKENS
            and type(output) is int and 1 <= output <= MAX_TOKENS):
        return dict(raw)
    return None


def _summary(problems: list[str]) -> str:
    return problems[0] if len(problems) == 1 else f"{len(problems)} problems; first: {problems[0]}"


def _field_problems(raw: dict, rules: dict, where: str) -> tuple[list[str], dict]:
    """Missing, unknown, repeated and ill-typed fields of one JSON object, one line each.

    A misspelt field is reported once: as unknown, with the missing name it most likely means.
    Returns the problems and the fields whose values passed their rule (name -> value).
    """
    problems = [f"{where} {field!r}: given more than once (JSON keeps only the last)"
                for field in getattr(raw, "repeated", ())]
    unknown = {field: _closest(field, rules) for field in raw if field not in rules}
    valid = {}
    for field, rule in rules.items():
        if field not in raw:
            if rule.required and field not in unknown.values():
                problems.append(f"{where} {field!r}: missing")
            continue
        problem = None if rule.nullable and raw[field] is None else rule.check(raw[field])
        if problem:
            problems.append(f"{where} {field!r}: {problem}")
        else:
            valid[field] = raw[field]
    for field, closest in unknown.items():
        hint = f"did you mean {closest!r}?" if closest else "valid fields are " + ", ".join(rules)
        problems.append(f"{where} {field!r}: unknown field; {hint}")
    return problems, valid


def _closest(field: str, rules: dict) -> str | None:
    """The valid field name closest to ``field`` (ignoring case), or None when none is close."""
    lowered = {name.lower(): name for name in rules}
    match = difflib.get_close_matches(str(field).lower(), lowered, n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


closest_field = _closest  # for other files' did-you-mean hints (step-model.json)


def _request_problems(fields: dict, where: str) -> list[str]:
    """Rules relating the (individually valid) fields of one request (lab.md §2)."""
    problems = []
    prefix, suffix = fields.get("prefix_tokens"), fields.get("suffix_tokens")
    if prefix is not None and suffix is not None and prefix + suffix < 1:
        problems.append(f"{where}: field 'suffix_tokens': the prompt has 0 tokens; "
                        "prefix_tokens + suffix_tokens must be at least 1")
    if "prefix_key" in fields and prefix is not None:
        key = fields["prefix_key"]
        if key is None and prefix > 0:
            problems.append(f"{where}: field 'prefix_key': is null but prefix_tokens is {prefix}; "
                            "a shared prefix needs a key")
        if key is not None and prefix == 0:
            problems.append(f"{where}: field 'prefix_tokens': is 0 but prefix_key is {key!r}; "
                            "a shared prefix needs at least 1 token")
    return problems


def _add_workload_problems(requests: list[tuple[str, dict, list[str]]], source: str) -> None:
    """Rules across requests, added to the later request's problems: unique names; one length
    per prefix key (an exact shared prefix)."""
    names: dict[str, str] = {}
    prefixes: dict[str, tuple[str, int]] = {}
    for label, fields, found in requests:
        where = f"{source}: {label}"
        name, key, tokens = fields.get("name"), fields.get("prefix_key"), fields.get("prefix_tokens")
        if name is not None:
            first = names.setdefault(name, label)
            if first != label:
                found.append(f"{where}: field 'name': duplicate of {first}; "
                             "names must be unique")
        if key is None or not tokens:
            continue
        first, first_tokens = prefixes.setdefault(key, (label, tokens))
        if first_tokens != tokens:
            found.append(f"{where}: field 'prefix_tokens': is {tokens} but {first} gives "
                         f"prefix_key {key!r} {first_tokens} tokens; an exact shared prefix has one length")


# --- block-level prefixes (README §14): header ``block_size`` + per-request ``prefix_blocks`` -------

def _blocks(value) -> str | None:
    """Field rule of ``prefix_blocks``: a non-empty list of block ids, each an integer of absolute value
    at most :data:`MAX_BLOCK_ID` or a non-empty string; ids are compared exactly (``1`` and ``"1"`` differ)."""
    if not isinstance(value, list) or not value or not all(
            (isinstance(b, int) and not isinstance(b, bool) and abs(b) <= MAX_BLOCK_ID)
            or (isinstance(b, str) and b.strip()) for b in value):
        return (f"must be a non-empty list of block ids (integers of absolute value at most 2**63 - 1, "
                f"or non-empty strings), got {_show(value)}")
    return None


def _add_block_problems(requests: list[tuple[str, dict, list[str]]], header: dict, given: bool,
                        source: str) -> None:
    """A request with ``prefix_blocks`` has ``prefix_key: null`` and ``prefix_tokens: 0`` (the
    blocks cover the prompt's first tokens), the workload header then gives ``block_size``
    (``given``: the field is present, valid or not), and the blocks lie inside the prompt:
    ``len(prefix_blocks) <= ceil(prompt tokens / block_size)`` (a block past the prompt would
    cache tokens the request never had)."""
    size = header.get("block_size")
    for label, fields, found in requests:
        blocks = fields.get("prefix_blocks")
        if blocks is None:
            continue
        where = f"{source}: {label}: field 'prefix_blocks'"
        if fields.get("prefix_key") is not None or fields.get("prefix_tokens"):
            found.append(f"{where}: replaces prefix_key; needs prefix_key null and prefix_tokens 0")
        if not given:
            found.append(f"{where}: needs the workload header field 'block_size' (tokens per block)")
        prompt = fields.get("prefix_tokens", 0) + fields.get("suffix_tokens", 0)
        if size is not None and "suffix_tokens" in fields and prompt >= 1 and len(blocks) > -(-prompt // size):
            found.append(f"{where}: {len(blocks)} blocks of {size} tokens but the prompt has {prompt} tokens; "
                         f"at most ceil({prompt} / {size}) = {-(-prompt // size)} blocks")


def workload_tick_ms(specs: list[RequestSpec]) -> float | None:
    """The workload header's ``tick_ms`` (ms one tick stood for at import), or None if not recorded.

    The header value is carried on every request of the workload (an empty workload has none).
    """
    return next((spec.tick_ms for spec in specs if spec.tick_ms is not None), None)


def _spec(fields: dict, block_size: int | None, tick_ms: float | None = None) -> RequestSpec:
    """The :class:`RequestSpec` of validated fields; block ids become a tuple."""
    blocks = fields.pop("prefix_blocks", None)
    return RequestSpec(**fields, prefix_blocks=None if blocks is None else tuple(blocks), block_size=block_size,
                       tick_ms=tick_ms)


#: The note ``workload.json`` carries as its ``units`` field (ignored when read back).
WORKLOAD_UNITS = "arrival in abstract ticks; prefix_tokens, suffix_tokens, output_tokens in tokens"


def workload_to_json(specs: list[RequestSpec], units: bool = False) -> str:
    """The canonical workload text: one request per line, fixed field order, newline at end.

    With ``units`` the object starts with a ``units`` note (as in a run's ``workload.json``). A
    workload with block-level prefixes then has a ``"block_size"`` header line, an imported one a
    ``"tick_ms"`` line; one without either is written exactly as before.
    """
    lines = ",\n".join("    " + json.dumps(spec.to_json()) for spec in specs)
    body = f"\n{lines}\n  " if specs else ""
    head = f"  \"units\": {json.dumps(WORKLOAD_UNITS)},\n" if units else ""
    block_size = next((spec.block_size for spec in specs if spec.block_size is not None), None)
    if block_size is not None:
        head += f"  \"block_size\": {block_size},\n"
    tick_ms = workload_tick_ms(specs)
    if tick_ms is not None:
        head += f"  \"tick_ms\": {json.dumps(tick_ms)},\n"
    return "{\n" + head + "  \"requests\": [" + body + "]\n}\n"


def workload_sha256(specs: list[RequestSpec]) -> str:
    """sha256 (hex) of the canonical workload text (without the units note)."""
    return hashlib.sha256(workload_to_json(specs).encode("utf-8")).hexdigest()


def workload_json_and_sha256(specs: list[RequestSpec]) -> tuple[str, str]:
    """``(workload_to_json(specs, units=True), workload_sha256(specs))`` with the text built once
    (the canonical text is the same without its ``units`` line)."""
    text = workload_to_json(specs, units=True)
    units = f"  \"units\": {json.dumps(WORKLOAD_UNITS)},\n"
    return text, hashlib.sha256(("{\n" + text[2 + len(units):]).encode("utf-8")).hexdigest()
