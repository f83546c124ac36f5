"""infer-sched-lab: a teaching simulator of how an LLM serving engine schedules requests.

Modules, imports flowing one way (nothing imports ``cli``; the engine never writes files):

- the model: ``workload`` (records, validation, scenarios) → ``cache`` (prefix cache) →
  ``policy`` (admission order) → ``config`` and ``profiles`` (knobs) → ``engine`` (the tick
  engine) → ``invariants`` and ``metrics`` (the statistics contract);
- outputs: ``picture`` and ``report`` → ``artifacts`` (rendering, safe writing); ``sweep`` (and
  ``cluster``: its points on a Dask cluster, Dask imported only when asked for); ``parallel``
  (the cases of a large run side by side in worker processes);
- tools on artifacts: ``explain``, ``check``, ``compare``; real data: ``importers`` (traces →
  workloads), ``realrun`` (export for a benchmark client, import of real results); shipping:
  ``labzip``; shared helpers: ``files`` (regular files, permissions), ``cmdline`` (one-line errors);
- ``cli``: ``main(argv) -> int``.

Time is in abstract ticks and work in abstract budget units (lab.md §1); nothing here is
milliseconds or GPU tokens per second, except the imported real runs, which say so.
"""

__version__ = "0.1.0"
