"""What one run of the vLLM engine records per step (vllm-engine.md §5; timeline.jsonl).

``full`` keeps one :class:`StepRecord` per step; ``counts`` one :class:`StepCounts` per step or per
jump over decode-only steps, merged pairwise above :data:`MAX_COUNTS_RECORDS` records so memory and
file size stay bounded at any scale (the lab engine's rule, lab.md §7).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["StepRecord", "StepCounts", "MAX_COUNTS_RECORDS", "keep_counts"]

#: Most ``counts`` records one run keeps; beyond it adjacent pairs merge and the span doubles.
MAX_COUNTS_RECORDS = 32768


@dataclass(slots=True)
class StepRecord:
    """One engine step (timeline ``full``, vllm-engine.md §5).

    ``step`` is the step's ordinal (its start tick with unit steps), ``tick`` its start time,
    ``duration`` its length; ``scheduled`` pairs each request with its tokens in vLLM's order
    (running list first, then admissions); ``num_prompt_tokens``/``num_decode_tokens`` split them
    (module docstring); ``kv_blocks_used`` counts the blocks held after scheduling, before finished
    requests free theirs; ``num_running``/``num_waiting`` are taken after scheduling;
    ``preempted_for`` pairs each preempted request with the request whose KV blocks it freed
    (itself when a request had to give up its own).
    """

    step: int
    tick: object
    duration: object
    scheduled: list
    num_prompt_tokens: int
    num_decode_tokens: int
    preempted: list
    admitted: list
    cache_hits: list
    finished: list
    timeouts: list
    kv_blocks_used: int
    num_running: int
    num_waiting: int
    preempted_for: list = field(default_factory=list)   # (victim, request that needed the blocks)


@dataclass(slots=True)
class StepCounts:
    """Counts of one step or one jump over ``num_steps`` decode-only steps (timeline ``counts``).

    Token, admission, preemption, timeout and finish counts are summed over the span;
    ``num_running``, ``num_waiting`` and ``kv_blocks_used`` keep the largest value seen.
    """

    step: int
    tick: object
    num_steps: int
    duration: object
    num_prompt_tokens: int
    num_decode_tokens: int
    num_preempted: int
    num_admitted: int
    num_cache_hits: int
    num_finished: int
    num_timeouts: int
    kv_blocks_used: int
    num_running: int
    num_waiting: int

    def merge(self, later: "StepCounts") -> None:
        """Absorb ``later`` (a record starting after this one)."""
        self.num_steps = later.step + later.num_steps - self.step
        self.duration = later.tick + later.duration - self.tick
        self.num_prompt_tokens += later.num_prompt_tokens
        self.num_decode_tokens += later.num_decode_tokens
        self.num_preempted += later.num_preempted
        self.num_admitted += later.num_admitted
        self.num_cache_hits += later.num_cache_hits
        self.num_finished += later.num_finished
        self.num_timeouts += later.num_timeouts
        if later.kv_blocks_used > self.kv_blocks_used:
            self.kv_blocks_used = later.kv_blocks_used
        if later.num_running > self.num_running:
            self.num_running = later.num_running
        if later.num_waiting > self.num_waiting:
            self.num_waiting = later.num_waiting


def keep_counts(records: list, record: StepCounts, span: int) -> int:
    """Append ``record`` to ``records`` (merging into the last record while it spans fewer than
    ``span`` steps); halve the list when it reaches :data:`MAX_COUNTS_RECORDS`. Returns the new span."""
    if span > 1 and records and record.step < records[-1].step + span:
        records[-1].merge(record)
        return span
    records.append(record)
    if len(records) >= MAX_COUNTS_RECORDS:
        for first, second in zip(records[::2], records[1::2]):
            first.merge(second)
        del records[1::2]
        span *= 2
    return span
