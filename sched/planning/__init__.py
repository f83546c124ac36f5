"""Capacity planning (``plan``): for each vLLM setting, the highest request rate whose SLO attainment
reaches a target (``search``), settings whose runs are provably another's (``same_runs``), the grid of
settings and its refusals (``grid``), and the table,
``plan.json``, recommendation and Pareto chart (``report``, ``pareto``).

May import: ``sched.base``, ``sched.workload``, ``sched.core``, ``sched.vllm``, ``sched.output``,
``sched.engines``, ``sched.timing``, ``sched.runs``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base", "workload", "core", "vllm", "output", "engines", "timing", "runs")
