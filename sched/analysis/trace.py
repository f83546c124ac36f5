"""What ``compare`` reads from a run directory, checked like ``import-results`` checks a result file.

Two pieces (compare.md §3.2, lab.md §5):

- :func:`check_summary_row`: one case row of ``summary.json`` against the statistics contract:
  latencies and throughputs ≥ 0, rates and scores in [0, 1], counts whole and ≥ 0, succeeded and
  timed out at most arrived, completion rate = succeeded / arrived. A baseline with a negative
  P95 TTFT would otherwise turn a worse candidate into an accept.
- :func:`read_trace`: one case's lines of ``requests.jsonl`` in a single streaming pass, kept as
  a :class:`Trace` (counts per id, histograms of the latencies): memory grows with the number of
  distinct ids and latency values, never with the rows (a 10⁶-request run with four cases is
  four million lines). :func:`check_consistency` then holds the summary row to the trace: the
  same arrived (simulated) or at most arrived (real), succeeded, output tokens, and the nearest-rank
  P50/P95 TTFT, P95 E2E and P95 queue wait the rows give.

Every violation is one :class:`~sched.base.cmdline.InputError` naming the file, case or line, and field.
"""

from __future__ import annotations

import json
import re
from array import array
from collections import Counter
from dataclasses import dataclass, field

from ..base.cmdline import MAX_COUNT, NON_FINITE_AS_NONE, InputError, count_or_none, need, number_or_none, parse_json
from ..base.files import open_regular
from ..core.metrics import percentile_of_histogram

__all__ = ["Trace", "Expected", "read_trace", "case_rows", "check_summary_row", "check_consistency", "FRACTION_FIELDS"]

#: Summary fields that are fractions or shares in [0, 1].
FRACTION_FIELDS = ("error_rate", "completion_rate", "fairness", "budget_utilization", "busy_fraction",
                   "priority_first_token_order_score", "priority_order_score", "slo_attainment")
#: Summary fields that are whole counts (requests or tokens); ``*_samples`` columns are too.
_COUNT_FIELDS = ("output_tokens", "hit_tokens", "succeeded", "timed_out", "arrived", "failed", "latency_samples",
                 # vLLM bench serve's counts (bench-metrics.md §3) and a vLLM run's load counts (sched.vllm.load_stats)
                 "completed", "total_input_tokens", "total_output_tokens", "num_preemptions", "preempted_requests",
                 "peak_kv_blocks_used", "peak_num_running", "peak_num_waiting")
#: Other non-negative summary fields (rates per tick or second, the makespan); every percentile,
#: mean or median column (``p95_ttft``, ``mean_queue_wait``, ...) is a non-negative latency too.
_NON_NEGATIVE = ("throughput", "completed_output_tps", "makespan", "duration", "request_throughput",
                 "output_throughput", "total_token_throughput", "request_goodput")
_LATENCY = re.compile(r"(p\d+(\.\d+)?|mean|median|std)_")
#: Request-line fields whose nearest-rank percentiles the summary reports: field -> (column, percent).
_PERCENTILES = {"ttft": (("p50_ttft", 50), ("p95_ttft", 95)), "e2e": (("p95_e2e", 95),),
                "queue_wait": (("p95_queue_wait", 95),)}
_ENDED = ("ok", "timeout", "error")


def check_summary_row(row: dict, where: str) -> None:
    """Check one ``summary.json`` case row (``where`` names the file and case); ``None`` passes (a
    metric not measured is missing evidence, judged later). Raises :class:`InputError`."""
    for key, value in row.items():
        at = f"{where}: field {key!r}"
        if key in FRACTION_FIELDS:
            number_or_none(value, at, 0, 1)
        elif key in _COUNT_FIELDS or key.endswith("_samples"):
            count_or_none(value, at)
        elif key in _NON_NEGATIVE or _LATENCY.match(key):
            number_or_none(value, at, low=0)
    arrived = row.get("arrived")
    for key in ("succeeded", "timed_out", "failed"):
        if arrived is not None and row.get(key) is not None and row[key] > arrived:
            raise InputError(f"{where}: field {key!r}: {row[key]} is more than the {arrived} requests that arrived")
    if arrived and row.get("succeeded") is not None and row.get("completion_rate") is not None:
        if abs(row["completion_rate"] - row["succeeded"] / arrived) > 1e-6:
            raise InputError(f"{where}: field 'completion_rate': {row['completion_rate']} but succeeded / arrived "
                             f"is {row['succeeded']} / {arrived}")


