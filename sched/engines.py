"""The two engines seen from outside: which engine a finished case ran on, and its invariants.

Everything downstream of a simulation reads the shared records of :mod:`sched.core.records`; the
one question that needs the engine is which rules a finished case must keep. This module sits
above both engine packages (:mod:`sched.lab`, :mod:`sched.vllm`) so neither imports the other.
"""

from __future__ import annotations

from .core.invariants import InvariantError, fail
from .core.records import CaseResult
from .lab.invariants import check_lab_case
from .vllm.config import VllmKnobs

__all__ = ["InvariantError", "check_case", "check_cases"]


def check_cases(results) -> None:
    """Check every case of one run with :func:`check_case`."""
    for result in results:
        check_case(result)


def check_case(result: CaseResult) -> None:
    """Check one finished case against its engine's rules; raises :class:`InvariantError` naming
    the case, request or tick (lab.md §3 for the lab engine, vllm-engine.md §5 for the vLLM engine,
    whose cases carry a :class:`~sched.vllm.config.VllmKnobs` config)."""
    if isinstance(result.config, VllmKnobs):   # the vLLM engine's own rules
        from .vllm.invariants import check_vllm_case   # only a vLLM-engine case needs it (start-up)
        check_vllm_case(result, fail)
        return
    check_lab_case(result)
