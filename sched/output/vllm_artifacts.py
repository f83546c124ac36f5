"""What a vLLM-engine run writes differently from a lab run (vllm-engine.md §5; lab.md §7).

The artifact writers of :mod:`sched.output.artifacts`, for a run whose clock
(:class:`sched.core.clock.RunClock`) names the vLLM engine, ask this module for the few parts that depend on
the engine: the units note, the table header and its extra column, the manifest's configuration,
the preemption fields of ``requests.jsonl`` and the step lines of ``timeline.jsonl``. Everything
else (summary, CSV, picture frame, report) is shared.

``timeline.jsonl`` with ``full`` detail: one line per step::

    {"case": "vllm", "tick": 41, "scheduled": {"L0": 1, "S2": 32}, "preempted": ["U3"],
     "preempted_for": {"U3": "S2"}, "admitted": [], "cache_hits": [], "timeouts": [], "finished": [],
     "prompt_tokens": 32, "decode_tokens": 1, "budget_used": 33, "kv_blocks_used": 40,
     "running": 2, "waiting": 3}

``scheduled`` keeps vLLM's order (running list, then admissions); ``preempted_for`` names the
request whose KV blocks each preemption made room for. With ``counts`` detail one line per step or
jump: ``{"case", "tick", "ticks", "prompt_tokens", "decode_tokens", "budget_used", "preempted",
"admitted", "cache_hits", "timeouts", "finished", "kv_blocks_used", "running", "waiting"}`` (counts;
``kv_blocks_used``, ``running`` and ``waiting`` are the largest over the span).
"""

from __future__ import annotations

import json

from .. import __version__
from ..base.cmdline import InputError
from ..core.clock import UNITS_NOTE_VLLM

__all__ = ["UNITS_NOTE_VLLM", "table_header", "manifest_config", "timeline_lines",
           "preemption_problem", "async_scheduling_of"]

def table_header(run) -> str:
    """The first line of ``table.txt`` for a vLLM run (no source: a replay gives the same bytes)."""
    k = run.config
    timeout = "no timeout" if k.timeout_ticks is None else f"timeout {run.clock.duration(k.timeout_ticks, True)}"
    blocks = k.gpu_blocks_for(run.workload)
    return (f"infer-sched-lab {__version__} | {len(run.workload)} requests, workload sha256 "
            f"{run.workload_sha256[:12]} | engine vllm (vLLM 0.33.0 rules) | policy {k.policy} | "
            f"max-num-batched-tokens {k.max_num_batched_tokens}, max-num-seqs {k.max_num_seqs}, "
            f"long-prefill-token-threshold {k.long_prefill_token_threshold}, prefix caching "
            f"{'on' if k.enable_prefix_caching else 'off'}, block size {k.block_size}, "
            f"num-gpu-blocks {blocks}{' (ample)' if k.num_gpu_blocks is None else ''} | {timeout}"
            f"{' | async scheduling' if k.async_scheduling else ''}")


def manifest_config(run) -> dict:
    """The ``config`` object of ``manifest.json`` for a vLLM run (vLLM's knob names)."""
    k = run.config
    return {"max_num_batched_tokens": k.max_num_batched_tokens, "max_num_seqs": k.max_num_seqs,
            "long_prefill_token_threshold": k.long_prefill_token_threshold,
            "enable_prefix_caching": k.enable_prefix_caching, "block_size": k.block_size,
            "num_gpu_blocks": k.gpu_blocks_for(run.workload), "num_gpu_blocks_ample": k.num_gpu_blocks is None,
            "vllm_version": "0.33.0", "async_scheduling": k.async_scheduling}


