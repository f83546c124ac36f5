"""``explain NAME`` for a lab-engine run: one request's story in one case, tick by tick (lab.md §3, §5).

Read from the run's ``requests.jsonl`` row and, with ``--timeline full``, its ticks in
``timeline.jsonl`` (each prefill tick and its tokens; while the request waited, who held the slots
and how the budget was spent). The vLLM engine's story is :mod:`sched.analysis.vllm_explain`'s.
"""

from __future__ import annotations

from ..output.lanes import WAIT_REASONS

__all__ = ["MAX_WAIT_LINES", "lab_case_story"]

#: Most lines describing who held the slots while the request waited, per case.
MAX_WAIT_LINES = 24


def _span(start: int, end: int) -> str:
    """Ticks ``start … end`` inclusive, as text."""
    return f"tick {start}" if start == end else f"ticks {start}–{end}"



def lab_case_story(row: dict, ticks: dict[int, dict] | None, budget, static: bool = False) -> list[str]:
    """The story lines of one request in one case (``row`` of requests.jsonl; ``ticks``: tick -> its
    timeline.jsonl record, or ``None`` without a full timeline; ``budget``: units per tick, or ``None``
    when unknown; ``static``: the case batches statically, so a wait means the batch was running)."""
    name, arrival, admitted, end = row["name"], row["arrival"], row["admitted_at"], row["done_at"]
    lines = [f"  arrival      tick {arrival}"]
    queue_end = admitted if admitted is not None else end
    if queue_end is not None and queue_end > arrival:
        lines.append(f"  waiting      {_span(arrival, queue_end - 1)} ({queue_end - arrival} ticks in the queue, "
                     f"{WAIT_REASONS[static]})")
    if admitted is None:
        lines.append("  admission    never")
    else:
        hit = row.get("hit_tokens", 0)
        lines.append(f"  admission    tick {admitted}, "
                     + (f"cache hit: {hit} prefix tokens skipped" if hit else "no cache hit"))
    stalled: list[int] = []
    if ticks is not None and admitted is not None:
        lines += _prefill_lines(row, ticks, stalled)
    first = row["first_token_at"]
    if first is not None:
        lines.append(f"  first token  tick {first} (TTFT {first - arrival})")
    else:
        lines.append("  first token  none")
    emitted, wanted = row.get("output_tokens_emitted"), row.get("output_tokens")
    if row["status"] == "ok":
        lines.append(f"  end          tick {end}, ok, {emitted} of {wanted} tokens (E2E {end - arrival})")
    else:
        lines.append(f"  end          tick {end}, {row['status']} with {emitted} of {wanted} tokens "
                     "(no latency counted)")
    lines.append(f"  hit tokens   {row.get('hit_tokens', 0)}")
    times = row.get("token_times") or []
    if row["status"] == "ok" and len(times) >= 2:
        lines.append(f"  token times  {_times_text(times)}")
    # A gap of g > 1 between tokens stamped a and b: the decodes of ticks a .. b − 2 were skipped.
    skipped = [tick for a, b in zip(times, times[1:]) for tick in range(a, b - 1)]
    if skipped:
        lines.append(f"  no budget    {', '.join(_runs_text(skipped))} (decoding, but the budget was spent "
                     "before its turn)")
    runs = row.get("token_runs")
    if runs:
        spans = ", ".join(_span(start, start + count - 1) for start, count in runs)
        lines.append(f"  token runs   {spans} ({sum(count for _, count in runs)} tokens in {len(runs)} "
                     f"run{'s' if len(runs) > 1 else ''})")
    if ticks is not None:
        waited = list(range(arrival, queue_end if queue_end is not None else arrival)) + stalled + skipped
        lines += _wait_lines(name, waited, ticks, budget)
    return lines


