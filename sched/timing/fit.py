"""Fitting a step-time model to a real run (vllm-engine.md §6): the loss and the search.

Pure arithmetic over per-step records; no engine here (the replays come from
:mod:`sched.timing.calibrate`, which passes them in). The coefficients are
``(a, b, c, d)`` of :mod:`sched.timing.stepmodel` (ms per step, per prompt token, per decoded
sequence, per KV context token); a coefficient the training data cannot tell apart
(:mod:`sched.timing.identify`) is held at 0 and left out of the search.

**Loss.** For each training request, the absolute log error of its predicted TTFT and of its
predicted E2E, averaged over both and over the requests:
``mean(|ln(ttft_pred / ttft_meas)| + |ln(e2e_pred / e2e_meas)|) / 2``. A log error treats a
request waiting 0.5 s and one waiting 60 s alike (an overloaded run holds both) and is symmetric:
twice too long costs what half too long costs. ``exp(loss) − 1`` reads as a typical relative error.

**Search.** Replaying the run for every candidate ``(a, b, c)`` would cost a whole simulation per
candidate, so the search alternates two cheap moves, all deterministic:

1. *Freeze the schedule* of the latest replay: which steps ran, how many prompt and decode tokens
   each computed, in which step every request got its first token and finished. With the
   schedule fixed, every stamp is linear in ``(a, b, c, d)``: a step ending ``n`` steps into a busy
   period that began at time ``B`` (an arrival) ends at ``B + a·n + b·P + c·D + d·K``, with ``P``,
   ``D`` and ``K`` the prompt tokens, decode tokens and KV context tokens of those ``n`` steps.
2. *Nelder–Mead* (:func:`nelder_mead`, coefficients kept ``>= 0`` by taking absolute values)
   minimises the loss of that frozen schedule, which costs one pass over the training requests.
3. *Replay* with the new coefficients (the schedule may change: other arrivals join other steps,
   other preemptions happen) and score it with the true loss. Repeat from 1 until the
   coefficients move by less than 0.5% or ``max_replays`` replays were made (the caller says so
   when the limit, :data:`MAX_REPLAYS` unless asked otherwise, stopped it); a replay that
   scores worse than the best so far is retried half-way back towards the best. The best replayed
   coefficients are kept: the reported training error is always a real replay's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Step", "FrozenSchedule", "log_loss", "nelder_mead", "fit_coefficients", "MAX_REPLAYS", "TERMS"]

#: The coefficients of the step model, in order.
TERMS = ("a", "b", "c", "d")

#: Most replays of the run one fit makes (each replay is one simulation of every request).
MAX_REPLAYS = 8


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step of a replay: ``start`` and ``duration`` in ms, tokens computed in it, and the
    KV context tokens held by running requests during it (KV blocks in use × block size)."""

    start: float
    duration: float
    prompt_tokens: int
    decode_tokens: int
    kv_tokens: int = 0

    @property
    def end(self) -> float:
        return self.start + self.duration


def log_loss(pairs) -> float:
    """Mean absolute log error over ``(predicted, measured)`` pairs of positive durations (ms).

    Durations below 1 µs count as 1 µs (a log needs a positive number). Example: pairs
    ``[(2, 1), (1, 2)]`` give ``ln 2 ≈ 0.693`` (twice too long and half too long cost the same).
    """
    total, count = 0.0, 0
    for predicted, measured in pairs:
        total += abs(math.log(max(predicted, 1e-3) / max(measured, 1e-3)))
        count += 1
    return total / count if count else 0.0


