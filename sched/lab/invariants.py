"""Invariants of a finished case, checked after every run (lab.md §3; issue "nothing bad gets in").

The engine is trusted by nobody: :func:`check_case` re-reads a finished :class:`CaseResult` (its
requests and, when present, its tick records) and raises :class:`InvariantError` at the first
broken rule. It is post hoc and cheap, O(requests + token runs + ticks), so the CLI runs it on every
case of every run. Request names are assumed unique (the workload validator guarantees it).

The rules, each named in its message:

- every request ends exactly once (status ok or timeout, one end tick, one end event);
- nothing is admitted before it arrives or at/after its deadline;
- the budget is never exceeded in a tick, and a tick's budget is its decodes plus its prefill;
- active requests never exceed ``max_active``;
- token times strictly increase, start at admission + 2 at the earliest and end by the end tick
  (read from the request's runs of consecutive ticks, so the check costs O(runs));
- emitted tokens never exceed ``output_tokens`` (and equal it for a request that ended ok);
- hit tokens never exceed ``prefix_tokens`` (with block-level prefixes: blocks × block size),
  nor the prompt minus one, and only with APC;
- prefill work summed over the ticks equals prompt − hit tokens for every request that finished
  prefill, and stays below it for one that did not.
"""

from __future__ import annotations

from operator import attrgetter

from ..core.records import CaseResult, Request, SimulationError, Status
from ..core.invariants import fail as _fail

__all__ = ["check_lab_case"]


def check_lab_case(result: CaseResult) -> None:
    """Check one finished lab-engine case; raises :class:`~sched.core.invariants.InvariantError`
    naming the case, request or tick (callers go through :func:`sched.engines.check_case`).

    ``result.ticks`` is checked when present (a case with requests always walks at least one
    tick); per-request prefill work then comes from the ticks, otherwise from the requests.
    """
    # Per-tick rules need full records; counts records (large runs) and ``off`` carry none.
    full = bool(result.ticks) and hasattr(result.ticks[0], "prefilled")
    timeline = _check_ticks(result) if full else None
    prefilled = None if timeline is None else timeline[0]
    _check_requests(result, prefilled)
    if timeline is not None:
        _check_timeline_matches(result, *timeline)



#: The record fields :func:`_check_requests` reads, one tuple per request.
_FIELDS = attrgetter("status", "done_at", "admitted_at", "hit_tokens", "prefilled_tokens", "prefill_done_at",
                     "_runs", "_open_from", "spec")


def _check_requests(result: CaseResult, prefilled: dict | None) -> None:
    """The rules of :func:`_check_request` for every request, screened in one pass: a request that
    ended with at most one run of tokens and no open run is passed when all its rules hold at once;
    any other (or any miss) goes through :func:`_check_request`, which names the first broken rule."""
    timeout, apc = result.config.timeout_ticks, result.case.apc
    done_status, timeout_status = Status.DONE, Status.TIMEOUT
    for r, (status, done, admitted, hit, work, prefill_done, runs, open_from, spec) in zip(
            result.requests, map(_FIELDS, result.requests)):
        if open_from is not None or len(runs) not in (0, 2):
            _check_request(result, r, prefilled)
            continue
        arrival, output, prompt = spec.arrival, spec.output_tokens, spec.prefix_tokens + spec.suffix_tokens
        deadline = None if timeout is None else arrival + timeout
        shared = spec.prefix_tokens if spec.prefix_blocks is None else len(spec.prefix_blocks) * spec.block_size
        if prefilled is not None:
            work = prefilled.get(spec.name, 0)
        first, count = runs if runs else (None, 0)
        last = first + count - 1 if runs else None
        if not (  # the rules of _check_request, in its order
                (runs and count == output and done == last if status is done_status
                 else status is timeout_status and deadline is not None and done == deadline and count <= output)
                and (deadline is None or done <= deadline)
                and (arrival <= admitted and (deadline is None or admitted < deadline) if admitted is not None
                     else not (runs or hit))
                and (not runs or (count >= 1 and first >= admitted + 2 and last <= done and prefill_done is not None))
                and 0 <= hit <= shared and hit <= prompt - 1 and (apc or not hit)
                and (work == prompt - hit if prefill_done is not None else work < prompt - hit)):
            _check_request(result, r, prefilled)


