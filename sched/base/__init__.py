"""What every room uses: regular files and the writer's lock (``files``), one-line errors, number
checks and signals for commands (``cmdline``), the strict JSON reader of files read back
(``strict_json``), atomic artifact directories (``safe_write``).

May import: nothing of ``sched``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ()
