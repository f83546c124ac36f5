"""infer-sched-lab: a teaching simulator of how an LLM serving engine schedules requests.

One sub-package per concept, imports flowing one way (docs/architecture.md is the map; each
package's ``__init__`` says what it holds and, in ``MAY_IMPORT``, what it may import):
``base`` → ``workload`` → ``core`` → ``lab`` and ``vllm`` (the two engines) → ``engines`` →
``output`` → ``timing``, ``runs``, ``analysis``, ``chapter`` → ``commands`` (the command line).
``serving_bench`` keeps the chapter's import name.

Time is in abstract ticks and work in abstract budget units (lab.md §1); nothing here is
milliseconds or GPU tokens per second, except the imported real runs, runs given a fitted step
model and the serving-bench window model, which say so.
"""

__version__ = "0.1.0"
