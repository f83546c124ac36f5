"""The error every engine's invariant checks raise (lab.md §3, vllm-engine.md §5).

The rules themselves belong to each engine (:mod:`sched.lab.invariants`,
:mod:`sched.vllm.invariants`); :func:`sched.engines.check_case` picks the engine's rules for a
finished case. A broken invariant is a bug in the simulator: exit code 3, never bad input.
"""

from __future__ import annotations

from .records import CaseResult, SimulationError

__all__ = ["InvariantError", "fail"]


class InvariantError(SimulationError):
    """A finished case breaks a rule of the model: an internal error (exit code 3)."""


def fail(result: CaseResult, where: str, what: str):
    """Raise :class:`InvariantError` naming the case, then ``where`` (a request or tick) and ``what``."""
    raise InvariantError(f"invariant broken in case {result.case.name}, {where}: {what}")
