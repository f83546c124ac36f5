"""What engineers read first on a vLLM dashboard: preemptions, KV blocks in use, running and waiting.

One row per case of a vLLM-engine run (vllm-engine.md §5), added to ``summary.json``/``summary.csv``,
the report and ``diff`` (the lab engine has no KV blocks and never preempts: its files are unchanged):

- ``num_preemptions``: recompute preemptions summed over the requests; ``preempted_requests``: how
  many requests were preempted at least once. Always known.
- ``peak_kv_blocks_used``, ``peak_num_running``, ``peak_num_waiting``: the largest value after
  scheduling over every step (vLLM's ``num_requests_running``/``num_requests_waiting`` gauges and
  its KV blocks in use, read each step). Exact with a ``full`` or ``counts`` timeline (a ``counts``
  record keeps the largest value of its span); ``None`` with ``--timeline off``.
- ``mean_kv_blocks_used``, ``mean_num_running``, ``mean_num_waiting``: the mean over steps, each
  step weighted by its duration (one tick per step on the tick clock, its µs on a step-model run);
  idle time between steps does not count. Exact only when every timeline record is one step
  (``full``, or ``counts`` before any jump or merge); otherwise ``None`` (a merged record keeps its
  span's largest value, not its mean).
"""

from __future__ import annotations

from ..core.ended_requests import preemption_counts
from ..core.records import CaseResult

__all__ = ["LOAD_FIELDS", "LOAD_UNITS", "load_summary"]

LOAD_FIELDS = ("num_preemptions", "preempted_requests", "peak_kv_blocks_used", "mean_kv_blocks_used",
               "peak_num_running", "mean_num_running", "peak_num_waiting", "mean_num_waiting")
LOAD_UNITS = {"num_preemptions": "preemptions (recompute)", "preempted_requests": "requests",
              "peak_kv_blocks_used": "KV blocks", "mean_kv_blocks_used": "KV blocks (step-duration-weighted mean)",
              "peak_num_running": "requests", "mean_num_running": "requests (step-duration-weighted mean)",
              "peak_num_waiting": "requests", "mean_num_waiting": "requests (step-duration-weighted mean)"}
_GAUGES = ("kv_blocks_used", "num_running", "num_waiting")   # attributes of StepRecord and StepCounts


def load_summary(result: CaseResult) -> dict:
    """The :data:`LOAD_FIELDS` of one vLLM-engine case (module docstring); means are floats."""
    num_preemptions, preempted_requests = preemption_counts(result.requests)
    row = {"num_preemptions": num_preemptions, "preempted_requests": preempted_requests}
    records = result.ticks
    one_step_each = all(getattr(k, "num_steps", 1) == 1 for k in records)
    total = sum(k.duration for k in records)
    for name in _GAUGES:
        values = [getattr(k, name) for k in records]
        row[f"peak_{name}"] = max(values) if values else None
        row[f"mean_{name}"] = (sum(v * k.duration for v, k in zip(values, records)) / total
                              if records and one_step_each and total else None)
    return {field: row[field] for field in LOAD_FIELDS}
