"""The band printed with a ``--gpu`` run: the same workload under the two ends of the carry (issue 18, item 4).

A step model carried to another GPU (:func:`sched.timing.gpus.carry_to`) is one assumption about
which part of the fitted step time follows the new GPU's figures. :func:`band_text` replays the
run's workload under the two bounding models that ``carry_to`` records in
``fitted_on["carried_to"]["band"]`` (:func:`sched.timing.gpus.carry_ends`: *fast*, *slow*) and
returns the lines that ``table.txt`` and stdout print under the run's own table: P50 and P95 of
TTFT and E2E (ms, nearest rank, succeeded requests) for the central carry and each end, with the
ratio of each end to the central value, and what each end assumes. The band is not a confidence
interval: it is the spread between two physical readings of the same fit, so a prediction is
read as "somewhere in here, if the kernels and host of the target behave as the table says".
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..core.metrics import e2e, percentile, ttft
from .stepmodel import StepModel

__all__ = ["band_models", "band_text", "percentiles_ms"]

#: The statistics the band shows: (label, metric function, percentile).
_STATS = (("P50 TTFT", ttft, 50), ("P95 TTFT", ttft, 95), ("P50 E2E", e2e, 50), ("P95 E2E", e2e, 95))


def band_models(model: StepModel) -> dict[str, StepModel]:
    """``{"fast": StepModel, "slow": StepModel}`` from a carried ``model``'s
    ``fitted_on["carried_to"]["band"]`` (coefficients in ms, as :func:`~sched.timing.gpus.carry_ends`
    gives them); empty for a model that was not carried."""
    band = (model.fitted_on.get("carried_to") or {}).get("band") or {}
    return {name: replace(model, a_ms=end["a"], b_ms=end["b"], c_ms=end["c"], d_ms=end["d"])
            for name, end in band.items() if name in ("fast", "slow")}


def percentiles_ms(result) -> list[float | None]:
    """P50/P95 of TTFT and E2E of ``result``'s succeeded requests in ms (the engine's clock is in µs)."""
    values = []
    for _, metric, p in _STATS:
        sample = [metric(request) for request in result.requests if request.succeeded]
        value = percentile(sample, p)
        values.append(None if value is None else float(value) / 1000)
    return values


def _same_terms(one: StepModel, other: StepModel) -> bool:
    return all(math.isclose(getattr(one, term), getattr(other, term), rel_tol=1e-9, abs_tol=1e-12)
               for term in ("a_ms", "b_ms", "c_ms", "d_ms"))


def _one_sided(model: StepModel, ends: dict[str, StepModel]) -> list[str]:
    """One line when an end of the band is the central carry itself (its a, b, c, d equal to 1e-9),
    e.g. the slow end when no GPU of the pair has a measured matmul share; else none."""
    same = [name for name in ("fast", "slow") if _same_terms(ends[name], model)]
    if len(same) == 2:
        return ["  Both ends are the central carry: the band is a single point (no measured matmul share and no "
                "weight read to move), not a sign that the prediction is exact."]
    if same:
        other = "fast" if same[0] == "slow" else "slow"
        return [f"  The {same[0]} end is the central carry (same a, b, c, d): the band is one-sided, spanning only "
                f"the {other} side of the central prediction."]
    return []


def band_text(run, model: StepModel, simulate_with) -> str:
    """The band's lines for ``run`` (a finished :class:`~sched.output.artifacts.LabRun` under the
    carried ``model``). ``simulate_with(step_model)`` replays the same workload and settings under
    another step model and returns its :class:`~sched.core.records.CaseResult`. Returns ``""`` for a
    model that was not carried."""
    ends = band_models(model)
    if not ends:
        return ""
    carried = model.fitted_on["carried_to"]
    central = percentiles_ms(run.results[0])
    rows = [("central", central)] + [(name, percentiles_ms(simulate_with(ends[name]))) for name in ("fast", "slow")]
    band = carried["band"]
    formulas = {name: ends[name].formula for name in ends}   # an unidentified term stays "?", never a number
    lines = [f"--gpu band ({carried['from']} -> {carried['gpu']}): the carried step time is an assumption, "
             "not a measurement; the same run under the two ends of what the public figures allow (ms; ratio to "
             "central):",
             "  " + f"{'carry':<8}" + "".join(f"{label:>20}" for label, _, _ in _STATS)]
    for name, values in rows:
        cells = []
        for value, base in zip(values, central):
            if value is None:
                cells.append("NA")
            elif name == "central" or not base:
                cells.append(f"{value:.1f}")
            else:
                cells.append(f"{value:.1f} (x{value / base:.3f})")
        lines.append("  " + f"{name:<8}" + "".join(f"{cell:>20}" for cell in cells))
    lines += [f"  central: a kept, b and c {carried['b_and_c']}, d {carried['d']}",
              f"  fast: {formulas['fast']} ({band['fast']['assumes']})",
              f"  slow: {formulas['slow']} ({band['slow']['assumes']})",
              f"  {band['weights']}; {band['matmul']}",
              *_one_sided(model, ends),
              "  Not known from the table: tensor parallelism, mixture of experts, quantised weights or KV, how mature "
              "each architecture's kernels are beyond one matmul measurement, the target's host CPU."]
    return "\n".join(lines) + "\n"
