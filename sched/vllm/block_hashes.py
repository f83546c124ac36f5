"""The hashes of the prefix cache's blocks (vllm-engine.md §3): which id names each full KV block
of a request, and which of its blocks nobody else can ever hit.

A block's hash is an interned id of ``(parent id, its tokens as runs)`` (the runs of
:func:`sched.vllm.block_tokens.block_tokens`): exact, no collisions. When the workload's block size
is a multiple of ours, the blocks lying wholly inside one workload block are interned together:
``(parent id of the workload block, its id)`` names the run of consecutive ids of its blocks (the
same tokens give the same ids either way; a block holding other tokens too is interned alone, and
no block inside a workload block is ever interned alone).

Private blocks. A request's own prompt tokens (the ``("r", name)`` runs) are its alone (names are
unique), so the first full block holding one, and every block after it in its chain, can only ever
be hit by the request itself (after a preemption). Those blocks are not interned: the first gets a
fresh id, the later ones an id computed from it and their position (:func:`private_id`), so a
request whose prompt shares nothing costs no hash table entry and no token runs. Interned ids are
``>= 0``, private ids ``< 0``; the ids are internal (no artifact shows them), so the results are
those of interning all. A request whose prompt is wholly shared tokens that no other request of the
run repeats has private output blocks too (:meth:`BlockHashes.note_prompts`).

Used by :class:`sched.vllm.kv_cache.PrefixCachingKV`, which inherits :class:`BlockHashes`.
"""

from __future__ import annotations

from .block_tokens import NEVER, block_tokens, private_from, prompt_key

__all__ = ["BlockHashes", "private_id"]


class BlockHashes:
    """The interned block hashes of one run (a mixin of the prefix-caching pool).

    Reads ``self.block_size`` (tokens per KV block) and a *seq*'s ``spec``, ``prompt`` (tokens)
    and ``hashes`` (the ids of its leading full blocks computed so far, a list it keeps)."""

    #: Whether the blocks wholly inside one workload block are interned together (module docstring).
    GROUP_WORKLOAD_BLOCKS = True

    def _init_hashes(self) -> None:
        self._hash_ids: dict[tuple, int] = {}             # (parent hash, token runs) -> hash
        self._workload_ids: dict[tuple, int] = {}         # (parent hash, workload block id) -> first hash
        self._next_id = 0                                 # interned hashes handed out so far
        self._next_private = 0                            # private chains handed out so far
        # name -> first private block (note_prompts; read where _private_from would be asked: a pool
        # that answers _private_from otherwise leaves it empty)
        self._starts: dict = {}

    def _chain(self, seq, num_blocks: int) -> int:
        """Make ``seq.hashes`` hold the hashes of its first ``num_blocks`` full blocks up to its first
        private block (interned once), and that block's fresh id when it is reached; returns the
        index of the first private block."""
        hashes = seq.hashes
        first = self._private_from(seq)
        stop = num_blocks if num_blocks < first else first
        if len(hashes) < stop:
            self._intern(seq, stop)
        if num_blocks > first and len(hashes) == first:
            hashes.append(-1 - self._next_private)
            self._next_private += 1
        return first

    def _intern(self, seq, stop: int) -> None:
        """Extend ``seq.hashes`` with the interned ids of its blocks up to ``stop`` (none private)."""
        hashes = seq.hashes
        bs, spec = self.block_size, seq.spec
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
            key = (hashes[-1] if hashes else -1, block_tokens(spec, seq.prompt, j * bs, (j + 1) * bs))
            block_hash = ids.get(key)
            if block_hash is None:
                block_hash = ids[key] = self._next_id
                self._next_id += 1
            hashes.append(block_hash)

    def block_hashes(self, seq, num_blocks: int) -> list[int]:
        """The chained hashes of ``seq``'s first ``num_blocks`` full blocks (module docstring)."""
        first = self._chain(seq, num_blocks)
        hashes = seq.hashes
        return [hashes[j] if j <= first else private_id(hashes[first], j - first) for j in range(num_blocks)]

    def note_prompts(self, specs) -> None:
        """Learn which of the run's requests have private blocks the workload alone does not show:
        a prompt of wholly shared tokens that no other request repeats has private output blocks,
        and a workload block chain (``prefix_blocks``) that no other request shares up to block
        ``w`` makes the blocks from the first one holding a token of ``w`` private. Without this
        call none of them are."""
        # Workload blocks are interned together only when the workload has one block size (a file
        # has one header): an id's first tokens are the same tokens at any size, the groups not.
        one_size = len({spec.block_size for spec in specs if spec.prefix_blocks is not None}) <= 1
        if not one_size:
            self.GROUP_WORKLOAD_BLOCKS = False
        nodes: dict = {}      # (parent node, workload block id, its type) -> node of the chain tree
        users: list = []      # node -> how many requests' chains pass through it
        ends: dict = {}       # name -> the node of its last workload block
        bs = self.block_size
        if one_size:
            for spec in specs:
                if spec.prefix_blocks is not None:
                    parent = -1
                    for block_id in spec.prefix_blocks[:-(-spec.prompt_tokens // spec.block_size)]:
                        key = (parent, block_id, type(block_id).__name__)
                        node = nodes.get(key)
                        if node is None:
                            node = nodes[key] = len(users)
                            users.append(0)
                        users[node] += 1
                        parent = node
                    ends[spec.name] = parent
        firsts = [private_from(spec, spec.prompt_tokens, bs) for spec in specs]   # each asked once
        seen: dict = {}
        for spec, first in zip(specs, firsts):
            if first == NEVER:
                # With one workload block size a chain and a length name the tokens (no token runs built).
                end = ends.get(spec.name)
                key = prompt_key(spec) if end is None else ("n", end, spec.prompt_tokens)
                seen[key] = None if key in seen else spec.name
        unique = {name for name in seen.values() if name is not None}
        starts = {}
        for spec, first in zip(specs, firsts):
            if first == NEVER and spec.name in unique:
                first = spec.prompt_tokens // bs   # the first block holding an output token
            if spec.name in ends:   # a chain nobody else shares from workload block w on
                parent = -1
                for w, block_id in enumerate(spec.prefix_blocks[:-(-spec.prompt_tokens // spec.block_size)]):
                    parent = nodes[(parent, block_id, type(block_id).__name__)]
                    if users[parent] == 1:
                        first = min(first, w * spec.block_size // bs)
                        break
            starts[spec.name] = first
        self._starts = starts

    @property
    def private_starts(self) -> dict:
        """Request name -> index of its first private block, as :meth:`note_prompts` learnt it
        (empty before that call; a pool whose answer does not come from it leaves it empty)."""
        return self._starts

    def _private_from(self, seq) -> int:
        """The index of ``seq``'s first private block, or :data:`~sched.vllm.block_tokens.NEVER`
        (kept in ``seq.first_private``: read there directly once set)."""
        first = seq.first_private
        if first is None:
            first = self._starts.get(seq.spec.name)
            if first is None:
                first = private_from(seq.spec, seq.prompt, self.block_size)
            seq.first_private = first
        return first


def private_id(first_id: int, offset: int) -> int:
    """The id of the private block ``offset`` blocks after the first one (whose id is ``first_id``
    < 0): distinct for every (chain, offset) pair, and from every interned id."""
    return -1 - ((-1 - first_id) | offset << 40)
