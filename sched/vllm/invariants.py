"""Invariants of a finished vLLM-engine run (vllm-engine.md §2, §5).

Like :mod:`sched.lab.invariants` for the lab engine: post hoc, cheap (O(requests + token runs +
records)), run on every case, raising :class:`sched.core.invariants.InvariantError` at the first broken
rule. What differs from the lab's rules: the first token may come one tick after admission (the
step that completes the prompt samples it), and a request may be preempted and admitted again.

- every request ends exactly once (ok with all its tokens at its last token, or timeout at its deadline);
- nothing is admitted before it arrives or at/after its deadline;
- token times strictly increase, come after admission and by the end;
- hit tokens are whole blocks, never the whole prompt, never beyond the shared prefix, only with
  prefix caching;
- the preemption count equals the number of preemption times, which lie between admission and end
  (with async scheduling a preemption may fall at the end itself: the last token was in flight);
- per step (``full``): the tokens scheduled never exceed the budget (nor a step's prompt/decode
  split its total), the running list never exceeds ``max_num_seqs``, KV blocks in use never exceed
  ``num_gpu_blocks − 1``, each request is first admitted once and ends once, and every preemption
  of a request appears in the steps; per record (``counts``): the same bounds over its span.
"""

from __future__ import annotations

from itertools import repeat
from operator import add, le, sub

from ..core.ended_requests import RECORD_FIELDS, EndedRequests
from ..core.packed_requests import ColumnRequests
from ..core.records import CaseResult, Status
from ..core.step_stamps import StepStampedRequest, shared_step_ends
from .records import StepRecord

__all__ = ["check_vllm_case"]


def check_vllm_case(result: CaseResult, fail) -> None:
    """Check one finished vLLM-engine case; ``fail(result, where, what)`` raises."""
    knobs = result.config
    requests = result.requests
    capacity = knobs.gpu_blocks_for(requests.specs if isinstance(requests, ColumnRequests)
                                    else [r.spec for r in requests]) - 1
    _check_requests(result, fail)
    ended, admitted, preempted = {}, {}, {}
    previous = None
    for k in result.ticks:
        where = f"step at {k.tick}"
        if previous is not None and k.step <= previous:
            fail(result, where, f"step {k.step} follows step {previous}")
        previous = k.step
        steps = getattr(k, "num_steps", 1)
        used = k.num_prompt_tokens + k.num_decode_tokens
        if min(k.num_prompt_tokens, k.num_decode_tokens) < 0 or used > knobs.budget * steps:
            fail(result, where, f"scheduled {used} tokens over {steps} step(s), budget {knobs.budget} per step")
        if k.kv_blocks_used > capacity:
            fail(result, where, f"{k.kv_blocks_used} KV blocks in use, capacity {capacity}")
        if k.num_running > knobs.max_num_seqs:
            fail(result, where, f"{k.num_running} running, max_num_seqs {knobs.max_num_seqs}")
        if not isinstance(k, StepRecord):
            continue
        if sum(n for _, n in k.scheduled) != used or any(n < 1 for _, n in k.scheduled):
            fail(result, where, f"scheduled {k.scheduled} does not add up to {used} tokens")
        for name in k.admitted:
            if admitted.setdefault(name, k.tick) != k.tick:
                fail(result, where, f"{name} first admitted a second time")
        for name in k.finished + k.timeouts:
            ended[name] = ended.get(name, 0) + 1
        for name in k.preempted:
            preempted.setdefault(name, []).append(k.tick)
    if result.ticks and isinstance(result.ticks[0], StepRecord):
        for r in result.requests:
            where = f"request {r.index} ({r.name})"
            if ended.get(r.name, 0) != 1:
                fail(result, where, f"ends {ended.get(r.name, 0)} times in the timeline")
            if admitted.get(r.name) != r.admitted_at:
                fail(result, where, f"admitted at {r.admitted_at}, the timeline says {admitted.get(r.name)}")
            if preempted.get(r.name, []) != list(r.preempted_at):
                fail(result, where, f"preempted at {list(r.preempted_at)}, the timeline says {preempted.get(r.name)}")


#: The record fields :func:`_check_requests` reads, one tuple per request (what
#: :meth:`sched.core.ended_requests.EndedRequests.fields` gives without a record).
_FIELDS = RECORD_FIELDS