class FrozenSchedule:
    """The stamps of training requests as linear functions of ``(a, b, c, d)`` (module docstring, 1).

    ``steps`` in time order; ``targets`` one ``(arrival, first step index, done step index,
    measured ttft, measured e2e)`` per training request (ms; indices into ``steps``).
    """

    def __init__(self, steps: list[Step], targets: list[tuple]) -> None:
        # Per step: (busy period start, steps so far in the period, prompt, decode, KV tokens so far).
        # Steps of several runs may follow each other: a step not starting where the last ended
        # begins a new busy period (an idle engine, or the next run's clock).
        self.rows = []
        base = n = prompt = decode = kv = 0
        previous_end = None
        for step in steps:
            if previous_end is None or abs(step.start - previous_end) > 1e-6:  # idle: a new busy period
                base, n, prompt, decode, kv = step.start, 0, 0, 0, 0
            n, prompt, decode, kv = (n + 1, prompt + step.prompt_tokens, decode + step.decode_tokens,
                                     kv + step.kv_tokens)
            self.rows.append((base, n, prompt, decode, kv))
            previous_end = step.end
        self.targets = targets

    def end(self, index: int, a: float, b: float, c: float, d: float = 0.0) -> float:
        """End of step ``index`` (ms) under coefficients ``a, b, c, d`` with this schedule."""
        base, n, prompt, decode, kv = self.rows[index]
        return base + a * n + b * prompt + c * decode + d * kv

    def loss(self, coefficients, targets=None) -> float:
        """:func:`log_loss` of TTFT and E2E of the targets (or ``targets``, a subset or resample)
        under ``coefficients`` ``(a, b, c[, d])`` (absolute values). The same sum as
        :func:`log_loss` over the pairs, written out: it is the search's inner loop."""
        a, b, c, d = (tuple(abs(x) for x in coefficients) + (0.0,))[:4]
        rows, log = self.rows, math.log
        total, count = 0.0, 0
        for arrival, first, done, ttft, e2e in (self.targets if targets is None else targets):
            base, n, prompt, decode, kv = rows[first]
            predicted = base + a * n + b * prompt + c * decode + d * kv - arrival
            total += abs(log(max(predicted, 1e-3) / max(ttft, 1e-3)))
            base, n, prompt, decode, kv = rows[done]
            predicted = base + a * n + b * prompt + c * decode + d * kv - arrival
            total += abs(log(max(predicted, 1e-3) / max(e2e, 1e-3)))
            count += 2
        return total / count if count else 0.0


def nelder_mead(function, start, scales, iterations: int = 300, tolerance: float = 1e-10) -> tuple[list, float]:
    """Minimise ``function(point) -> float`` from ``start`` (a list); returns ``(best point, value)``.

    The standard simplex method (reflection 1, expansion 2, contraction 1/2, shrink 1/2), its
    first simplex ``start`` plus ``scales[i]`` along axis ``i``; stops after ``iterations`` or when
    the values of the simplex differ by less than ``tolerance``. Deterministic.
    """
    dimension = len(start)
    simplex = [list(start)] + [[x + (scales[i] if i == j else 0.0) for j, x in enumerate(start)]
                               for i in range(dimension)]
    values = [function(point) for point in simplex]
    for _ in range(iterations):
        order = sorted(range(dimension + 1), key=lambda i: values[i])
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] <= tolerance:
            break
        centroid = [sum(point[j] for point in simplex[:-1]) / dimension for j in range(dimension)]
        worst = simplex[-1]

        def toward(factor):
            return [centroid[j] + factor * (worst[j] - centroid[j]) for j in range(dimension)]

        reflected = toward(-1.0)
        reflected_value = function(reflected)
        if reflected_value < values[0]:
            expanded = toward(-2.0)
            expanded_value = function(expanded)
            simplex[-1], values[-1] = (expanded, expanded_value) if expanded_value < reflected_value else (
                reflected, reflected_value)
        elif reflected_value < values[-2]:
            simplex[-1], values[-1] = reflected, reflected_value
        else:
            contracted = toward(-0.5) if reflected_value < values[-1] else toward(0.5)
            contracted_value = function(contracted)
            if contracted_value < min(values[-1], reflected_value):
                simplex[-1], values[-1] = contracted, contracted_value
            else:  # shrink towards the best point
                best = simplex[0]
                simplex = [best] + [[best[j] + 0.5 * (point[j] - best[j]) for j in range(dimension)]
                                    for point in simplex[1:]]
                values = [values[0]] + [function(point) for point in simplex[1:]]
    best = min(range(dimension + 1), key=lambda i: values[i])
    return simplex[best], values[best]


