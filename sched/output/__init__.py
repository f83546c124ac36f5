"""What a run writes and draws (lab.md §7): requests.jsonl and timeline.jsonl lines, summary and
table, the timeline pictures (ticks, vLLM steps, milliseconds; their lanes cut in ``lanes``, drawn
with ``svg``), report.html, case sections. Each renderer asks the run's clock
(:class:`sched.core.clock.RunClock`) which engine and unit it renders.

May import: ``sched.base``, ``sched.workload``, ``sched.core``, ``sched.vllm``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base", "workload", "core", "vllm")
