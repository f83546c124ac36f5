"""The KV cache size of a run whose files do not say it, derived as vLLM sizes it (issue 18, item 1).

vLLM (V1 engine, ``gpu_worker.determine_available_memory`` and ``kv_cache_utils``) gives the KV
cache what is left of the memory it may use after the model:

``available = total_memory × gpu_memory_utilization − (weights + peak activations + non-torch memory)``

``num_gpu_blocks = floor(available / (block_size × KV bytes per token))``, with KV bytes per token
``= 2 (K and V) × layers × KV heads × head size × bytes per element`` (e.g. Llama-2-7B in bf16:
2 × 32 × 32 × 128 × 2 = 524,288 B).

The lab knows the weights from the log (``Model loading took X GiB``) or, failing that, from the
parameter count in the model's name (``...-7B`` → 7 × 10⁹ × 2 bytes in bf16/fp16). The peak
activation and non-torch memory are measured by vLLM's profiling run and are not in the files:
they are taken as 0, so the derived size is an **upper bound** (about 1 GiB too much on the runs
seen, 1–15% more blocks). Every derivation is said in the run's notes.
"""

from __future__ import annotations

import re

from ..base.cmdline import InputError
from .runmeta import value_at

__all__ = ["derive_num_gpu_blocks", "derive_from_log", "derive_from_meta", "weights_from_name", "utilization", "GIB",
           "MAX_BILLIONS"]

GIB = 1024 ** 3


#: The largest parameter count, in billions, read from a model's name: past any model (the largest
#: published are a few thousand billion); a name saying more (a typo, a file edited by hand) is no size.
MAX_BILLIONS = 100_000


def weights_from_name(model: str | None, dtype_bytes: int = 2) -> float | None:
    """Bytes of weights from a parameter count in ``model``'s name (``Llama-2-7b-hf`` → 7e9 × 2), or
    None: no count in the name, or a count of 0 or above :data:`MAX_BILLIONS` billion (not a model's)."""
    if not model:
        return None
    match = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", model.rsplit("/", 1)[-1])
    if not match or not 0 < float(match.group(1)) <= MAX_BILLIONS:
        return None
    return float(match.group(1)) * 1e9 * dtype_bytes


def utilization(raw, where: str) -> float:
    """``gpu_memory_utilization`` as read from a run's file (a number, or the text of a benchmark's
    ``--metadata``), ``where`` naming the file; ``None`` is vLLM's default 0.9. vLLM's cache config
    requires a fraction in (0, 1]; anything else raises :class:`InputError` naming the field."""
    if raw is None:
        return 0.9
    try:
        if isinstance(raw, bool):
            raise ValueError
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value <= 1:   # NaN fails too
        raise InputError(f"{where}: field 'gpu_memory_utilization': must be a fraction in (0, 1] as vLLM requires, "
                         f"got {str(raw)[:40]!r}")
    return value


