"""One strict JSON reader for the files the program reads back as facts (formats.md).

Plain :func:`json.loads` is lenient in three ways that let a wrong value through silently:

- a key written twice keeps the **last** value (``{"a": 1, "a": 2}`` is ``{"a": 2}``);
- ``NaN``, ``Infinity`` and ``-Infinity`` decode as floats, although JSON (RFC 8259 §6) has no
  such values, and ``1e400`` decodes as infinity;
- ``2588.0`` decodes as a float that compares equal to the integer ``2588``.

:func:`strict_json` refuses the first two at the place they are written, naming the file (or the
line) and the key; :func:`whole_number` refuses the third where a setting or a count is read.
Workload files have their own decoder with the same rules (:mod:`sched.workload.file`); every
other file the program reads back (``step-model.json``, a real run's result lines, a run's
``manifest.json`` and ``summary.json``) goes through this one.
"""

from __future__ import annotations

import json
import math

from .cmdline import MAX_COUNT, InputError, number_or_none, one_line

__all__ = ["strict_json", "whole_number", "printable_text", "check_provenance"]

#: Longest integer literal accepted (digits): larger ones are no measurement and cannot become floats.
_MAX_DIGITS = 30


class _Refused(Exception):
    """Raised by the fast decoder's hooks; the text is then decoded again to name the field."""


def _refuse(*_):
    raise _Refused


def _pairs(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) < len(pairs):
        raise _Refused
    return obj


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise _Refused
    return int(text)


def _finite_or_none(text: str):
    value = float(text)
    return value if math.isfinite(value) else None


#: The fast decoders: any of the problems stops them at once (built once, not per call). The
#: second reads NaN, Infinity and 1e999 as null, for a format whose writer uses them for "not
#: measured" (vLLM's benchmark results, their meta.json); a key written twice still stops it.
_DECODE = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_refuse, parse_float=_float,
                           parse_int=_int).decode
_DECODE_NAN_AS_NULL = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=lambda _: None,
                                       parse_float=_finite_or_none, parse_int=_int).decode


