"""The lines of a run's two JSON Lines artifacts, ``requests.jsonl`` and ``timeline.jsonl``
(lab.md §7): one line per request and one per timeline record, case after case.

A ``full`` run's lines are dicts (encoded by :func:`jsonl_text`); a large run's (``counts`` or
``off`` detail) are formatted here directly as text, the same text ``json.dumps`` would give,
several times faster. :func:`case_jsonl_lines` renders the cases of a run (one, in a worker:
:mod:`sched.output.case_sections`); :func:`sectioned_chunks` reads a case back from where it was
rendered. ``run`` is a :class:`sched.output.artifacts.LabRun` throughout (not imported: that module
imports this one).
"""

from __future__ import annotations

import json
from itertools import repeat

from ..core.metrics import e2e, queue_wait, ttft
from ..core.ended_requests import RECORD_FIELDS, EndedRequests
from ..core.packed_requests import ColumnRequests
from ..core.records import CaseResult, Status
from ..core.step_stamps import shared_step_ends, through_step_ends
from .vllm_artifacts import timeline_lines as vllm_timeline_lines
from ..workload.specs import RequestSpec

__all__ = ["request_lines", "timeline_lines", "request_line_parts", "case_jsonl_lines", "jsonl_text",
           "jsonl_chunks", "sectioned_chunks"]


def request_lines(run, parts: list[tuple] | None = None, runs_texts: list | None = None):
    """Lines of ``requests.jsonl``, case after case (dicts for ``full``, encoded text otherwise).

    ``runs_texts``: per case, per request, its ``token_runs`` pairs already formatted (``[s, 1], ...``
    for runs of one token each) or ``None`` (formatted here), when the caller has them (a step-model
    run: :mod:`sched.timing.step_ends`); read for ``counts``/``off`` detail only."""
    if run.timeline != "full" and parts is None and run.results:
        requests = run.results[0].requests
        specs = requests.specs if isinstance(requests, ColumnRequests) else [r.spec for r in requests]
        # Formatted once for every case; for a single case, as its lines go (nothing kept).
        parts = request_line_parts(specs) if len(run.results) > 1 else map(_line_parts, specs)
    for index, result in enumerate(run.results):
        yield from _case_request_lines(run, result, parts, None if runs_texts is None else runs_texts[index])


def request_line_parts(specs: list[RequestSpec]) -> list[tuple[str, str, str, int]]:
    """What every case's ``requests.jsonl`` line of each request shares (large runs), for the
    specs the cases' requests hold, in order: ``('"name": ..., "arrival": ..., ', '"prompt_tokens":
    ..., "hit_tokens": ', output tokens as text, output tokens)``; formatted once, not once per case."""
    return list(map(_line_parts, specs))


_dumps = json.JSONEncoder(ensure_ascii=False).encode


def _line_parts(spec: RequestSpec) -> tuple[str, str, str, int]:
    return (f'"name": {_dumps(spec.name)}, "arrival": {spec.arrival}, ',
            f'"prompt_tokens": {spec.prefix_tokens + spec.suffix_tokens}, "hit_tokens": ',
            str(spec.output_tokens), spec.output_tokens)


def _case_request_lines(run, result: CaseResult, parts: list[tuple] | None, runs_texts=None):
    if run.timeline != "full":
        yield from _compact_request_lines(result, parts, run.clock.is_vllm, runs_texts)
        return
    vllm = run.clock.is_vllm
    for r in result.requests:
        line = {
            "case": result.case.name, "name": r.name, "arrival": r.spec.arrival,
            "admitted_at": r.admitted_at, "first_token_at": r.first_token_at, "done_at": r.done_at,
            "status": r.status.value, "prompt_tokens": r.spec.prompt_tokens, "hit_tokens": r.hit_tokens,
            "output_tokens": r.spec.output_tokens, "output_tokens_emitted": len(r.token_times),
            "ttft": ttft(r), "queue_wait": queue_wait(r), "e2e": e2e(r), "token_times": r.token_times,
        }
        if vllm:   # vllm-engine.md §5 (lab runs never preempt: their lines stay as they were)
            line["num_preemptions"] = r.num_preemptions
            line["preempted_at"] = list(r.preempted_at)
        yield line


