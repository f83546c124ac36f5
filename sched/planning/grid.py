"""The settings ``plan`` searches: every combination of the lists given, under vLLM's flag names.

``--max-num-seqs 32,64 --max-num-batched-tokens 512,2048 --policy fcfs,priority`` gives 2 × 2 × 2 = 8
settings per step model (one step model per GPU). A flag not given keeps the step model's fitted
value (:func:`sched.timing.msrun.settle_knobs`). Each list is checked where it is read
(:func:`parse_int_list`, :func:`parse_policies`) and every combination the way vLLM's engine
arguments would refuse it (:func:`setting_problem`): ``--max-num-batched-tokens`` below
``--max-num-seqs`` ("max_num_batched_tokens must be greater than or equal to max_num_seqs"), fewer
than 2 KV blocks. A refused combination is an error (exit 2), never silently skipped.
"""

from __future__ import annotations

import itertools

__all__ = ["LIST_FLAGS", "parse_int_list", "parse_policies", "parse_utilizations", "setting_grid", "setting_problem",
           "flag_words"]

#: The list flags of ``plan`` (vLLM's names) -> the :class:`~sched.vllm.config.VllmKnobs` field, and
#: the smallest value vLLM accepts.
LIST_FLAGS = {"--max-num-seqs": ("max_num_seqs", 1), "--max-num-batched-tokens": ("max_num_batched_tokens", 1),
              "--long-prefill-token-threshold": ("long_prefill_token_threshold", 0),
              "--num-gpu-blocks": ("num_gpu_blocks", 2)}
_MAX = 10**9


def parse_int_list(text: str, low: int) -> tuple[int, ...]:
    """``"32,64,128"`` -> ``(32, 64, 128)``: whole numbers from ``low`` to 10⁹, each once. Raises
    :class:`ValueError` naming the bad item (a repeat, a non-integer, a value out of range)."""
    values = []
    for item in text.split(","):
        word = item.strip()
        if not (word.isascii() and word.isdigit()):
            raise ValueError(f"{word!r} is not a whole number (expected e.g. 32,64,128)")
        value = int(word)
        if not low <= value <= _MAX:
            raise ValueError(f"{value} is out of range [{low}, {_MAX}]")
        if value in values:
            raise ValueError(f"{value} is given twice")
        values.append(value)
    return tuple(values)


def parse_policies(text: str) -> tuple[str, ...]:
    """``"fcfs,priority"``: vLLM's ``--scheduling-policy`` values, each once. Raises :class:`ValueError`."""
    values = []
    for item in text.split(","):
        word = item.strip()
        if word not in ("fcfs", "priority"):
            raise ValueError(f"{word!r} is not a vLLM scheduling policy (fcfs or priority)")
        if word in values:
            raise ValueError(f"{word} is given twice")
        values.append(word)
    return tuple(values)


def parse_utilizations(text: str) -> tuple[float, ...]:
    """``--gpu-memory-utilization 0.8,0.9``: vLLM's share of GPU memory, each in (0, 1] and given once.
    Raises :class:`ValueError` naming the bad item."""
    values = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"{item.strip()!r} is not a number (expected e.g. 0.8,0.9)") from None
        if not 0 < value <= 1:
            raise ValueError(f"{item.strip()} is not a share of GPU memory in (0, 1]")
        if value in values:
            raise ValueError(f"{item.strip()} is given twice")
        values.append(value)
    return tuple(values)


def setting_grid(lists: dict) -> list[dict]:
    """Every combination of ``lists`` (knob field -> tuple of values, in flag order), as dicts of the
    given knobs only (``[{}]`` when no list was given: the step model's own settings)."""
    fields = [field for field, values in lists.items() if values]
    return [dict(zip(fields, combo)) for combo in itertools.product(*(lists[f] for f in fields))]


def setting_problem(knobs) -> str | None:
    """Why vLLM would refuse a settled :class:`~sched.vllm.config.VllmKnobs`, or ``None``."""
    if knobs.max_num_batched_tokens < knobs.max_num_seqs:
        return (f"--max-num-batched-tokens {knobs.max_num_batched_tokens} is below --max-num-seqs "
                f"{knobs.max_num_seqs}: vLLM refuses it (max_num_batched_tokens must be >= max_num_seqs)")
    return None


def flag_words(settings: dict) -> list[str]:
    """The command-line words of a setting (knob field -> value) under vLLM's flag names."""
    words = []
    for field, value in settings.items():
        if field == "policy":
            words += ["--policy", value]
        elif field == "enable_prefix_caching":
            words += ["--enable-prefix-caching"] if value else []
        else:
            words += [f"--{field.replace('_', '-')}", str(value)]
    return words
