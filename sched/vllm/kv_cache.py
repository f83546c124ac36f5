"""The KV cache of the vLLM engine: a pool of KV blocks and the block-level prefix cache
(vllm-engine.md §2 step 3–4 and §3).

A request's KV lives in a *block table*: ``ceil(tokens / block_size)`` blocks for the tokens it has
computed or is computing in the current step. ``num_gpu_blocks`` counts vLLM's reserved null block
too, so ``num_gpu_blocks − 1`` blocks are usable.

Two pools give the scheduler the same five answers (:meth:`KVCache.find_hit`,
:meth:`KVCache.blocks_to_allocate`, :meth:`KVCache.allocate`, :meth:`KVCache.free`,
:attr:`KVCache.num_free`):

- :class:`KVCache` without prefix caching (:mod:`sched.vllm.kv_counts`): only counts matter
  (which block a request holds changes nothing), so a block table is a number;
- :class:`PrefixCachingKV` with ``--enable-prefix-caching``: real blocks, each full block named by a
  hash chained over its parent block and its own tokens (:mod:`sched.vllm.block_hashes`), found
  again by that hash until evicted. The free list is an LRU queue: allocation takes blocks from its
  front (evicting what they cached); a finishing or preempted request frees its blocks tail first,
  cached ones to the back (hittable until evicted), uncached ones to the front. A hit *touches* its
  blocks: a block nobody holds leaves the free list, so a hit on an idle cached block costs one free
  block.

Token identity (the hash of a block) follows the workload's sharing structure, exactly as the
oracle corpus builds prompts (vllm-engine.md §3 last item; :mod:`sched.vllm.block_tokens`).

What the pool keeps per block, and what it keeps per run of blocks. Which block a request holds
shows in no artifact: only which hashes are cached, in what order the free queue evicts them and
how many blocks are free. So:

- the front of the free queue and the never-used blocks hold nothing and are interchangeable: they
  are a count (a block object is made when a table needs one);
- a request's *private* blocks (:mod:`sched.vllm.block_hashes`: only the request itself can hit
  them, after a preemption) are held as one shared placeholder each and are not entered in the
  cache index while it holds them; a table of nothing but private blocks (its first block is one,
  and it holds no hit) is just their count, as without prefix caching (:meth:`PrefixCachingKV.held`
  reads either);
- when it frees them, its cached private blocks enter the back of the free queue as one *run* (a
  count, evicted from its oldest end like the blocks it stands for): nobody can ever hit the run of
  a request that has ended (sampled its last token, or reached its deadline: :meth:`forget`); a
  preempted request hits its own run from its other end when it comes back. A run nobody can hit
  with nothing cached older than it joins the blank blocks (the same evictions:
  :mod:`sched.vllm.free_queue`). Only when a hit on its own run leaves blocks of the run cached
  (two copies of a block may then exist) do they become real blocks of the cache index, in place
  and in the order the literal pool would hold them (:mod:`sched.vllm.kv_blocks`).

Taking blocks off the free queue's front, evicting what they cache, and a request's blocks returning
to the queue (:meth:`free`), are :mod:`sched.vllm.free_queue`.

So a request whose prompt shares nothing costs a few operations per request, not per block.

:attr:`PrefixCachingKV.epoch` counts the changes that can make a blocked admission pass at equal free
blocks: a shared block entering the cache, an idle cached block being touched (the engine's memo of
a head that cannot be admitted, vllm-engine.md §2 step 4, keys on it), and an evicted block leaving
another block of its hash cached (a hit then finds that one, which may be held). A private block
entering the cache changes no other request's hit and leaves the epoch alone.

Example (block size 16): a 1,000-token prompt whose first 1,000 tokens another request already
cached hits ``floor(999 / 16) = 62`` blocks = 992 tokens.
"""

from __future__ import annotations

from collections import OrderedDict

from .block_hashes import BlockHashes, private_id
from .free_queue import FreeQueue
from .kv_counts import KVCache, blocks_for
from .kv_blocks import HELD, Block, Group, PrivateCopies, Run
from .block_tokens import NEVER as _NEVER

