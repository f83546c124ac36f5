"""What the tokens of a KV block are, for the prefix cache's hashes (vllm-engine.md §3 last item):
which workload source each run of a block's tokens comes from, where a request's private blocks
start, and when two wholly shared prompts are the same tokens.

A ``prefix_key`` K names its first ``prefix_tokens`` tokens, a ``prefix_blocks`` id names
``block_size`` tokens of the workload's own block size, the rest of a prompt is the request's own
(``("r", name)``: names are unique), and every output token is the same token, exactly as the oracle
corpus builds prompts. Positions and counts are tokens; block indexes count blocks of the engine's
``block_size`` from 0. Used by :mod:`sched.vllm.kv_cache`.
"""

from __future__ import annotations

__all__ = ["NEVER", "block_tokens", "private_from", "prompt_key"]


#: A block index no request reaches.
NEVER = 1 << 62


def private_from(spec, prompt: int, block_size: int) -> int:
    """The index of ``spec``'s first private block (the first holding one of its own prompt tokens),
    or a number no block index reaches when the whole prompt is shared.

    A prompt of ``prompt`` tokens whose first ``shared`` tokens come from a prefix key or workload
    blocks has its own tokens at positions ``shared .. prompt − 1``: block ``shared // block_size``
    is the first to hold one. Without own tokens nothing is private: returns a number no block
    index reaches (output blocks chain from a shared parent and two requests can share them)."""
    if spec.prefix_blocks is not None:
        shared = min(prompt, len(spec.prefix_blocks) * spec.block_size)
    elif spec.prefix_key is not None:
        shared = spec.prefix_tokens
    else:
        shared = 0
    return shared // block_size if shared < prompt else NEVER


def prompt_key(spec) -> tuple:
    """What a wholly shared prompt is made of (two requests with equal keys have equal tokens)."""
    if spec.prefix_blocks is not None:   # the tokens themselves: an id's first tokens are the same at any size
        return ("b", tuple(block_tokens(spec, spec.prompt_tokens, 0, spec.prompt_tokens)))
    return ("k", spec.prompt_tokens, spec.prefix_key, spec.prefix_tokens)


def block_tokens(spec, prompt: int, start: int, end: int) -> tuple:
    """The tokens at positions ``start .. end − 1`` of a request as runs ``(source, first, count)``.

    Sources: ``("k", K)`` the shared prefix of key K, ``("b", type, id)`` a workload block id (so
    1 and "1" differ), ``("r", name)`` the request's own prompt tokens, ``("o",)`` output tokens (all
    the same token, so their runs carry no position).
    """
    runs = []
    pos = start
    if spec.prefix_blocks is not None:
        size = spec.block_size
        shared = min(prompt, len(spec.prefix_blocks) * size)
        while pos < min(end, shared):
            block_id = spec.prefix_blocks[pos // size]
            stop = min(end, shared, (pos // size + 1) * size)
            runs.append((("b", type(block_id).__name__, block_id), pos % size, stop - pos))
            pos = stop
    elif spec.prefix_key is not None and pos < spec.prefix_tokens:
        shared = spec.prefix_tokens
        stop = min(end, shared)
        # The oracle draws a key's ids as 16-bit halves of 32-bit words: for an odd length the last
        # id is the high half of its word, the id of position ``shared`` in a longer draw.
        if shared % 2 and stop == shared:
            if stop - 1 > pos:
                runs.append((("k", spec.prefix_key), pos, stop - 1 - pos))
            runs.append((("k", spec.prefix_key), shared, 1))
        else:
            runs.append((("k", spec.prefix_key), pos, stop - pos))
        pos = stop
    if pos < min(end, prompt):
        runs.append((("r", spec.name), pos, min(end, prompt) - pos))
        pos = min(end, prompt)
    if pos < end:
        runs.append((("o",), 0, end - pos))
    return tuple(runs)
