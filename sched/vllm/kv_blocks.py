"""What the prefix cache's block tables and free queue hold (vllm-engine.md §3;
:class:`sched.vllm.kv_cache.PrefixCachingKV`), and its rare path: a request whose private blocks
have two cached copies.

- :class:`Block`: one KV block (its id, how many requests hold it, the hash it caches or ``None``);
- :data:`HELD`: one private block in its request's table (or in a hit on its run): only the count
  of them matters, so one object stands for every one;
- :class:`Run`: a request's cached private blocks, side by side in the free queue: a count;
- :class:`Group`: a run whose blocks became :class:`Block` objects of the cache index in place.

Two copies. A preempted request whose hit does not take every block of its run (the shared blocks
before them were evicted, or the hit's cap stops short of its last block) allocates new copies of
the blocks left. The cache finds the oldest copy of a hash first, so from then on the request's
private blocks are real blocks of the cache index, entered in the order the literal pool entered
them (:class:`PrivateCopies`, inherited by the pool).
"""

from __future__ import annotations

from collections import deque

from .block_hashes import private_id

__all__ = ["Block", "HELD", "Run", "Group", "PrivateCopies"]


class Block:
    """One KV block: ``block_id`` (internal: no artifact shows it), ``ref_cnt`` (requests holding
    it), ``block_hash`` (the hash it is cached under, or ``None``)."""

    __slots__ = ("block_id", "ref_cnt", "block_hash")

    def __init__(self, block_id: int, ref_cnt: int = 0, block_hash=None) -> None:
        self.block_id = block_id
        self.ref_cnt = ref_cnt
        self.block_hash = block_hash


class Run:
    """``count`` cached private blocks of one request, side by side in the free queue under ``key``:
    its blocks ``first .. first + count − 1`` (``first``: its first private block), the last one
    oldest, so eviction takes them from the top and a hit from the bottom. ``done``: its request
    has ended (sampled its last token, or ended by a deadline after the run was freed: nobody can
    ever hit the run; runs of such requests side by side are one run)."""

    __slots__ = ("count", "key", "done")

    def __init__(self, count: int, key: int, done: bool = False) -> None:
        self.count, self.key, self.done = count, key, done


class Group:
    """Cached blocks side by side in the free queue under ``key`` (``blocks``: oldest first): a run
    whose blocks became blocks of the cache index in place (:meth:`PrivateCopies._regroup`)."""

    __slots__ = ("blocks", "key")

    def __init__(self, key: int) -> None:
        self.blocks: deque = deque()
        self.key = key


#: A private block in its request's table, or in a hit on its run: one object stands for every
#: one; its ``ref_cnt`` stays 0.
HELD = Block(-1)


class PrivateCopies:
    """The pool's rare path (module docstring). Reads and writes the pool's ``_cached`` (hash ->
    its block, or {block id: block} of its copies, oldest first; entered by ``_enter``), ``_back`` (the free queue's cached end), ``_grouped`` (block
    id -> its group), ``_copied`` (requests on this path), ``_next_key`` and ``_private_from``."""

    def _regroup(self, seq, run: Run, taken: int) -> None:
        """The blocks of ``seq``'s run a hit did not take (the ``taken`` first ones it did) become
        cached blocks in the run's place in the free queue; ``seq``'s private blocks are real blocks
        from now on."""
        first = self._private_from(seq)
        chain = seq.hashes[first]
        start = first + taken
        group, cached, grouped = Group(run.key), self._cached, self._grouped
        key = self._next_key
        for j in range(start + run.count - 1, start - 1, -1):   # the last one oldest
            block_hash = private_id(chain, j - first)
            block = Block(key, 0, block_hash)
            cached[block_hash] = block   # the only copy so far
            group.blocks.append(block)
            grouped[key] = group
            key += 1
        self._next_key = key
        self._back[run.key] = group
        run.count = 0
        self._copied.add(seq)

    def _ungroup(self, block: Block) -> None:
        """A hit touches ``block``, which sits in a group."""
        group = self._grouped.pop(block.block_id)
        group.blocks.remove(block)
        if not group.blocks:
            del self._back[group.key]

    def _materialize(self, seq, start: int, stop: int) -> None:
        """``seq``'s held private blocks ``start .. stop − 1`` (cached, ``start`` at or after its first
        private block) become cached blocks at the back of the free queue, the last one first."""
        first = self._private_from(seq)
        chain = seq.hashes[first]
        back = self._back
        key = self._next_key
        for j in range(stop - 1, start - 1, -1):
            block_hash = private_id(chain, j - first)
            block = Block(key, 0, block_hash)
            self._enter(block, block_hash)
            back[key] = block
            key += 1
        self._next_key = key
