"""Export (compare.md §4, formats.md): a workload for a real serving engine's benchmark client.

Input: a workload (``--workload FILE`` or ``--scenario``) and ``--tick-ms`` (milliseconds per
tick). Output: an export directory, described below; a real engine's results come back as a run
through ``import-results`` (:mod:`sched.timing.realrun`), which reads the ``workload.json`` written here.

**Export** (``export``): a workload becomes a directory a real benchmark client replays:

- ``requests.jsonl``: one line per request in workload order with ``prompt`` (text) and
  ``output_tokens`` (the two columns vLLM's custom JSONL dataset reads; it ignores the others),
  plus ``name`` (also as ``request_id``, the serving-bench chapter's column), ``prompt_tokens``,
  ``arrival_s`` (send offset in seconds), ``priority`` (lower = earlier, vLLM's convention; 0 when
  the workload gives none), ``prefix_key``, ``prefix_tokens``;
  a request with block-level prefixes also has ``prefix_blocks`` and ``block_size``.
- ``workload.json`` (the exact input, for ``import-results --workload``) and ``export.json`` (the
  mapping below, machine-readable).

What a simulator token means there: one simulator token is one model token. A prompt of ``n``
tokens is ``n`` words drawn from a fixed list of short common English words, separated by single
spaces (the first word has none; each later word with its leading space is one token in the usual
BPE tokenizers; the exact count may differ by a few, e.g. a BOS token, which the imported
``input_lens`` show). Requests with the same ``prefix_key``
start with the *same* ``prefix_tokens`` words (drawn from a generator seeded by the key), so a real
prefix cache can reuse them; the rest is drawn from a generator seeded by the request name.
A block workload (header ``block_size``, per-request ``prefix_blocks``, see :mod:`sched.lab.cache`)
is exported block by block: each *full* block of the prompt (``floor(prompt tokens / block_size)``
of them) is the same ``block_size`` words in every request that lists its id (drawn from a
generator seeded by the id; ``1`` and ``"1"`` differ), so requests sharing leading blocks share
exactly those words; a partial last block and the rest of the prompt are the request's own.
A tick has no physical duration: ``--tick-ms`` only turns arrival ticks into send offsets
(``arrival_s = arrival × tick_ms / 1000``); choose it so the real engine sees a queue. Without
it, the workload's own ``tick_ms`` header (written by ``import``) is used, else 100.
vLLM's benchmark client neither replays per-row send times nor sends per-row priorities: a replay
client sends row ``i`` at ``arrival_s`` after the start with ``"priority": <priority>`` in the
request body, against a server started with ``--scheduling-policy priority`` (or ``fcfs`` for the
baseline) and ``--max-num-seqs`` equal to the lab's ``max_active``.
"""

from __future__ import annotations

import argparse
import json
import os
import random

from .. import __version__
from ..base.safe_write import write_artifacts
from ..base.cmdline import EXIT_OK, InputError, LineParser, decimal, run_command
from .realrun import directory_arg, json_text, workload_arg  # imports flow one way: export -> realrun
from ..workload.specs import SCENARIOS, RequestSpec, scenario, workload_sha256, workload_tick_ms, workload_to_json

__all__ = ["export_rows", "render_export", "export_command", "DEFAULT_TICK_MS", "MAX_TICK_MS"]

DEFAULT_TICK_MS = 100.0
#: Largest ``--tick-ms`` accepted: one hour per tick (keeps every send offset a finite JSON number).
MAX_TICK_MS = 3_600_000.0

# Short common words, each one token with a leading space in the usual BPE vocabularies.
_WORDS = ("time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world",
          "school", "state", "family", "student", "group", "country", "problem", "hand", "part",
          "place", "case", "week", "company", "system", "program", "question", "work", "number",
          "night", "point", "home", "water", "room", "mother", "area", "money", "story", "fact",
          "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue",
          "side", "kind", "head", "house", "service", "friend", "father", "power", "hour", "game",
          "line", "end", "member", "law", "car")


