"""Warnings for a run at a scale its flags do not suit (stderr only, never in artifacts): the lab
profile on a large workload, a full timeline on a large workload, and a lab-engine run (or sweep)
whose estimated work (:func:`sched.lab.estimate.estimate_walked_ticks`) would take long. A run is
never refused for its scale.
"""

from __future__ import annotations

from ..core.config import EngineConfig, cases_for
from ..lab.estimate import estimate_walked_ticks
from .build import default_timeline

__all__ = ["scale_warnings", "long_run_warning", "LAB_PROFILE_MAX_REQUESTS", "LONG_RUN_TICKS",
           "WALKED_TICKS_PER_SECOND"]

#: Above this many requests the ``lab`` profile draws a warning (a teaching scale).
LAB_PROFILE_MAX_REQUESTS = 5000
#: Above this many estimated walked ticks (all cases, all sweep points) a run draws a warning with
#: the estimate: at the roughly 2 × 10⁵ ticks per second of a small laptop, 10⁸ is some minutes.
LONG_RUN_TICKS = 10**8
WALKED_TICKS_PER_SECOND = 200_000


def scale_warnings(workload, profile: str, timeline: str | None) -> list[str]:
    """One-line warnings (stderr only, never in artifacts) for a run at a scale its flags do not
    suit: the ``lab`` profile above :data:`LAB_PROFILE_MAX_REQUESTS` requests, and an explicit
    ``--timeline full`` where :func:`default_timeline` would not choose it (one record per walked
    tick, built in memory: gigabytes on a real trace)."""
    warnings = []
    if profile in ("lab", None) and len(workload) > LAB_PROFILE_MAX_REQUESTS:
        warnings.append(f"the lab profile (budget 64, max active 4) is a teaching scale; with {len(workload)} "
                        "requests consider --profile vllm")
    if timeline == "full" and default_timeline(workload) != "full":
        warnings.append(f"--timeline full on {len(workload)} requests keeps one record per walked tick in memory "
                        "and may write gigabytes; consider --timeline counts")
    return warnings


def long_run_warning(workload, config: EngineConfig, points: int = 1) -> str | None:
    """A one-line warning when the estimated work (:func:`sched.lab.engine.estimate_walked_ticks` × the
    four cases × ``points`` sweep points) exceeds :data:`LONG_RUN_TICKS`, with the estimate in ticks
    and in time at :data:`WALKED_TICKS_PER_SECOND`; ``None`` otherwise. The run is not refused."""
    ticks = estimate_walked_ticks(workload, config) * len(cases_for(config)) * points
    if ticks <= LONG_RUN_TICKS:
        return None
    minutes = ticks / WALKED_TICKS_PER_SECOND / 60
    when = f"{minutes:.0f} minutes" if minutes < 120 else f"{minutes / 60:.0f} hours"
    return (f"about {ticks:.2g} ticks to simulate one by one ({len(workload)} requests, budget {config.budget}, "
            f"decode cost {config.decode_cost}, max active {config.max_active}): roughly {when} at "
            f"{WALKED_TICKS_PER_SECOND:,} ticks per second; a larger --budget, a smaller --decode-cost or "
            "--profile vllm makes it shorter (Ctrl-C stops it cleanly)")
