"""The vLLM engine's knobs, under vLLM's own names (vllm-engine.md §1), and their checks.

How they relate to the lab's knobs (docs/handbook/vllm-engine.md §17.1): ``max_num_batched_tokens`` is the
lab's ``budget`` with a decode costing 1 token; ``max_num_seqs`` is ``max_active``;
``long_prefill_token_threshold`` is ``chunk_tokens`` (0 = no cap, and vLLM applies it only while
more than one request is running or waiting); ``enable_prefix_caching`` is the APC case;
``block_size`` and ``num_gpu_blocks`` have no lab counterpart (the lab's KV cache is infinite).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import MAX_KNOB, Batching, Case, ConfigError

__all__ = ["VllmKnobs", "VLLM_POLICIES", "ample_blocks", "check_fits"]

#: ``--policy`` values the vLLM engine knows (vLLM's ``--scheduling-policy``).
VLLM_POLICIES = ("fcfs", "priority")


def ample_blocks(workload, block_size: int) -> int:
    """KV blocks (null block included) enough that capacity never binds: every request could hold
    all of its blocks at once, ``1 + Σ ceil((prompt + output) / block_size)`` (the oracle's rule)."""
    return 1 + sum(-(-(spec.prompt_tokens + spec.output_tokens) // block_size) for spec in workload)


@dataclass(frozen=True, slots=True)
class VllmKnobs:
    """One vLLM engine configuration (vllm-engine.md §1).

    max_num_batched_tokens: tokens scheduled per step (prompt and output alike; the lab's budget);
    max_num_seqs: most requests in the running list; long_prefill_token_threshold: most tokens one
    request gets per step while more than one request is running or waiting, 0 = none;
    enable_prefix_caching: block-level prefix cache; block_size: tokens per KV block;
    num_gpu_blocks: KV blocks including the null block (``N − 1`` usable), ``None`` = ample
    (:func:`ample_blocks`); policy: ``fcfs`` or ``priority``; timeout_ticks: deadline after arrival
    (same unit as arrivals), or ``None``; async_scheduling: vLLM's ``--async-scheduling`` (the next
    step is scheduled before the last step's tokens are known; :mod:`sched.vllm.async_step`).
    Raises :class:`ConfigError` naming the flag.
    """

    ENGINE = "vllm"   # the engine these knobs drive (sched.core.clock.RunClock.engine); not a field
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    long_prefill_token_threshold: int = 0
    enable_prefix_caching: bool = False
    block_size: int = 16
    num_gpu_blocks: int | None = None
    policy: str = "fcfs"
    timeout_ticks: int | None = None
    async_scheduling: bool = False

    def __post_init__(self) -> None:
        for knob, low in (("max_num_batched_tokens", 1), ("max_num_seqs", 1), ("long_prefill_token_threshold", 0),
                          ("block_size", 1), ("num_gpu_blocks", 2), ("timeout_ticks", 1)):
            value = getattr(self, knob)
            if value is None and knob in ("num_gpu_blocks", "timeout_ticks"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_KNOB:
                what = (f"at least 2 (block 0 is vLLM's null block) and at most {MAX_KNOB}" if knob == "num_gpu_blocks"
                        else f"an integer from {low} to {MAX_KNOB}")
                raise ConfigError(f"--{knob.replace('_', '-')} must be {what}, got {value!r}")
        if not isinstance(self.async_scheduling, bool):
            raise ConfigError(f"--async-scheduling must be true or false, got {self.async_scheduling!r}")
        if self.async_scheduling and self.timeout_ticks is not None:
            raise ConfigError("--timeout-ticks with --async-scheduling: request deadlines are not modelled under async "
                              "scheduling; drop one of the two")
        if self.max_num_batched_tokens < self.max_num_seqs:   # vLLM's SchedulerConfig refuses it too
            raise ConfigError(f"--max-num-batched-tokens {self.max_num_batched_tokens} is below --max-num-seqs "
                              f"{self.max_num_seqs}: vLLM refuses such settings (max_num_batched_tokens must be >= "
                              f"max_num_seqs); raise --max-num-batched-tokens to at least {self.max_num_seqs} or "
                              f"lower --max-num-seqs to at most {self.max_num_batched_tokens}")
        if self.policy not in VLLM_POLICIES:
            raise ConfigError(f"--policy {self.policy!r}: the vllm engine knows {' and '.join(VLLM_POLICIES)}")

    # The names the shared code (metrics, invariants) reads from a case's configuration.
    @property
    def budget(self) -> int:
        """The token budget per step (``max_num_batched_tokens``), the lab's ``budget``."""
        return self.max_num_batched_tokens

    @property
    def max_active(self) -> int:
        return self.max_num_seqs

    @property
    def decode_cost(self) -> int:
        return 1

    @property
    def chunk_tokens(self) -> int | None:
        return self.long_prefill_token_threshold or None

    def case(self) -> Case:
        """The one case a vLLM run simulates (no static batching in vLLM), named ``vllm``."""
        return Case("vllm", Batching.CONTINUOUS, apc=self.enable_prefix_caching,
                    chunk_tokens=self.long_prefill_token_threshold or None)

    def gpu_blocks_for(self, workload) -> int:
        """``num_gpu_blocks``, or the ample count for ``workload`` when not given."""
        return self.num_gpu_blocks if self.num_gpu_blocks is not None else ample_blocks(workload, self.block_size)


def check_fits(workload, knobs: VllmKnobs, source: str = "workload", blocks_from: str | None = None) -> None:
    """Refuse a workload with a request that could never finish in the KV cache: vLLM itself would
    wait forever. A lone request holds at most ``prompt + output − 1`` tokens (its last output
    token is sampled, never computed), so it must fit in ``num_gpu_blocks − 1`` blocks.
    Raises :class:`ConfigError` naming every such request (``problems``: one line each), its block
    count and the capacity. ``blocks_from`` names where the block count came from when it was not
    the ``--num-gpu-blocks`` flag (e.g. a step model's settings)."""
    if knobs.num_gpu_blocks is None:
        return
    usable, bs = knobs.num_gpu_blocks - 1, knobs.block_size
    problems = []
    for index, spec in enumerate(workload):
        need = -(-(spec.prompt_tokens + spec.output_tokens - 1) // bs)
        if need > usable:
            problems.append(f"{source}: request {index} ({spec.name}): prompt {spec.prompt_tokens} + output "
                            f"{spec.output_tokens} tokens need {need} KV blocks of {bs} tokens, but "
                            f"{blocks_from or '--num-gpu-blocks'} {knobs.num_gpu_blocks} leaves {usable} usable: it "
                            "could never run (vLLM would wait forever)")
    if problems:
        raise ConfigError(problems[0], problems=problems)
