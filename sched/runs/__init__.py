"""Building runs: a plain run's cases simulated and checked (``build``), warnings for its scale
(``scale``); many cases or points at once: worker processes for a large run (``parallel``), load
sweeps (``sweep``, on Dask with ``cluster``; ``worker_pool``: the workers and stop signals a sweep and a plan share), the speed benchmark (``bench``), the lab ZIP (``labzip``).

May import: ``sched.base``, ``sched.workload``, ``sched.core``, ``sched.lab``, ``sched.vllm``, ``sched.output``, ``sched.engines``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base", "workload", "core", "lab", "vllm", "output", "engines")
