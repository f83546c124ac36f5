"""The free queue of the prefix-caching KV pool and the cache index's entries (vllm-engine.md §3;
:class:`sched.vllm.kv_cache.PrefixCachingKV`).

The free queue is ``blank blocks (a count) + back`` (an LRU of cached free blocks, runs and groups,
oldest first; :mod:`sched.vllm.kv_blocks`). Allocation takes blocks from its front: blank blocks
first, then the oldest cached ones, which are *evicted*: their hashes leave the cache index. A hash
may be cached by more than one block (two copies, :class:`sched.vllm.kv_blocks.PrivateCopies`);
the index then holds ``{block id: block}`` of its copies, oldest first, and the cache finds the
oldest one. A request that finishes or is preempted returns its blocks to the queue
(:meth:`FreeQueue.free`): tail first, cached ones to the back, the others to the front; its cached
private blocks as one run (the runs of requests that have ended, side by side in the back, are one
run: nobody can hit them). Such a run with nothing cached older than it (the back empty when it is
freed, or the entries before it gone) is as good as blank blocks: taken first either way, evicting
nothing anybody can hit; it joins the blank count (:meth:`FreeQueue._fold_done`), so a trace whose
prompts share nothing takes blocks as cheaply as without prefix caching.

:class:`FreeQueue` holds no state of its own: the pool inherits it, and every attribute it reads
(``num_free``, ``_blank``, ``_back``, ``_cached``, ``_grouped``, ``_next_key``, ``_spare``, ``_own``,
``_copied``, ``_done_run``, ``epoch``) is the pool's, as are ``_private_from`` and ``_materialize``.
``_spare`` holds block objects that nobody holds and that cache nothing (evicted and not reused at
once, or freed uncached), ``ref_cnt`` already 1: a table needing block objects takes them before new
ones are made (which block object a table holds shows nowhere).
"""

from __future__ import annotations

from itertools import repeat

from .kv_blocks import HELD, Block, Run

__all__ = ["FreeQueue"]


