"""Reading and validation of workload files (lab.md §2, §7).

Validation (README "输入校验与退出码") collects every problem of a file, one line each naming the
file, the request (index and name) and the field. The fields and their bounds live in two small tables
(:mod:`sched.workload.rules`); the rules relating fields and requests follow here. The quick road
for a plain file is :mod:`sched.workload.plain`'s; decoding the file's text is
:mod:`sched.workload.file`'s.
"""

from __future__ import annotations

import json

from ..base.files import read_regular_text
from .file import decode_json
from .plain import canonical_specs as _canonical_specs, plain_fields as _plain_fields  # the quick road
from .rules import MAX_NAME_LENGTH, REQUEST_RULES, WORKLOAD_RULES, field_problems as _field_problems, show as _show
from .specs import RequestSpec, WorkloadError

__all__ = ["MAX_NAME_LENGTH", "REQUEST_RULES", "WORKLOAD_RULES", "load_workload", "parse_workload", "validate_workload"]


def load_workload(path: str) -> list[RequestSpec]:
    """Read and validate a workload file (JSON, see :mod:`sched.workload.specs`; a UTF-8 BOM is accepted).

    Returns the requests in workload order. Raises :class:`WorkloadError` whose ``problems`` list
    every problem found, each naming ``path``, the request (index and name) and the field.
    """
    try:
        held = [read_regular_text(path, encoding="utf-8-sig")]  # a FIFO is refused, never waited on
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such workload file", source=path) from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory, not a workload file", source=path) from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not UTF-8 text (byte {exc.start})", source=path) from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read workload file ({exc.strerror or exc})", source=path) from None
    return _parse_held(held, path)   # the text held by this list alone: freed once the quick road has its columns


def parse_workload(text: str, source: str = "<workload>") -> list[RequestSpec]:
    """Parse and validate workload JSON text; ``source`` names it in messages.

    ``NaN``, ``Infinity`` and too large numbers are decoded so that validation can name the
    request and field they sit in. Raises :class:`WorkloadError`. A file in the canonical layout
    whose requests plainly pass every rule is read column by column (:func:`_canonical_specs`),
    with the same result.
    """
    return _parse_held([text], source)


def _parse_held(held: list, source: str) -> list[RequestSpec]:
    """:func:`parse_workload` of the text ``held[0]`` (the quick road may take it out of the list)."""
    if not held[0].strip():
        raise WorkloadError(f"{source}: file is empty; expected a JSON object with a 'requests' list",
                            source=source)
    specs = _canonical_specs(held, source)
    if specs is not None:
        return specs
    text = held.pop()
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



def _summary(problems: list[str]) -> str:
    return problems[0] if len(problems) == 1 else f"{len(problems)} problems; first: {problems[0]}"



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
