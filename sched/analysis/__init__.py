"""Tools that read a run's artifacts: ``explain`` (reading and checking its files in ``explain_input``,
the stories in ``lab_explain`` and ``vllm_explain``), ``check``, ``diff`` (``rundiff``, its reading in ``rundiff_input``), and ``compare``
(``trace`` and ``compare_sides`` read a run as a side; ``run_manifest`` is the one reader of a
run's ``manifest.json`` they share).

May import: ``sched.base``, ``sched.workload``, ``sched.core``, ``sched.output``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base", "workload", "core", "output")
