"""KV blocks without prefix caching (vllm-engine.md §2 step 3–4): only counts matter (which block a
request holds changes nothing), so a block table is a number.

:class:`KVCache` is the pool of a run without ``--enable-prefix-caching`` and the base of the
prefix-caching pool (:class:`sched.vllm.kv_cache.PrefixCachingKV`), which gives the scheduler the
same answers with real blocks.
"""

from __future__ import annotations

__all__ = ["KVCache", "blocks_for"]


def blocks_for(tokens: int, block_size: int) -> int:
    """KV blocks holding ``tokens`` tokens: ``ceil(tokens / block_size)``."""
    return -(-tokens // block_size)


class KVCache:
    """KV blocks without prefix caching: block tables are counts (``seq.blocks``: int).

    ``num_gpu_blocks`` includes the null block; ``num_free`` starts at ``num_gpu_blocks − 1``.
    A *seq* is any object with the attributes ``blocks`` and ``num_tokens`` (prompt + generated).
    """

    caching = False

    def __init__(self, num_gpu_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.capacity = num_gpu_blocks - 1
        self.num_free = self.capacity

    @property
    def num_used(self) -> int:
        """Blocks held by requests (the null block not counted)."""
        return self.capacity - self.num_free

    def new_table(self):
        return 0

    def held(self, seq) -> int:
        return seq.blocks

    def find_hit(self, seq) -> list:
        """Leading cached full blocks of ``seq`` (none without prefix caching)."""
        return []

    def blocks_to_allocate(self, seq, num_tokens: int, hit=()) -> int:
        """Free blocks ``seq`` would take to hold ``num_tokens`` tokens, given ``hit`` blocks."""
        return blocks_for(num_tokens, self.block_size) - seq.blocks

    def allocate(self, seq, num_tokens: int, hit=()) -> None:
        """Grow ``seq``'s table to hold ``num_tokens`` tokens (the caller checked the free count)."""
        need = blocks_for(num_tokens, self.block_size) - seq.blocks
        if need > 0:
            self.num_free -= need
            seq.blocks += need

    def free(self, seq) -> None:
        """Return every block of ``seq`` to the pool."""
        self.num_free += seq.blocks
        seq.blocks = 0

    def forget(self, seq) -> None:
        """``seq`` ended after :meth:`free`, not admitted again: nothing is kept without prefix caching."""

    # --- open decode runs (sched.vllm.fastpath) ----------------------------------------------

    def can_open(self, seq) -> bool:
        """Whether ``seq`` may decode as an open run (its blocks taken ahead, its table settled later)."""
        return True

    def reserve(self, count: int) -> None:
        """Take ``count`` blocks for open runs that start a new block in this step."""
        self.num_free -= count

    def settle(self, seq) -> None:
        """An open run closes with ``seq.computed`` tokens: its table holds them."""
        seq.blocks = blocks_for(seq.computed, self.block_size)
