"""The fields of a workload file and their bounds (lab.md §2, §7; compare.md §1 for ``priority``;
docs/handbook/real-traffic.md §14 for block-level prefixes): one small rule per field, in two tables,
:data:`WORKLOAD_RULES` (the header) and :data:`REQUEST_RULES` (one request), and
:func:`field_problems`, which holds one JSON object against a table. Rules relating several fields
or several requests are :mod:`sched.workload.validation`'s.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from typing import Callable

from .file import HugeNumber

__all__ = ["MAX_TOKENS", "MAX_ARRIVAL", "MAX_PRIORITY", "MAX_BLOCK_ID", "MAX_TICK_MS", "MAX_NAME_LENGTH",
           "name_problem", "closest_field", "encodable", "show", "field_problems", "Rule", "REQUEST_RULES",
           "WORKLOAD_RULES"]


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


def show(value) -> str:
    """A JSON value as the learner wrote it, shortened for a one-line message."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _integer(low: int, high: int, unit: str):
    """A field rule: an integer in ``[low, high]`` (``unit`` explains the upper bound)."""
    def check(value) -> str | None:
        if isinstance(value, bool):
            return f"must be an integer, got {show(value)} (a boolean)"
        if isinstance(value, float):
            if not math.isfinite(value):
                return f"must be an integer, got {show(value)} (not a number JSON allows)"
            hint = f"; write {int(value)}" if value.is_integer() else ""
            return f"must be an integer, got {show(value)}{hint}"
        if isinstance(value, str):
            return f"must be an integer, got the string {show(value)}"
        if isinstance(value, HugeNumber):
            if value.integer and value.negative:
                return f"must be at least {low}, got {value}"
            if value.integer:
                return f"must be at most {high} ({unit}), got {value}"
            return f"must be an integer, got {value}"
        if not isinstance(value, int):
            return f"must be an integer, got {show(value)}"
        if value < low:
            return f"must be at least {low}, got {value}"
        if value > high:
            return f"must be at most {high} ({unit}), got {value}"
        return None
    return check


def _text(value) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return f"must be a non-empty string, got {show(value)}"
    if len(value) > MAX_NAME_LENGTH:
        return f"must be at most {MAX_NAME_LENGTH} characters, got {len(value)}"
    if not value.isprintable():
        return f"must be printable (no tabs, line breaks or control characters), got {show(value)}"
    return None


def name_problem(value) -> str | None:
    """Why ``value`` cannot be a request ``name`` (lab.md §7: a printable string of 1..MAX_NAME_LENGTH
    characters), as the tail of a message ("must be ..."); ``None`` when it can."""
    return _text(value)


def _string(value) -> str | None:
    return None if isinstance(value, str) else f"must be a string, got {show(value)}"


def _key(value) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        return f"must be a non-empty string or null, got {show(value)}"
    if value is not None and not encodable(value):
        return f"must be Unicode text that UTF-8 can write (no lone surrogate such as \\ud800), got {show(value)}"
    return None


def encodable(text: str) -> bool:
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
        return f"must be a number of milliseconds above 0 and at most {MAX_TICK_MS:g}, got {show(value)}"
    return None


def _request_list(value) -> str | None:
    return None if isinstance(value, list) else f"must be a list of request objects, got {show(value)}"


@dataclass(frozen=True, slots=True)
class Rule:
    """How one field is checked: required or optional, may it be null, and its value check."""

    required: bool
    check: Callable[[object], str | None]  # the value -> a problem text, or None when valid
    nullable: bool = False



#: Top-level fields of a workload file (lab.md §7).
WORKLOAD_RULES = {
    "requests": Rule(True, _request_list),
    "description": Rule(False, _string),
    "units": Rule(False, _string),  # the note a run's workload.json carries; ignored when read
    "block_size": Rule(False, _integer(1, MAX_TOKENS, "tokens per block")),  # with prefix_blocks
    "tick_ms": Rule(False, _tick_ms),  # milliseconds per tick at import; provenance, carried unchanged
}

#: Fields of one request, in the order they are written (lab.md §2, §7; compare.md §1 for priority).
REQUEST_RULES = {
    "name": Rule(True, _text),
    "arrival": Rule(True, _integer(0, MAX_ARRIVAL, "ticks")),
    "prefix_key": Rule(True, _key),
    "prefix_tokens": Rule(True, _integer(0, MAX_TOKENS, "tokens per request")),
    "suffix_tokens": Rule(True, _integer(0, MAX_TOKENS, "tokens per request")),
    "output_tokens": Rule(True, _integer(1, MAX_TOKENS, "tokens per request")),
    "priority": Rule(False, _integer(-MAX_PRIORITY, MAX_PRIORITY, "priority range"), nullable=True),
    "prefix_blocks": Rule(False, lambda value: _blocks(value), nullable=True),
}


def field_problems(raw: dict, rules: dict, where: str) -> tuple[list[str], dict]:
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


closest_field = _closest  # for did-you-mean hints (step-model.json, the validation of a workload)


def _blocks(value) -> str | None:
    """Field rule of ``prefix_blocks``: a non-empty list of block ids, each an integer of absolute value
    at most :data:`MAX_BLOCK_ID` or a non-empty string; ids are compared exactly (``1`` and ``"1"`` differ)."""
    if not isinstance(value, list) or not value or not all(
            (isinstance(b, int) and not isinstance(b, bool) and abs(b) <= MAX_BLOCK_ID)
            or (isinstance(b, str) and b.strip()) for b in value):
        return (f"must be a non-empty list of block ids (integers of absolute value at most 2**63 - 1, "
                f"or non-empty strings), got {show(value)}")
    return None

