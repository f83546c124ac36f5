"""Replaying a real run through the vLLM engine with a step time in milliseconds (vllm-engine.md §6).

The engine (:mod:`sched.vllm.engine`) keeps its clock in whatever unit ``step_time`` returns. Here
that unit is the whole **microsecond** (:meth:`sched.timing.stepmodel.StepModel.step_us`): the workload's
arrivals in ms become µs, every stamp is an exact integer, and the results are turned back into
ms. Three variants of the KV-cache rules serve the ablation of :mod:`sched.timing.calibrate`:

- ``kv-preemption``: the run's settings as they are (vLLM's rules: whole-sequence admission gate,
  recompute preemption when a running request needs a block and none is free);
- ``no-kv-limit``: the same with ample KV blocks (``num_gpu_blocks`` = ``None``): nothing waits
  for memory, nothing is preempted;
- ``kv-reserve``: the run's blocks, but a request is admitted only if its *whole future sequence*
  (prompt + every output token but the last) fits, and those blocks are taken at admission, so a
  running request never needs another block and **nothing is ever preempted**. This is how "a KV
  limit without preemption" is modelled: a conservative engine that reserves for the worst case
  (the alternative, letting running requests grow past the capacity, would model a GPU with more
  memory than it has). It runs without prefix caching (the replayed workload shares no prefix, and
  only a re-prefill after a preemption could hit its own blocks: this variant has none).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .fit import Step
from ..vllm.kv_counts import KVCache, blocks_for
from ..core.records import SimulationError
from ..vllm.config import VllmKnobs, check_fits
from ..vllm.async_step import make_simulation

__all__ = ["ReplayResult", "replay", "knobs_from_settings", "VARIANTS"]

VARIANTS = ("kv-preemption", "no-kv-limit", "kv-reserve")


@dataclass(frozen=True)
class ReplayResult:
    """One replay in ms.

    ``steps``: :class:`~sched.timing.fit.Step` per engine step; ``samples``: ``(start, end, running,
    waiting)`` per timeline record (counts after scheduling; a jump over decode-only steps, which only
    the fast path without prefix caching makes, keeps its largest counts); ``predicted``: name -> ``{"ttft", "e2e",
    "queue_wait", "tpot"}`` (ms; tpot ``None`` below two tokens); ``first_step``/``done_step``:
    name -> index into ``steps`` of the step that sampled its first / last token;
    ``preemptions``: total recompute preemptions.
    """

    steps: list
    samples: list
    predicted: dict
    first_step: dict
    done_step: dict
    preemptions: int


def knobs_from_settings(settings: dict, num_gpu_blocks="settings", prefix_caching=None,
                        async_scheduling=None) -> VllmKnobs:
    """:class:`VllmKnobs` of a step model's ``settings`` (``num_gpu_blocks`` may override, ``None`` = ample).

    ``async_scheduling``: ``None`` takes ``settings["async_scheduling"]`` when present (the mode a
    real run says it ran, e.g. ``scheduler_config.async_scheduling`` of its meta.json), else off;
    ``True``/``False`` overrides. Raises :class:`sched.core.config.ConfigError` on a bad value."""
    blocks = settings["num_gpu_blocks"] if num_gpu_blocks == "settings" else num_gpu_blocks
    caching = settings["enable_prefix_caching"] if prefix_caching is None else prefix_caching
    if async_scheduling is None:
        async_scheduling = settings.get("async_scheduling", False)
    return VllmKnobs(max_num_batched_tokens=settings["max_num_batched_tokens"], max_num_seqs=settings["max_num_seqs"],
                     long_prefill_token_threshold=settings["long_prefill_token_threshold"],
                     enable_prefix_caching=caching, block_size=settings["block_size"],
                     num_gpu_blocks=blocks, policy=settings["policy"], async_scheduling=async_scheduling)


class _ReservingKV(KVCache):
    """KV blocks (counts) that take a request's whole future sequence at admission (``kv-reserve``).

    The admission gate asks :meth:`blocks_to_allocate` for a waiting request's whole current
    sequence; this pool answers with the blocks of prompt + output − 1 tokens (the last output
    token is sampled, never computed) and :meth:`allocate` takes them all at once, so later
    requests of the running pass need none."""

    def __init__(self, num_gpu_blocks: int, block_size: int, final_tokens: dict) -> None:
        super().__init__(num_gpu_blocks, block_size)
        self.final_tokens = final_tokens      # request index -> prompt + output − 1

    def _target(self, seq, num_tokens: int) -> int:
        return max(blocks_for(num_tokens, self.block_size), blocks_for(self.final_tokens[seq.index], self.block_size))

    def blocks_to_allocate(self, seq, num_tokens: int, hit=()) -> int:
        return self._target(seq, num_tokens) - seq.blocks

    def allocate(self, seq, num_tokens: int, hit=()) -> None:
        need = self._target(seq, num_tokens) - seq.blocks
        if need > 0:
            self.num_free -= need
            seq.blocks += need


def replay(specs, settings: dict, coefficients, variant: str = "kv-preemption") -> ReplayResult:
    """Simulate ``specs`` (arrivals in whole ms) under ``settings`` with
    ``step_ms = a + b·prompt + c·decode + d·kv_tokens`` (:mod:`sched.timing.stepmodel`).

    ``coefficients`` is ``(a, b, c)`` or ``(a, b, c, d)`` in ms; ``variant`` one of :data:`VARIANTS`
    (module docstring). The engine asks the step time once per step with the KV blocks held
    (``reads_kv_blocks``), so every step's tokens, KV context and duration are known exactly.
    Raises :class:`sched.core.config.ConfigError` when a request can never fit the KV cache.
    """
    a, b, c, d = (tuple(coefficients) + (0.0,))[:4]
    per_block = d * settings["block_size"]
    workload = [replace(spec, arrival=spec.arrival * 1000) for spec in specs]
    calls = []   # (prompt tokens, decode tokens, kv blocks, duration µs) per step, in step order
    log = calls.append

    def step_us(prompt_tokens: int, decode_tokens: int, kv_blocks: int) -> int:
        duration = max(1, round(1000 * (a + b * prompt_tokens + c * decode_tokens + per_block * kv_blocks)))
        log((prompt_tokens, decode_tokens, kv_blocks, duration))
        return duration
    step_us.reads_kv_blocks = True

    if variant == "no-kv-limit":
        knobs = knobs_from_settings(settings, num_gpu_blocks=None)
    elif variant == "kv-reserve":
        knobs = knobs_from_settings(settings, prefix_caching=False)
    elif variant == "kv-preemption":
        knobs = knobs_from_settings(settings)
    else:
        raise ValueError(f"unknown replay variant {variant!r}; known: {', '.join(VARIANTS)}")
    check_fits(workload, knobs)
    simulation = make_simulation(workload, knobs, timeline="counts", step_time=step_us,
                                 per_step=variant == "kv-reserve")
    if variant == "kv-reserve":
        # The one pool swapped in from outside the engine: same interface, reserving at admission.
        simulation.kv = _ReservingKV(knobs.num_gpu_blocks, knobs.block_size,
                                     {i: s.prompt_tokens + s.output_tokens - 1 for i, s in enumerate(workload)})
    result = simulation.run()
    ends = simulation.stamp_times[1:]
    if len(ends) != len(calls):
        raise SimulationError(f"replay: {len(calls)} step times asked for {len(ends)} steps")
    return _in_ms(result, calls, ends, settings["block_size"])


def _in_ms(result, calls, ends, block_size) -> ReplayResult:
    steps, end_index = [], {}
    for index, ((prompt, decode, kv_blocks, duration), end) in enumerate(zip(calls, ends)):
        steps.append(Step((end - duration) / 1000, duration / 1000, prompt, decode, kv_blocks * block_size))
        end_index[end] = index
    # Running/waiting counts per record (a jump keeps its largest counts), for the time-series comparison.
    samples = [(record.tick / 1000, (record.tick + record.duration) / 1000, record.num_running, record.num_waiting)
               for record in result.ticks]
    predicted, first_step, done_step, preemptions = {}, {}, {}, 0
    for request in result.requests:
        arrival, first, done = request.spec.arrival, request.first_token_at, request.done_at
        count = request.num_tokens
        predicted[request.name] = {
            "ttft": (first - arrival) / 1000, "e2e": (done - arrival) / 1000,
            "queue_wait": (request.admitted_at - arrival) / 1000,
            "tpot": (done - first) / 1000 / (count - 1) if count > 1 else None}
        first_step[request.name], done_step[request.name] = end_index[first], end_index[done]
        preemptions += request.num_preemptions
    return ReplayResult(steps, samples, predicted, first_step, done_step, preemptions)
