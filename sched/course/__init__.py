"""The course around the lab: what a learner hands in (``plan``, ``handin``), re-simulating a run
from its own ``workload.json`` and ``manifest.json`` (``resimulate``), opening hand-ins safely
(``unpack``) and grading a class at once (``grade``).

May import: ``sched.base``, ``sched.workload``, ``sched.core``, ``sched.lab``, ``sched.vllm``,
``sched.output``, ``sched.engines``, ``sched.analysis``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base", "workload", "core", "lab", "vllm", "output", "engines", "analysis")
