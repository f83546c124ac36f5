"""The course's serving-scheduler chapter (serving-bench.md): the CPU window model (``window``,
also importable as :mod:`sched.serving_bench`), its result files, decision and evidence record.

May import: ``sched.base``, ``sched.workload``, ``sched.core``, and for the GPU-free stand-in
(``stand_in``) ``sched.vllm``, ``sched.timing`` (the step model) and ``sched.engines`` (invariants).
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base", "workload", "core", "vllm", "timing", "engines")
