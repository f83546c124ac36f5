"""Admission policies: the order of the waiting queue (compare.md §1).

A policy maps ``(spec, workload_index, decode_cost)`` to a sort key; the waiting request with the
smallest key is admitted first. Keys end with ``(arrival, workload_index)`` so ties are explicit.
Only admission is ordered: an active request is never preempted.
"""

from __future__ import annotations

from ..workload.specs import RequestSpec

__all__ = ["POLICIES"]


def fcfs(spec: RequestSpec, index: int, decode_cost: int) -> tuple:
    """First come, first served: arrival tick, then workload order (the lab's default)."""
    return (spec.arrival, index)


def shortest(spec: RequestSpec, index: int, decode_cost: int) -> tuple:
    """Least total work first: prompt tokens + decode_cost × output tokens, in budget units.

    compare.md §1 says "prompt tokens left to prefill": a waiting request has prefilled nothing, and
    its cache hit is only decided at admission (lab.md §3), so that is its whole prompt.
    """
    return (spec.prompt_tokens + decode_cost * spec.output_tokens, spec.arrival, index)


def priority(spec: RequestSpec, index: int, decode_cost: int) -> tuple:
    """Smallest ``priority`` first (lower = more urgent, vLLM's convention; missing = 0)."""
    return (spec.priority or 0, spec.arrival, index)


#: Policy name -> key function; the CLI offers these names as ``--policy`` choices.
POLICIES = {"fcfs": fcfs, "shortest": shortest, "priority": priority}
