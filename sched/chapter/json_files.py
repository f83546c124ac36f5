"""Reading the serving-bench chapter's JSON files at the boundary (requests files, result files).

One reader for ``serving-bench run`` and ``serving-bench decide``, with the lab's workload rules:

- a leading UTF-8 BOM is accepted (as for lab workloads);
- a key given twice in one object is refused (JSON would silently keep the last);
- ``NaN``, ``Infinity`` and numbers too large for a float decode as :class:`NonFinite` (a float
  that is not finite and prints as written), so a check can say the true reason, e.g. "must be a
  finite number, got NaN", instead of "missing". :func:`finite_or_none` turns the ones nobody
  checks into ``None`` before a value is copied into a record.

Errors are :class:`~sched.base.cmdline.InputError` naming the file.
"""

from __future__ import annotations

import json
import math

from ..base.cmdline import InputError, parse_json, read_failure
from ..base.files import open_regular

__all__ = ["NonFinite", "read_text", "decode", "finite_or_none"]


class NonFinite(float):
    """A JSON number that is not finite (``NaN``, ``Infinity``, ``1e400``); ``repr`` is the text written."""

    text: str = "NaN"

    def __new__(cls, text: str):
        value = super().__new__(cls, "nan" if text == "NaN" else text)
        value.text = text
        return value

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


class _DuplicateKey(ValueError):
    pass


def _object(pairs):
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen.add(key)
    return dict(pairs)


def _float(text: str):
    value = float(text)
    return value if math.isfinite(value) else NonFinite(text)


def read_text(path: str, what: str) -> str:
    """The text of the regular file ``path`` (a leading BOM dropped); ``what`` names it in errors."""
    try:
        with open_regular(path, encoding="utf-8-sig") as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({read_failure(exc)})") from None


def decode(text: str, where: str):
    """JSON ``text`` decoded with the rules above; ``where`` (file, line) names it in errors."""
    try:
        return json.loads(text, object_pairs_hook=_object, parse_constant=NonFinite, parse_float=_float)
    except _DuplicateKey as exc:
        raise InputError(f"{where}: key {str(exc)!r} given more than once in one object "
                         "(JSON would keep only the last); write it once") from None
    except json.JSONDecodeError:
        return parse_json(text, where)  # the shared wording of syntax errors
    except (ValueError, RecursionError):
        return parse_json(text, where)  # too many digits, too deep: the shared messages


def finite_or_none(value):
    """``value`` with every :class:`NonFinite` inside replaced by ``None`` (JSON-ready again)."""
    if isinstance(value, NonFinite):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_or_none(v) for v in value]
    return value
