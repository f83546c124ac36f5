"""Public GPU figures and carrying a step model from one GPU to another (issue 18, item 4).

:data:`GPUS` holds, per GPU, the three figures a step time can scale with, from the vendor's
public data sheets (dense figures: no structured sparsity): memory (GB), memory bandwidth
(GB/s) and dense BF16 tensor throughput (TFLOP/s, FP32 accumulate). ``help gpus`` lists them
with their sources.

**Carrying a model** (:func:`carry_to`, ``--gpu NAME`` on a step-model run). Of
``step_ms = a + b·prompt + c·decode + d·kv_tokens`` (:mod:`sched.timing.stepmodel`):

- ``a`` (the fixed per-step cost) **stays**: it is host work (scheduling, sampling, launches,
  Python), measured at about 25 ms per step on both an RTX 4090 and an RTX PRO 6000 for the same
  model, which it would not be if it followed memory bandwidth. It also holds the weights read
  once per step, which does scale; keeping it is the larger error only for a small batch on a
  much faster GPU.
- ``b`` (per prompt token) and ``c`` (per decoded sequence) are matrix work, ~2 FLOPs per
  parameter per token: they scale with dense BF16 throughput, ``× F_from / F_to``.
- ``d`` (per KV context token) is attention reading the KV cache: it scales with memory
  bandwidth, ``× BW_from / BW_to``.

Not modelled: tensor parallelism (a model split over GPUs adds communication per layer that none
of the terms holds; carry only between runs with the same ``tensor_parallel_size``), mixture of
experts (the active parameters per token differ from the weights read, and expert routing makes
the per-token cost depend on the batch), quantised weights or KV (other throughput figures apply),
and a KV cache of another size: the engine settings (``num_gpu_blocks``) stay the fitted GPU's
unless given (``--num-gpu-blocks``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace

from ..base.cmdline import InputError

__all__ = ["GPU", "GPUS", "find_gpu", "carry_to", "render_gpus"]


@dataclass(frozen=True)
class GPU:
    """One GPU's public figures: ``memory_gb`` (GB), ``bandwidth_gbs`` (GB/s), ``bf16_tflops``
    (dense BF16 tensor TFLOP/s), ``aliases`` (other spellings, e.g. the driver's device name),
    ``source`` (where the figures are published)."""

    name: str
    memory_gb: float
    bandwidth_gbs: float
    bf16_tflops: float
    aliases: tuple
    source: str


#: The GPU table (vendor data sheets; dense, non-sparse figures). A bare family name ("A100", "H100")
#: is no alias: its variants differ (A100 40GB 1,555 GB/s, H100 PCIe 2,000 GB/s and 756 TFLOP/s), so
#: it is refused with the closest name rather than read as one of them.
GPUS = (
    GPU("RTX 4090", 24, 1008, 165.2, ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", "4090"),
        "NVIDIA Ada Lovelace GPU architecture whitepaper (v2.1, 2023), GeForce RTX 4090 table"),
    GPU("RTX PRO 6000", 96, 1792, 503.8, ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                                          "RTX PRO 6000 Blackwell", "NVIDIA RTX PRO 6000 Blackwell"),
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition data sheet (2025); RTX Blackwell PRO architecture "
        "whitepaper"),
    GPU("RTX A6000", 48, 768, 154.8, ("NVIDIA RTX A6000", "A6000"),
        "NVIDIA Ampere GA102 GPU architecture whitepaper (v2.0), NVIDIA RTX A6000 table"),
    GPU("A100 80GB", 80, 2039, 312.0, ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", "A100 SXM 80GB"),
        "NVIDIA A100 Tensor Core GPU data sheet (2021), A100 80GB SXM column"),
    GPU("H100 SXM", 80, 3350, 989.4, ("NVIDIA H100 80GB HBM3", "H100 80GB HBM3"),
        "NVIDIA H100 Tensor Core GPU data sheet (2023), H100 SXM column (1,979 TFLOP/s is with sparsity)"),
    GPU("L40S", 48, 864, 362.05, ("NVIDIA L40S",),
        "NVIDIA L40S GPU data sheet (2023) (733 TFLOP/s is with sparsity)"),
)


def _key(text: str) -> str:
    return " ".join(str(text).lower().replace("-", " ").replace("_", " ").split())


def _sorted(text: str) -> str:
    return " ".join(sorted(_key(text).split()))


def find_gpu(name: str, where: str = "--gpu") -> GPU:
    """The table's GPU called ``name`` (its name or an alias, case, dashes and spaces ignored);
    raises :class:`InputError` naming ``where`` and the closest name for an unknown one."""
    wanted = _key(name)
    for gpu in GPUS:
        if wanted in {_key(gpu.name)} | {_key(alias) for alias in gpu.aliases}:
            return gpu
    # Closest by its words in any order ("RTX 6000 pro" is the RTX PRO 6000), then by spelling.
    names = {_sorted(gpu.name): gpu.name for gpu in GPUS} | {_sorted(a): gpu.name for gpu in GPUS for a in gpu.aliases}
    words = set(wanted.split())   # a family name ("A100") first suggests the variants that hold its words
    close = [key for key in names if words and words <= set(key.split())][:1] or \
        difflib.get_close_matches(_sorted(name), list(names), n=1, cutoff=0.3)
    hint = f"did you mean {names[close[0]]!r}?" if close else "known: " + ", ".join(g.name for g in GPUS)
    raise InputError(f"{where} {name!r}: not in the lab's GPU table; {hint} (help gpus lists them)")


def carry_to(model, target: str):
    """``model`` (:class:`~sched.timing.stepmodel.StepModel`) carried to GPU ``target`` (module
    docstring). The fitted GPU is ``fitted_on["device"]``; a model without it, or on a GPU not in
    the table, is refused. Returns the new model with ``fitted_on["carried_to"]`` saying what was done."""
    device = model.fitted_on.get("device")
    if not device:
        raise InputError("--gpu: the step model does not say which GPU it was fitted on (fitted_on.device); "
                         "calibrate with --run-gpu NAME to record it")
    source = find_gpu(device, "the step model's fitted_on.device")
    gpu = find_gpu(target)
    compute, memory = source.bf16_tflops / gpu.bf16_tflops, source.bandwidth_gbs / gpu.bandwidth_gbs
    fitted_on = dict(model.fitted_on, carried_to={
        "gpu": gpu.name, "from": source.name, "a": "kept (host work per step)",
        "b_and_c": f"x {compute:.4g} (dense BF16 {source.bf16_tflops:g} / {gpu.bf16_tflops:g} TFLOP/s)",
        "d": f"x {memory:.4g} (memory bandwidth {source.bandwidth_gbs:g} / {gpu.bandwidth_gbs:g} GB/s)"})
    return replace(model, b_ms=model.b_ms * compute, c_ms=model.c_ms * compute, d_ms=model.d_ms * memory,
                   fitted_on=fitted_on)


def render_gpus() -> str:
    """The text of ``help gpus``: the table, how ``--gpu`` uses it, and the sources."""
    lines = ["GPUs the lab knows (--gpu NAME on a --step-model run; figures from public data sheets, dense):",
             f"  {'name':<14}{'memory GB':>10}{'bandwidth GB/s':>16}{'BF16 TFLOP/s':>14}"]
    lines += [f"  {gpu.name:<14}{gpu.memory_gb:>10g}{gpu.bandwidth_gbs:>16g}{gpu.bf16_tflops:>14g}" for gpu in GPUS]
    lines += ["", "Carrying a step model to another GPU: a (per step, host work) stays; b and c (per prompt token, "
              "per decoded sequence) scale with BF16 FLOP/s; d (per KV context token) scales with memory bandwidth. "
              "Not modelled: tensor parallelism, mixture of experts, quantisation, another KV size.", "", "Sources:"]
    lines += [f"  {gpu.name}: {gpu.source}" for gpu in GPUS]
    return "\n".join(lines) + "\n"
