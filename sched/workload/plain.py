"""The quick road for the common workload file (lab.md §7): a file in the canonical layout whose
requests plainly pass every rule is read column by column, and a plain request object is accepted
without its full check. Shortcuts only: each never accepts what :mod:`sched.workload.validation`
refuses, and builds the same :class:`sched.workload.specs.RequestSpec` list.
"""

from __future__ import annotations

from itertools import repeat

from .file import canonical_columns, decode_json
from .rules import (MAX_ARRIVAL, MAX_NAME_LENGTH, MAX_PRIORITY, MAX_TOKENS, WORKLOAD_RULES, encodable,
                    field_problems)
from .specs import RequestSpec

__all__ = ["PLAIN_KEYS", "plain_fields", "canonical_specs", "plain_columns"]


PLAIN_KEYS = frozenset(("name", "arrival", "prefix_key", "prefix_tokens", "suffix_tokens", "output_tokens"))


def plain_fields(raw) -> dict | None:
    """``raw`` as valid fields when it plainly passes every field rule of :data:`REQUEST_RULES`
    (exactly the six required fields, plus ``priority`` or not, no field given twice, plain
    integers in range, a printable name of at most :data:`MAX_NAME_LENGTH` characters, a non-empty
    key or null); ``None`` otherwise, and the
    full check (:func:`field_problems`) decides. A shortcut only: it never accepts what the full
    check refuses."""
    if getattr(raw, "repeated", ()) or not PLAIN_KEYS.issubset(raw) or len(raw) > 7:
        return None
    priority = raw.get("priority")
    if len(raw) == 7 and ("priority" not in raw or priority is not None and (
            type(priority) is not int or not -MAX_PRIORITY <= priority <= MAX_PRIORITY)):
        return None
    name, key, arrival = raw["name"], raw["prefix_key"], raw["arrival"]
    prefix, suffix, output = raw["prefix_tokens"], raw["suffix_tokens"], raw["output_tokens"]
    if (type(name) is str and name.strip() and len(name) <= MAX_NAME_LENGTH and name.isprintable()
            and (key is None or type(key) is str and key.strip() and encodable(key))
            and type(arrival) is int and 0 <= arrival <= MAX_ARRIVAL
            and type(prefix) is int and 0 <= prefix <= MAX_TOKENS
            and type(suffix) is int and 0 <= suffix <= MAX_TOKENS
            and type(output) is int and 1 <= output <= MAX_TOKENS):
        return dict(raw)
    return None


def canonical_specs(text: str | list, source: str) -> list[RequestSpec] | None:
    """The requests of ``text`` when it is in the canonical layout (:func:`canonical_columns`), its
    header passes :data:`WORKLOAD_RULES` and its columns :func:`plain_columns`; ``None`` otherwise,
    and the full decode and check decide. A shortcut only: it never accepts what they refuse, and
    builds the same :class:`RequestSpec` list.

    ``text`` may be a one-item list holding the text: once the columns pass, the item is removed
    before the specs are made, so a text nothing else holds is freed first (a 10⁶-request file
    is about 128 MB of text); when the quick road refuses, the text stays there."""
    held = text if isinstance(text, list) else None
    found = canonical_columns(held[0] if held is not None else text)
    del text
    if found is None:
        return None
    header_text, columns = found
    try:
        header = decode_json(header_text)
    except (ValueError, RecursionError):
        return None
    if (not isinstance(header, dict) or field_problems(header, WORKLOAD_RULES, source)[0]
            or not plain_columns(*columns)):
        return None
    if held is not None:
        held.clear()   # the columns hold every value: the text is not needed any more
    none, block_size, tick_ms = repeat(None), repeat(header.get("block_size")), repeat(header.get("tick_ms"))
    return [*map(RequestSpec, *columns, none, block_size, tick_ms)]


def plain_columns(names, arrivals, keys, prefixes, suffixes, outputs, priorities) -> bool:
    """Whether requests given column by column (one value per request in each sequence) pass every
    rule of :func:`sched.workload.validation.validate_workload` for a request without ``prefix_blocks``: the field rules of
    :data:`REQUEST_RULES` (a printable, non-blank name of at most :data:`MAX_NAME_LENGTH`
    characters; integers in range; a non-blank key or None; priority None or in range), then
    :func:`sched.workload.validation._request_problems` (a prompt of at least 1 token; key None exactly when prefix_tokens is
    0) and :func:`sched.workload.validation._add_workload_problems` (unique names; one prefix_tokens per key)."""
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
    return all((key is None) == (tokens == 0) and (key is None or key.strip() and encodable(key))
               for key, tokens in pairs) \
        and len({key for key, _ in pairs}) == len(pairs)
