"""The command line: argument parsing and dispatch only; the work is in the domain packages.

May import: every package of ``sched``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("*",)
