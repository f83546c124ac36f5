"""Public GPU figures and carrying a step model from one GPU to another (issue 18, item 4).

:data:`GPUS` holds, per GPU, the three figures a step time can scale with, from the vendor's
public data sheets (dense figures: no structured sparsity): memory (GB), memory bandwidth
(GB/s) and dense BF16 tensor throughput (TFLOP/s, FP32 accumulate), and, where a public
measurement exists, ``matmul_fraction``: the share of that BF16 figure a large BF16 matrix
multiply reached in practice (each with its source). ``help gpus`` lists them.

**Carrying a model** (:func:`carry_to`, ``--gpu NAME`` on a step-model run). Of
``step_ms = a + b·prompt + c·decode + d·kv_tokens`` (:mod:`sched.timing.stepmodel`), the model
the engine uses (the *central* carry):

- ``a`` (the fixed per-step cost) **stays**: it is host work (scheduling, sampling, launches,
  Python), measured at about 25 ms per step on both an RTX 4090 and an RTX PRO 6000 for the same
  model, which it would not be if it followed memory bandwidth. It also holds the weights read
  once per step, which does scale: the band below says how much that can matter.
- ``b`` (per prompt token) and ``c`` (per decoded sequence) are matrix work, ~2 FLOPs per
  parameter per token: they scale with dense BF16 throughput, ``× F_from / F_to``.
- ``d`` (per KV context token) is attention reading the KV cache: it scales with memory
  bandwidth, ``× BW_from / BW_to``.

**The band** (:func:`carry_ends`): the central carry is one assumption among several the public
figures allow, so two bounding models are carried too and a run prints its result under each:

- *fast end*: ``a``'s weight read follows memory bandwidth. The weights' bytes come from the
  parameter count in the model's name (2 bytes each, BF16) or ``--weights-gb``; their read at the
  fitted GPU's data-sheet bandwidth, ``W = bytes / BW_from`` (ms), is taken out of ``a`` and put
  back as ``W × BW_from / BW_to``; the rest of ``a`` is host work and stays. ``b`` and ``c`` take
  the smaller of the data-sheet and the achieved FLOP/s ratio.
- *slow end*: ``a`` stays whole (all host work, or a GPU step hidden behind it), and ``b``, ``c``
  take the larger of the two FLOP/s ratios; the achieved ratio is
  ``(F_from · m_from) / (F_to · m_to)`` with ``m`` the ``matmul_fraction`` (1 where the table has
  no measurement).

``d`` scales with bandwidth at both ends. A term unidentified on the fitted GPU (``c`` or ``d``
of an overloaded run, whose batch hardly moves) gets no floor: its cost on the fitted GPU is
inside ``a`` (the fit could not separate them), and a floor added on the target would count it
twice; it is carried with ``a``, inside the band.

Not modelled: tensor parallelism (a model split over GPUs adds communication per layer that none
of the terms holds; carry only between runs with the same ``tensor_parallel_size``), mixture of
experts (the active parameters per token differ from the weights read, and expert routing makes
the per-token cost depend on the batch), quantised weights or KV (other throughput figures apply,
and the weights' bytes are not 2 per parameter), kernel maturity per architecture beyond the one
measured ``matmul_fraction`` (attention and small-batch kernels may reach other shares), and a KV
cache of another size: the engine settings (``num_gpu_blocks``) stay the fitted GPU's unless given
(``--num-gpu-blocks``).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, replace

from ..base.cmdline import InputError
from .kvsize import GIB, MAX_BILLIONS, weights_from_name

__all__ = ["GPU", "GPUS", "find_gpu", "carry_to", "carry_ends", "weight_read", "render_gpus"]


@dataclass(frozen=True)
class GPU:
    """One GPU's public figures: ``memory_gb`` (GB), ``bandwidth_gbs`` (GB/s), ``bf16_tflops``
    (dense BF16 tensor TFLOP/s), ``aliases`` (other spellings, e.g. the driver's device name),
    ``source`` (where the figures are published); ``matmul_fraction``: the share of ``bf16_tflops``
    a large BF16 matrix multiply measured in practice (``None``: no public measurement), with
    ``matmul_source``."""

    name: str
    memory_gb: float
    bandwidth_gbs: float
    bf16_tflops: float
    aliases: tuple
    source: str
    matmul_fraction: float | None = None
    matmul_source: str = ""


#: The GPU table (vendor data sheets; dense, non-sparse figures). A bare family name ("A100", "H100")
#: is no alias: its variants differ (A100 40GB 1,555 GB/s, H100 PCIe 2,000 GB/s and 756 TFLOP/s), so
#: it is refused with the closest name rather than read as one of them.
GPUS = (
    GPU("RTX 4090", 24, 1008, 165.2, ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", "4090"),
        "NVIDIA Ada Lovelace GPU architecture whitepaper (v2.1, 2023), GeForce RTX 4090 table",
        1.0, "the lab's RTX 4090 run (Llama-3.1-8B BF16, tests/data/llmservingsim-vllm-rtx4090-run): its fit's "
             "full 2,048-token prefill step, a + 2048 b = 24.6 + 173.6 = 198 ms, computes 2 x 8.03e9 x 2048 FLOP "
             "at about 166 TFLOP/s, the data sheet's figure"),
    GPU("RTX PRO 6000", 96, 1792, 503.8, ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                                          "RTX PRO 6000 Blackwell", "NVIDIA RTX PRO 6000 Blackwell"),
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition data sheet (2025); RTX Blackwell PRO architecture "
        "whitepaper",
        0.535, "measured on the same GB202 die in the GeForce RTX 5090: a BF16 torch.matmul (16384 x 8192 x 1280) "
               "reached 224.3 TFLOP/s against 419 TFLOP/s counted as the PRO 6000's 503.8 is (1,024 FLOP per SM "
               "per clock at the boost clock); 224.3 / 419 = 0.535 (main-horse.github.io, 'Things I learned "
               "digging into 5090 perf', 2025). Consistent with cuBLAS BF16-class (FP16 in, FP32 accumulate) at "
               "8192^3 on an RTX PRO 6000 Max-Q, the 300 W version: 229 TFLOP/s, 0.45 of the 503.8 (its own figure is "
               "lower), cuBLAS "
               "dispatching an Ampere-generation CUTLASS kernel on sm_120 (github.com/waynehacking8/"
               "blackwell-tensorcore-kernels, README); not measured on the Workstation Edition itself"),
    GPU("RTX A6000", 48, 768, 154.8, ("NVIDIA RTX A6000", "A6000"),
        "NVIDIA Ampere GA102 GPU architecture whitepaper (v2.0), NVIDIA RTX A6000 table"),
    GPU("A100 80GB", 80, 2039, 312.0, ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", "A100 SXM 80GB"),
        "NVIDIA A100 Tensor Core GPU data sheet (2021), A100 80GB SXM column"),
    GPU("H100 SXM", 80, 3350, 989.4, ("NVIDIA H100 80GB HBM3", "H100 80GB HBM3"),
        "NVIDIA H100 Tensor Core GPU data sheet (2023), H100 SXM column (1,979 TFLOP/s is with sparsity)"),
    GPU("L40S", 48, 864, 362.05, ("NVIDIA L40S",),
        "NVIDIA L40S GPU data sheet (2023) (733 TFLOP/s is with sparsity)"),
)


#: Smallest carried ``a`` (ms): a step takes at least the engine clock's 1 µs (stepmodel.MIN_STEP_MS).
MIN_A_MS = 0.001


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


def _pair(model, target: str):
    """The fitted GPU and the target GPU of the table for carrying ``model`` (raises InputError)."""
    device = model.fitted_on.get("device")
    if not device:
        raise InputError("--gpu: the step model does not say which GPU it was fitted on (fitted_on.device); "
                         "calibrate with --run-gpu NAME to record it")
    return find_gpu(device, "the step model's fitted_on.device"), find_gpu(target)


def weight_read(model, source: GPU, weights_bytes: float | None = None) -> tuple[float | None, str]:
    """``(W, said)``: the ms of ``model``'s per-step cost ``a`` that is reading the weights once at
    ``source``'s data-sheet bandwidth, ``bytes / BW`` (at most ``a``), and one sentence saying where the
    bytes came from; ``(None, why)`` when the size is unknown. ``weights_bytes``: given
    (``--weights-gb``), else 2 bytes per parameter of the count in ``fitted_on.model``'s name; with
    ``fitted_on.tensor_parallel_size`` N > 1 each GPU reads 1/N of them (the target runs N GPUs too)."""
    shards = _tensor_parallel(model)
    if weights_bytes is None:
        name = model.fitted_on.get("model")
        weights_bytes = weights_from_name(name) if isinstance(name, str) else None
        origin = f"the parameter count in {model.fitted_on.get('model')!r}, 2 bytes each"
        if weights_bytes is None:
            return None, (f"the weights' size is unknown (no parameter count in the model's name "
                          f"{model.fitted_on.get('model')!r}, or none from 0 to {MAX_BILLIONS:,} billion; give "
                          "--weights-gb)")
    else:
        origin = "--weights-gb"
    if shards > 1:   # each GPU reads its own 1/N of the weights, at the same time
        weights_bytes /= shards
        origin += (f"; 1/{shards} per GPU at tensor_parallel_size {shards}, the target taken to run {shards} GPUs "
                   "too")
    read_ms = weights_bytes / (source.bandwidth_gbs * 1e9) * 1000
    said = (f"weights {weights_bytes / GIB:.1f} GiB ({origin}) read once per step: {read_ms:.3g} ms at "
            f"{source.bandwidth_gbs:g} GB/s")
    if read_ms > model.a_ms:
        said += f", more than a = {model.a_ms:.3g} ms: all of a taken as weight read"
        read_ms = model.a_ms
    return read_ms, said


def _tensor_parallel(model) -> int:
    """``fitted_on.tensor_parallel_size`` of ``model`` (1 when not said); anything but a whole number
    >= 1 there is an :class:`InputError` (a step model edited by hand)."""
    shards = model.fitted_on.get("tensor_parallel_size")
    if shards is None:
        return 1
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= 4096:
        raise InputError(f"the step model's fitted_on.tensor_parallel_size {json.dumps(shards)[:40]}: must be a "
                         "whole number of GPUs from 1 to 4096")
    return shards


def _ratios(source: GPU, gpu: GPU) -> tuple[float, float, float]:
    """``(data-sheet FLOP/s ratio, achieved FLOP/s ratio, bandwidth ratio)``, from over to."""
    peak = source.bf16_tflops / gpu.bf16_tflops
    achieved = (source.bf16_tflops * (source.matmul_fraction or 1.0)) / (gpu.bf16_tflops * (gpu.matmul_fraction or 1.0))
    return peak, achieved, source.bandwidth_gbs / gpu.bandwidth_gbs


def carry_ends(model, target: str, weights_bytes: float | None = None) -> dict:
    """The band of ``model`` carried to GPU ``target`` (module docstring): ``{"fast": {...}, "slow":
    {...}, "weights": str, "matmul": str}``, each end ``{"a", "b", "c", "d"}`` in ms (per step, per
    prompt token, per decoded sequence, per KV context token) and ``"assumes"`` (one sentence).
    ``weights_bytes`` as :func:`weight_read`. Raises :class:`InputError` as :func:`carry_to`."""
    source, gpu = _pair(model, target)
    peak, achieved, memory = _ratios(source, gpu)
    read_ms, said = weight_read(model, source, weights_bytes)
    a_bw = model.a_ms if read_ms is None else max(MIN_A_MS, model.a_ms - read_ms + read_ms * memory)
    lo, hi = min(peak, achieved), max(peak, achieved)
    fast_a, slow_a = min(model.a_ms, a_bw), max(model.a_ms, a_bw)
    def end(a, flops, assumes):
        return {"a": a, "b": model.b_ms * flops, "c": model.c_ms * flops, "d": model.d_ms * memory, "assumes": assumes}
    if read_ms is None:
        fast_words = slow_words = "a kept: the weights' size is unknown"
    else:
        fast_words = "a's weight read follows memory bandwidth" if fast_a < model.a_ms else "a kept: all host work"
        slow_words = "a's weight read follows memory bandwidth" if slow_a > model.a_ms else "a kept: all host work"
    matmul = (f"achieved share of the data sheet's BF16 FLOP/s: {source.name} {_fraction(source)}, {gpu.name} "
              f"{_fraction(gpu)}: b and c x {achieved:.4g} at achieved, x {peak:.4g} at data-sheet figures")
    return {"fast": end(fast_a, lo, f"{fast_words}; b and c x {lo:.4g}"),
            "slow": end(slow_a, hi, f"{slow_words}; b and c x {hi:.4g}"),
            "weights": said, "matmul": matmul}


def _fraction(gpu: GPU) -> str:
    """``"0.535 (measured)"``, ``"1.0 (measured)"``, or ``"not measured (1.0 assumed)"`` for ``gpu``'s matmul share."""
    if gpu.matmul_fraction is None:
        return "not measured (1.0 assumed)"
    share = f"{gpu.matmul_fraction:g}"
    return f"{share if '.' in share else share + '.0'} (measured)"


def carry_to(model, target: str, weights_bytes: float | None = None):
    """``model`` (:class:`~sched.timing.stepmodel.StepModel`) carried to GPU ``target`` (module
    docstring, the central carry). The fitted GPU is ``fitted_on["device"]``; a model without it,
    or on a GPU not in the table, is refused (:class:`InputError`). Returns the new model with
    ``fitted_on["carried_to"]`` saying what was done, the band's two ends included (:func:`carry_ends`;
    ``weights_bytes`` as :func:`weight_read`)."""
    source, gpu = _pair(model, target)
    compute, _, memory = _ratios(source, gpu)
    ends = carry_ends(model, target, weights_bytes)
    band = {key: ({k: (round(v, 12) if isinstance(v, float) else v) for k, v in value.items()}
                  if isinstance(value, dict) else value) for key, value in ends.items()}
    fitted_on = dict(model.fitted_on, carried_to={
        "gpu": gpu.name, "from": source.name, "a": "kept (host work per step)",
        "b_and_c": f"x {compute:.4g} (dense BF16 {source.bf16_tflops:g} / {gpu.bf16_tflops:g} TFLOP/s)",
        "d": f"x {memory:.4g} (memory bandwidth {source.bandwidth_gbs:g} / {gpu.bandwidth_gbs:g} GB/s)",
        "band": band})
    return replace(model, b_ms=model.b_ms * compute, c_ms=model.c_ms * compute, d_ms=model.d_ms * memory,
                   fitted_on=fitted_on)


def render_gpus() -> str:
    """The text of ``help gpus``: the table, how ``--gpu`` uses it (the central carry and the band), and
    the sources."""
    lines = ["GPUs the lab knows (--gpu NAME on a --step-model run; figures from public data sheets, dense):",
             f"  {'name':<14}{'memory GB':>10}{'bandwidth GB/s':>16}{'BF16 TFLOP/s':>14}{'matmul achieved':>17}"]
    lines += [f"  {gpu.name:<14}{gpu.memory_gb:>10g}{gpu.bandwidth_gbs:>16g}{gpu.bf16_tflops:>14g}"
              f"{'-' if gpu.matmul_fraction is None else format(gpu.matmul_fraction, 'g'):>17}" for gpu in GPUS]
    lines += ["", "Carrying a step model to another GPU (the model the run uses): a (per step, host work) stays; b and c "
              "(per prompt token, per decoded sequence) scale with data-sheet BF16 FLOP/s; d (per KV context token) "
              "scales with memory bandwidth.",
              "The band printed with the result: the same run under two bounding carries. Fast end: the weights "
              "(2 bytes per parameter of the model's name, or --weights-gb) read once per step at the fitted GPU's "
              "bandwidth are taken out of a and scale with bandwidth; b and c take the smaller of the data-sheet and "
              "achieved FLOP/s ratios. Slow end: a stays whole; b and c take the larger ratio. 'matmul achieved' is "
              "the share of the BF16 figure a large BF16 matrix multiply measured ('-': none found, 1 taken).",
              "Unidentified c or d (a run whose batch hardly moves) get no floor: on the fitted GPU their cost is "
              "inside a, so they are carried with it.",
              "Not modelled: tensor parallelism, mixture of experts, quantisation, kernel maturity beyond one "
              "matmul figure, the target's host CPU, another KV size (give --num-gpu-blocks).", "", "Sources:"]
    for gpu in GPUS:
        lines.append(f"  {gpu.name}: {gpu.source}")
        if gpu.matmul_fraction is not None:
            lines.append(f"    matmul achieved {gpu.matmul_fraction:g}: {gpu.matmul_source}")
    return "\n".join(lines) + "\n"