def typical_sizes(current, steps) -> list:
    """For ``(a, b, c, d)``: the change of each coefficient that adds a quarter of ``a`` to a typical
    busy step (``a/4`` itself for ``a``): the natural size of a move in the search."""
    a = max(current[0], 1e-3)
    busy = [s for s in steps if s.prompt_tokens or s.decode_tokens] or [Step(0, 0, 1, 1, 1)]
    typical = [max(1.0, sum(getattr(s, key) for s in busy) / len(busy))
               for key in ("prompt_tokens", "decode_tokens", "kv_tokens")]
    return [0.25 * a] + [0.25 * a / size for size in typical]


def search_scales(current, steps) -> list:
    """First simplex steps for ``(a, b, c, d)`` at ``current``: a quarter of each value, and at least
    :func:`typical_sizes` for a coefficient at or near 0 (so the search can leave 0)."""
    sizes = typical_sizes(current, steps)
    return [max(0.25 * abs(value), size) if i else 0.25 * max(current[0], 1e-3)
            for i, (value, size) in enumerate(zip(current, sizes))]


def minimise_frozen(frozen: FrozenSchedule, current, free, scales, targets=None, iterations: int = 300):
    """Nelder–Mead on ``frozen``'s loss over the coefficients marked ``free`` (the others held at
    their value in ``current``); returns the full ``(a, b, c, d)`` (absolute values) and its loss."""
    index = [i for i in range(4) if free[i]]

    def loss(point):
        full = list(current)
        for i, value in zip(index, point):
            full[i] = value
        return frozen.loss(full, targets)
    point, value = nelder_mead(loss, [current[i] for i in index], [scales[i] for i in index], iterations)
    full = list(current)
    for i, x in zip(index, point):
        full[i] = abs(x)
    return tuple(full), value


def fit_coefficients(replay, start, max_replays: int = MAX_REPLAYS, free=(True, True, True, True)):
    """The search of the module docstring; returns ``(coefficients, loss, replays, converged)``.

    ``replay(a, b, c, d) -> (steps, targets)`` simulates the run(s) with those coefficients and returns
    the :class:`Step` list and the training targets as :class:`FrozenSchedule` wants them;
    ``start`` is the first ``(a, b, c, d)`` (e.g. a constant step of the median TPOT); ``free``
    marks the coefficients searched (the others stay at their ``start`` value). ``replays`` lists
    ``(coefficients, true loss)`` of every replay made, in order; ``converged`` is False when
    ``max_replays`` stopped the search before the coefficients settled.
    """
    history = []
    best, best_loss = None, math.inf
    current = tuple(start)
    converged = False
    for _ in range(max_replays):
        steps, targets = replay(*current)
        frozen = FrozenSchedule(steps, targets)
        true_loss = frozen.loss(current)
        history.append((current, true_loss))
        if true_loss < best_loss:
            best, best_loss = current, true_loss
        elif best is not None:  # worse than the best: try half-way back before fitting again
            current = tuple((x + y) / 2 for x, y in zip(best, current))
            continue
        proposal, _ = minimise_frozen(frozen, current, free, search_scales(current, steps))
        # Settled: no coefficient moved by 0.5% of itself plus 1% of its typical size, i.e. by more
        # than a quarter of a percent of a on a typical step (a coefficient near 0 wobbling by a
        # negligible amount is settled too).
        floors = [1e-2 * size for size in typical_sizes(current, steps)]
        if all(abs(x - y) <= 5e-3 * abs(y) + floor for x, y, floor in zip(proposal, current, floors)):
            converged = True
            break
        current = proposal
    return best, best_loss, history, converged
