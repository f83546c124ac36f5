"""Which step-model terms a training run can tell apart, and how sure the fit is of each (issue 18, item 2).

Pure arithmetic over replayed steps (:class:`sched.timing.fit.Step`); no engine here.

**Identification.** The training requests see only the steps up to the last of them finishing.
Over those steps (the *training window*) a coefficient of ``step_ms = a + b·P + c·D + d·K``
(:mod:`sched.timing.stepmodel`) can be told apart from the others only if its quantity varies in
a way the others do not follow:

- ``c`` (per decoded sequence) against ``a`` (per step): the decode-only steps must show at least
  two different numbers of decoded sequences. One request at a time, or a single batch size
  throughout, makes ``a + c·D`` one number: ``c`` is then held at 0 and its cost is inside ``a``.
- ``d`` (per KV context token) against ``a`` and ``c``: over the decode-only steps, the KV context
  ``K`` must not be a straight line of ``D``: what least squares of ``K`` on ``1, D`` leaves must
  spread by at least :data:`MIN_SPREAD` (5%) of the mean context; otherwise ``d`` is held at 0.
- ``c`` also needs the decode batch itself to spread by :data:`MIN_SPREAD` of its mean: a batch
  that is almost always the same size cannot separate the two either.
- ``b`` (per prompt token): at least two steps computing different, non-zero numbers of prompt
  tokens; otherwise ``b`` is held at 0 and a prefill costs what a step costs.

``a`` is always fitted (every step has it). A term held at 0 is written ``unidentified`` in
``step-model.json`` with the reason, and is never printed as a measured number.

**Unidentified after the fit** (:func:`unidentified_by_spread`). A term the window can tell apart
may still come out smaller than its own uncertainty: ``|value| < sd`` (one standard deviation of the
bootstrap below). The data then cannot say whether it is 0 or twice its value, so it is
*unidentified* too: it is held at its fitted value (the replays that judged the model used it), and
said as ``c unidentified (|c| < 0.00026 ms at 1 sd; held at its fit)``, never as a number.
``step-model.json`` keeps the value used in ``step_ms``, the reason in ``unidentified`` and
``identified: {term: false}``. The rule is one standard deviation, not two: a term is called
identified only when its value stands clear of its own noise at least once over.

**Uncertainty.** A bootstrap over training requests on the frozen schedule of the final replay
(:class:`sched.timing.fit.FrozenSchedule`): :data:`BOOTSTRAP_ROUNDS` resamples of the training
requests with replacement (seeded, so the same run gives the same figures), each refitted by
Nelder–Mead from the fitted point; the standard deviation of each coefficient over the rounds is
its uncertainty. It measures how much the answer depends on which requests were seen, with the
schedule held fixed; it does not include the error of the model's form.
"""

from __future__ import annotations

import random
import statistics

from .fit import FrozenSchedule, TERMS, minimise_frozen, search_scales

__all__ = ["identify_terms", "unidentified_by_spread", "bootstrap_spread", "too_few_to_bootstrap",
           "BOOTSTRAP_ROUNDS", "MIN_BOOTSTRAP_REQUESTS", "MIN_SPREAD", "TERM_UNITS"]

#: Resamples of the bootstrap.
BOOTSTRAP_ROUNDS = 12
#: Fewest training requests whose resamples say anything about a coefficient's uncertainty (the
#: noise column's sampling bootstrap has the same floor): one request resampled is itself every time.
MIN_BOOTSTRAP_REQUESTS = 5
#: Least relative spread (standard deviation over mean) of the decode batch, and of the part of the KV
#: context a straight line in the decode batch does not explain, for ``c`` and ``d`` to be told apart.
MIN_SPREAD = 0.05
#: What one unit of each coefficient is (the ms it costs per what).
TERM_UNITS = {"a": "ms per step", "b": "ms per prompt token", "c": "ms per decoded sequence",
              "d": "ms per KV context token"}


