"""The automatic prefix cache (APC) of one simulated case (lab.md §3 steps 3 and 5).

Infinite, no eviction, cold at the start of every case. A request *hits* when its ``prefix_key``
is already cached at its admission; it then skips ``prefix_tokens`` of prefill, but at least one
prompt token is always computed (as in vLLM).

Block-level sharing (issue 6): a request with ``prefix_blocks`` hits the longest *leading* run of
its blocks already cached, times ``block_size`` tokens, with the same cap. ``prefix_key`` is the
one-block case: key K with P prefix tokens behaves as ``prefix_blocks [K]`` with block size P.
Entries are inserted when the producing request's prefill completes.

Example: cached blocks {1, 2, 7}; a request with blocks [1, 2, 3, 7], block size 16 and a 100-token
prompt hits 2 × 16 = 32 tokens (block 7 does not count: block 3 breaks the leading run).
"""

from __future__ import annotations

from .workload import RequestSpec

__all__ = ["PrefixCache"]


class PrefixCache:
    """Set of cached prefix keys and block ids; one instance per simulated case."""

    def __init__(self) -> None:
        self._keys: set[str] = set()
        self._blocks: set = set()

    def hit_tokens(self, spec: RequestSpec) -> int:
        """Prompt tokens a request admitted now may skip (0 on a miss), in tokens."""
        if spec.prefix_blocks is not None:
            leading = 0
            for block in spec.prefix_blocks:
                if block not in self._blocks:
                    break
                leading += 1
            return min(leading * spec.block_size, spec.prompt_tokens - 1)
        if spec.prefix_key is None or spec.prefix_key not in self._keys:
            return 0
        return min(spec.prefix_tokens, spec.prompt_tokens - 1)

    def insert(self, spec: RequestSpec) -> None:
        """Record the request's prefix as cached (called when its prefill completes)."""
        if spec.prefix_blocks is not None:
            self._blocks.update(spec.prefix_blocks)
        elif spec.prefix_key is not None:
            self._keys.add(spec.prefix_key)

    def __len__(self) -> int:
        return len(self._keys) + len(self._blocks)
