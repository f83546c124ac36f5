"""What one run of the vLLM engine records per step (vllm-engine.md §5; timeline.jsonl).

``full`` keeps one :class:`StepRecord` per step; ``counts`` one :class:`StepCounts` per step or per
jump over decode-only steps, merged pairwise above :data:`MAX_COUNTS_RECORDS` records so memory and
file size stay bounded at any scale (the lab engine's rule, lab.md §7).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat

__all__ = ["StepRecord", "StepCounts", "StepLog", "MAX_COUNTS_RECORDS", "keep_counts"]

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
    return _halve(records, span) if len(records) >= MAX_COUNTS_RECORDS else span


def _halve(records: list, span: int) -> int:
    """Merge ``records`` pairwise (each even record absorbs the next); returns the doubled span."""
    for first, second in zip(records[::2], records[1::2]):
        first.merge(second)
    del records[1::2]
    return span * 2


class StepLog:
    """The timeline records of one run at one detail level (``full``, ``counts`` or ``off``).

    :meth:`add_step` takes the step's requests as scheduler objects (anything with ``.spec.name``)
    and keeps names only for ``full``; ``counts`` merges in place once the span exceeds one step.
    """

    def __init__(self, detail: str) -> None:
        self.detail = detail
        self.records: list = []
        self._span = 1

    def add_step(self, ordinal, t, duration, scheduled, num_prompt, num_decode, preempted, admitted, hits,
                 finished, timeouts, kv_used, num_running, num_waiting):
        """Record one step; ``scheduled``: (request, tokens) pairs in vLLM's order (``full`` only);
        ``preempted``: (victim, request it made room for) pairs. Returns the new record, if any."""
        if self.detail == "full":
            record = StepRecord(ordinal, t, duration, [(s.spec.name, n) for s, n in scheduled],
                                num_prompt, num_decode, sorted(v.spec.name for v, _ in preempted),
                                [s.spec.name for s in admitted], [s.spec.name for s in hits],
                                [s.spec.name for s in finished], [s.spec.name for s in timeouts], kv_used,
                                num_running, num_waiting, [(v.spec.name, s.spec.name) for v, s in preempted])
            self.records.append(record)
            return record
        if self.detail != "counts":
            return None
        records = self.records
        if self._span > 1 and records and ordinal < records[-1].step + self._span:
            last = records[-1]   # merged at once (see keep_counts)
            last.num_steps = ordinal + 1 - last.step
            last.duration = t + duration - last.tick
            last.num_prompt_tokens += num_prompt
            last.num_decode_tokens += num_decode
            last.num_preempted += len(preempted)
            last.num_admitted += len(admitted)
            last.num_cache_hits += len(hits)
            last.num_finished += len(finished)
            last.num_timeouts += len(timeouts)
            if kv_used > last.kv_blocks_used:
                last.kv_blocks_used = kv_used
            if num_running > last.num_running:
                last.num_running = num_running
            if num_waiting > last.num_waiting:
                last.num_waiting = num_waiting
            return None
        record = StepCounts(ordinal, t, 1, duration, num_prompt, num_decode, len(preempted), len(admitted),
                            len(hits), len(finished), len(timeouts), kv_used, num_running, num_waiting)
        self._span = keep_counts(records, record, self._span)
        return record

    def add_decode_steps(self, ordinal, starts, durations, num_decode, kv_used, num_running, num_waiting) -> None:
        """Record ``len(starts)`` decode-only steps from step ``ordinal`` on, as :meth:`add_step`
        would one by one: step ``ordinal + j`` starts at ``starts[j]``, lasts ``durations[j]``,
        decodes ``num_decode`` tokens of ``num_running`` requests, with ``kv_used[j]`` blocks held
        and ``num_waiting[j]`` requests waiting (both non-decreasing in ``j``). The steps a merged
        ``counts`` record covers are merged at once: only the entries of its first and last step
        are read (``kv_used`` and ``num_waiting`` at its last, their largest), so any sequences
        (lists, ranges) will do."""
        if self.detail != "counts":
            if self.detail == "full":
                for j, start in enumerate(starts):
                    self.add_step(ordinal + j, start, durations[j], (), 0, num_decode, (), (), (), (), (), kv_used[j],
                                  num_running, num_waiting[j])
            return
        records, count, span = self.records, len(starts), self._span
        # The first j steps join the last record while it spans fewer than span steps.
        j = records[-1].step + span - ordinal if span > 1 and records else 0
        if j > 0:
            last = records[-1]
            if j > count:
                j = count
            k = j - 1
            last.num_steps = ordinal + j - last.step
            last.duration = starts[k] + durations[k] - last.tick
            last.num_decode_tokens += j * num_decode
            if kv_used[k] > last.kv_blocks_used:
                last.kv_blocks_used = kv_used[k]
            if num_running > last.num_running:
                last.num_running = num_running
            if num_waiting[k] > last.num_waiting:
                last.num_waiting = num_waiting[k]
        else:
            j = 0
        if len(records) + count - j < MAX_COUNTS_RECORDS:   # a new record per span steps; the list does not halve
            if span == 1:   # (no record to join: j is 0)
                if count > 16:
                    records += map(StepCounts, range(ordinal, ordinal + count), starts, repeat(1), durations, repeat(0),
                                   repeat(num_decode), repeat(0), repeat(0), repeat(0), repeat(0), repeat(0), kv_used,
                                   repeat(num_running), num_waiting)
                else:
                    for j in range(count):
                        records.append(StepCounts(ordinal + j, starts[j], 1, durations[j], 0, num_decode, 0, 0, 0, 0,
                                                  0, kv_used[j], num_running, num_waiting[j]))
                return
            while j < count:   # steps j .. k, made whole (the values merging them step by step gives)
                k = j + span - 1
                if k >= count:
                    k = count - 1
                records.append(StepCounts(ordinal + j, starts[j], 1, durations[j], 0, num_decode, 0, 0, 0, 0, 0,
                                          kv_used[j], num_running, num_waiting[j]) if k == j else
                               StepCounts(ordinal + j, starts[j], k + 1 - j, starts[k] + durations[k] - starts[j], 0,
                                          (k + 1 - j) * num_decode, 0, 0, 0, 0, 0, kv_used[k], num_running,
                                          num_waiting[k]))
                j = k + 1
            return
        while j < count:   # the list fills: step by step, halving where add_step would
            self._span = span = keep_counts(records, StepCounts(ordinal + j, starts[j], 1, durations[j], 0, num_decode,
                                                                0, 0, 0, 0, 0, kv_used[j], num_running,
                                                                num_waiting[j]), span)
            j += 1

    def add_jump(self, ordinal, t, num_steps, duration, num_decode, kv_used, num_running, num_waiting) -> None:
        """Record a jump over ``num_steps`` decode-only steps (``counts`` only; ``full`` never jumps)."""
        if self.detail == "counts":
            self._span = keep_counts(self.records, StepCounts(
                ordinal, t, num_steps, duration, 0, num_decode, 0, 0, 0, 0, 0, kv_used, num_running, num_waiting),
                self._span)