class _Bad:
    """What the naming decoder leaves where a refused value was: the reason, for the error line."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Twice(dict):
    """An object with a key written twice (named by ``twice``)."""

    twice = ""


def _named_pairs(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set = set()
        obj = _Twice(obj)
        obj.twice = next(key for key, _ in pairs if key in seen or seen.add(key))
    return obj


def _named_float(text: str):
    value = float(text)
    return value if math.isfinite(value) else _Bad(f"must be a finite number, got Infinity (written {text[:30]})")


def _named_int(text: str):
    digits = len(text.lstrip("-"))
    return int(text) if digits <= _MAX_DIGITS else _Bad(f"an integer of {digits} digits is no measurement")


_NAMING = json.JSONDecoder(
    object_pairs_hook=_named_pairs, parse_float=_named_float, parse_int=_named_int,
    parse_constant=lambda name: _Bad(f"must be a finite number, got {name} (JSON has no such value; "
                                     "write null when nothing was measured)")).decode


_NAMING_NAN_AS_NULL = json.JSONDecoder(object_pairs_hook=_named_pairs, parse_float=_finite_or_none,
                                       parse_int=_named_int, parse_constant=lambda _: None).decode


def _first_problem(value, path: str):
    """``(path, reason)`` of the first refused value in ``value`` (depth first, in file order), or None."""
    if isinstance(value, _Bad):
        return path, value.reason
    if isinstance(value, dict):
        if isinstance(value, _Twice):
            return (f"{path}.{value.twice}" if path else value.twice,
                    "written twice in one object (JSON would keep only the last); write it once")
        for key, item in value.items():
            found = _first_problem(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_problem(item, f"{path}[{index}]")
            if found:
                return found
    return None


def strict_json(text: str, where: str, id_field: str | None = None, nan_as_null: bool = False):
    """Decode JSON ``text`` strictly; ``where`` names the file (and line) in every error.

    Returns the decoded value (objects as ``dict``). Raises :class:`~sched.base.cmdline.InputError`
    ``"<where>: field '<path>': <reason>"`` (``path`` like ``step_ms.a`` or ``train_names[1]``) for
    a key written twice in one object, ``NaN``/``Infinity``, a number beyond the float range
    (``1e999``) or an integer of more than 30 digits; ``"<where>: not valid JSON ..."`` for bad
    syntax or nesting too deep. With ``id_field`` (e.g. ``request_id`` for one result line), a
    refused object names its record too: ``"<where> (<id>): field ..."``. With ``nan_as_null``,
    ``NaN``, ``Infinity`` and numbers beyond the float range decode as ``None`` instead (never as
    a number); keys written twice are still refused.
    """
    try:
        return (_DECODE_NAN_AS_NULL if nan_as_null else _DECODE)(text)
    except _Refused:
        decoded = _NAMING(text) if not nan_as_null else _NAMING_NAN_AS_NULL(text)
        found = _first_problem(decoded, "")
        path, reason = found if found else ("", "refused")
        record = decoded.get(id_field) if id_field and isinstance(decoded, dict) else None
        if isinstance(record, (str, int)) and not isinstance(record, bool) and path != id_field:
            where = f"{where} ({one_line(str(record))[:64]})"
        raise InputError(f"{where}: field {path!r}: {reason}" if path else f"{where}: {reason}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None


def whole_number(value, where: str, low: int = 0, high: int = MAX_COUNT) -> int:
    """``value`` if it is a JSON integer within ``[low, high]``; ``where`` names file and field.

    ``"2588"``, ``true`` and ``NaN`` are "not a finite number", ``-1`` is out of range, ``3.7`` is
    "not a whole number", and ``2588.0`` is refused too, never coerced: a count or a setting is
    written as an integer, a float there means the file was made or edited by something else
    (the rule workload files keep, lab.md §7). Raises :class:`~sched.base.cmdline.InputError`.
    """
    number = number_or_none(value, where, low, high)
    if number is None:
        raise InputError(f"{where}: missing or not a finite number")
    if type(number) is not int:
        if number != int(number):
            raise InputError(f"{where}: must be a whole number, got {number!r}")
        raise InputError(f"{where}: must be a whole number written without a decimal point, got {number!r}")
    return number


def printable_text(value, where: str, limit: int = 200) -> str:
    """``value`` if it is a string of at most ``limit`` printable characters (no line break, tab or
    escape: it is printed on one line of a table or an error message). Raises
    :class:`~sched.base.cmdline.InputError` naming ``where``."""
    if not isinstance(value, str):
        raise InputError(f"{where}: must be a string, got {json.dumps(value)[:40]}")
    if not value.isprintable():
        bad = next(ch for ch in value if not ch.isprintable())
        raise InputError(f"{where}: holds the control character {bad.encode('unicode_escape').decode('ascii')}; "
                         "it must be one line of printable text")
    if len(value) > limit:
        raise InputError(f"{where}: longer than {limit} characters ({len(value)})")
    return value


def check_provenance(value, source: str, path: str, depth: int = 0) -> None:
    """Refuse free provenance (a step model's ``fitted_on``: text, numbers, true/false, null, and
    lists or objects of those) holding text that is not one line of printable characters
    (:func:`printable_text`, up to 1,000 characters) or nested more than 8 levels. Errors read
    ``"<source>: field '<path>': ..."`` with ``path`` extended by each key and index
    (``fitted_on.runs[0].model``). Raises :class:`InputError`."""
    where = f"{source}: field {path!r}"
    if depth > 8:
        raise InputError(f"{where}: nested more than 8 levels")
    if isinstance(value, str):
        printable_text(value, where, 1000)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_provenance(item, source, f"{path}[{index}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_provenance(item, source, f"{path}.{printable_text(key, f'{where}: a key', 100)}", depth + 1)
    elif not isinstance(value, (int, float, bool, type(None))):
        raise InputError(f"{where}: must be text, a number, true/false or null, got {type(value).__name__}")
