"""The lab's tick engine (lab.md §3): prefix cache, admission policies, profiles, steady ticks, the
engine and its invariants.

May import: ``sched.base``, ``sched.workload``, ``sched.core``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_architecture.py).
MAY_IMPORT = ("base", "workload", "core")
