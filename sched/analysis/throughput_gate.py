"""An honest throughput gate: below saturation, throughput is the offered load (compare.md §3.3).

Throughput here is output tokens / makespan, and the makespan runs from the first arrival to the
last end. When a run keeps up with its arrivals, it finishes shortly after the last one arrives:
its throughput is the offered load (the workload's tokens over its arrival span) whatever the
scheduler does, and a tiny change in it says how long the last requests took, not what the engine
can carry. Gating such a change as "throughput fell" is wrong advice (a candidate with twice the KV
blocks, P95 TTFT −60% and throughput −0.0004% was told to keep the baseline).

- **Load ratio** of a side = arrival span / makespan (= achieved / offered throughput when every
  request is served): 1 when the run ends as the last request arrives, well below 1 when a backlog
  builds and drains after the arrivals stop.
- **Below saturation**: a side whose load ratio is at least ``1 − saturation_margin`` (default
  0.95). Unknown (``None``) when a side's arrivals or makespan are unknown.
- The non-priority gate then passes, and says which rule applied, when the change meets the
  floor (``min_throughput_gain``); or, both sides below saturation and the floor not a demanded gain
  (``<= 0``), when the change is within ``± throughput_noise`` (default 1%) or both sides emitted the
  same output tokens (same work over the same arrivals: the change is explained by the offered load).
  Saturated or unknown: the floor alone, as before.
"""

from __future__ import annotations

__all__ = ["load_ratio", "throughput_gate"]


def _measured(change):
    """The gate's ``measured`` as ``decision.json`` holds it: ``None``, the change to 6 decimals, or
    ``"inf"`` for a gain over a baseline that emitted nothing (JSON has no infinity; the other gates
    write an infinite ratio the same way)."""
    if change is None:
        return None
    if change == float("inf"):
        return "inf"
    return round(float(change), 6)


def load_ratio(side) -> float | None:
    """Arrival span / makespan of a :class:`~sched.analysis.compare_sides.Side` (both in its own time
    unit), or ``None`` when either is unknown or the makespan is 0."""
    trace, makespan = side.trace, side.summary.get("makespan")
    if not trace.arrivals_known or trace.first_arrival is None or not makespan:
        return None
    return (trace.last_arrival - trace.first_arrival) / makespan


def throughput_gate(baseline, candidate, change, floor: float, noise: float, margin: float) -> dict:
    """The throughput gate of a non-priority comparison (module docstring).

    ``change``: candidate / baseline − 1 (or ``None``); ``floor``: ``min_throughput_gain``;
    ``noise``: ``throughput_noise``; ``margin``: ``saturation_margin``. Returns the gate record
    (``gate``, ``measured``, ``op``, ``threshold``, ``passed``) with ``regime`` (``below saturation``,
    ``saturated`` or ``unknown``), both ``load_ratios`` and ``rule``: the sentence saying which rule decided.
    """
    ratios = [load_ratio(side) for side in (baseline, candidate)]
    if None in ratios:
        regime = "unknown"
    elif min(ratios) >= 1 - margin:
        regime = "below saturation"
    else:
        regime = "saturated"
    shown = ", ".join("NA" if r is None else f"{r:.4f}" for r in ratios)
    record = {"gate": "throughput gain", "measured": _measured(change),
              "op": ">=", "threshold": floor, "passed": None, "regime": regime, "load_ratios": ratios}
    if change is None:
        record["rule"] = "throughput unknown on a side"
        return record
    if change >= floor:
        record.update(passed=True, rule=f"the change meets the floor {floor:+g} ({regime}; arrival span / makespan {shown})")
    elif regime == "below saturation" and floor <= 0:
        same_work = (baseline.trace.emitted == candidate.trace.emitted and baseline.trace.emitted > 0)
        if abs(change) <= noise:
            record.update(passed=True, threshold=-noise, rule=(
                f"below saturation (arrival span / makespan {shown} >= {1 - margin:g}): a change within the "
                f"noise tolerance ±{noise:g} is not a regression"))
        elif same_work:
            record.update(passed=True, rule=(
                f"below saturation (arrival span / makespan {shown} >= {1 - margin:g}): both sides emitted "
                f"the same {baseline.trace.emitted} tokens over the same arrivals; the change is explained by "
                "the offered load (when the last requests ended), not by capacity"))
        else:
            record.update(passed=False, rule=(
                f"below saturation, but the change exceeds the noise tolerance ±{noise:g} and the sides "
                "emitted different tokens"))
    else:
        why = ("saturated (arrival span / makespan " + shown + f" below {1 - margin:g} on a side): throughput is "
               "capacity here" if regime == "saturated" else "saturation unknown (arrivals or makespan missing)")
        record.update(passed=False, rule=f"{why}; the change is below the floor {floor:+g}")
    return record