def derive_num_gpu_blocks(total_bytes: float, utilization: float, weights_bytes: float, kv_bytes_per_token: int,
                          block_size: int, where: str) -> int:
    """``num_gpu_blocks`` by vLLM's sizing (module docstring), activations not counted.

    ``total_bytes``: the GPU's memory; ``utilization``: ``gpu_memory_utilization`` (0..1];
    ``weights_bytes``: the model's weights; ``kv_bytes_per_token``: 2 × layers × KV heads × head size
    × element bytes. Raises :class:`InputError` (naming ``where``) when nothing is left for the KV cache.
    """
    available = total_bytes * utilization - weights_bytes
    blocks = int(available // (block_size * kv_bytes_per_token))
    if blocks < 2:
        raise InputError(f"{where}: the KV size derived from the GPU memory ({total_bytes / GIB:.1f} GiB x "
                         f"{utilization:g}) minus the weights ({weights_bytes / GIB:.1f} GiB) leaves no KV block; "
                         "give --num-gpu-blocks")
    return blocks


def derive_from_log(log, given, config, block_size, sizing, log_path) -> tuple[int, str]:
    """``(num_gpu_blocks, note)`` of an OpenTelemetry run whose vllm.log names no block count: from the
    log's available KV memory, or from the GPU memory (``sizing["gpu"]``) minus the weights.
    ``log``: :func:`sched.timing.otel_run.read_vllm_log`; ``given``, ``config``: its non-default args and
    engine config; ``sizing["kv_bytes_per_token"]``: bytes. Raises :class:`InputError` naming ``log_path``."""
    per_token = sizing["kv_bytes_per_token"]
    if log["available_kv_gib"] is not None:   # vLLM's own figure, after profiling its activations
        blocks = int(log["available_kv_gib"] * GIB // (block_size * per_token))
        return blocks, (f"num_gpu_blocks {blocks} derived as vLLM does: vllm.log's available KV cache memory "
                        f"{log['available_kv_gib']:g} GiB / ({block_size} tokens x {per_token} bytes per token)")
    gpu = sizing.get("gpu")
    if gpu is None:
        raise InputError(f"{log_path}: field 'num_gpu_blocks': the log names no KV size; to derive it from the GPU "
                         "memory as vLLM does, give --run-gpu NAME (or give --num-gpu-blocks)")
    share = utilization(given.get("gpu_memory_utilization"), log_path)
    model = config.get("served_model_name") or config.get("model")
    weights, said = ((log["weights_gib"] * GIB, f"vllm.log's {log['weights_gib']:g} GiB of weights")
                     if log["weights_gib"] is not None else (weights_from_name(model), f"the parameters in {model!r}"))
    if weights is None:
        raise InputError(f"{log_path}: field 'num_gpu_blocks': the log names neither the KV size nor the weights; "
                         "give --num-gpu-blocks")
    blocks = derive_num_gpu_blocks(gpu.memory_gb * GIB, share, weights, per_token, block_size, log_path)
    return blocks, (f"num_gpu_blocks {blocks} derived as vLLM does, an upper bound: {gpu.name}'s {gpu.memory_gb:g} GiB "
                    f"x gpu_memory_utilization {share:g} minus {said}, activations not counted, / "
                    f"({block_size} tokens x {per_token} bytes per token)")


def derive_from_meta(meta, meta_path, flags, sizing) -> tuple[int, str]:
    """``(num_gpu_blocks, note)`` of a meta.json (or a benchmark's metadata, in the same shape) without a
    block count: its GPU memory (or ``sizing["gpu"]``'s) times its utilization minus the weights, over
    ``sizing["kv_bytes_per_token"]`` × block size. Raises :class:`InputError` naming ``meta_path``."""
    per_token = sizing["kv_bytes_per_token"]
    total = value_at(meta, ("hardware", "device_total_memory_bytes"))
    gpu = sizing.get("gpu")
    if not isinstance(total, (int, float)) or isinstance(total, bool):
        if gpu is None:
            raise InputError(f"{meta_path}: field 'hardware.device_total_memory_bytes': missing; give --run-gpu NAME "
                             "to derive the KV size (or give --num-gpu-blocks)")
        total = gpu.memory_gb * GIB
    said = (value_at(meta, ("kv_cache", "gpu_memory_utilization")),
            value_at(meta, ("resolved_config", "cache_config", "gpu_memory_utilization")))
    share = utilization(next((v for v in said if v is not None), None), meta_path)
    weights = weights_from_name(meta.get("model"))
    if weights is None:
        raise InputError(f"{meta_path}: field 'model': no parameter count in {meta.get('model')!r} to size the "
                         "weights; give --num-gpu-blocks")
    block_size = int(flags.get("block_size") or value_at(meta, ("kv_cache", "block_size")) or 16)
    blocks = derive_num_gpu_blocks(total, share, weights, per_token, block_size, meta_path)
    return blocks, (f"num_gpu_blocks {blocks} derived as vLLM does, an upper bound: {total / GIB:.2f} GiB x "
                    f"gpu_memory_utilization {share:g} minus the parameters in {meta.get('model')!r} "
                    f"({weights / GIB:.2f} GiB), activations not counted, / ({block_size} tokens x {per_token} "
                    "bytes per token)")


# --- the run as a workload -----------------------------------------------------------------------