def identify_terms(steps, last_index: int) -> dict:
    """``{term: reason}`` for each of ``b``, ``c``, ``d`` the steps ``steps[:last_index + 1]`` cannot
    tell apart (module docstring); an empty dict when all four can be fitted.

    Example: steps decoding one sequence each (``D = 1``) with a growing context give
    ``{"c": "...one request at a time..."}``: ``a`` and ``c`` are one number there.
    """
    window = steps[:last_index + 1]
    unknown = {}
    decode_only = [s for s in window if s.decode_tokens and not s.prompt_tokens]
    sizes = [s.decode_tokens for s in decode_only]
    if len(set(sizes)) < 2:
        size = sizes[0] if sizes else 0
        unknown["c"] = (f"every decode step of the training window decoded {size} sequence{'s' if size != 1 else ''} "
                        "(one request at a time, or a single batch size): the per-sequence cost cannot be told apart "
                        "from the per-step cost; c held at 0, its cost is inside a")
    elif _relative_spread(sizes) < MIN_SPREAD:
        unknown["c"] = (f"the decode batch hardly changed in the training window (spread {_relative_spread(sizes):.1%} "
                        f"of its mean {statistics.fmean(sizes):.0f}, under {MIN_SPREAD:.0%}): the per-sequence cost cannot "
                        "be told apart from the per-step cost; c held at 0, its cost is inside a")
    contexts = [s.kv_tokens for s in decode_only]
    left = _unexplained(contexts, sizes) * _relative_spread(contexts) ** 2
    if left < MIN_SPREAD ** 2:
        unknown["d"] = ("over the decode steps of the training window the KV context moves in step with the number of "
                        f"decoded sequences, or by less than {MIN_SPREAD:.0%} of its mean: its cost cannot be told apart; "
                        "d held at 0")
    prompts = {s.prompt_tokens for s in window if s.prompt_tokens}
    if len(prompts) < 2:
        unknown["b"] = ("fewer than two different prefill sizes in the training window: the per-token prefill cost "
                        "cannot be told apart from the per-step cost; b held at 0")
    return unknown


def unidentified_by_spread(coefficients, spread: dict, held: dict) -> dict:
    """``{term: reason}`` for each fitted term (not in ``held``, the terms :func:`identify_terms`
    held at 0) whose value is smaller than its uncertainty: ``|value| < spread[term]`` (module
    docstring, "Unidentified after the fit").

    ``coefficients``: ``(a, b, c, d)`` in ms; ``spread``: ``{term: one standard deviation or None}``
    (:func:`bootstrap_spread`). Example: ``c = 1e-09`` with ``sd = 0.00026`` gives
    ``{"c": "|c| < 0.00026 ms per decoded sequence at 1 sd; held at its fit (1e-09)"}``.
    """
    unknown = {}
    for term, value in zip(TERMS, coefficients):
        sd = spread.get(term)
        if term in held or sd is None or abs(value) >= sd:
            continue
        unknown[term] = f"|{term}| < {sd:.2g} {TERM_UNITS[term]} at 1 sd; held at its fit ({value:.4g})"
    return unknown


def too_few_to_bootstrap(coefficients, free, count: int) -> dict:
    """``{term: reason}`` for each fitted term but ``a`` when only ``count`` (<
    :data:`MIN_BOOTSTRAP_REQUESTS`) training requests exist: their bootstrap spread (0 for one
    request) is no uncertainty, so b, c, d cannot be told from 0 and are held at their fit, said;
    ``a``, the step itself, is kept without a ±. ``coefficients``: ``(a, b, c, d)`` in ms; ``free``:
    which were fitted. Empty when ``count`` is large enough."""
    if count >= MIN_BOOTSTRAP_REQUESTS:
        return {}
    return {term: (f"only {count} training request{'s' if count != 1 else ''} (fewer than "
                   f"{MIN_BOOTSTRAP_REQUESTS}): its uncertainty cannot be measured; held at its fit ({value:.4g})")
            for term, value, fitted in zip(TERMS, coefficients, free) if fitted and term != "a"}


def _relative_spread(values: list) -> float:
    """Standard deviation over mean of ``values`` (0 for fewer than two or a zero mean)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean else 0.0


def _unexplained(y: list, x: list) -> float:
    """Share of the variance of ``y`` that least squares on ``1, x`` leaves (0 when ``y`` is constant)."""
    n = len(y)
    if n < 3:
        return 0.0
    my, mx = sum(y) / n, sum(x) / n
    syy = sum((v - my) ** 2 for v in y)
    if syy <= 1e-9 * max(1.0, my * my) * n:
        return 0.0
    sxx = sum((v - mx) ** 2 for v in x)
    sxy = sum((u - mx) * (v - my) for u, v in zip(x, y))
    explained = sxy * sxy / sxx if sxx > 0 else 0.0
    return max(0.0, (syy - explained) / syy)


def bootstrap_spread(steps, targets, coefficients, free, rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0) -> dict:
    """``{term: standard deviation}`` of each free coefficient over ``rounds`` resamples of
    ``targets`` (module docstring); ``None`` for a term held fixed. Same inputs, same answer."""
    frozen = FrozenSchedule(steps, targets)
    scales = search_scales(coefficients, steps)
    generator = random.Random(seed)
    samples = []
    for _ in range(rounds):
        resample = [targets[generator.randrange(len(targets))] for _ in targets]
        point, _ = minimise_frozen(frozen, coefficients, free, scales, resample, iterations=150)
        samples.append(point)
    return {term: (statistics.pstdev(point[i] for point in samples) if free[i] else None)
            for i, term in enumerate(TERMS)}
