"""Workloads: the request records and scenarios (``specs``), workload files decoded (``file``) and
checked (``rules`` per field, ``plain`` the quick road, ``validation`` the rest), real traces turned
into workloads (``importers``).

May import: ``sched.base``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base",)
