"""``report.html``: one self-contained page, in the order a learner reads it (lab.md §7): the short
summary (``table.txt``, one line per case), the time-line picture scaled to the page's width, then
the long tables folded away (``<details>``): every summary field, and the input workload.

Pure rendering (text in, text out), no scripts, no external resources, no clock: the same run
gives the same bytes.
"""

from __future__ import annotations

import json
from html import escape

__all__ = ["render_report", "field_groups", "GROUPS", "SHORT_SUMMARY", "MAX_WORKLOAD_ROWS"]

_STYLE = """body{font-family:sans-serif;margin:1.2em 1.5em;color:#222;max-width:1360px}
h1{font-size:24px;margin:0.2em 0}
h2{font-size:18px;margin:1.2em 0 0.3em}
h3{font-size:14px;margin:0.4em 0 0.2em}
.groups{display:flex;flex-wrap:wrap;gap:0 28px;align-items:flex-start}
table{border-collapse:collapse;font-size:13px;margin:0.3em 0 0.8em}
th,td{border:1px solid #ccc;padding:2px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
th{background:#f3f3f3}
th:nth-child(2),td.unit{text-align:left}
td.unit{color:#666;font-size:12px;max-width:110px}
th.case{max-width:92px}
.note{color:#555;font-size:13px;margin:0.3em 0}
.picture svg{display:block;max-width:100%;height:auto}
details{margin:0.6em 0}
summary{cursor:pointer;font-size:16px;font-weight:bold;margin:0.4em 0}
pre{font-size:12px;background:#f8f8f8;padding:0.6em;overflow-x:auto}"""

#: Summary tables of the report: (title, predicate on a field name). A field goes to the first
#: group whose predicate accepts it; any field no group takes is shown under "Other".
GROUPS = (
    ("Latency (successful requests only)", lambda f: f.endswith("_samples") and "queue" not in f
        or any(f.endswith(m) or f"_{m}_" in f for m in ("ttft", "itl", "tpot", "e2e"))),
    ("Throughput and cache hits", lambda f: f in ("throughput", "completed_output_tps", "output_tokens",
                                                  "hit_tokens", "makespan", "budget_utilization", "busy_fraction")),
    ("Queue, outcomes and fairness", lambda f: "queue_wait" in f or f in (
        "succeeded", "timed_out", "arrived", "error_rate", "completion_rate", "fairness")
        or f.startswith("priority_")),
    ("Preemptions, KV blocks, running and waiting (vLLM engine)",
     lambda f: "preempt" in f or f.startswith(("peak_", "mean_kv_", "mean_num_"))),
)

#: The short summary at the top of the page: (field, column heading); its unit comes from ``units``.
SHORT_SUMMARY = (("p95_ttft", "P95 TTFT"), ("p95_tpot", "P95 TPOT"), ("throughput", "throughput"),
                 ("hit_tokens", "hit tokens"), ("makespan", "makespan"))

#: Most workload requests listed in the report (the rest are in workload.json).
MAX_WORKLOAD_ROWS = 40


def _cell(value) -> str:
    """A summary value as shown: NA for an empty sample (never 0), numbers as in summary.json."""
    if value is None:
        return "NA"
    return value if isinstance(value, str) else json.dumps(value)


def field_groups(fields) -> list[tuple[str, list[str]]]:
    """``fields`` (without ``case``) split into the report's tables: ``[(title, fields), ...]`` in
    :data:`GROUPS` order, then ``"Other"`` for fields no group takes; empty groups are left out."""
    groups = [(title, []) for title, _ in GROUPS] + [("Other", [])]
    for field in fields:
        if field == "case":
            continue
        index = next((i for i, (_, accepts) in enumerate(GROUPS) if accepts(field)), len(GROUPS))
        groups[index][1].append(field)
    return [(title, names) for title, names in groups if names]


def _group_table(title: str, names: list[str], summaries: list[dict], units: dict) -> str:
    """One small table: a row per summary field (its unit beside it), a column per case."""
    head = "<tr><th>field</th><th>unit</th>" + "".join(  # long case names may wrap after a "+"
        f"<th class=\"case\">{escape(str(s.get('case'))).replace('+', '+<wbr>')}</th>" for s in summaries) + "</tr>"
    rows = "\n".join(
        f'<tr data-field="{escape(field)}"><td>{escape(field)}</td><td class="unit">{escape(units.get(field, ""))}</td>'
        + "".join(f"<td>{escape(_cell(s.get(field)))}</td>" for s in summaries) + "</tr>" for field in names)
    return f"<div>\n<h3>{escape(title)}</h3>\n<table>\n{head}\n{rows}\n</table>\n</div>"


