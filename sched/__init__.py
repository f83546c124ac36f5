"""infer-sched-lab: a teaching simulator of how an LLM serving engine schedules requests.

Modules, imports flowing one way: ``workload`` → ``cache`` → ``config`` and ``profiles`` →
``engine`` → ``invariants`` and ``metrics`` → ``artifacts`` and ``sweep`` → ``cli``; ``importers``
turns real traces into workloads. Time is in abstract ticks and work in abstract budget units
(lab.md §1); nothing here is milliseconds or GPU tokens per second.
"""

__version__ = "0.1.0"
