# One piece (about 420 lines; PrefixCachingKV about 250): the pool, its free queue, the cache index
# and the open runs' reserve change together on every take, touch and free; the token side of the
# hashes is sched/vllm/block_tokens.py.
"""The KV cache of the vLLM engine: a pool of KV blocks and the block-level prefix cache
(vllm-engine.md §2 step 3–4 and §3).

A request's KV lives in a *block table*: ``ceil(tokens / block_size)`` blocks for the tokens it has
computed or is computing in the current step. ``num_gpu_blocks`` counts vLLM's reserved null block
too, so ``num_gpu_blocks − 1`` blocks are usable.

Two pools give the scheduler the same five answers (:meth:`KVCache.find_hit`,
:meth:`KVCache.blocks_to_allocate`, :meth:`KVCache.allocate`, :meth:`KVCache.free`,
:attr:`KVCache.num_free`):

- :class:`KVCache` without prefix caching: only counts matter (which block a request holds
  changes nothing), so a block table is a number;
- :class:`PrefixCachingKV` with ``--enable-prefix-caching``: real blocks, each full block named by a
  hash chained over its parent block and its own tokens, found again by that hash until evicted.
  The free list is an LRU queue: allocation takes blocks from its front (evicting what they
  cached); a finishing or preempted request frees its blocks tail first, cached ones to the back
  (hittable until evicted), uncached ones to the front. A hit *touches* its blocks: a block
  nobody holds leaves the free list, so a hit on an idle cached block costs one free block.

Token identity (the hash of a block) follows the workload's sharing structure, exactly as the
oracle corpus builds prompts (vllm-engine.md §3 last item): a ``prefix_key`` K names its first
``prefix_tokens`` tokens, a ``prefix_blocks`` id names ``block_size`` tokens of the workload's own
block size, the rest of a prompt is the request's own, and every output token is the same token
(:mod:`sched.vllm.block_tokens`).
A block's hash is an interned id of ``(parent id, its tokens as runs)``: exact, no collisions. When the
workload's block size is a multiple of ours, the blocks lying wholly inside one workload block are
interned together: ``(parent id of the workload block, its id)`` names the run of consecutive ids
of its blocks (the same tokens give the same ids either way; a block holding other tokens too is
interned alone, and no block inside a workload block is ever interned alone).

Private blocks. A request's own prompt tokens (the ``("r", name)`` runs) are its alone (names are
unique), so the first full block holding one, and every block after it in its chain, can only ever be
hit by the request itself (after a preemption). Those blocks are not interned: the first gets a fresh
id, the later ones an id computed from it and their position, so a request whose prompt shares nothing
costs no hash table entry and no token runs, and a request that has never held a block skips the
lookup of its private blocks (they cannot be cached yet). Interned ids are ``>= 0``, private ids
``< 0``; the ids are internal (no artifact shows them), so the results are those of interning all.

:attr:`PrefixCachingKV.epoch` counts the changes that can make a blocked admission pass at equal free
blocks: a block entering the cache, an idle cached block being touched (the engine's memo of a head
that cannot be admitted, vllm-engine.md §2 step 4, keys on it), and an evicted block leaving another
block of its hash cached (a hit then finds that one, which may be held).

Example (block size 16): a 1,000-token prompt whose first 1,000 tokens another request already
cached hits ``floor(999 / 16) = 62`` blocks = 992 tokens.
"""

from __future__ import annotations

from collections import OrderedDict

from .block_tokens import NEVER as _NEVER, block_tokens as _block_tokens, private_from, prompt_key as _prompt_key

__all__ = ["KVCache", "PrefixCachingKV", "LiteralPrefixKV", "blocks_for", "make_kv_cache"]


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

class _Block:
    __slots__ = ("block_id", "ref_cnt", "block_hash")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash = None


def _new_block(block_id: int) -> _Block:
    block = _Block(block_id)
    block.ref_cnt = 1
    return block


