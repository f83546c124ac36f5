"""The learner's two notes (``prediction.md``, ``diagnosis.md``) and whether one is still the template.

The lab ships both notes as templates in its folder (README, course steps 2 and 10); the learner
fills them in place. A note that still has the template's bytes was never filled in: ``grade``
reports it in its ``notes`` column, and ``handin`` warns about it (the learner may still hand it
in). Both use :func:`is_template` (``grade`` through :func:`unchanged_template`, which also takes the
instructor's own copy of a template), so the two commands never disagree.
"""

from __future__ import annotations

import hashlib

__all__ = ["TEMPLATE_SHA256", "unchanged_template", "is_template"]

#: sha256 of each template as shipped (line ends read as LF). tests/test_course_notes.py checks these
#: against the files in the lab folder, so a template edited without updating its digest fails there.
TEMPLATE_SHA256 = {
    "prediction.md": "39e2de1182a2de9993750bf97ad3f35d964aa68ef3ede9ea2a7a69fa5b4d561f",
    "diagnosis.md": "990bbdb5bb3e6a44301cba05f5d58c692598ca6f1e9e0383d20a68aa166b5ff1",
}


def _digest_of(data: bytes) -> str:
    return hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest()


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return _digest_of(handle.read())
    except (OSError, ValueError):   # ValueError: a path with a NUL in it
        return None


def is_template(data: bytes, note: str) -> bool:
    """Whether ``data``, the bytes of the note ``note`` (``prediction.md`` or ``diagnosis.md``), are
    the unfilled template shipped with the lab (CRLF line ends read as LF; :data:`TEMPLATE_SHA256`)."""
    return _digest_of(data) == TEMPLATE_SHA256.get(note)


def unchanged_template(path: str, note: str, template: str | None = None) -> bool:
    """Whether the note file at ``path`` (``note``: its name, ``prediction.md`` or ``diagnosis.md``) is the
    unfilled template: the same bytes, CRLF line ends read as LF, as the template shipped with the
    lab (:data:`TEMPLATE_SHA256`) or, given, as the template file at ``template`` (the grading
    instructor's own copy). ``False`` for a file that cannot be read (a missing note is the
    caller's case). Never raises."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (OSError, ValueError):   # ValueError: a path with a NUL in it
        return False
    return is_template(data, note) or (template is not None and _digest_of(data) == _digest(template))