def _short_table(summaries: list[dict], units: dict) -> str:
    """The page's first table: one row per case, the :data:`SHORT_SUMMARY` columns and
    ``succeeded/arrived``, values exactly as in summary.json (NA for an empty sample)."""
    def heading(field, label):
        unit = units.get(field, "")
        return f"<th>{escape(label)}" + (f"<br><small>{escape(unit)}</small>" if unit else "") + "</th>"
    head = "<tr><th>case</th>" + "".join(heading(f, label) for f, label in SHORT_SUMMARY) + "<th>ok/arrived</th></tr>"
    rows = "\n".join(
        f"<tr><td>{escape(str(s.get('case')))}</td>" + "".join(f"<td>{escape(_cell(s.get(f)))}</td>" for f, _ in SHORT_SUMMARY)
        + f"<td>{escape(_cell(s.get('succeeded')))}/{escape(_cell(s.get('arrived')))}</td></tr>" for s in summaries)
    return f'<table class="short">\n{head}\n{rows}\n</table>'


def _workload_section(workload) -> str:
    """The input: a line of totals and the first :data:`MAX_WORKLOAD_ROWS` requests."""
    if workload is None:
        return ""
    specs = list(workload)
    if not specs:
        return "<details>\n<summary>Input workload: no requests</summary>\n</details>\n"
    prompt = sum(spec.prefix_tokens + spec.suffix_tokens for spec in specs)
    output = sum(spec.output_tokens for spec in specs)
    keys = {spec.prefix_key for spec in specs if spec.prefix_key is not None}
    facts = (f"{len(specs)} requests arriving at ticks {min(s.arrival for s in specs)}–{max(s.arrival for s in specs)}; "
             f"{prompt} prompt tokens and {output} output tokens in all; "
             f"{len(keys)} shared prefix key{'s' if len(keys) != 1 else ''}"
             + (f"; imported with 1 tick = {specs[0].tick_ms:g} ms" if specs[0].tick_ms is not None else ""))
    priority = any(spec.priority is not None for spec in specs)
    columns = ["name", "arrival (tick)", "prefix_key", "prefix_tokens", "suffix_tokens", "prompt tokens",
               "output_tokens"] + (["priority"] if priority else [])
    rows = []
    for spec in specs[:MAX_WORKLOAD_ROWS]:
        cells = [spec.name, spec.arrival, "null" if spec.prefix_key is None else spec.prefix_key,
                 spec.prefix_tokens, spec.suffix_tokens, spec.prefix_tokens + spec.suffix_tokens, spec.output_tokens]
        if priority:
            cells.append("null" if spec.priority is None else spec.priority)
        rows.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    more = (f'<p class="note">Showing the first {MAX_WORKLOAD_ROWS} of {len(specs)} requests (workload order); '
            "every request is in workload.json.</p>\n" if len(specs) > MAX_WORKLOAD_ROWS else "")
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    return (f'<details>\n<summary>Input workload ({len(specs)} request{"s" if len(specs) != 1 else ""})</summary>\n'
            f'<p class="note">{escape(facts)}.</p>\n'
            f'<table class="workload">\n<tr>{head}</tr>\n' + "\n".join(rows) + f"\n</table>\n{more}</details>\n")


def render_report(table_text: str, summaries: list[dict], fields, svg: str, units: dict | None = None,
                  workload=None, time_unit: str = "ticks") -> str:
    """The HTML page of one run.

    ``table_text``: the text of ``table.txt`` (its first and last lines under the title, the whole
    text folded at the end); a short summary table comes first (:data:`SHORT_SUMMARY`); ``summaries``: one dict per case with JSON-ready values (ints,
    floats, strings or None); ``fields``: the field order (``SUMMARY_FIELDS``), shown as a few
    small tables (:func:`field_groups`) folded below the picture, one row per field and one column
    per case; ``svg``: the text of ``timeline.svg``, embedded inline and scaled down to the page's
    width (no scroll box inside the page); ``units``: field -> short unit shown beside the field name
    (``output tokens per tick``); ``workload``: the run's request specs, listed under "Input
    workload", folded (at most :data:`MAX_WORKLOAD_ROWS`; ``None`` leaves the section out);
    ``time_unit``: the unit word of the run's clock (:attr:`sched.core.clock.RunClock.unit`: ``ticks``
    or ``ms``). Returns the page text.
    """
    lines = table_text.splitlines()
    subtitle, note = (lines[0], lines[-1]) if lines else ("", "")
    units = units or {}
    groups = field_groups(fields)
    tables = "\n".join(_group_table(title, names, summaries, units) for title, names in groups)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>infer-sched-lab report</title>
<style>
{_STYLE}
</style>
</head>
<body>
<h1>infer-sched-lab report</h1>
<p class="note">{escape(subtitle)}</p>
<p class="note">{escape(note)}</p>
<h2>Summary</h2>
{_short_table(summaries, units)}
<p class="note">Latencies ({escape(time_unit)}) count successful requests only (latency_samples says how many);
percentiles by nearest rank; NA means an empty sample, never zero. Every field is in the tables below the picture.</p>
<h2>Time line</h2>
<p class="note">Hover a segment or marker for its request, phase, ticks and tokens.</p>
<div class="picture">
{svg.rstrip()}
</div>
<details>
<summary>Every summary field ({sum(len(names) for _, names in groups)} fields, one column per case)</summary>
<div class="groups">
{tables}
</div>
</details>
{_workload_section(workload)}<details>
<summary>table.txt (as printed)</summary>
<pre>{escape(table_text.rstrip())}</pre>
</details>
</body>
</html>
"""