class FreeQueue:
    """Taking blocks off the front of the free queue (evicting what they cache), returning a
    request's blocks to it, and a block's hash entering or leaving the cache index."""

    def _take(self, count: int, table=None, objects: int = 0) -> None:
        """Take ``count`` blocks off the front of the free queue (the caller checked ``num_free``):
        blank blocks first, then the oldest cached ones, whose hashes leave the cache. ``table``
        gets ``objects`` block objects (held once, caching nothing), then :data:`HELD` for the rest."""
        self.num_free -= count
        blank = self._blank
        if count > blank:   # ended requests' runs at the oldest end: blank blocks from now on
            blank = self._fold_done()
        if count <= blank:
            self._blank = blank - count
        else:
            self._blank = 0
            rest = count - blank
            back, cached = self._back, self._cached
            if not objects:   # the oldest entry a run that covers the rest: it only shrinks
                entry = back[next(iter(back))]
                if type(entry) is Run and entry.count > rest:
                    entry.count -= rest
                    rest = 0
            popitem, uncache, keep = back.popitem, cached.pop, self._spare.append
            while rest:
                key, entry = popitem(False)
                if type(entry) is Block:   # evicted (inlined for speed: a long trace evicts millions)
                    block_hash = entry.block_hash
                    if (same := uncache(block_hash)) is not entry:   # not its only copy
                        cached[block_hash] = same
                        self._drop_copy(entry)
                    entry.block_hash = None
                    entry.ref_cnt = 1
                    rest -= 1
                    if objects:   # reused
                        table.append(entry)
                        objects -= 1
                        count -= 1
                    else:         # kept for a later table
                        keep(entry)
                    continue
                if type(entry) is Run:
                    if entry.count > rest:
                        entry.count -= rest
                        back[key] = entry
                        back.move_to_end(key, last=False)
                        break
                    rest -= entry.count
                    entry.count = 0
                else:
                    blocks = entry.blocks
                    while rest and blocks:
                        block = blocks.popleft()
                        del self._grouped[block.block_id]
                        self._uncache(block)
                        rest -= 1
                    if blocks:
                        back[key] = entry
                        back.move_to_end(key, last=False)
        if objects:
            count -= objects
            spare = self._spare
            if spare:   # block objects nobody holds or caches (ref_cnt already 1), reused first
                reused = spare[-objects:]
                del spare[-objects:]
                table += reused
                objects -= len(reused)
            if objects:
                first = self._next_key
                self._next_key = first + objects
                table.extend(map(Block, range(first, first + objects), repeat(1, objects)))   # held once
        if count and table is not None:
            table.extend([HELD] * count)

    def _fold_done(self) -> int:
        """The runs of ended requests at the oldest end of the back join the blank blocks (nobody
        can hit them and nothing cached is older: taking them as blank blocks evicts the same, and
        no other hash leaves the cache first). Returns the blank blocks now."""
        back = self._back
        while back:
            entry = back[next(iter(back))]
            if type(entry) is not Run or not entry.done:
                break
            back.popitem(False)
            self._blank += entry.count
            entry.count = 0
        return self._blank

    def free(self, seq) -> None:
        """Return every block of ``seq`` to the free queue, tail first: cached ones to the back,
        the others to the front. Its cached private blocks become one run (module docstring):
        found again by ``seq`` after a preemption, by nobody once it has sampled its last token
        (``generated >= output``)."""
        table = seq.blocks
        counted = type(table) is int   # nothing but private blocks, a count
        size = table if counted else len(table)
        if size and (counted or table[0] is HELD) and not self._back and seq.generated >= seq.output:
            # Nothing but private blocks, of a request that has ended, nothing cached in the queue:
            # as good as blank (below: the uncached ones and, with nothing older, the run).
            self._blank += size
            self.num_free += size
            seq.blocks = []
            seq.num_cached = 0
            return
        if size and (counted or table[-1] is HELD):
            start = 0 if counted else table.index(HELD)
            cached = seq.num_cached - start if seq.num_cached > start else 0
            self._blank += size - start - cached   # the uncached tail
            if cached:
                done = seq.generated >= seq.output
                last = self._done_run
                if done and not self._back:   # nothing cached behind them: as good as blank
                    self._blank += cached
                elif done and last is not None and last.count and next(reversed(self._back)) == last.key:
                    last.count += cached   # the newest entry is a run nobody can hit: one run
                elif done or (start == self._private_from(seq) and seq not in self._copied):
                    key = self._next_key
                    self._next_key = key + 1
                    run = self._back[key] = Run(cached, key, done)
                    if done:
                        self._done_run = run
                    else:
                        self._own[seq] = run
                else:
                    self._materialize(seq, start, start + cached)
            self.num_free += size - start
            if not start:   # nothing but private blocks
                seq.blocks = []
                seq.num_cached = 0
                return
            del table[start:]
        back, keep = self._back, self._spare.append
        blank = kept = 0
        for block in reversed(table):   # tail first
            if block.ref_cnt == 1:
                if block.block_hash is None:   # a blank block: its object kept for a later table
                    blank += 1
                    keep(block)
                else:
                    block.ref_cnt = 0
                    back[block.block_id] = block
            else:   # another request holds it too
                block.ref_cnt -= 1
                kept += 1
        self._blank += blank
        self.num_free += len(table) - kept
        seq.blocks = []
        seq.num_cached = 0

    def forget(self, seq) -> None:
        """``seq`` has ended after its blocks were freed (:meth:`free`) and was not admitted again: a
        deadline (its blocks freed as a preemption's, or freed before it timed out in the waiting
        queue) or, with async scheduling, its last token arriving after a preemption. Nobody can hit
        the run of its private blocks any more: the run becomes an ended request's (``done``: it joins
        the blank blocks once nothing cached is older, :meth:`_fold_done`, the same evictions), and
        the pool holds ``seq`` no longer (memory follows what is running or waiting). Nothing else
        changes: no block is taken or freed, no hash leaves the cache."""
        run = self._own.pop(seq, None)
        if run is not None:
            run.done = True
        self._copied.discard(seq)

    def _uncache(self, block: Block) -> None:
        """``block`` (taken from the free queue) leaves the cache index."""
        block_hash = block.block_hash
        if self._cached[block_hash] is block:   # its only copy
            del self._cached[block_hash]
        else:
            self._drop_copy(block)
        block.block_hash = None

    def _drop_copy(self, block: Block) -> None:
        """``block`` leaves the cache index, where other blocks cache its hash too."""
        block_hash = block.block_hash
        same = self._cached[block_hash]
        del same[block.block_id]
        if len(same) == 1:
            self._cached[block_hash] = next(iter(same.values()))
        self.epoch += 1   # a later copy of the hash may be held: a hit on it costs less

    def _enter(self, block: Block, block_hash: int) -> None:
        """``block`` caches ``block_hash`` (after any other block caching it)."""
        cached = self._cached
        same = cached.get(block_hash)
        if same is None:
            cached[block_hash] = block
        elif type(same) is Block:
            cached[block_hash] = {same.block_id: same, block.block_id: block}
        else:
            same[block.block_id] = block
        block.block_hash = block_hash
