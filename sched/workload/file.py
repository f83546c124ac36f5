"""Decoding workload files (lab.md §7) for :mod:`sched.workload.validation`, which checks what they hold.

:func:`decode_json` keeps what plain :func:`json.loads` loses: keys written twice, integers too long
to hold and floats beyond range (``1e400``), so that validation can name them.

:func:`canonical_columns` reads the canonical layout :func:`sched.workload.specs.workload_to_json`
writes (one request per line, fixed field order), as ``import`` and every run's ``workload.json``
have it, column by column without a dict per request: a large trace loads in a fraction of the
time. It only reads; any other layout, escape or number form gives ``None`` and the file is
decoded in full.
"""

from __future__ import annotations

import json
import math
import re
from itertools import chain

__all__ = ["HugeNumber", "JsonObject", "decode_json", "canonical_columns"]


class HugeNumber:
    """A number literal too large to hold: an integer of over 30 digits (Python refuses int() of
    over 4300) or a float beyond the float range such as ``1e400``. Kept so validation can name it."""

    def __init__(self, text: str, integer: bool) -> None:
        self.integer, self.negative = integer, text.startswith("-")
        self.text = f"an integer of {len(text.lstrip('-'))} digits" if integer else text[:30]

    def __str__(self) -> str:
        return self.text


def _parse_int(text: str):
    return int(text) if len(text) <= 30 else HugeNumber(text, integer=True)


def _parse_float(text: str):
    value = float(text)
    return value if math.isfinite(value) else HugeNumber(text, integer=False)


class JsonObject(dict):
    """A decoded JSON object that remembers keys written more than once (JSON keeps the last)."""

    repeated: tuple = ()


def _object(pairs) -> JsonObject:
    obj = JsonObject(pairs)
    if len(obj) < len(pairs):
        seen: set = set()
        obj.repeated = tuple(dict.fromkeys(k for k, _ in pairs if k in seen or seen.add(k)))
    return obj


def decode_json(text: str):
    """JSON text -> Python values; objects are :class:`JsonObject`, over-long integers and
    out-of-range floats :class:`HugeNumber` (``NaN`` and ``Infinity`` decode as floats).

    Raises :class:`json.JSONDecodeError` for bad JSON, :class:`RecursionError` for too deep nesting.
    """
    return json.loads(text, object_pairs_hook=_object, parse_int=_parse_int, parse_float=_parse_float)


# --- the canonical layout -------------------------------------------------------------------------

_INT = r"(0|[1-9][0-9]{0,15})"   # a JSON integer >= 0 of at most 16 digits; longer ones: decoded in full
_STR = r'[^"\\\x00-\x1f]*'       # a JSON string body without escapes: it reads as itself
#: One request line as ``workload_to_json`` writes it (``priority`` only when set), comma added.
_REQUEST_LINE = re.compile(
    r'^    \{"name": "(' + _STR + r')", "arrival": ' + _INT + r', "prefix_key": (null|"' + _STR + r'")'
    r', "prefix_tokens": ' + _INT + r', "suffix_tokens": ' + _INT + r', "output_tokens": ' + _INT
    + r'(?:, "priority": (-?(?:0|[1-9][0-9]{0,15})))?\},\n', re.MULTILINE)
_OPEN, _CLOSE = '\n  "requests": [\n', "\n  ]\n}"


def canonical_columns(text: str, keep: tuple | None = None) -> tuple[str, tuple] | None:
    """Split workload text in the canonical layout into its header and its requests' columns.

    Returns ``(header_text, columns)``: ``header_text`` is ``text`` with the ``requests`` list
    emptied (to decode and check as usual); ``columns`` are seven equally long sequences, one
    value per request in file order: names (str), arrivals (int), prefix keys (str or None),
    prefix, suffix and output tokens (int), priorities (int, or None where not given). Returns
    ``None`` unless the list has one request per line, each written exactly as
    :meth:`sched.workload.specs.RequestSpec.to_json` and :func:`json.dumps` write it (no escapes in
    strings, no ``prefix_blocks``): then the full decode decides. Values are not checked here.
    ``keep``: the positions of the columns to fill (``(0,)``: the names only), the others left
    empty; ``None``: all seven.
    """
    start = text.find(_OPEN)
    end = len(text) - len(_CLOSE) - text.endswith("\n")
    if start < 0 or not text.startswith(_CLOSE, end):
        return None
    # The lines are matched in chunks of about _CHUNK characters in place (no copy of the text),
    # each chunk's strings turned into column values at once: the memory beyond the text and the
    # columns stays that of one chunk, at any size. The last line has no comma: matched alone.
    begin = start + len(_OPEN)
    last = text.rfind("\n", begin, end) + 1 or begin
    columns = ([], [], [], [], [], [], [])
    # One int object per distinct token count (a count is one of few values; each int is 28 bytes):
    # the columns of a large workload then hold references, not an object per request and field.
    shared: dict = {}
    pieces = []
    at = begin
    while at < last:
        stop = text.find("\n", min(at + _CHUNK, last - 1)) + 1
        pieces.append((text, at, stop))
        at = stop
    tail = text[last:end] + ",\n"
    pieces.append((tail, 0, len(tail)))
    for piece, lo, hi in pieces:
        rows = _REQUEST_LINE.findall(piece, lo, hi)
        # Each match is one whole line (from a line start to its newline): as many as lines = all of them.
        if not rows or len(rows) != piece.count("\n", lo, hi):
            return None
        if keep is not None:   # a reader that needs a few columns: the others are never made
            for at in keep:
                texts = [row[at] for row in rows]
                columns[at].extend(texts if at == 0 else _column_values(at, texts))
            continue
        values = [*chain.from_iterable(rows)]   # row after row; every 7th value is one column (quicker than zip)
        names, arrivals, keys, prefixes, suffixes, outputs, priorities = (values[i::7] for i in range(7))
        for column, part in zip(columns, (
                names, map(int, arrivals), [None if key == "null" else key[1:-1] for key in keys],
                _shared(prefixes, shared), _shared(suffixes, shared), _shared(outputs, shared),
                [int(p) if p else None for p in priorities])):
            column.extend(part)
    return text[:start] + '\n  "requests": []\n}', columns


def _column_values(at: int, texts):
    """The values of column ``at`` (1 to 6) from its texts in the file, as the full read makes them."""
    if at == 2:
        return [None if key == "null" else key[1:-1] for key in texts]
    return [int(p) if p else None for p in texts] if at == 6 else map(int, texts)


def _shared(texts: list, table: dict):
    """The integers written in ``texts``, each value one object: ``table`` (text -> int, kept across
    chunks) gains the texts it lacks, then every text is looked up (quicker than parsing each)."""
    for text in dict.fromkeys(texts).keys() - table.keys():
        table[text] = int(text)
    return map(table.__getitem__, texts)


#: Characters of workload text matched at a time by :func:`canonical_columns` (about 8,000 requests).
_CHUNK = 1 << 20
