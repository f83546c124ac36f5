"""The automatic prefix cache (APC) of one simulated case (lab.md §3 steps 3 and 5).

Infinite, no eviction, cold at the start of every case. A request *hits* when its ``prefix_key``
is already cached at its admission; it then skips ``prefix_tokens`` of prefill, but at least one
prompt token is always computed (as in vLLM).

Block-level sharing (docs/handbook/real-traffic.md §14): only *full* blocks are cached (as vLLM caches only full blocks): a
request with ``prefix_blocks`` and a prompt of P tokens caches its blocks ``0 .. floor(P /
block_size) - 1`` when its prefill completes; a partial last block is never cached. A request hits
the longest *leading* run of its blocks already cached, times ``block_size`` tokens, capped at
P - 1 so at least one prompt token is computed. ``prefix_key`` is the one-block case: key K with
``prefix_tokens`` T behaves as ``prefix_blocks [K]`` with block size T (its prompt always covers T).

Example: cached blocks {1, 2, 7}; a request with blocks [1, 2, 3, 7], block size 16 and a 100-token
prompt hits 2 × 16 = 32 tokens (block 7 does not count: block 3 breaks the leading run). A 20-token
producer with blocks [A, B] caches only A (16 tokens); a later [A, B, D] then hits 16, not 32.
"""

from __future__ import annotations

from ..workload.specs import RequestSpec

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
        """Record the request's prefix as cached (called when its prefill completes): its full
        blocks, or its ``prefix_key``."""
        if spec.prefix_blocks is not None:  # full blocks only: the partial last block is not cached
            self._blocks.update(spec.prefix_blocks[:spec.prompt_tokens // spec.block_size])
        elif spec.prefix_key is not None:
            self._keys.add(spec.prefix_key)

    def __len__(self) -> int:
        return len(self._keys) + len(self._blocks)
