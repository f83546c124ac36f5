"""The rules every reader of a real run applies to the engine settings it finds (issue 18, item 1).

One rule for every format (request JSONL + ``meta.json``, a ``vllm bench serve`` file, a vLLM
OpenTelemetry run directory):

- ``--block-size`` alone keeps the KV capacity **in tokens** the files state: vLLM counted the
  file's blocks at the file's block size, so they are counted again at the flag's,
  ``floor(tokens / block_size)`` (:func:`rescaled_blocks`, :func:`blocks_at_flag_size`); fewer than
  two blocks (vLLM's null block plus one) is refused naming both values.
- A run that does not say whether async scheduling was on gets its vLLM version's default: off
  before 0.14, on since, off when the version is unknown (:func:`default_async_scheduling`,
  :func:`with_mode`); the output says which.
- A request too large for the KV cache names what set its size (:func:`kv_source`).

Problems are one :class:`~sched.base.cmdline.InputError` naming the file (or flag) and field.
"""

from __future__ import annotations

import os

from ..base.cmdline import InputError
from .runmeta import FLAG_NAMES, value_at

__all__ = ["rescaled_blocks", "blocks_at_flag_size", "default_async_scheduling", "with_mode", "kv_source",
           "version_tuple"]


def rescaled_blocks(document, places: dict, flags: dict, path: str, tokens=None) -> tuple[int, str] | None:
    """A meta file's or benchmark's block count re-counted at ``--block-size`` (the KV capacity in
    tokens the file states is kept: ``floor(tokens / block_size)``, tokens = the file's KV tokens or
    blocks x its block size); ``None`` when no flag changes the block size or the file lacks either
    number (the settings check then names what is missing)."""
    if "block_size" not in flags or "num_gpu_blocks" in flags:
        return None
    blocks, size = (_whole_at(document, places[key]) for key in ("num_gpu_blocks", "block_size"))
    if blocks is None or size is None or size == flags["block_size"] or blocks < 2 or size < 1:
        return None
    if not (isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0):
        tokens = blocks * size
    block_size = flags["block_size"]
    name = os.path.basename(path)
    _at_least_two(tokens, block_size, name)
    return tokens // block_size, (
        f"num_gpu_blocks {tokens // block_size} = {name}'s KV capacity of {tokens} tokens (num_gpu_blocks {blocks} x "
        f"block_size {size}) / --block-size {block_size}, floor: a --block-size flag keeps the KV capacity in "
        "tokens the file states (give --num-gpu-blocks to set the count itself)")


def _at_least_two(tokens: int, block_size: int, file_name: str) -> None:
    """vLLM needs two KV blocks (one is its null block): refuse a --block-size the file's KV
    capacity of ``tokens`` tokens cannot hold twice, naming both."""
    if tokens // block_size < 2:
        raise InputError(f"--block-size {block_size}: {file_name}'s KV capacity of {tokens} tokens holds "
                         f"{tokens // block_size} blocks of {block_size} tokens; vLLM needs at least 2 (give a smaller "
                         "--block-size, or --num-gpu-blocks)")


def _whole_at(document, places: tuple):
    """The first of ``places`` present in ``document`` as a whole number (a benchmark's text "16"
    counts), or ``None``."""
    for place in places:
        value = value_at(document, place)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if value is not None:
            return None
    return None


def version_tuple(text) -> tuple:
    """``"0.11.0"`` -> ``(0, 11, 0)``; ``()`` when unknown (sorts before every version)."""
    parts = []
    for part in str(text or "").split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def default_async_scheduling(version) -> bool:
    """vLLM's default ``async_scheduling`` for a version string: off before 0.14, on since; off
    when the version is unknown (the one rule of every reader, said in the run's notes)."""
    return version_tuple(version) >= (0, 14)


def with_mode(settings: dict, notes: list, said, flags: dict, source: str,
               path: str | None = None, version=None) -> tuple[dict, list]:
    """``settings`` with ``async_scheduling``: the flag's (said when it differs), else what the run
    says it ran (a string ``"true"`` of a benchmark's metadata counts), else the default of the
    run's vLLM ``version`` (:func:`default_async_scheduling`, said)."""
    if isinstance(said, str) and said.lower() in ("true", "false"):
        said = said.lower() == "true"
    if said is not None and not isinstance(said, bool):
        raise InputError(f"{path or source}: field 'async_scheduling': must be true or false, got {str(said)[:40]!r}")
    if "async_scheduling" in flags:
        mode = flags["async_scheduling"]
        shown = "--async-scheduling" if mode else "--no-async-scheduling"
        if said is None:
            notes = notes + [f"async_scheduling {mode} from {shown} ({source} does not say)"]
        elif bool(said) != mode:
            notes = notes + [f"async_scheduling {mode} from {shown}, which wins over {source}'s {said!r}"]
    else:
        mode = bool(said) if said is not None else default_async_scheduling(version)
        if said is None:
            shown = "--no-async-scheduling" if mode else "--async-scheduling"
            notes = notes + [f"async_scheduling not in {source}: {'on' if mode else 'off'} (vLLM "
                             f"{version or '?'}'s default{'' if version_tuple(version) else ', the version unknown'}; "
                             f"give {shown} if the run differed)"]
    return dict(settings, async_scheduling=mode), notes


def kv_source(flags: dict, file_name: str, derived_from_memory: bool = False) -> str:
    """What set a run's KV size, for a request that cannot fit it: ``"the KV size from
    --num-gpu-blocks 10"``, ``"... from vllm.log and --block-size 48"``, ``"... from meta.json"``,
    or the derivation from the GPU's memory (``flags``: the settings given as flags by the user)."""
    parts = [f"{FLAG_NAMES[key]} {flags[key]}" for key in ("num_gpu_blocks", "block_size") if key in flags]
    if "num_gpu_blocks" not in flags:
        parts.insert(0, f"the derivation from the GPU's memory ({file_name}'s figures)" if derived_from_memory
                     else file_name)
    return "the KV size from " + " and ".join(parts)


def blocks_at_flag_size(in_log: dict, log: dict, block_size: int, given: dict) -> tuple[int, str | None]:
    """The log's block count re-counted at ``--block-size`` so the KV capacity in tokens stays the
    log's (vLLM counted its blocks at the log's block size): ``floor(tokens / block_size)``, tokens =
    the logged ``GPU KV cache size`` (else blocks x the log's block size, vLLM's CUDA default 16
    when the log names none). Returns ``(blocks, note)``; the note is ``None`` when the sizes agree."""
    blocks, logged = in_log["num_gpu_blocks"], in_log["block_size"] or 16
    if block_size == logged:
        return blocks, None
    overridden = given.get("num_gpu_blocks_override") is not None
    tokens = log["kv_tokens"] if log["kv_tokens"] and not overridden else blocks * logged
    if not isinstance(tokens, int) or isinstance(tokens, bool):
        return blocks, None   # a non-number is refused, naming the log, by the settings check
    counted = "num_gpu_blocks_override" if overridden else "num_gpu_blocks"
    _at_least_two(tokens, block_size, "vllm.log")
    return tokens // block_size, (
        f"num_gpu_blocks {tokens // block_size} = vllm.log's KV capacity of {tokens} tokens ({counted} {blocks} "
        f"x block_size {logged}{'' if in_log['block_size'] else ' (vLLM default)'}) / --block-size {block_size}, "
        "floor: a --block-size flag keeps the KV capacity in tokens the log states (give --num-gpu-blocks to "
        "set the count itself)")
