"""Milliseconds (vllm-engine.md §6): the step model, its fit and calibration on real runs, replay on
a µs clock, which terms a run can tell apart (``identify``), real-run readers (``real_record``, ``read_vllm_bench``,
``read_request_jsonl``, ``realrun`` for import-results, ``runmeta``, ``loadrun``, ``otel_run`` for vLLM OpenTelemetry run directories, ``run_settings``:
the settings rules every reader shares; ``repeat_run``: what ``--repeat`` accepts), public GPU figures
(``gpus``), an unknown KV size derived as vLLM does (``kvsize``), a run in ms (``msrun``), export to a benchmark client.

May import: ``sched.base``, ``sched.workload``, ``sched.core``, ``sched.vllm``, ``sched.output``, ``sched.engines``.
"""

#: The packages of ``sched`` this one may import (checked by tests/test_project_architecture.py).
MAY_IMPORT = ("base", "workload", "core", "vllm", "output", "engines")
