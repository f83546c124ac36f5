"""The two JSON Lines artifacts of a millisecond run (:mod:`sched.timing.msrun`, vllm-engine.md §6).

``requests.jsonl`` keeps each line of the engine's clock (ticks of 1 µs, lab.md §7) and adds
``arrival_ms, admitted_ms, first_token_ms, done_ms, ttft_ms, queue_wait_ms, e2e_ms, tpot_ms`` and
``token_times_ms``; ``timeline.jsonl`` adds ``start_ms`` and ``duration_ms`` per step (or jump).
A time in ms is ``round(µs / 1000, 3)``, written as ``json.dumps`` writes a float. A large run's
lines (``counts`` detail) are text: the ms fields are appended to it as ``json.dumps`` would add
them (keys last), never decoded and encoded again; a ``full`` run's lines are dicts, updated and
encoded. The per-token texts of a request come from its case's :class:`sched.timing.step_ends.StepEnds`
(slices of one text per step end) when it has spans.
"""

from __future__ import annotations

import json
from itertools import chain, repeat

from ..core.records import Status
from ..output.artifacts import LabRun
from ..output.jsonl_lines import request_lines, timeline_lines
from .step_ends import StepEnds, ms_text

__all__ = ["request_lines_ms", "timeline_lines_ms"]


def _ms(value):
    return None if value is None else round(value / 1000, 3)


def _request_line(line) -> str:
    """One line of ``requests.jsonl`` with the ms fields added (``line``: a dict, or encoded text for
    ``counts`` detail, whose ``token_runs`` give ``[first stamp, count]`` in µs)."""
    record = json.loads(line) if isinstance(line, str) else line
    record.update(arrival_ms=_ms(record["arrival"]), admitted_ms=_ms(record["admitted_at"]),
                  first_token_ms=_ms(record["first_token_at"]), done_ms=_ms(record["done_at"]),
                  ttft_ms=_ms(record["ttft"]), queue_wait_ms=_ms(record["queue_wait"]), e2e_ms=_ms(record["e2e"]))
    emitted = record["output_tokens_emitted"]
    record["tpot_ms"] = (round((record["done_at"] - record["first_token_at"]) / 1000 / (emitted - 1), 3)
                         if record["status"] == "ok" and emitted > 1 else None)
    times = record.get("token_times")
    if times is None:
        times = [start + k for start, count in record.get("token_runs", []) for k in range(count)]
    record["token_times_ms"] = [_ms(t) for t in times]
    return json.dumps(record, ensure_ascii=False)


class _MsTexts(dict):
    """µs time -> the JSON text of its ms value (``_ms``), formatted once: every request sampling
    in a step shares that step's end, so a run has far fewer distinct stamps than tokens."""

    def __missing__(self, value) -> str:
        text = self[value] = ms_text(value)   # json.dumps' float text
        return text


def request_lines_ms(run: LabRun, ends: list[StepEnds] | None = None):
    """Lines of ``requests.jsonl`` with the ms fields (``_request_line``'s text). A ``counts`` run's
    lines are text: the ms fields are appended to it as ``json.dumps`` would write them (keys
    added last, floats as ``repr``), from the request's record (its first token's stamp and its
    count of tokens read as ``first_token_at`` and ``num_tokens``). ``ends``: each case's
    :class:`StepEnds`; a request with spans takes its ``token_runs`` and ``token_times_ms`` texts
    from there (slices of one text per step end); any other its token times from its
    ``token_times``, each stamp's text formatted once (:class:`_MsTexts`). A time of the record
    (an int, µs) is written in ms as ``repr(t / 1000)``: the text :func:`ms_text` gives, without
    ``round`` (which changes no int's ms value) and without a call."""
    texts = _MsTexts()
    requests = [r for result in run.results for r in result.requests]
    if ends is None or run.timeline == "full":
        lines, times_texts = request_lines(run), repeat(None)
    else:
        lines = request_lines(run, runs_texts=[e.runs_texts() for e in ends])
        times_texts = chain.from_iterable(e.times_ms_texts() for e in ends)
    done_status = Status.DONE
    for line, r, times_text in zip(lines, requests, times_texts):
        if not isinstance(line, str) or r._open_from is not None:
            yield _request_line(line)
            continue
        arrival, admitted, done, first = r.spec.arrival, r.admitted_at, r.done_at, r.first_token_at
        if times_text is None:
            times = r.token_times
            emitted = len(times)
            times_text = ", ".join(map(texts.__getitem__, times))
        else:
            emitted = r.num_tokens
        if r.status is done_status:   # admitted, with a first token and an end: every time an int
            tpot = repr(round((done - first) / 1000 / (emitted - 1), 3)) if emitted > 1 else "null"
            yield (f'{line[:-1]}, "arrival_ms": {arrival / 1000!r}, "admitted_ms": {admitted / 1000!r}, '
                   f'"first_token_ms": {first / 1000!r}, "done_ms": {done / 1000!r}, '
                   f'"ttft_ms": {(first - arrival) / 1000!r}, "queue_wait_ms": {(admitted - arrival) / 1000!r}, '
                   f'"e2e_ms": {(done - arrival) / 1000!r}, "tpot_ms": {tpot}, "token_times_ms": [{times_text}]}}')
        else:
            yield (f'{line[:-1]}, "arrival_ms": {arrival / 1000!r}, "admitted_ms": {ms_text(admitted)}, '
                   f'"first_token_ms": {ms_text(first)}, "done_ms": {ms_text(done)}, "ttft_ms": null, '
                   f'"queue_wait_ms": null, "e2e_ms": null, "tpot_ms": null, "token_times_ms": [{times_text}]}}')


def timeline_lines_ms(run: LabRun):
    """Lines of ``timeline.jsonl`` with ``start_ms`` and ``duration_ms`` of each step (or jump) added:
    appended to a ``counts`` line's text as ``json.dumps`` would add them (last, floats as ``repr``);
    a ``full`` line (a dict) is updated and encoded."""
    records = [record for result in run.results for record in result.ticks]
    durations = _MsTexts()   # a step's duration repeats from step to step: its text made once
    for line, record in zip(timeline_lines(run), records):
        if isinstance(line, str):
            start = record.tick   # an int (µs): ms_text's text, without the call
            start = repr(start / 1000) if start.__class__ is int else ms_text(start)
            yield f'{line[:-1]}, "start_ms": {start}, "duration_ms": {durations[record.duration]}}}\n'
            continue
        line = dict(line)
        line.update(start_ms=_ms(record.tick), duration_ms=_ms(record.duration))
        yield json.dumps(line, ensure_ascii=False) + "\n"
