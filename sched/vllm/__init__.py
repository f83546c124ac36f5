"""The vLLM engine (vllm-engine.md): knobs under vLLM's names, KV blocks and the block-level prefix
cache (its free queue and eviction in ``free_queue``), the waiting queue, per-step records, the fast
path, vLLM's scheduler step (``engine``, with its waiting side in ``waiting_side``), its async
scheduling (the batch-queue loop of ``--async-scheduling``, with its output side in
``async_outputs``), its invariants.

May import: ``sched.base``, ``sched.workload``, ``sched.core``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base", "workload", "core")
