"""The automatic prefix cache (APC) of one simulated case (lab.md §3 steps 3 and 5).

Infinite, no eviction, cold at the start of every case. A request *hits* when its ``prefix_key``
is already cached at its admission; it then skips ``prefix_tokens`` of prefill, but at least one
prompt token is always computed (as in vLLM).
"""

from __future__ import annotations

from .workload import RequestSpec

__all__ = ["PrefixCache"]


class PrefixCache:
    """Set of cached prefix keys; one instance per simulated case."""

    def __init__(self) -> None:
        self._keys: set[str] = set()

    def hit_tokens(self, spec: RequestSpec) -> int:
        """Prompt tokens a request admitted now may skip (0 on a miss), in tokens."""
        if spec.prefix_key is None or spec.prefix_key not in self._keys:
            return 0
        return min(spec.prefix_tokens, spec.prompt_tokens - 1)

    def insert(self, spec: RequestSpec) -> None:
        """Record the request's prefix as cached (called when its prefill completes)."""
        if spec.prefix_key is not None:
            self._keys.add(spec.prefix_key)

    def __len__(self) -> int:
        return len(self._keys)
