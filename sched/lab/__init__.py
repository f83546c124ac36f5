"""The lab's tick engine (lab.md §3): prefix cache, admission policies, profiles, the engine (its
waiting side, its decoding side, the tick and the loop), steady ticks, the cost estimate and the
invariants.

May import: ``sched.base``, ``sched.workload``, ``sched.core``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base", "workload", "core")
