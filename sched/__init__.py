"""infer-sched-lab: a teaching simulator of how an LLM serving engine schedules requests.

Modules, imports flowing one way (nothing imports ``cli``; the engine never writes files):

- the model: ``workload`` (records, scenarios) → ``workload_file`` (decoding workload files: JSON,
  the canonical layout column by column) → ``validation`` (reading and checking workload files) →
  ``cache`` (prefix cache) → ``policy`` (admission order) → ``config`` and ``profiles`` (knobs) →
  ``records`` (the records both engines hand on: their one shared interface) → ``steady`` (ticks the
  engine need not walk in full: steady decoding and prefill) → ``engine`` (the tick engine) →
  ``invariants`` and ``metrics`` (the statistics contract);
- outputs: ``picture``, ``report`` and ``jsonl_lines`` (the lines of requests.jsonl and timeline.jsonl)
  → ``artifacts`` (rendering); ``safe_write`` (directory kinds, atomic
  writes, ``--force`` rules); ``sweep`` (and
  ``cluster``: its points on a Dask cluster, Dask imported only when asked for); ``parallel``
  (the cases of a large run side by side in worker processes) with ``case_sections`` (each case's
  ``requests.jsonl``/``timeline.jsonl`` lines rendered in the process that simulated it);
- tools on artifacts: ``explain``, ``check``, ``rundiff`` (``diff``), ``compare_sides`` (a run's case
  as a side, read through ``trace``: the summary checked, requests.jsonl streamed) → ``compare``
  (contract, gates, decision) → ``compare_cli`` (the ``compare`` subcommand); ``bench`` (speed and memory,
  through the ``main`` the CLI hands it); real data: ``importers`` (traces → workloads), ``realrun``
  (import of real results) → ``export`` (a workload for a benchmark client); shipping: ``labzip``; shared helpers:
  ``files`` (regular files, permissions, staging names, the writer's lock), ``cmdline`` (one-line
  escaped errors, signals as interrupts, a guarded stdout);
- the serving-bench chapter (serving-bench.md), beside the lab and not using its engine:
  ``serving_bench`` (the CPU window model and the chapter's helpers) → ``serving_artifacts`` (runs on
  a requests file, artifacts, the windows picture); ``serving_decide`` (the real-engine result files,
  the chapter's decision) → ``serving_evidence`` (the evidence record, the printed view);
  ``serving_cli`` (``serving-bench run|decide``); ``serving_json`` reads both commands' JSON files;
- the vLLM engine (``--engine vllm``, vllm-engine.md): ``vllm_config`` (knobs under vLLM's names)
  → ``kv_cache`` (KV block pool, block-level prefix cache) → ``vllm_queue`` (requests as the
  scheduler sees them, waiting queue, arrivals) → ``vllm_records`` (per-step records) →
  ``vllm_fastpath`` (open decode runs, jumps) → ``vllm_engine`` (vLLM 0.33.0's scheduler step)
  → ``vllm_invariants``; its outputs
  ``vllm_artifacts``, ``vllm_picture`` and ``vllm_explain`` plug into ``artifacts``, ``picture``
  and ``explain``; both engines hand the same ``records.Request``/``records.CaseResult`` records on;
- milliseconds from a real run (vllm-engine.md §6): ``stepmodel`` (step-model.json) → ``fit``
  (loss, Nelder–Mead) → ``replay`` (the vLLM engine on a µs clock) → ``calibration_report`` (error
  tables) → ``runmeta`` (a real run's settings) → ``calibrate`` (the subcommand);
  ``ms_picture`` → ``msrun`` (a vLLM run with ``--step-model``, in ms);
- ``run_cli`` (the plain run: its flags, ``run_lab``, warnings) and ``tool_cli`` (``import``, ``sweep``,
  ``explain``, ``check``, ``zip``) → ``cli`` (the entry point, ``main(argv) -> int``: dispatch, exit codes).

Time is in abstract ticks and work in abstract budget units (lab.md §1); nothing here is
milliseconds or GPU tokens per second, except the imported real runs, runs given a fitted step
model and the serving-bench window model, which say so.
"""

__version__ = "0.1.0"
