"""Reading and validation of workload files (lab.md §2, §7).

Validation (README "输入校验与退出码") collects every problem of a file, one line each naming the
file, the request (index and name) and the field. The fields and their bounds live in two small tables,
:data:`WORKLOAD_RULES` and :data:`REQUEST_RULES`; rules relating fields follow them.
Decoding the file's text is :mod:`sched.workload.file`'s part.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from itertools import repeat
from typing import Callable

from ..base.files import read_regular_text
from .specs import RequestSpec, WorkloadError
from .file import HugeNumber, canonical_columns, decode_json

__all__ = [
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
]


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
        if isinstance(value, HugeNumber):
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
    if value is not None and not _encodable(value):
        return f"must be Unicode text that UTF-8 can write (no lone surrogate such as \\ud800), got {_show(value)}"
    return None


def _encodable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (no lone surrogate from a ``\\ud800`` escape)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    """Read and validate a workload file (JSON, see :mod:`sched.workload.specs`; a UTF-8 BOM is accepted).

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
    request and field they sit in. Raises :class:`WorkloadError`. A file in the canonical layout
    whose requests plainly pass every rule is read column by column (:func:`_canonical_specs`),
    with the same result.
    """
    if not text.strip():
        raise WorkloadError(f"{source}: file is empty; expected a JSON object with a 'requests' list",
                            source=source)
    specs = _canonical_specs(text, source)
    if specs is not None:
        return specs
    try:
        data = decode_json(text)
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
            and (key is None or type(key) is str and key.strip() and _encodable(key))
            and type(arrival) is int and 0 <= arrival <= MAX_ARRIVAL
            and type(prefix) is int and 0 <= prefix <= MAX_TOKENS
            and type(suffix) is int and 0 <= suffix <= MAX_TOKENS
            and type(output) is int and 1 <= output <= MAX_TOKENS):
        return dict(raw)
    return None


def _canonical_specs(text: str, source: str) -> list[RequestSpec] | None:
    """The requests of ``text`` when it is in the canonical layout (:func:`canonical_columns`), its
    header passes :data:`WORKLOAD_RULES` and its columns :func:`_plain_columns`; ``None`` otherwise,
    and the full decode and check decide. A shortcut only: it never accepts what they refuse, and
    builds the same :class:`RequestSpec` list."""
    found = canonical_columns(text)
    if found is None:
        return None
    header_text, columns = found
    try:
        header = decode_json(header_text)
    except (ValueError, RecursionError):
        return None
    if (not isinstance(header, dict) or _field_problems(header, WORKLOAD_RULES, source)[0]
            or not _plain_columns(*columns)):
        return None
    none, block_size, tick_ms = repeat(None), repeat(header.get("block_size")), repeat(header.get("tick_ms"))
    return [*map(RequestSpec, *columns, none, block_size, tick_ms)]


def _plain_columns(names, arrivals, keys, prefixes, suffixes, outputs, priorities) -> bool:
    """Whether requests given column by column (one value per request in each sequence) pass every
    rule of :func:`validate_workload` for a request without ``prefix_blocks``: the field rules of
    :data:`REQUEST_RULES` (a printable, non-blank name of at most :data:`MAX_NAME_LENGTH`
    characters; integers in range; a non-blank key or None; priority None or in range), then
    :func:`_request_problems` (a prompt of at least 1 token; key None exactly when prefix_tokens is
    0) and :func:`_add_workload_problems` (unique names; one prefix_tokens per key)."""
    if ({*map(type, names)} - {str} or {*map(type, keys)} - {str, type(None)}
            or {*map(type, arrivals), *map(type, prefixes), *map(type, suffixes), *map(type, outputs)} - {int}
            or {*map(type, priorities)} - {int, type(None)}):
        return False
    counts = [*arrivals, *prefixes, *suffixes]
    given = [p for p in priorities if p is not None]
    if (not all(map(str.strip, names)) or max(map(len, names), default=0) > MAX_NAME_LENGTH
            or not all(map(str.isprintable, names)) or len(set(names)) < len(names)
            or min(counts, default=0) < 0 or max(arrivals, default=0) > MAX_ARRIVAL
            or max(prefixes, default=0) > MAX_TOKENS or max(suffixes, default=0) > MAX_TOKENS
            or min(outputs, default=1) < 1 or max(outputs, default=1) > MAX_TOKENS
            or any(abs(p) > MAX_PRIORITY for p in given) or not all(map(int.__add__, prefixes, suffixes))):
        return False
    pairs = set(zip(keys, prefixes))   # (key, prefix_tokens) as written: one pair per key, or a mismatch
    return all((key is None) == (tokens == 0) and (key is None or key.strip() and _encodable(key))
               for key, tokens in pairs) \
        and len({key for key, _ in pairs}) == len(pairs)


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


def _spec(fields: dict, block_size: int | None, tick_ms: float | None = None) -> RequestSpec:
    """The :class:`RequestSpec` of validated fields; block ids become a tuple."""
    blocks = fields.pop("prefix_blocks", None)
    return RequestSpec(**fields, prefix_blocks=None if blocks is None else tuple(blocks), block_size=block_size,
                       tick_ms=tick_ms)