def _words(seed: str, count: int) -> str:
    rng = random.Random(seed)
    return "".join(" " + rng.choice(_WORDS) for _ in range(count))


def _prompt(spec: RequestSpec) -> str:
    """The prompt text of ``spec``: shared words (its ``prefix_key``'s, or one run of ``block_size``
    words per full block) and then its own words, ``prompt_tokens`` words in all."""
    if spec.prefix_blocks is not None:
        full = min(len(spec.prefix_blocks), spec.prompt_tokens // spec.block_size)  # a partial block is its own
        shared = "".join(_words(f"block:{json.dumps(block)}", spec.block_size) for block in spec.prefix_blocks[:full])
        own = spec.prompt_tokens - full * spec.block_size
    else:
        shared = _words(f"prefix:{spec.prefix_key}", spec.prefix_tokens) if spec.prefix_key else ""
        own = spec.suffix_tokens
    return (shared + _words(f"suffix:{spec.name}", own)).lstrip(" ")


def _settle_tick_ms(specs: list[RequestSpec], tick_ms: float | None) -> tuple[float, str]:
    """Milliseconds per tick and where they come from: ``tick_ms`` when given, else the workload's
    ``tick_ms`` header (:class:`RequestSpec` ``tick_ms``), else :data:`DEFAULT_TICK_MS`."""
    if tick_ms is not None:
        return tick_ms, "--tick-ms"
    recorded = workload_tick_ms(specs)
    return (DEFAULT_TICK_MS, "default") if recorded is None else (recorded, "workload tick_ms")


def export_rows(specs: list[RequestSpec], tick_ms: float | None = None) -> list[dict]:
    """One benchmark-client row per request (see the module docstring for the columns).

    ``tick_ms`` > 0 maps arrival ticks to send offsets in seconds (``None``: the workload's
    ``tick_ms`` header, else :data:`DEFAULT_TICK_MS`). Prompts sharing a ``prefix_key`` share
    their first ``prefix_tokens`` words exactly; prompts sharing leading full blocks share exactly
    those blocks' words.
    """
    return list(_iter_export_rows(specs, tick_ms))


def _iter_export_rows(specs: list[RequestSpec], tick_ms: float | None):
    """The rows of :func:`export_rows` one at a time (a large export never holds every prompt)."""
    tick_ms, _ = _settle_tick_ms(specs, tick_ms)
    for spec in specs:
        row = {"prompt": _prompt(spec), "output_tokens": spec.output_tokens, "name": spec.name, "request_id": spec.name,
               "prompt_tokens": spec.prompt_tokens, "arrival_s": round(spec.arrival * tick_ms / 1000, 6),
               "priority": spec.priority or 0, "prefix_key": spec.prefix_key, "prefix_tokens": spec.prefix_tokens}
        if spec.prefix_blocks is not None:
            row.update(prefix_blocks=list(spec.prefix_blocks), block_size=spec.block_size)
        yield row


def render_export(specs: list[RequestSpec], source: str, tick_ms: float | None = None) -> dict:
    """The files of an export directory by name: ``requests.jsonl``, ``workload.json``, ``export.json``.

    ``requests.jsonl`` is an iterator of text lines, produced as it is written (see
    :func:`sched.base.safe_write.write_artifacts`); the other two are strings.

    ``tick_ms`` as in :func:`export_rows`; ``export.json`` records the value and ``tick_ms_from``
    (``--tick-ms``, ``workload tick_ms`` or ``default``)."""
    tick_ms, tick_ms_from = _settle_tick_ms(specs, tick_ms)
    meta = {
        "tool": "infer-sched-lab", "version": __version__, "kind": "export", "source": source,
        "workload_sha256": workload_sha256(specs), "num_requests": len(specs), "tick_ms": tick_ms,
        "tick_ms_from": tick_ms_from,
        "arrival": "arrival_s = arrival tick x tick_ms / 1000: send row i that many seconds after the start",
        "tokens": "one simulator token = one model token; prompts are words that are one token each in "
                  "usual BPE tokenizers (the real input_lens may differ by a few, e.g. a BOS token)",
        "prefix": "requests with the same prefix_key share their first prefix_tokens words exactly; with "
                  "prefix_blocks, each full block (block_size words) is the same words in every request "
                  "listing its id, a partial last block is the request's own",
        "priority": "send 'priority' in the request body (lower = earlier), server started with "
                    "--scheduling-policy priority; the baseline server uses fcfs",
        "columns": ["prompt", "output_tokens", "name", "request_id (= name)", "prompt_tokens", "arrival_s", "priority",
                    "prefix_key", "prefix_tokens", "prefix_blocks (block workloads only)",
                    "block_size (block workloads only)"],
    }
    return {
        "requests.jsonl": (json_text(row) for row in _iter_export_rows(specs, tick_ms)),
        "workload.json": workload_to_json(specs, units=True),
        "export.json": json_text(meta, indent=2),
    }


def _tick_ms(text: str) -> float:
    try:
        value = decimal(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_TICK_MS:
        raise argparse.ArgumentTypeError(f"must be a number of milliseconds above 0 and at most {MAX_TICK_MS:g} "
                                         f"(one hour), got {text!r}")
    return value


def _check_text_fields(specs: list[RequestSpec], source: str) -> None:
    """Names and prefix keys must be writable text (UTF-8): a lone surrogate such as ``\\udc80`` is refused."""
    for index, spec in enumerate(specs):
        for field in ("name", "prefix_key"):
            value = getattr(spec, field)
            try:
                (value or "").encode("utf-8")
            except UnicodeEncodeError:
                raise InputError(f"{source}: request {index}: field {field!r}: not valid text "
                                 f"(a lone surrogate such as {value!a})") from None


def _export(argv: list[str]) -> int:
    parser = LineParser(prog="infer_sched_lab.py export",
                        description="Export a workload for a real benchmark client (compare.md §4): "
                                    "requests.jsonl (prompt, output_tokens, arrival_s, priority, ...), "
                                    "workload.json and export.json in DIR.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--scenario", choices=tuple(SCENARIOS), help="built-in workload (default baseline)")
    source.add_argument("--workload", metavar="FILE", help="a workload JSON file")
    parser.add_argument("--out", metavar="DIR", required=True, type=directory_arg,
                        help="directory to write (new or empty unless --force)")
    parser.add_argument("--tick-ms", type=_tick_ms, default=None, metavar="MS",
                        help=f"milliseconds per tick for send offsets, above 0 and at most {MAX_TICK_MS:g} "
                             f"(default: the workload's tick_ms header, else {DEFAULT_TICK_MS:g})")
    parser.add_argument("--force", action="store_true", help="replace the export's own files in DIR")
    args = parser.parse_args(argv)
    if args.workload:
        specs, _ = workload_arg(args.workload)
        origin = f"workload:{os.path.basename(args.workload)}"
    else:
        name = args.scenario or "baseline"
        specs, origin = scenario(name), f"scenario:{name}"
    _check_text_fields(specs, args.workload or origin)
    files = render_export(specs, origin, args.tick_ms)
    write_artifacts(files, args.out, force=args.force)
    tick_ms, tick_ms_from = _settle_tick_ms(specs, args.tick_ms)
    print(f"exported {len(specs)} requests to {args.out}/ ({', '.join(files)}); tick = {tick_ms:g} ms "
          f"({tick_ms_from})")
    return EXIT_OK


def export_command(argv: list[str]) -> int:
    """The ``export`` subcommand; exit 0, or 2 for bad input or usage."""
    return run_command("infer_sched_lab.py export", _export, argv)
