"""What both engines share: the lab's knobs and cases (``config``), the records an engine hands on
(``records``: the one interface downstream code reads), the statistics (``metrics``, its compact
samples ``samples``), the clock a run keeps (``clock``) and the error an invariant check raises
(``invariants``).

May import: ``sched.base``, ``sched.workload``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base", "workload")
