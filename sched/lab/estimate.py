"""How long a lab-engine case will take to simulate, estimated before it runs (the scale warnings
of a run and a sweep).
"""

from __future__ import annotations

from ..core.config import EngineConfig
from ..workload.specs import RequestSpec

__all__ = ["estimate_walked_ticks"]


def estimate_walked_ticks(workload: list[RequestSpec], config: EngineConfig) -> int:
    """A rough count of the ticks one case walks one at a time (the simulation's cost), before running it.

    Every walked tick spends at most ``budget`` units: prefill needs ``Σ prompt tokens / budget``
    ticks. Decoding is jumped over when the budget pays every active request's decode
    (``min(max_active, N) × decode_cost <= budget``: about two event ticks per request);
    otherwise each decode tick is walked, ``decode_cost × Σ output tokens / budget`` of them. A
    deadline caps the total at the last arrival plus ``timeout_ticks``. Example: 1,000 requests
    of 1,000 prompt and 1,000 output tokens, budget 64, decode cost 64, max active 4: about
    1,015,625 ticks per case (the lab walks roughly 2 × 10⁵ ticks per second on a small laptop).
    """
    if not workload:
        return 0
    prompt = sum(spec.prompt_tokens for spec in workload)
    output = sum(spec.output_tokens for spec in workload)
    budget, cost = config.budget, config.decode_cost
    if min(config.max_active, len(workload)) * cost <= budget:
        decode = 2 * len(workload)
    else:
        decode = -(-cost * output // budget)
    ticks = -(-prompt // budget) + decode
    if config.timeout_ticks is not None:
        ticks = min(ticks, max(spec.arrival for spec in workload) + config.timeout_ticks + 1)
    return ticks