def timeline_lines(run):
    """Lines of ``timeline.jsonl`` (dicts for ``full``, encoded text for ``counts``)."""
    dumps = json.JSONEncoder(ensure_ascii=False).encode
    for result in run.results:
        case = result.case.name
        if run.timeline == "counts":
            name = dumps(case)
            for k in result.ticks:
                tick = k.tick if type(k.tick) is int else dumps(k.tick)
                yield (f'{{"case": {name}, "tick": {tick}, "ticks": {k.num_steps}, '
                       f'"prompt_tokens": {k.num_prompt_tokens}, "decode_tokens": {k.num_decode_tokens}, '
                       f'"budget_used": {k.num_prompt_tokens + k.num_decode_tokens}, "preempted": {k.num_preempted}, '
                       f'"admitted": {k.num_admitted}, "cache_hits": {k.num_cache_hits}, '
                       f'"timeouts": {k.num_timeouts}, "finished": {k.num_finished}, '
                       f'"kv_blocks_used": {k.kv_blocks_used}, "running": {k.num_running}, '
                       f'"waiting": {k.num_waiting}}}')
            continue
        for k in result.ticks:
            line = {"case": case, "tick": k.tick}
            if k.duration != 1:
                line["duration"] = k.duration
            line.update({
                "scheduled": dict(k.scheduled), "preempted": k.preempted, "preempted_for": dict(k.preempted_for),
                "admitted": k.admitted, "cache_hits": k.cache_hits, "timeouts": k.timeouts, "finished": k.finished,
                "prompt_tokens": k.num_prompt_tokens, "decode_tokens": k.num_decode_tokens,
                "budget_used": k.num_prompt_tokens + k.num_decode_tokens, "kv_blocks_used": k.kv_blocks_used,
                "running": k.num_running, "waiting": k.num_waiting})
            yield line


def _tick(value) -> bool:
    return type(value) is int and value >= 0  # not bool, not float: ticks are whole numbers


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def async_scheduling_of(manifest: dict, where: str) -> bool:
    """Whether a run's ``manifest.json`` (the parsed object ``manifest``, read from ``where``) says it
    ran with async scheduling (vllm-engine.md §7): ``config.async_scheduling`` ``true`` or ``false``,
    absent (a lab run, or a vLLM run written before the flag existed) meaning off.

    The one reading for every reader of a run (explain, diff, compare), so a tampered value is
    refused the same way everywhere. Raises :class:`~sched.base.cmdline.InputError` naming ``where``
    and the field when the value is anything but ``true``/``false`` (``"true"``, ``1``, ``null``).
    """
    config = manifest.get("config")
    if not isinstance(config, dict) or "async_scheduling" not in config:
        return False
    value = config["async_scheduling"]
    if not isinstance(value, bool):
        raise InputError(f"{where}: field 'config.async_scheduling': must be true or false, got {_shown(value)}")
    return value


def preemption_problem(row: dict, latest: int | None = None, async_scheduling: bool = False) -> str | None:
    """Why the preemption fields of a vLLM run's ``requests.jsonl`` line ``row`` are impossible, or ``None``.

    The one check of what this module writes, used by every reader (explain, diff):
    ``num_preemptions`` a whole count >= 0, ``preempted_at`` a list of that many ticks in order,
    each no earlier than the request's arrival and first admission and before its end
    (``done_at``; at it at the latest with ``async_scheduling``, where a request whose last token is
    in flight can still be preempted, vllm-engine.md §7), and no later than ``latest`` (the case's
    last tick) when given. Returns the tail
    of a message naming the field (``"field 'preempted_at': ..."``).
    """
    for key in ("num_preemptions", "preempted_at"):
        if key not in row:
            return f"field {key!r}: missing (a vLLM-engine run writes it on every request line)"
    count, times = row["num_preemptions"], row["preempted_at"]
    if not _tick(count):
        return f"field 'num_preemptions': must be a whole number >= 0, got {_shown(count)}"
    if not isinstance(times, list) or not all(_tick(t) for t in times):
        return f"field 'preempted_at': must be a list of ticks (integers >= 0), got {_shown(times)}"
    if count != len(times):
        return f"field 'num_preemptions': {count}, but 'preempted_at' holds {len(times)} ticks"
    if not times:
        return None
    if times != sorted(times):
        return f"field 'preempted_at': ticks out of order: {_shown(times)}"
    arrival, admitted, done = row.get("arrival"), row.get("admitted_at"), row.get("done_at")
    if admitted is None:
        return f"field 'preempted_at': {_shown(times)}, but the request was never admitted (admitted_at null)"
    for earlier, name in ((arrival, "arrival"), (admitted, "admitted_at")):
        if _tick(earlier) and times[0] < earlier:
            return f"field 'preempted_at': tick {times[0]} is before {name} {earlier}; impossible in a run"
    if _tick(done) and (times[-1] > done if async_scheduling else times[-1] >= done):
        relation = "after" if async_scheduling else "not before"
        return f"field 'preempted_at': tick {times[-1]} is {relation} done_at {done}; impossible in a run"
    if latest is not None and times[-1] > latest:
        return f"field 'preempted_at': tick {times[-1]} is after the case's last tick {latest}; impossible in this run"
    return None