class Expected:
    """The requests a simulated run's ``workload.json`` lists, as a comparison reads its trace:
    ``names`` in workload order (distinct), ``priorities`` (a priority or ``None`` per request, or
    ``None`` when no request gives one). A line is matched to its request by its place first (a
    case's lines follow the workload's order), else by name: no dict per request unless the lines
    are out of order."""

    __slots__ = ("names", "priorities", "_index")

    def __init__(self, names: list, priorities) -> None:
        self.names, self.priorities, self._index = names, priorities, None

    def find(self, name: str, place: int) -> int | None:
        """The index of request ``name`` (``place``: where the line stands among its case's lines), or ``None``."""
        names = self.names
        if place < len(names) and names[place] == name:
            return place
        if self._index is None:
            self._index = dict(zip(names, range(len(names))))
        return self._index.get(name)

    def priority(self, index: int) -> int:
        """The priority class of request ``index`` (none given = 0)."""
        return 0 if self.priorities is None else self.priorities[index] or 0


@dataclass(slots=True)
class Trace:
    """One case's request lines, reduced to what a comparison needs.

    ``counts``: id → number of lines; ``never_ended``: ids with a line whose status is not an
    end (ok, timeout, error); ``num_rows``, ``num_ok``; ``emitted``: output tokens emitted by every
    line; ``samples``: field → histogram {value: count} of the successful lines' ``ttft``, ``e2e``
    and ``queue_wait``; ``e2e_by_priority``: priority → histogram of successful lines' ``e2e``
    (the priority from ``priorities`` by id, else the line's own ``priority`` field);
    ``row_priorities``: the set of the lines' own ``priority`` values, ``None`` once a line has none;
    ``empty_ok``: the ids of successful lines whose ``output_text_empty`` is ``true`` (a real engine's
    "ok" without text), in file order; ``first_arrival``/``last_arrival``: the span of the lines' arrivals (the offered load's span).
    Read with an :class:`Expected` (``expected``), ``seen`` counts the lines of each expected request
    by index and ``counts`` holds only the ids it does not list.
    """

    counts: dict = field(default_factory=dict)
    never_ended: set = field(default_factory=set)
    num_rows: int = 0
    num_ok: int = 0
    emitted: int = 0
    samples: dict = field(default_factory=lambda: {key: Counter() for key in _PERCENTILES})
    e2e_by_priority: dict = field(default_factory=dict)
    row_priorities: set | None = field(default_factory=set)
    empty_ok: list = field(default_factory=list)
    #: Earliest and latest arrival of any line (ticks, or ms on a step-model or real run); ``None`` when a line lacks one.
    first_arrival: float | None = None
    last_arrival: float | None = None
    arrivals_known: bool = True
    expected: Expected | None = None
    seen: array | None = None

    @property
    def num_ids(self) -> int:
        """Distinct ids with a line."""
        return len(self.counts) + (0 if self.seen is None else len(self.seen) - self.seen.count(0))


def _request_row(row, where: str) -> dict:
    """One request line, every field compare reads checked: ids are strings, times ≥ 0, counts whole."""
    need(row, dict, where, "a JSON object")
    need(row.get("case"), str, f"{where}: field 'case'", "a string (the case name)", nullable=True)
    need(row.get("name"), str, f"{where}: field 'name'", "a string (the request id)")
    need(row.get("status"), str, f"{where}: field 'status'", "a string", nullable=True)
    for key in _PERCENTILES:
        number_or_none(row.get(key), f"{where}: field {key!r}", low=0)
    for key in ("output_tokens_emitted", "hit_tokens"):
        count_or_none(row.get(key), f"{where}: field {key!r}")
    need(row.get("priority"), int, f"{where}: field 'priority'", "an integer", nullable=True)
    return row


_DECODE = json.JSONDecoder(**NON_FINITE_AS_NONE).decode  # built once: json.loads with options builds one per call
_LARGEST = 10**300


def _plain_row(row) -> bool:
    """The common case, checked fast: an object whose read fields all have the right shape (any
    doubt goes to :func:`_request_row`, which names what is wrong)."""
    if type(row) is not dict:
        return False
    get = row.get
    case, status = get("case"), get("status")
    if type(get("name")) is not str or not (case is None or type(case) is str) or not (status is None or type(status) is str):
        return False
    for key in ("ttft", "e2e", "queue_wait"):
        value = get(key)
        if value is not None and not ((type(value) is int and 0 <= value <= _LARGEST) or (type(value) is float and value >= 0)):
            return False
    emitted, priority, hit = get("output_tokens_emitted"), get("priority"), get("hit_tokens")
    return ((emitted is None or (type(emitted) is int and 0 <= emitted <= MAX_COUNT))
            and (hit is None or (type(hit) is int and 0 <= hit <= MAX_COUNT))
            and (priority is None or type(priority) is int))