class PrefixCachingKV(KVCache):
    """KV blocks with the block-level prefix cache (vllm-engine.md §3); tables are block lists.

    The free queue is ``front + never used blocks (in id order) + back``: blocks are created only
    when first taken, so an ample pool costs nothing until it is used.
    """

    caching = True
    #: Whether the blocks wholly inside one workload block are interned together (module docstring).
    GROUP_WORKLOAD_BLOCKS = True

    def __init__(self, num_gpu_blocks: int, block_size: int) -> None:
        super().__init__(num_gpu_blocks, block_size)
        self._front: OrderedDict[int, _Block] = OrderedDict()
        self._back: OrderedDict[int, _Block] = OrderedDict()
        self._next_new = 1                  # block 0 is the null block
        self._cached: dict[int, dict[int, _Block]] = {}   # hash -> {block id: block}, oldest first
        self._hash_ids: dict[tuple, int] = {}             # (parent hash, token runs) -> hash
        self._workload_ids: dict[tuple, int] = {}         # (parent hash, workload block id) -> first hash
        self._next_id = 0                                 # interned hashes handed out so far
        self._next_private = 0                            # private chains handed out so far
        self._unique_prompts: set = set()                 # see note_prompts
        self._reserved: list[_Block] = []                 # taken for open runs, not yet settled
        #: Bumped when a block enters the cache or an idle cached block is touched (module docstring).
        self.epoch = 0

    def new_table(self):
        return []

    def held(self, seq) -> int:
        return len(seq.blocks)

    # --- hashes ------------------------------------------------------------------------------

    def _chain(self, seq, num_blocks: int) -> int:
        """Make ``seq.hashes`` hold the hashes of its first ``num_blocks`` full blocks up to its first
        private block (interned once), and that block's fresh id when it is reached; returns the
        index of the first private block."""
        hashes = seq.hashes
        bs, spec = self.block_size, seq.spec
        first = self._private_from(seq)
        stop = min(num_blocks, first)
        # Blocks wholly inside one workload block (its size a multiple of ours): ids in a row.
        per = spec.block_size // bs if spec.prefix_blocks is not None and spec.block_size % bs == 0 \
            and self.GROUP_WORKLOAD_BLOCKS else 0
        aligned = min(seq.prompt, len(spec.prefix_blocks) * spec.block_size) // bs if per else 0
        ids = self._hash_ids
        while len(hashes) < stop:
            j = len(hashes)
            if j < aligned:
                w = j // per
                block_id = spec.prefix_blocks[w]
                key = (hashes[w * per - 1] if w else -1, block_id, type(block_id).__name__)
                base = self._workload_ids.get(key)
                if base is None:
                    base = self._workload_ids[key] = self._next_id
                    self._next_id += per
                hashes.extend(range(base + j - w * per, base + min(stop, aligned, (w + 1) * per) - w * per))
                continue
            key = (hashes[-1] if hashes else -1, _block_tokens(spec, seq.prompt, j * bs, (j + 1) * bs))
            block_hash = ids.get(key)
            if block_hash is None:
                block_hash = ids[key] = self._next_id
                self._next_id += 1
            hashes.append(block_hash)
        if num_blocks > first and len(hashes) == first:
            hashes.append(-1 - self._next_private)
            self._next_private += 1
        return first

    def block_hashes(self, seq, num_blocks: int) -> list[int]:
        """The chained hashes of ``seq``'s first ``num_blocks`` full blocks (module docstring)."""
        first = self._chain(seq, num_blocks)
        hashes = seq.hashes
        return [hashes[j] if j <= first else _private(hashes[first], j - first) for j in range(num_blocks)]

    # --- the pool ----------------------------------------------------------------------------

    def _take(self) -> _Block:
        """Pop the front of the free queue, evicting what it cached."""
        if self._front:
            _, block = self._front.popitem(last=False)
        elif self._next_new <= self.capacity:
            block = _Block(self._next_new)
            self._next_new += 1
        else:
            _, block = self._back.popitem(last=False)
        if block.block_hash is not None:
            same = self._cached[block.block_hash]
            del same[block.block_id]
            if not same:
                del self._cached[block.block_hash]
            else:
                self.epoch += 1   # a later copy of the hash may be held: a hit on it costs less
            block.block_hash = None
        block.ref_cnt = 1
        self.num_free -= 1
        return block

    def _take_many(self, count: int, table: list) -> None:
        """:meth:`_take` ``count`` times, appending to ``table`` (the same blocks, in the same order)."""
        front, back, cached = self._front, self._back, self._cached
        self.num_free -= count
        while count and front:
            _, block = front.popitem(last=False)
            block.ref_cnt = 1           # a block in the front queue caches nothing
            table.append(block)
            count -= 1
        fresh = min(count, self.capacity + 1 - self._next_new)
        if fresh > 0:
            first = self._next_new
            table.extend(_new_block(block_id) for block_id in range(first, first + fresh))
            self._next_new += fresh
            count -= fresh
        for _ in range(count):
            _, block = back.popitem(last=False)
            block_hash = block.block_hash
            if block_hash is not None:
                same = cached[block_hash]
                del same[block.block_id]
                if not same:
                    del cached[block_hash]
                else:
                    self.epoch += 1   # as in _take
                block.block_hash = None
            block.ref_cnt = 1
            table.append(block)

    def find_hit(self, seq) -> list:
        """The longest run of ``seq``'s leading full blocks in the cache, at most
        ``floor((num_tokens − 1) / block_size)`` blocks (at least one token is computed)."""
        limit = (seq.num_tokens - 1) // self.block_size
        hit = []
        first = self._private_from(seq)
        if len(seq.hashes) <= first:
            # No private id yet: it never held a private block, none of them can be cached.
            limit = min(limit, first)
        if limit <= 0 or not self._cached:
            return hit
        cached = self._cached
        hashes = seq.hashes
        for j in range(limit):
            if j >= len(hashes):   # computed only as far as the hit goes
                first = self._chain(seq, j + 1)
                if j > first:
                    for k in range(j, limit):
                        same = cached.get(_private(hashes[first], k - first))
                        if not same:
                            break
                        hit.append(next(iter(same.values())))
                    break
            same = cached.get(hashes[j])
            if not same:
                break
            hit.append(next(iter(same.values())))
        return hit

    def blocks_to_allocate(self, seq, num_tokens: int, hit=()) -> int:
        # A hit block nobody holds sits in the free queue: touching it takes it out.
        idle_hits = sum(1 for block in hit if block.ref_cnt == 0)
        return blocks_for(num_tokens, self.block_size) - len(hit) - len(seq.blocks) + idle_hits

    def allocate(self, seq, num_tokens: int, hit=()) -> None:
        table = seq.blocks
        for block in hit:   # touch the hit blocks first, so taking new blocks cannot evict them
            if block.ref_cnt == 0:
                queue = self._front if block.block_id in self._front else self._back
                del queue[block.block_id]
                self.num_free -= 1
                self.epoch += 1
            block.ref_cnt += 1
            table.append(block)
        if hit:
            seq.num_cached = len(table)
        need = blocks_for(num_tokens, self.block_size) - len(table)
        if need == 1:
            table.append(self._take())
        elif need > 0:
            self._take_many(need, table)
        # Blocks enter the cache when allocated for a step, before they are computed.
        self.cache_full(seq, min(num_tokens, seq.num_tokens))

    def cache_full(self, seq, num_tokens: int) -> None:
        """Enter ``seq``'s full blocks among its first ``num_tokens`` tokens in the cache (those past
        ``seq.num_cached``); nothing when no new block is full (vllm-engine.md §3)."""
        full = num_tokens // self.block_size
        if full <= seq.num_cached:
            return
        first = self._chain(seq, full)
        hashes, table, cached = seq.hashes, seq.blocks, self._cached
        start = seq.num_cached
        for j in range(start, min(full, first + 1)):
            block = table[j]
            block.block_hash = block_hash = hashes[j]
            same = cached.get(block_hash)
            if same is None:
                cached[block_hash] = {block.block_id: block}
            else:
                same[block.block_id] = block
        if full > first + 1:   # private blocks: ids as _private computes them, inlined
            chain = -1 - hashes[first]
            for j in range(max(start, first + 1), full):
                block = table[j]
                block.block_hash = block_hash = -1 - (chain | (j - first) << 40)
                same = cached.get(block_hash)
                if same is None:
                    cached[block_hash] = {block.block_id: block}
                else:
                    same[block.block_id] = block
        seq.num_cached = full
        self.epoch += 1

    def free(self, seq) -> None:
        for block in reversed(seq.blocks):   # tail first
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is None:
                    self._front[block.block_id] = block
                    self._front.move_to_end(block.block_id, last=False)
                else:
                    self._back[block.block_id] = block
                self.num_free += 1
        seq.blocks = []
        seq.num_cached = 0

    # --- open decode runs (sched.vllm.fastpath) ----------------------------------------------
    #
    # A decoding request whose output blocks are private (module docstring) may run open: the blocks
    # it starts are taken in their step (reserve: the same evictions, in the same step, as taking them
    # one by one in running order, since a block taken holds nothing and any one serves), and handed
    # to it with its cache entries when the run closes (settle), before anything can free, preempt or
    # look it up. Nobody else can hit a private block, so entering it later changes no decision.

    def note_prompts(self, specs) -> None:
        """Learn which requests' prompts (wholly shared tokens) no other request of the run repeats:
        their output blocks are private too. Without this call none of them are."""
        # Workload blocks are interned together only when the workload has one block size (a file
        # has one header): an id's first tokens are the same tokens at any size, the groups not.
        if len({spec.block_size for spec in specs if spec.prefix_blocks is not None}) > 1:
            self.GROUP_WORKLOAD_BLOCKS = False
        seen: dict = {}
        for spec in specs:
            if private_from(spec, spec.prompt_tokens, self.block_size) == _NEVER:
                key = _prompt_key(spec)
                seen[key] = None if key in seen else spec.name
        self._unique_prompts = {name for name in seen.values() if name is not None}

    def _private_from(self, seq) -> int:
        first = private_from(seq.spec, seq.prompt, self.block_size)
        if first == _NEVER and seq.spec.name in self._unique_prompts:
            return seq.prompt // self.block_size   # the first block holding an output token
        return first

    def can_open(self, seq) -> bool:
        return self._private_from(seq) != _NEVER

    def reserve(self, count: int) -> None:
        if count:
            self._take_many(count, self._reserved)

    def settle(self, seq) -> None:
        table, reserved = seq.blocks, self._reserved
        for _ in range(blocks_for(seq.computed, self.block_size) - len(table)):
            table.append(reserved.pop())
        self.cache_full(seq, seq.computed)

class LiteralPrefixKV(PrefixCachingKV):
    """The prefix cache as vllm-engine.md §3 words it, for the differential tests' reference: every
    full block interned from its tokens, one at a time, nothing private (so no request runs open)."""

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


def _private(first_id: int, offset: int) -> int:
    """The id of the private block ``offset`` blocks after the first one (whose id is ``first_id``
    < 0): distinct for every (chain, offset) pair, and from every interned id."""
    return -1 - ((-1 - first_id) | offset << 40)