_OK = Status.DONE
_PAIR = "[{}, {}]".format   # f"[{start}, {count}]", mapped over a request's runs in C


def _compact_request_lines(result: CaseResult, parts: list[tuple], vllm: bool, runs_texts=None):
    """Large runs: ``token_runs`` ([first stamp, count] per run of consecutive ticks) replaces
    ``token_times``; every other field is as in a full run. Lines are formatted directly (the
    same text ``json.dumps`` gives for these integers and strings, several times faster).
    ``runs_texts``: per request, its runs of one token each as ``[s, 1], [s, 1], ...``, or ``None``."""
    case = json.JSONEncoder(ensure_ascii=False).encode(result.case.name)
    requests = result.requests
    # Requests packed as they ended (a vLLM case) give these fields from their columns, without a record.
    rows = requests.fields() if isinstance(requests, EndedRequests) else map(RECORD_FIELDS, requests)
    ends = None if isinstance(requests, EndedRequests) else shared_step_ends(requests)   # runs of step ordinals
    for i, ((status, done, admitted, hit, num_preemptions, preempted_at, runs, open_from, spec),
            (head, prompt, output_text, output), given) in enumerate(
            zip(rows, parts, repeat(None) if runs_texts is None else runs_texts)):
        arrival = spec.arrival
        if open_from is not None or (ends is not None and given is None):
            runs = requests[i].flat_token_runs   # still decoding: its open run too; or its stamps in µs
        elif ends is not None:   # step ordinals, the pairs given: the first stamp through the step ends
            first, _, emitted = through_step_ends(runs, ends)
            runs = (first, emitted) if runs else ()
        if status is _OK:
            first = runs[0]
            latencies = f'"ttft": {first - arrival}, "queue_wait": {admitted - arrival}, "e2e": {done - arrival}'
        else:
            first = runs[0] if runs else None
            latencies = '"ttft": null, "queue_wait": null, "e2e": null'
        first_text = "null" if first is None else str(first)
        if given is not None:   # one token a run, formatted by the caller
            pairs, emitted = given, len(runs) // 2 if ends is None else emitted
        elif len(runs) == 2:   # one run of tokens: its count is every token emitted
            emitted = output_text if runs[1] == output else str(runs[1])
            pairs = f"[{first_text}, {emitted}]"
        elif runs and runs[1::2].count(1) * 2 == len(runs):   # one token a run (a step-model run): "[s, 1]" each
            pairs = f'[{", 1], [".join(map(str, runs[0::2]))}, 1]'
            emitted = len(runs) // 2
        else:
            pairs = ", ".join(map(_PAIR, runs[0::2], runs[1::2]))
            emitted = sum(runs[1::2])
        # vLLM's preemptions last (vllm-engine.md §5; lab runs never preempt: their lines stay as they were)
        end = (f', "num_preemptions": {num_preemptions}, "preempted_at": [{", ".join(map(str, preempted_at))}]}}'
               if vllm else "}")
        yield (f'{{"case": {case}, {head}'
               f'"admitted_at": {"null" if admitted is None else admitted}, "first_token_at": {first_text}, '
               f'"done_at": {"null" if done is None else done}, "status": "{status._value_}", '
               f'{prompt}{hit}, "output_tokens": {output_text}, "output_tokens_emitted": {emitted}, '
               f'{latencies}, "token_runs": [{pairs}]{end}')


def case_jsonl_lines(run, parts: list[tuple] | None = None) -> tuple:
    """``(request lines, timeline lines)`` of every case of ``run`` (iterators of encoded text
    lines without newlines), as :func:`stream_artifacts` writes them; for a lab-engine run of
    ``counts`` or ``off`` detail. ``parts``: :func:`request_line_parts` of the workload, if at hand."""
    if run.timeline != "full":   # lines already text
        return request_lines(run, parts), timeline_lines(run)
    encode = json.JSONEncoder(ensure_ascii=False).encode
    return map(encode, request_lines(run, parts)), map(encode, timeline_lines(run))