__all__ = ["KVCache", "PrefixCachingKV", "LiteralPrefixKV", "blocks_for", "make_kv_cache"]


class PrefixCachingKV(BlockHashes, PrivateCopies, FreeQueue, KVCache):
    """KV blocks with the block-level prefix cache (vllm-engine.md §3); tables are block lists,
    or counts.

    The free queue is ``blank blocks (a count: the front and the never-used blocks) + back`` (an
    LRU of cached blocks, runs and groups, oldest first; module docstring), taken from its front by
    :class:`sched.vllm.free_queue.FreeQueue` (inherited). A table is a list: a
    :class:`Block` for each block before the request's first private one (and for a private one
    hit in the cache index after a preemption), then :data:`HELD` for each private block it holds;
    or, for a request whose first block is private, allocated without a hit, an ``int >= 1``: the
    count of the private blocks it holds (a freed table is an empty list again).
    """

    caching = True

    def __init__(self, num_gpu_blocks: int, block_size: int) -> None:
        super().__init__(num_gpu_blocks, block_size)
        self._init_hashes()
        self._blank = self.capacity         # free blocks that cache nothing: taken first
        self._back: OrderedDict = OrderedDict()   # key -> cached free Block, Run or Group, oldest first
        self._next_key = 1                  # block ids and run keys (block 0 is the null block)
        self._cached: dict = {}             # hash -> its block, or {block id: block} of its copies, oldest first
        self._grouped: dict[int, Group] = {}             # block id -> the group holding it
        self._own: dict = {}                # preempted seq -> the run of its private blocks
        self._done_run = None               # the last run of a request that had ended (nobody can hit it)
        self._copied: set = set()           # seqs whose private blocks may have two cached copies
        self._spare: list[Block] = []       # block objects held by nobody, caching nothing (FreeQueue._take)
        #: Bumped when a shared block enters the cache or an idle cached block is touched (module docstring).
        self.epoch = 0

    def new_table(self):
        return []

    def held(self, seq) -> int:
        """Blocks ``seq`` holds: its table's length, or the count it is."""
        table = seq.blocks
        return table if type(table) is int else len(table)

    # --- the pool ----------------------------------------------------------------------------

    def find_hit(self, seq) -> list:
        """The longest run of ``seq``'s leading full blocks in the cache, at most
        ``floor((num_tokens − 1) / block_size)`` blocks (at least one token is computed). Blocks of
        its own run are :data:`HELD` in the answer."""
        first = seq.first_private   # _private_from, its answer kept
        if first is None:
            first = self._private_from(seq)
        hashes = seq.hashes
        if not first and not hashes:   # its first block private, none ever held: nothing cached
            return []
        limit = (seq.num_tokens - 1) // self.block_size
        hit = []
        if len(hashes) <= first:
            # No private id yet: it never held a private block, none of them can be cached.
            limit = min(limit, first)
        if limit <= 0 or not (self._cached or self._own):
            return hit
        cached = self._cached
        stop = min(limit, first)
        if len(hashes) < stop:   # its shared blocks' hashes (interned now or when it allocates them)
            self._chain(seq, stop)
        for j in range(stop):
            same = cached.get(hashes[j])
            if same is None:
                return hit
            hit.append(same if type(same) is Block else next(iter(same.values())))
        if limit <= first:
            return hit
        run = self._own.get(seq)
        if run is not None:   # the only copies of its private blocks: as many as are left
            if run.count:
                hit.extend([HELD] * min(run.count, limit - first))
            return hit
        chain = hashes[first]
        for k in range(limit - first):
            same = cached.get(private_id(chain, k))
            if same is None:
                break
            hit.append(same if type(same) is Block else next(iter(same.values())))
        return hit

    def may_hit(self, seq) -> bool:
        """Whether :meth:`find_hit` can find anything for ``seq``: not when its first block is
        private and it has never held a full one (nothing of it can be cached)."""
        return bool(seq.hashes) or self._private_from(seq) > 0

    def blocks_to_allocate(self, seq, num_tokens: int, hit=()) -> int:
        # A hit block nobody holds sits in the free queue: touching it takes it out.
        table = seq.blocks
        need = blocks_for(num_tokens, self.block_size) - (table if type(table) is int else len(table))
        if hit:
            size = len(hit)
            stop = hit.index(HELD) if hit[-1] is HELD else size   # a run's blocks: all idle
            need -= stop - sum(1 for j in range(stop) if hit[j].ref_cnt == 0)
        return need

    def allocate(self, seq, num_tokens: int, hit=()) -> None:
        table = seq.blocks
        # A count: every block of it is private (its first one is; class docstring).
        counted = type(table) is int or not table and not hit and seq.first_private == 0 and \
            (not self._own or seq not in self._own)
        bs = self.block_size
        if counted or not hit and table and table[-1] is HELD:
            # Its blocks from here on are private (a count, or a table ending in one): taken as an
            # open run's are (reserve), nothing entered in the cache index.
            have = table if type(table) is int else len(table)
            need = -(-num_tokens // bs) - have
            if need > 0:
                if need <= self._blank:   # reserve's first case, inlined
                    self._blank -= need
                    self.num_free -= need
                else:
                    self.reserve(need)
                if counted:
                    seq.blocks = have + need
                else:
                    table += [HELD] * need
        else:
            self._extend(seq, num_tokens, hit)
        # Blocks enter the cache when allocated for a step, before they are computed.
        if num_tokens > seq.num_tokens:
            num_tokens = seq.num_tokens
        if (full := num_tokens // bs) > seq.num_cached:
            hashes = seq.hashes
            if hashes and hashes[-1] < 0 and seq.num_cached >= len(hashes) - 1:
                seq.num_cached = full   # past its first private block: nothing to enter (_cache_new)
            elif not hashes and (counted or table[0] is HELD):   # its first block is private: only its id
                hashes.append(-1 - self._next_private)                 # (_chain)
                self._next_private += 1
                seq.num_cached = full
            else:
                self._cache_new(seq, num_tokens)

    def _extend(self, seq, num_tokens: int, hit) -> None:
        """:meth:`allocate`'s blocks when its table is a list that may get block objects: the hit
        first (its idle blocks touched, the bottom of its own run taken; blocks of the run the hit
        leaves stay cached, :meth:`_regroup`), then new blocks up to ``num_tokens`` tokens: block
        objects before its first private block, placeholders from it on."""
        table = seq.blocks
        run = self._own.pop(seq, None) if not table and self._own else None
        taken = 0   # blocks of its run the hit takes (from the bottom)
        if hit:
            back = self._back
            size = len(hit)
            stop = hit.index(HELD) if hit[-1] is HELD else size
            for j in range(stop):   # touch the hit blocks first, so taking new blocks cannot evict them
                block = hit[j]
                if block.ref_cnt == 0:
                    if back.pop(block.block_id, None) is None:
                        self._ungroup(block)
                    self.num_free -= 1
                    self.epoch += 1
                block.ref_cnt += 1
            if stop < size:   # the bottom of its run
                taken = size - stop
                run.count -= taken
                if not run.count:
                    del back[run.key]
                self.num_free -= taken
                self.epoch += 1
            table.extend(hit)
            seq.num_cached = len(table)
        if run is not None and run.count:   # blocks of its run the hit did not take stay cached
            self._regroup(seq, run, taken)
        have = len(table)
        need = -(-num_tokens // self.block_size) - have
        if need > 0:   # new blocks before the first private one are block objects
            if have and table[-1] is HELD:
                shared = 0
            else:
                shared = self._private_from(seq) - have
            if shared > 0:
                self._take(need, table, need if shared >= need else shared)
            else:   # private blocks: taken as an open run's are (reserve), held as placeholders
                self.reserve(need)
                table += [HELD] * need

    def cache_full(self, seq, num_tokens: int) -> None:
        """Enter ``seq``'s full blocks among its first ``num_tokens`` tokens in the cache (those past
        ``seq.num_cached``); nothing when no new block is full (vllm-engine.md §3). A private block
        only counts as cached: its id is known from its chain's, and it is looked up only by its own
        request after a preemption (:meth:`free`)."""
        if num_tokens // self.block_size > seq.num_cached:
            self._cache_new(seq, num_tokens)

    def _cache_new(self, seq, num_tokens: int) -> None:
        """:meth:`cache_full` when a new block among the first ``num_tokens`` tokens is full."""
        full = num_tokens // self.block_size
        start = seq.num_cached
        seq.num_cached = full
        hashes = seq.hashes
        if hashes and hashes[-1] < 0 and start >= len(hashes) - 1:
            return   # past the first private block: nothing to enter
        first = self._chain(seq, full)
        if start >= first:
            return
        stop, cached = min(full, first), self._cached
        enter = cached.setdefault
        for block, block_hash in zip(seq.blocks[start:stop], hashes[start:stop]):
            block.block_hash = block_hash
            if enter(block_hash, block) is not block:   # another block caches it already
                self._enter(block, block_hash)
        self.epoch += 1

    # --- open decode runs (sched.vllm.fastpath) ----------------------------------------------
    #
    # A decoding request whose output blocks are private (module docstring) may run open: the blocks
    # it starts are taken in their step (reserve: the same evictions, in the same step, as taking them
    # one by one in running order, since a block taken holds nothing and any one serves), and handed
    # to it when the run closes (settle), before anything can free, preempt or look it up. Nobody
    # else can hit a private block, so entering it later changes no decision.

    def can_open(self, seq) -> bool:
        table = seq.blocks
        return type(table) is int or bool(table) and table[-1] is HELD or self._private_from(seq) != _NEVER

    def reserve(self, count: int) -> None:
        if count:
            blank = self._blank
            if count > blank:   # ended requests' runs at the oldest end: blank blocks from now on
                blank = self._fold_done()
            if count <= blank:   # _take's first cases, inlined: a decode step takes few blocks
                self._blank = blank - count
                self.num_free -= count
                return
            oldest = next(iter(self._back.values()))
            if type(oldest) is Run and oldest.count > count - blank:   # the oldest run shrinks
                oldest.count -= count - blank
                self._blank = 0
                self.num_free -= count
            else:
                self._take(count)

    def settle(self, seq, num_cached_tokens=None) -> None:
        """As :meth:`KVCache.settle`; its full blocks among ``num_cached_tokens`` tokens (default
        ``seq.computed``) enter the cache (async scheduling caches one token less: the one in flight)."""
        table = seq.blocks
        bs = self.block_size
        if type(table) is int:   # a count (class docstring)
            if (more := -(-seq.computed // bs) - table) > 0:
                seq.blocks = table + more
        elif (more := -(-seq.computed // bs) - len(table)) > 0:   # past the prompt of a request that
            table += [HELD] * more                                # may run open: private blocks
        if num_cached_tokens is None:
            num_cached_tokens = seq.computed
        if (full := num_cached_tokens // bs) > seq.num_cached:
            hashes = seq.hashes
            if hashes and hashes[-1] < 0 and seq.num_cached >= len(hashes) - 1:
                seq.num_cached = full   # past its first private block: nothing to enter (_cache_new)
            else:
                self._cache_new(seq, num_cached_tokens)


class LiteralPrefixKV(PrefixCachingKV):
    """The prefix cache as vllm-engine.md §3 words it, for the differential tests' reference: every
    full block interned from its tokens, one at a time, nothing private (so no request runs open,
    and every block a table holds is a block object)."""

    GROUP_WORKLOAD_BLOCKS = False

    def note_prompts(self, specs) -> None:
        pass

    def _private_from(self, seq) -> int:
        return _NEVER


def make_kv_cache(num_gpu_blocks: int, block_size: int, prefix_caching: bool, literal: bool = False) -> KVCache:
    """The pool for one simulated run: :class:`PrefixCachingKV` when prefix caching is on
    (:class:`LiteralPrefixKV` when ``literal``: the fast paths off, sched.vllm.engine.FAST_PATHS)."""
    if not prefix_caching:
        return KVCache(num_gpu_blocks, block_size)
    return (LiteralPrefixKV if literal else PrefixCachingKV)(num_gpu_blocks, block_size)
