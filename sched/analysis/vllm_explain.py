"""``explain NAME`` for a vLLM-engine run: one request's story, preemptions included (vllm-engine.md §5).

Read from the run's ``requests.jsonl`` row (admission, hit, token stamps, ``preempted_at``) and,
with ``--timeline full``, its steps in ``timeline.jsonl`` (``scheduled``, ``preempted``,
``preempted_for``). Example (``explain S4`` on the baseline with 64 tokens, 4 seqs, chunk cap 32,
prefix caching and 41 blocks)::

    == vllm ==
      arrival      tick 9
      waiting      ticks 9–17 (9 ticks in the queue: no free slot, no budget left, or no KV room ...)
      admission    tick 18, cache hit: 128 prefix tokens skipped
      prefill      tick 18: 16 tokens (prompt complete: the first token is sampled in this step)
      first token  tick 19 (TTFT 10)
      preempted    at tick 19 to free KV blocks for U3; back in the queue ticks 19–29; recomputed 17
                   tokens from tick 30 (tick 30)
      end          tick 45, ok, 16 of 16 tokens (E2E 36)
"""

from __future__ import annotations

from ..core.clock import VLLM_STEPS, RunClock
from .explain_error import ExplainError

__all__ = ["VLLM_STEP_FIELDS", "check_step_times", "check_tick_steps", "step_problem", "vllm_case_story",
           "vllm_costs"]

#: Most prefill lines printed per request (the rest are summed in one line).
MAX_PREFILL_LINES = 12


def _names(value) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) for n in value)


#: Shape checks of the step fields explain reads (see :func:`sched.analysis.explain_input.checked`).
VLLM_STEP_FIELDS = {
    "case": (lambda v: isinstance(v, str), "a string", True),
    "tick": (lambda v: type(v) is int and v >= 0, "a tick (integer >= 0)", True),
    "scheduled": (lambda v: isinstance(v, dict) and all(type(n) is int and n >= 0 for n in v.values()),
                  "an object of name -> tokens", True),
    "preempted": (_names, "a list of names", True),
    "preempted_for": (lambda v: isinstance(v, dict) and all(isinstance(n, str) for n in v.values()),
                      "an object of name -> name", False),
    "duration": (lambda v: type(v) is int and v >= 0, "a duration in ticks (integer >= 0)", False),
}


def step_problem(record: dict, budget: int | None) -> str | None:
    """What is impossible about one step of ``timeline.jsonl`` (vllm-engine.md §2), or ``None``:
    more tokens scheduled than ``max_num_batched_tokens`` (``budget``, from ``manifest.json``), a
    request scheduled for 0 tokens, a preemption named in ``preempted_for`` but not in ``preempted``,
    or one made for a request that is neither scheduled nor preempted in that step (vLLM preempts
    a running request only to make room for one it is scheduling, or for the victim itself)."""
    scheduled, preempted = record["scheduled"], record["preempted"]
    total = sum(scheduled.values())
    if budget is not None and total > budget:
        return f"field 'scheduled': {total} tokens in one step, more than max_num_batched_tokens {budget}"
    idle = next((name for name, tokens in scheduled.items() if tokens < 1), None)
    if idle is not None:
        return f"field 'scheduled': {idle!r} is scheduled for 0 tokens"
    for victim, needer in (record.get("preempted_for") or {}).items():
        if victim not in preempted:
            return f"field 'preempted_for': {victim!r} is not in this step's preempted list"
        if needer != victim and needer not in scheduled and needer not in preempted:
            return (f"field 'preempted_for': {victim!r} preempted for {needer!r}, a request this step neither "
                    "schedules nor preempts")
    return None