def _check_request(result: CaseResult, r: Request, prefilled: dict | None) -> None:
    spec, config = r.spec, result.config
    where = f"request {r.index} ({r.name})"
    deadline = None if config.timeout_ticks is None else spec.arrival + config.timeout_ticks
    # Token stamps are read as runs of consecutive ticks: O(runs), not O(tokens), per request.
    runs = r.flat_token_runs   # [first stamp, count, first stamp, count, ...]
    num_tokens = sum(runs[1::2])
    first, last = (runs[0], runs[-2] + runs[-1] - 1) if runs else (None, None)

    # Ends exactly once, with the end tick its status implies.
    if not r.status.ended or r.done_at is None:
        _fail(result, where, f"never ended (status {r.status.value})")
    if num_tokens > spec.output_tokens:
        _fail(result, where, f"emitted {num_tokens} tokens, output_tokens is {spec.output_tokens}")
    if r.status is Status.DONE and (num_tokens != spec.output_tokens or r.done_at != last):
        _fail(result, where, f"ended ok at {r.done_at} with {num_tokens} of {spec.output_tokens} tokens")
    if r.status is Status.TIMEOUT and r.done_at != deadline:
        _fail(result, where, f"timed out at {r.done_at}, its deadline is {deadline}")
    if deadline is not None and r.done_at > deadline:
        _fail(result, where, f"ended at {r.done_at}, after its deadline {deadline}")

    # Admission within [arrival, deadline).
    if r.admitted_at is None:
        if r.status is Status.DONE or runs or r.hit_tokens:
            _fail(result, where, "was served without being admitted")
    elif r.admitted_at < spec.arrival or (deadline is not None and r.admitted_at >= deadline):
        _fail(result, where, f"admitted at {r.admitted_at}, outside arrival {spec.arrival} .. deadline {deadline}")

    # Tokens: strictly increasing, after prefill, before the end.
    if runs and (first < r.admitted_at + 2 or last > r.done_at):
        _fail(result, where, f"token times {first}..{last} outside admission+2 .. end {r.done_at}")
    if min(runs[1::2], default=1) < 1 or (len(runs) > 2 and any(
            runs[i] <= runs[i - 2] + runs[i - 1] - 1 for i in range(2, len(runs), 2))):
        _fail(result, where, f"token times do not strictly increase: runs {r.token_runs}")

    # Prefix cache hits (block-level prefixes share up to their blocks × block size).
    shared = spec.prefix_tokens if spec.prefix_blocks is None else len(spec.prefix_blocks) * spec.block_size
    if not 0 <= r.hit_tokens <= min(shared, spec.prompt_tokens - 1):
        _fail(result, where, f"hit_tokens {r.hit_tokens} with a shareable prefix of {shared} tokens")
    if r.hit_tokens and not result.case.apc:
        _fail(result, where, "hit tokens without APC")

    # Prefill work: exactly prompt − hit once prefill finished, less before.
    work = r.prefilled_tokens if prefilled is None else prefilled.get(r.name, 0)
    needed = spec.prompt_tokens - r.hit_tokens
    finished_prefill = r.prefill_done_at is not None
    if (work != needed) if finished_prefill else (work >= needed):
        state = "finished" if finished_prefill else "unfinished"
        _fail(result, where, f"prefill work {work} tokens for an {state} prefill of {needed} tokens")
    if runs and not finished_prefill:
        _fail(result, where, "emitted tokens before its prefill finished")


def _check_ticks(result: CaseResult) -> tuple[dict, dict, dict, dict]:
    """Per-tick rules; returns per request name the prefill tokens and decodes summed over the
    ticks, the admission tick, and the number of end events."""
    config, chunk = result.config, result.case.chunk_tokens
    prefilled: dict[str, int] = {}
    decoded: dict[str, int] = {}
    admitted: dict[str, int] = {}
    ended: dict[str, int] = {}
    previous = None
    for k in result.ticks:
        if previous is not None and k.tick <= previous:
            _fail(result, f"tick {k.tick}", f"follows tick {previous}")
        previous = k.tick
        work = 0
        for name, tokens in k.prefilled:
            if tokens < 1 or (chunk is not None and tokens > chunk):
                _fail(result, f"tick {k.tick}", f"{name} prefilled {tokens} tokens (chunk cap {chunk})")
            prefilled[name] = prefilled.get(name, 0) + tokens
            work += tokens
        spent = config.decode_cost * len(k.decoded) + work
        if k.budget_used > config.budget or k.budget_used != spent:
            _fail(result, f"tick {k.tick}", f"budget used {k.budget_used}, decodes and prefill cost {spent}, "
                                            f"budget {config.budget}")
        if len(k.active) > config.max_active:
            _fail(result, f"tick {k.tick}", f"{len(k.active)} active requests, max_active is {config.max_active}")
        for name in k.decoded:
            decoded[name] = decoded.get(name, 0) + 1
        for name in k.admitted:
            if admitted.setdefault(name, k.tick) != k.tick:
                _fail(result, f"tick {k.tick}", f"{name} admitted a second time")
        for names in (k.finished, k.timeouts):
            for name in names:
                ended[name] = ended.get(name, 0) + 1
    return prefilled, decoded, admitted, ended


def _check_timeline_matches(result: CaseResult, prefilled: dict, decoded: dict, admitted: dict,
                            ended: dict) -> None:
    """Each request ends once in the timeline, and admission and tokens agree with its record."""
    for r in result.requests:
        where = f"request {r.index} ({r.name})"
        if ended.get(r.name, 0) != 1:
            _fail(result, where, f"ends {ended.get(r.name, 0)} times in the timeline")
        if admitted.get(r.name) != r.admitted_at:
            _fail(result, where, f"admitted at {r.admitted_at}, the timeline says {admitted.get(r.name)}")
        if decoded.get(r.name, 0) != r.num_tokens:
            _fail(result, where, f"{r.num_tokens} tokens, the timeline decodes {decoded.get(r.name, 0)}")