def timeline_lines(run):
    """Lines of ``timeline.jsonl``, case after case (dicts for ``full``, encoded text for ``counts``)."""
    if run.clock.is_vllm:
        yield from vllm_timeline_lines(run)
        return
    for result in run.results:
        yield from _case_timeline_lines(run, result)


class _CountTexts(dict):
    """``str(i)`` by ``i``, each made on first use: a counts record's request counts (waiting, active,
    admitted, hits, timeouts, finished) repeat a few values over and over, and looking their text
    up is several times cheaper than formatting it again on every line. Holds only the values met
    (at most six per record), not one text per request of the workload."""

    __slots__ = ()

    def __missing__(self, count: int) -> str:
        text = self[count] = str(count)
        return text


def _case_timeline_lines(run, result: CaseResult):
    if run.timeline == "counts":
        case = json.JSONEncoder(ensure_ascii=False).encode(result.case.name)
        n = _CountTexts()
        for k in result.ticks:
            yield (f'{{"case": {case}, "tick": {k.tick}, "ticks": {k.num_ticks}, "waiting": {n[k.num_waiting]}, '
                   f'"active": {n[k.num_active]}, "admitted": {n[k.num_admitted]}, '
                   f'"cache_hits": {n[k.num_cache_hits]}, "timeouts": {n[k.num_timeouts]}, '
                   f'"decoded": {k.num_decoded}, "prefill_tokens": {k.num_prefill_tokens}, '
                   f'"budget_used": {k.budget_used}, "finished": {n[k.num_finished]}}}')
        return
    for k in result.ticks:
        yield {
            "case": result.case.name, "tick": k.tick, "waiting": k.waiting, "active": k.active,
            "admitted": k.admitted, "cache_hits": k.cache_hits, "timeouts": k.timeouts,
            "decoded": k.decoded, "prefilled": dict(k.prefilled), "budget_used": k.budget_used,
            "finished": k.finished,
        }


#: Characters after which :func:`jsonl_chunks` ends a chunk (256 KiB of ASCII text).
CHUNK_CHARS = 1 << 18


def jsonl_text(records) -> str:
    return "".join(jsonl_chunks(records))


def jsonl_chunks(records, lines_per_chunk: int = 4096, chars_per_chunk: int = CHUNK_CHARS):
    """The JSON Lines text of ``records`` in chunks (for streaming): a chunk ends after
    ``lines_per_chunk`` lines or once it holds ``chars_per_chunk`` characters, whichever comes
    first. Chunks stay small (a few hundred KB) so each is built and written in memory the process
    already holds, not in fresh pages the system must hand over and take back for every chunk."""
    encode = json.JSONEncoder(ensure_ascii=False).encode
    chunk = []
    size = 0
    for record in records:  # a dict, or a line already encoded
        line = record if isinstance(record, str) else encode(record)
        chunk.append(line)
        size += len(line)
        if size >= chars_per_chunk or len(chunk) == lines_per_chunk:
            chunk.append("")   # the last line's newline, joined in (not a second copy of the chunk)
            yield "\n".join(chunk)
            chunk = []
            size = 0
    if chunk:
        chunk.append("")
        yield "\n".join(chunk)


def sectioned_chunks(run, name: str):
    """``name``'s (``requests.jsonl`` or ``timeline.jsonl``) text chunks case after case: a
    case's section where it was rendered (``run._sections``, :mod:`sched.output.case_sections`), else
    its lines rendered here from its result."""
    parts = None
    for index, result in enumerate(run.results):
        if run._sections.written(index):
            yield from run._sections.chunks(index, name)
            continue
        if name == "requests.jsonl":
            if parts is None:
                parts = request_line_parts([r.spec for r in result.requests])
            yield from jsonl_chunks(_case_request_lines(run, result, parts))
        else:
            yield from jsonl_chunks(_case_timeline_lines(run, result))