def check_step_times(row: dict, steps: dict[int, dict], requests_path: str, timeline_path: str) -> None:
    """On a step-model run, refuse a request line the steps of ``timeline.jsonl`` contradict: its
    ``admitted_at`` must start a step scheduling it; ``first_token_at`` and ``done_at`` must end a
    step naming it (a step stamps its tokens at its end; times in µs ticks). Raises
    :class:`sched.analysis.explain_error.ExplainError`."""
    where = f"{requests_path} (request {row['name']!r}, case {row['case']!r})"
    admitted = row["admitted_at"]
    if admitted is not None and row["name"] not in steps.get(admitted, {}).get("scheduled", {}):
        raise ExplainError(f"{where}: field 'admitted_at': {admitted} µs starts no step of {timeline_path} that "
                           "schedules it; the files disagree")
    ends = {tick + record["duration"] for tick, record in steps.items() if "duration" in record}
    for key in ("first_token_at", "done_at"):
        value = row.get(key)
        if value is not None and value not in ends:
            raise ExplainError(f"{where}: field '{key}': {value} µs ends no step of {timeline_path} naming it; "
                               "the files disagree")


def check_tick_steps(row: dict, steps: dict[int, dict], requests_path: str, timeline_path: str) -> None:
    """On a vLLM run on the tick clock with a full timeline, refuse a request line the steps of
    ``timeline.jsonl`` contradict (a truncated or edited file), sync or async alike (vllm-engine.md
    §2, §7): ``admitted_at`` must be a step scheduling it; ``first_token_at`` and, for an ``ok``
    request, ``done_at`` must follow a step scheduling it (a step's tokens are stamped step + 1);
    every tick of ``preempted_at`` must be a step whose ``preempted`` names it. ``steps`` maps tick
    -> that step's record (only records naming the request are needed). Raises
    :class:`sched.analysis.explain_error.ExplainError` naming both files and the field."""
    name = row["name"]
    where = f"{requests_path} (request {name!r}, case {row['case']!r})"
    wanted = [("admitted_at", row.get("admitted_at"), "scheduled", "is no step of")]
    wanted += [(key, row.get(key) - 1, "scheduled", "follows no step of") for key in ("first_token_at", "done_at")
               if row.get(key) is not None and (key == "first_token_at" or row.get("status") == "ok")]
    wanted += [("preempted_at", tick, "preempted", "is no step of") for tick in row.get("preempted_at") or ()]
    for key, tick, field, said in wanted:
        if tick is not None and name not in steps.get(tick, {}).get(field, ()):
            shown = tick + 1 if said.startswith("follows") else tick
            raise ExplainError(f"{where}: field '{key}': tick {shown} {said} {timeline_path} that "
                               f"{'schedules' if field == 'scheduled' else 'preempts'} it; the files disagree "
                               "(truncated or edited?)")


def vllm_costs(manifest: dict) -> str:
    """The sentence on budget and KV capacity, from ``manifest.json``'s ``config``."""
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    budget, blocks, size = (config.get(k) for k in ("max_num_batched_tokens", "num_gpu_blocks", "block_size"))
    if not (budget and blocks and size):
        return ""
    return (f" Budget {budget} tokens per step (a decode is 1 token); KV cache {blocks - 1} usable blocks of "
            f"{size} tokens.")


def _stamps(row: dict) -> list[int]:
    if isinstance(row.get("token_times"), list):
        return list(row["token_times"])
    return [start + k for start, count in row.get("token_runs") or [] for k in range(count)]