def _check_requests(result: CaseResult, fail) -> None:
    """The rules of :func:`_check_request` for every request, screened in one pass: a request that
    ended with at most one run of tokens, no open run and no preemption is passed when all its rules
    hold at once; any other (or any miss) goes through :func:`_check_request`, which names the first
    broken rule. Requests of a step-time run that keep step ordinals
    (:func:`sched.core.records.shared_step_ends`) are screened with their first and last stamps read
    through their case's step ends."""
    knobs = result.config
    timeout, block_size, caching = knobs.timeout_ticks, knobs.block_size, knobs.enable_prefix_caching
    done_status, timeout_status = Status.DONE, Status.TIMEOUT
    requests = result.requests
    # Requests packed as they ended give these fields from their columns, a record only for a miss.
    rows = requests.fields() if isinstance(requests, EndedRequests) else map(_FIELDS, requests)
    ends = shared_step_ends(requests)   # runs of step ordinals: first and last read through it
    for i, (status, done, admitted, hit, preemptions, preempted_at, runs, open_from, spec) in enumerate(rows):
        if open_from is not None or preemptions or preempted_at or len(runs) not in (0, 2):
            _check_request(result, requests[i], fail)
            continue
        arrival, output, prompt = spec.arrival, spec.output_tokens, spec.prefix_tokens + spec.suffix_tokens
        deadline = None if timeout is None else arrival + timeout
        shared = spec.prefix_tokens if spec.prefix_blocks is None else len(spec.prefix_blocks) * spec.block_size
        first, count = runs if runs else (None, 0)
        last = first + count - 1 if runs else None
        if ends is not None and runs:   # step ordinals: their ends
            first, last = ends[first], ends[last]
        if not (  # the rules of _check_request, in its order
                (runs and count == output and done == last if status is done_status
                 else status is timeout_status and deadline is not None and done is not None and done >= deadline
                 and count <= output)
                and (arrival <= admitted and (deadline is None or admitted < deadline) if admitted is not None
                     else not (runs or hit))
                and (not runs or (count >= 1 and first > admitted and last <= done))
                and not hit % block_size and 0 <= hit <= shared and hit <= prompt - 1 and (caching or not hit)):
            _check_request(result, requests[i], fail)


def _check_request(result: CaseResult, r, fail) -> None:
    spec, knobs = r.spec, result.config
    where = f"request {r.index} ({r.name})"
    deadline = None if knobs.timeout_ticks is None else spec.arrival + knobs.timeout_ticks
    # [first stamp, count, ...]: the runs of token_runs, not paired up; for a request keeping step
    # ordinals its runs of ordinals (they increase as the step ends do, which increase by more than
    # 1 µs), the first and last stamp read through the step ends.
    stamped = type(r) is StepStampedRequest
    flat = r._runs if stamped else r.flat_token_runs
    runs = bool(flat)
    starts, counts = flat[0::2], flat[1::2]
    one_each = counts.count(1) == len(counts)   # one token a run (a step-model run: every token its own)
    num_tokens = len(counts) if one_each else sum(counts)
    first, last = (flat[0], flat[-2] + flat[-1] - 1) if runs else (None, None)
    if stamped and runs:
        first, last = r.first_token_at, r.last_token_at
    if not r.status.ended or r.done_at is None:
        fail(result, where, f"never ended (status {r.status.value})")
    if num_tokens > spec.output_tokens:
        fail(result, where, f"emitted {num_tokens} tokens, output_tokens is {spec.output_tokens}")
    if r.status is Status.DONE and (num_tokens != spec.output_tokens or r.done_at != last):
        fail(result, where, f"ended ok at {r.done_at} with {num_tokens} of {spec.output_tokens} tokens")
    # Aborted at the start of the first step at or after its deadline: the deadline itself with unit
    # steps, the end of the step in flight with a step time (a step is never interrupted).
    if r.status is Status.TIMEOUT and (deadline is None or r.done_at < deadline):
        fail(result, where, f"timed out at {r.done_at}, before its deadline {deadline}")
    if r.admitted_at is None:
        if r.status is Status.DONE or runs or r.hit_tokens or r.num_preemptions:
            fail(result, where, "was served without being admitted")
    elif r.admitted_at < spec.arrival or (deadline is not None and r.admitted_at >= deadline):
        fail(result, where, f"admitted at {r.admitted_at}, outside arrival {spec.arrival} .. deadline {deadline}")
    if runs and (first <= r.admitted_at or last > r.done_at):
        fail(result, where, f"token times {first}..{last} outside admission {r.admitted_at} .. end {r.done_at}")
    # Each run's start <= the last stamp (start + count − 1) of the run before it: mapped in C (with
    # runs of one token, the start of the run before).
    if (any(map(le, starts[1:], starts)) if one_each else
            (counts and min(counts) < 1) or any(map(le, starts[1:], map(sub, map(add, starts, counts), repeat(1))))):
        fail(result, where, f"token times do not strictly increase: runs {r.token_runs}")
    shared = spec.prefix_tokens if spec.prefix_blocks is None else len(spec.prefix_blocks) * spec.block_size
    if r.hit_tokens % knobs.block_size or not 0 <= r.hit_tokens <= min(shared, spec.prompt_tokens - 1):
        fail(result, where, f"hit_tokens {r.hit_tokens}: not whole blocks of {knobs.block_size} within a "
                            f"shareable prefix of {shared} tokens")
    if r.hit_tokens and not knobs.enable_prefix_caching:
        fail(result, where, "hit tokens without prefix caching")
    times = list(r.preempted_at)
    # Async scheduling: a request whose last token is in flight can still be preempted by the
    # next schedule(), at the time that token arrives (it then ends in the waiting queue).
    late = times and (times[-1] > r.done_at if knobs.async_scheduling else times[-1] >= r.done_at)
    if r.num_preemptions != len(times) or times != sorted(times) or (
            times and (times[0] < r.admitted_at or late)):
        fail(result, where, f"{r.num_preemptions} preemptions at {times} (admitted {r.admitted_at}, end {r.done_at})")
