"""``report.html``: one self-contained page with the summary table and the time-line picture (lab.md §7).

Pure rendering (text in, text out), no scripts, no external resources, no clock: the same run
gives the same bytes.
"""

from __future__ import annotations

import json
from html import escape

__all__ = ["render_report"]

_STYLE = """body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
th{background:#f3f3f3}
.note{color:#555;font-size:13px}
pre{font-size:12px;background:#f8f8f8;padding:0.6em;overflow-x:auto}"""


def _cell(value) -> str:
    """A summary value as shown: NA for an empty sample (never 0), numbers as in summary.json."""
    if value is None:
        return "NA"
    return value if isinstance(value, str) else json.dumps(value)


def render_report(table_text: str, summaries: list[dict], fields, svg: str, units: dict | None = None) -> str:
    """The HTML page of one run.

    ``table_text``: the text of ``table.txt`` (its first line is the page's subtitle and the whole
    text is repeated verbatim); ``summaries``: one dict per case with JSON-ready values (ints,
    floats, strings or None); ``fields``: the column order (``SUMMARY_FIELDS``); ``svg``: the text of
    ``timeline.svg``, embedded inline; ``units``: field -> short unit shown under the column name
(``throughput (output tokens per tick)``; a field without one shows its name only). Returns the
page text.
    """
    lines = table_text.splitlines()
    subtitle, note = (lines[0], lines[-1]) if lines else ("", "")
    units = units or {}
    head = "".join(f"<th>{escape(field)}" + (f"<br>({escape(units[field])})" if field in units else "") + "</th>"
                   for field in fields)
    rows = "\n".join("<tr>" + "".join(f"<td>{escape(_cell(s.get(field)))}</td>" for field in fields) + "</tr>"
                     for s in summaries)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>infer-sched-lab report</title>
<style>
{_STYLE}
</style>
</head>
<body>
<h1>infer-sched-lab report</h1>
<p class="note">{escape(subtitle)}</p>
<p class="note">{escape(note)}</p>
<h2>Summary (one row per case)</h2>
<table>
<tr>{head}</tr>
{rows}
</table>
<p class="note">Latencies (ticks) count successful requests only (latency_samples says how many);
percentiles by nearest rank; NA means an empty sample, never zero.</p>
<h2>Time line</h2>
<p class="note">Hover a segment or marker for its request, phase, ticks and tokens.</p>
{svg.rstrip()}
<h2>table.txt</h2>
<pre>{escape(table_text.rstrip())}</pre>
</body>
</html>
"""