def case_rows(path: str, case: str):
    """Yield ``(line number, row)`` for each line of ``requests.jsonl`` at ``path`` whose ``case``
    is ``case``, reading one line at a time; every line, of any case, is checked."""
    try:
        with open_regular(path, encoding="utf-8-sig") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = _DECODE(line)
                except (ValueError, RecursionError):
                    row = None
                if not _plain_row(row):
                    where = f"{path}: line {number}"
                    row = _request_row(parse_json(line, where, non_finite_as_none=True), where)
                if row.get("case") == case:
                    yield number, row
    except FileNotFoundError:
        raise InputError(f"{path}: missing; is this a run directory?") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc})") from None


def read_trace(path: str, case: str, priorities: dict | None = None, suffix: str = "",
               expected: Expected | None = None) -> Trace:
    """The :class:`Trace` of ``case`` in ``requests.jsonl`` at ``path``, in one streaming pass.

    ``priorities`` (id → priority, from the workload) classes each successful line's E2E; without
    it a line's own ``priority`` field is used. ``suffix`` ``"_ms"`` reads the latencies from
    ``ttft_ms``, ``e2e_ms`` and ``queue_wait_ms`` (a ``--step-model`` run, whose ``ttft`` ... are
    µs ticks while its summary is in ms). ``expected`` (instead of ``priorities``): the workload's
    requests, counted by index (:class:`Expected`). Raises :class:`InputError` for a bad line.
    """
    trace = Trace(expected=expected)
    counts, samples = trace.counts, trace.samples
    if expected is not None:
        seen = trace.seen = array("i", bytes(4 * len(expected.names)))
    for number, row in case_rows(path, case):
        if suffix:
            for key in _PERCENTILES:
                number_or_none(row.get(key + suffix), f"{path}: line {number}: field {key + suffix!r}", low=0)
        name, status = row["name"], row.get("status")
        at = None if expected is None else expected.find(name, trace.num_rows)
        if at is None:
            counts[name] = counts.get(name, 0) + 1
        else:
            seen[at] += 1
        trace.num_rows += 1
        trace.emitted += row.get("output_tokens_emitted") or 0
        own = row.get("priority")
        if trace.row_priorities is not None:
            if own is None:
                trace.row_priorities = None
            else:
                trace.row_priorities.add(own)
        arrival = row.get("arrival" + suffix)
        if isinstance(arrival, (int, float)) and not isinstance(arrival, bool) and arrival >= 0:
            if trace.first_arrival is None or arrival < trace.first_arrival:
                trace.first_arrival = arrival
            if trace.last_arrival is None or arrival > trace.last_arrival:
                trace.last_arrival = arrival
        else:
            trace.arrivals_known = False
        if status not in _ENDED:
            trace.never_ended.add(name)
        if status != "ok":
            continue
        trace.num_ok += 1
        if row.get("output_text_empty") is True:
            trace.empty_ok.append(name)
        for key, histogram in samples.items():
            if row.get(key + suffix) is not None:
                histogram[row[key + suffix]] += 1
        if row.get("e2e" + suffix) is not None:
            if expected is not None:
                priority = None if at is None else expected.priority(at)
            else:
                priority = priorities.get(name) if priorities is not None else own
            trace.e2e_by_priority.setdefault(priority, Counter())[row["e2e" + suffix]] += 1
    return trace


def _differs(summary_value, trace_value) -> bool:
    return abs(summary_value - trace_value) > 1e-6 * max(1.0, abs(trace_value))


def check_consistency(row: dict, trace: Trace, where: str, requests_path: str, exact_arrivals: bool) -> None:
    """The summary row must say what the request lines say (compare.md §3.2: evidence that
    contradicts itself is unusable). ``exact_arrivals``: a simulated run has one line per arrived
    request; a real run may have fewer (lost requests). Values that are ``None`` are not compared.
    Raises :class:`InputError` naming the summary field and both values."""
    def refuse(key, value, expected) -> None:
        raise InputError(f"{where}: field {key!r}: is {value} but {requests_path} gives {expected} "
                         "(the two files disagree; was one edited?)")
    arrived = row.get("arrived")
    if arrived is not None and (trace.num_rows != arrived if exact_arrivals else trace.num_rows > arrived):
        refuse("arrived", arrived, f"{trace.num_rows} request lines for this case")
    if row.get("succeeded") is not None and row["succeeded"] != trace.num_ok:
        refuse("succeeded", row["succeeded"], f"{trace.num_ok} successful lines")
    if row.get("output_tokens") is not None and row["output_tokens"] != trace.emitted:
        refuse("output_tokens", row["output_tokens"], f"{trace.emitted} tokens emitted")
    for key, columns in _PERCENTILES.items():
        for column, percent in columns:
            value, expected = row.get(column), percentile_of_histogram(trace.samples[key], percent)
            if value is not None and (expected is None or _differs(value, expected)):
                refuse(column, value, f"a nearest-rank P{percent} of {expected if expected is not None else 'nothing'}")