def _times_text(times: list[int]) -> str:
    """``ticks 2, 3, 4, 14: gaps 1, 1, 10; TPOT (14 − 2) / 3 = 4, largest gap 10`` (lab.md §5), the
    middle of a long list elided; ``ticks 41–56, one per tick (TPOT 1)`` when no decode was skipped."""
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    if max(gaps) == 1:
        return f"ticks {times[0]}–{times[-1]}, one per tick (TPOT 1)"
    shown = ", ".join(map(str, times)) if len(times) <= 12 else \
        f"{', '.join(map(str, times[:5]))}, …, {', '.join(map(str, times[-5:]))}"
    gap_text = f"gaps {', '.join(map(str, gaps))}" if len(gaps) <= 12 else f"{len(gaps)} gaps"
    span, count = times[-1] - times[0], len(times) - 1
    tpot = span / count
    tpot_text = str(span // count) if span % count == 0 else f"{tpot:.2f}"
    return (f"ticks {shown}: {gap_text}; TPOT ({times[-1]} − {times[0]}) / {count} = {tpot_text}, "
            f"largest gap {max(gaps)}")


def _prefill_lines(row: dict, ticks: dict[int, dict], stalled: list[int]) -> list[str]:
    """One line per prefill tick; ``stalled`` collects admitted ticks with no prefill budget."""
    name = row["name"]
    need = row.get("prompt_tokens", 0) - row.get("hit_tokens", 0)
    done, lines = 0, []
    tick = row["admitted_at"]
    last = row["done_at"] if row["done_at"] is not None else max(ticks, default=tick)
    while done < need and tick < last and tick in ticks:
        tokens = ticks[tick]["prefilled"].get(name, 0)
        if tokens == 0:
            stalled.append(tick)
        else:
            done += tokens
            label = "prefill" if len(lines) == 0 else ""
            tail = f" (prefill complete, {done} of {row.get('prompt_tokens')} prompt tokens computed)" if done >= need else ""
            lines.append(f"  {label:<12} tick {tick}: {tokens} tokens{tail}")
        tick += 1
    if stalled:
        lines.insert(0, f"  no budget    {', '.join(_runs_text(stalled))} (admitted, but the budget was spent "
                        "before its turn)")
    return lines


def _runs_text(values: list[int]) -> list[str]:
    runs, start = [], None
    for i, value in enumerate(values):
        if start is None:
            start = value
        if i + 1 == len(values) or values[i + 1] != value + 1:
            runs.append(_span(start, value))
            start = None
    return runs


def _wait_lines(name: str, waited: list[int], ticks: dict[int, dict], budget) -> list[str]:
    """Who held the slots and the budget in each tick ``name`` waited, equal ticks grouped."""
    if not waited:
        return []
    lines = [f"  while it waited, the slots (every active request, {name} too once admitted) and the budget went to:"]
    groups: list[tuple[int, int, str]] = []
    for tick in waited:
        record = ticks.get(tick)
        if record is None:
            text = "(tick not in timeline.jsonl)"
        else:
            holders = record["active"]  # the request itself too, once admitted (then it lacked budget)
            spent = [f"decode {' '.join(record['decoded'])}"] if record["decoded"] else []
            prefills = [f"{n} {t}" for n, t in record["prefilled"].items() if n != name]
            if prefills:
                spent.append("prefill " + ", ".join(prefills))
            used = f"{record['budget_used']}/{budget}" if budget else f"{record['budget_used']}"
            text = f"slots {' '.join(holders) or '(none)'} | budget {used}: {'; '.join(spent) or 'nothing'}"
        if groups and groups[-1][1] == tick - 1 and groups[-1][2] == text:
            groups[-1] = (groups[-1][0], tick, text)
        else:
            groups.append((tick, tick, text))
    for start, end, text in groups[:MAX_WAIT_LINES]:
        lines.append(f"    {_span(start, end):<13} {text}")
    if len(groups) > MAX_WAIT_LINES:
        lines.append(f"    … {len(groups) - MAX_WAIT_LINES} more lines: see timeline.jsonl")
    return lines
