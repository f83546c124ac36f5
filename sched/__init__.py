"""infer-sched-lab: a teaching simulator of how an LLM serving engine schedules requests.

Modules, imports flowing one way (nothing imports ``cli``; the engine never writes files):

- the model: ``workload`` (records, validation, scenarios) → ``cache`` (prefix cache) →
  ``policy`` (admission order) → ``config`` and ``profiles`` (knobs) → ``engine`` (the tick
  engine) → ``invariants`` and ``metrics`` (the statistics contract);
- outputs: ``picture`` and ``report`` → ``artifacts`` (rendering, safe writing); ``sweep``;
- tools on artifacts: ``explain``, ``check``, ``compare``; real data: ``importers`` (traces →
  workloads), ``realrun`` (export for a benchmark client, import of real results); shipping:
  ``labzip``; shared helpers: ``files`` (regular files, permissions), ``cmdline`` (one-line errors);
- the vLLM engine (``--engine vllm``, vllm-engine.md): ``vllm_config`` (knobs under vLLM's names)
  → ``kv_cache`` (KV block pool, block-level prefix cache) → ``vllm_queue`` (requests as the
  scheduler sees them, waiting queue, arrivals) → ``vllm_records`` (per-step records) →
  ``vllm_fastpath`` (open decode runs, jumps) → ``vllm_engine`` (vLLM 0.33.0's scheduler step)
  → ``vllm_invariants``; its outputs
  ``vllm_artifacts``, ``vllm_picture`` and ``vllm_explain`` plug into ``artifacts``, ``picture``
  and ``explain``; both engines hand the same ``engine.Request``/``engine.CaseResult`` records on;
- milliseconds from a real run (vllm-engine.md §6): ``stepmodel`` (step-model.json) → ``fit``
  (loss, Nelder–Mead) → ``replay`` (the vLLM engine on a µs clock) → ``calibration_report`` (error
  tables) → ``runmeta`` (a real run's settings) → ``calibrate`` (the subcommand);
  ``ms_picture`` → ``msrun`` (a vLLM run with ``--step-model``, in ms);
- ``cli``: ``main(argv) -> int``.

Time is in abstract ticks and work in abstract budget units (lab.md §1); nothing here is
milliseconds or GPU tokens per second, except the imported real runs and runs given a fitted
step model, which say so.
"""

__version__ = "0.1.0"