def vllm_case_story(row: dict, steps: dict[int, dict] | None, clock: RunClock = VLLM_STEPS) -> list[str]:
    """The story lines of one request (``row`` of requests.jsonl; ``steps``: tick -> its step record
    for the steps naming it, or ``None`` without a full timeline; ``clock``: the run's
    :class:`sched.core.clock.RunClock`, :data:`~sched.core.clock.VLLM_MS` for a step-model run, whose
    times are then printed in ms)."""
    c = clock
    name, arrival, admitted, end = row["name"], row["arrival"], row["admitted_at"], row["done_at"]
    lines = [f"  arrival      {c.at(arrival)}"]
    queue_end = admitted if admitted is not None else end
    if queue_end is not None and queue_end > arrival:
        lines.append(f"  waiting      {c.span(arrival, queue_end)} ({c.length(arrival, queue_end)} in the queue: no "
                     "free slot, no budget left, or no KV room for its whole prompt)")
    if admitted is None:
        lines.append("  admission    never")
    else:
        hit = row.get("hit_tokens", 0)
        lines.append(f"  admission    {c.at(admitted)}, "
                     + (f"cache hit: {hit} prefix tokens skipped" if hit else "no cache hit"))
    stamps = _stamps(row)
    preempted_at = row.get("preempted_at") if isinstance(row.get("preempted_at"), list) else []
    if steps is not None and admitted is not None:
        lines += _prefill_lines(name, admitted, stamps, preempted_at, steps, c)
    first = row["first_token_at"]
    lines.append(f"  first token  {c.at(first)} (TTFT {c.duration(first - arrival)})" if first is not None
                 else "  first token  none")
    for tick in preempted_at:
        lines.append("  preempted    " + _preemption(name, tick, stamps, steps, end, c))
    emitted, wanted = row.get("output_tokens_emitted"), row.get("output_tokens")
    if row["status"] == "ok":
        lines.append(f"  end          {c.at(end)}, ok, {emitted} of {wanted} tokens (E2E {c.duration(end - arrival)})")
    else:
        lines.append(f"  end          {c.at(end)}, {row['status']} with {emitted} of {wanted} tokens "
                     "(no latency counted)")
    lines.append(f"  hit tokens   {row.get('hit_tokens', 0)}")
    lines.append(f"  preemptions  {len(preempted_at)}"
                 + (f" (at {', '.join(c.at(t) for t in preempted_at)})" if preempted_at else ""))
    return lines


def _prefill_lines(name, admitted, stamps, preempted_at, steps, c: RunClock) -> list[str]:
    """One line per step of the first prefill (admission up to the first token's step)."""
    last = (stamps[0] - 1) if stamps else min(preempted_at + [max(steps, default=admitted)])
    ticks = [t for t in sorted(steps) if admitted <= t <= last and name in steps[t]["scheduled"]]
    lines = []
    for t in ticks[:MAX_PREFILL_LINES]:
        done = (" (prompt complete: the first token is sampled in this step)"
                if stamps and c.step_end(t, steps[t]) == stamps[0] else "")
        lines.append(f"  {'prefill' if not lines else '':<12} {c.step(t)}: {steps[t]['scheduled'][name]} tokens{done}")
    if len(ticks) > MAX_PREFILL_LINES:
        rest = ticks[MAX_PREFILL_LINES:]
        lines.append(f"  {'':<12} … {len(rest)} more steps, {sum(steps[t]['scheduled'][name] for t in rest)} tokens")
    return lines


def _preemption(name, tick, stamps, steps, end, c: RunClock) -> str:
    """``at tick 41 to free KV blocks for S2; recomputed 312 tokens from tick 44 (ticks 44–46)``."""
    if steps is None:
        return f"at {c.at(tick)} (recompute); who needed the blocks and the recompute need --timeline full"
    why = steps.get(tick, {}).get("preempted_for", {}).get(name)
    text = f"at {c.at(tick)} " + ("to free KV blocks for itself" if why == name else
                                 f"to free KV blocks for {why}" if why else "to free KV blocks")
    later = [t for t in sorted(steps) if t > tick and name in steps[t]["scheduled"]]
    if not later and end is not None and tick == end:   # async only (vllm-engine.md §7 rule 5)
        return text + ("; its last token was already in flight, so it was not recomputed: it ended when "
                       "that token arrived (async scheduling)")
    if not later:
        return text + "; never scheduled again"
    resumed = later[0]
    following = [s for s in stamps if s > resumed]
    until = following[0] - 1 if following else (end if end is not None else later[-1])
    ticks = [t for t in later if t <= until]
    tokens = sum(steps[t]["scheduled"][name] for t in ticks)
    return (f"{text}; back in the queue {c.span(tick, resumed)}; recomputed {tokens} tokens from "
            f"{c.at(resumed)} ({c.steps(ticks)})")
