"""Reading one case of a run directory as a comparison side (compare.md §3, §4).

A *side* is one case of one run directory: a simulated run (``manifest.json``, ``workload.json``,
``summary.json``, ``requests.jsonl`` in ticks) or a real run normalised by ``import-results``
(the same files in milliseconds, compare.md §4). :func:`load_side` reads it as a :class:`Side`;
:func:`check_evidence` judges its trace and required metrics (compare.md §3.2). The decision on
two sides is :mod:`sched.analysis.compare`.

Every value read from a run directory is checked in :func:`load_side` (one
:class:`~sched.base.cmdline.InputError` line naming the file, case or line and field); the JSON is
read strictly (NaN, Infinity, a key written twice are refused, as ``diff`` refuses them) and
``manifest.json`` by :func:`sched.analysis.run_manifest.read_manifest`. Impossible values (a negative latency, a rate outside [0, 1], a
fractional count) and a summary that its complete ``requests.jsonl`` contradicts are refused
(:mod:`sched.analysis.trace`), and ``requests.jsonl`` is read as a stream, never held whole.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from itertools import compress, repeat

from ..base.files import open_regular
from ..base.cmdline import InputError, count_or_none, need, number_or_none, parse_json
from ..base.strict_json import strict_json
from .run_manifest import read_manifest
from ..core.clock import RunClock
from ..core.metrics import COMPARE_FIELDS
from ..output.vllm_artifacts import async_scheduling_of
from ..workload.file import canonical_columns
from .trace import Expected, Trace, case_rows, check_consistency, check_summary_row, read_trace

__all__ = ["Side", "load_side", "check_evidence"]


@dataclass(slots=True)
class Side:
    """One side of a comparison, read from a run directory.

    ``fixed``: conditions that must be equal (workload, engine, measurement settings);
    ``scheduler``: the settings of which exactly one may differ; ``trace``: the case's request
    lines reduced in one streaming pass (:class:`sched.analysis.trace.Trace`; :attr:`rows` reads the lines
    again); ``expected``: the ids that arrived (``None`` when only a count is known, then
    ``num_expected``); ``priorities``: the priority classes of the requests, or ``None`` when the
    run does not know them.
    """

    label: str
    units: str
    fixed: dict
    scheduler: dict
    summary: dict
    trace: Trace
    expected: list[str] | None
    num_expected: int | None
    priorities: set | None
    run_failed: bool = False
    has_trace: bool = True
    requests_path: str = ""
    case: str = ""

    @property
    def rows(self) -> list[dict]:
        """The case's request lines, read again from ``requests.jsonl`` (small runs, tests)."""
        return [row for _, row in case_rows(self.requests_path, self.case)] if self.requests_path else []


# --- reading a side ------------------------------------------------------------------------------

#: Summary columns a comparison reads: the required metrics and the ones gates and deltas use.
_METRICS = (*COMPARE_FIELDS, "budget_utilization", "priority_first_token_order_score")


def _read_text(path: str, hint: str) -> str:
    try:
        with open_regular(path) as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError(f"{path}: missing; {hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc})") from None


def _read_json(path: str):
    """A run file's JSON, read strictly (:func:`sched.base.strict_json.strict_json`): the program writes
    ``null`` for a metric it could not measure, so a NaN, an Infinity or a key written twice means the
    file was edited and is refused, as ``diff`` refuses it."""
    text = _read_text(path, "is this a run directory (--artifacts or import-results)?")
    return strict_json(text, path)


class _Request(tuple):
    """``(name, priority)`` of a workload request whose fields have the right types: a large
    workload.json is read without keeping a dict per request."""


def _compact_request(obj: dict):
    name, priority = obj.get("name"), obj.get("priority")
    if "arrival" in obj and isinstance(name, str) and (priority is None or type(priority) is int):
        return _Request((name, priority))
    return obj  # kept whole, so the check below names what is wrong with it


def load_side(directory: str, case: str | None = None) -> Side:
    """Read one case of a run directory (simulated or imported) as a :class:`Side`.

    ``case`` may be omitted when the run has a single case (an imported real run). Every value
    the comparison uses is checked here (a NaN metric is refused; ``null`` is missing evidence).
    Raises :class:`~sched.base.cmdline.InputError` naming the file, line or case
    and the field for unusable input.
    """
    if not os.path.isdir(directory):
        raise InputError(f"{directory}: not a run directory")
    manifest_path, summary_path = (os.path.join(directory, name) for name in ("manifest.json", "summary.json"))
    if not os.path.lexists(manifest_path):
        raise InputError(f"{manifest_path}: missing; is this a run directory (--artifacts or import-results)?")
    manifest = read_manifest(directory)
    summary = need(_read_json(summary_path), dict, summary_path, "a JSON object")
    cases = need(summary.get("cases"), list, f"{summary_path}: field 'cases'", "a list of case rows")
    for index, row in enumerate(cases):
        need(row, dict, f"{summary_path}: cases[{index}]", "an object")
        need(row.get("case"), str, f"{summary_path}: cases[{index}]: field 'case'", "a string (the case name)")
    names = [c["case"] for c in cases]
    if case is None:
        if len(names) != 1:
            raise InputError(f"{directory}: holds cases {', '.join(names)}; choose one with --case "
                             "(or --baseline-case/--candidate-case)")
        case = names[0]
    if case not in names:
        raise InputError(f"{summary_path}: no case {case!r}; it holds {', '.join(names)}")
    row = cases[names.index(case)]
    where = f"{summary_path}: case {case!r}"
    for key in _METRICS:
        number_or_none(row.get(key), f"{where}: field {key!r}")
    check_summary_row(row, where)  # impossible values (a negative P95, a rate of 7.5) are refused
    label = f"{os.path.basename(os.path.normpath(directory))}#{case}"
    requests_path = os.path.join(directory, "requests.jsonl")
    if manifest.get("kind") == "real":
        side = _real_side(manifest_path, manifest, row, requests_path, label)
    else:
        side = _simulated_side(directory, manifest, row, requests_path, case, label)
    side.requests_path, side.case = requests_path, case
    evidence = check_evidence(side)
    if side.has_trace and not (evidence["num_lost"] or evidence["duplicated"] or evidence["unknown"]):
        # A complete trace must agree with the summary. An incomplete one is judged by the evidence
        # rules instead (lost: reject; duplicated or unknown ids: tune), so it never reaches accept.
        check_consistency(row, side.trace, where, requests_path, exact_arrivals=side.units == "ticks")
    return side


def _simulated_side(directory, manifest, row, requests_path, case, label) -> Side:
    where = os.path.join(directory, "manifest.json")
    entries = need(manifest.get("cases"), list, f"{where}: field 'cases'", "a list of case settings")
    settings = {c["case"]: c for c in entries if isinstance(c, dict) and isinstance(c.get("case"), str)}
    if case not in settings:
        raise InputError(f"{where}: field 'cases': no settings for case {case!r}")
    config = need(manifest.get("config"), dict, f"{where}: field 'config'", "an object", nullable=True) or {}
    names, priorities = _workload_requests(os.path.join(directory, "workload.json"))
    fixed = {
        "engine": f"{manifest.get('tool')} {manifest.get('version')}",
        "workload_sha256": manifest.get("workload_sha256"),
        "timeout_ticks": manifest.get("timeout_ticks"),
        "decode_cost": config.get("decode_cost"),
        "prefill_cost": config.get("prefill_cost"),
        "units": "ticks",
        "time_base": "simulated tick clock",
    }
    clock = RunClock.from_manifest(manifest)   # the run's engine and clock, read once
    step_model = clock.in_ms   # --step-model: ms from a fitted step time (vllm-engine.md §6)
    if step_model:
        fixed.update(_step_model_fixed(manifest))
    scheduler = {
        "policy": manifest.get("policy"),
        "max_active": config.get("max_active"),
        "budget": config.get("budget"),
        "batching": settings[case].get("batching"),
        "apc": settings[case].get("apc"),
        "chunk_tokens": settings[case].get("chunk_tokens"),
    }
    if clock.is_vllm:   # the vLLM engine's knobs, named as the real engine names them
        scheduler = {"policy": manifest.get("policy"), **{key: config.get(key) for key in _VLLM_KNOBS}}
        if async_scheduling_of(manifest, where):   # a setting only when on: sync sides compare as before
            scheduler["async_scheduling"] = True
    suffix = "_ms" if step_model else ""
    if len(set(names)) == len(names):   # counted by request index, a few bytes each
        classes = {0} if priorities is None else {p or 0 for p in set(priorities)}
        trace = read_trace(requests_path, case, suffix=suffix, expected=Expected(names, priorities))
    else:   # a name listed twice: counted by name, as the ids are
        by_name = {name: priority or 0 for name, priority in zip(names, priorities or repeat(None))}
        classes = set(by_name.values())
        trace = read_trace(requests_path, case, by_name, suffix=suffix)
    return Side(label, fixed["units"], fixed, scheduler, row, trace, names, len(names), classes)


def _workload_requests(workload_path: str) -> tuple[list, list | None]:
    """The names of ``workload.json``'s requests in order and their priorities (``None`` for a request
    without one; the list ``None`` when no request has one), each checked; read column by column when
    the file has the canonical layout, else decoded keeping a pair per request, not a dict."""
    text = _read_text(workload_path, "is this a run directory (--artifacts or import-results)?")
    found = canonical_columns(text, keep=(0, 6))
    if found is not None:
        try:
            header = json.loads(found[0])
        except (ValueError, RecursionError):
            header = None
        if isinstance(header, dict) and header.get("requests") == []:
            del text
            names, priorities = found[1][0], found[1][6]
            return names, priorities if any(p is not None for p in priorities) else None
    try:
        workload = json.loads(text, object_hook=_compact_request)
    except (ValueError, RecursionError):
        workload = parse_json(text, workload_path)  # raises the one-line error
    del text
    need(workload, dict, workload_path, "a JSON object")
    requests = need(workload.get("requests"), list, f"{workload_path}: field 'requests'", "a list of requests")
    for index, request in enumerate(requests):
        if isinstance(request, _Request):
            continue
        at = f"{workload_path}: request {index}"
        need(request, dict, at, "an object")
        need(request.get("name"), str, f"{at}: field 'name'", "a string")
        need(request.get("priority"), int, f"{at} ({request['name']}): field 'priority'", "an integer", nullable=True)
    names = [name for name, _ in requests]
    priorities = [priority for _, priority in requests]
    return names, priorities if any(p is not None for p in priorities) else None


#: A vLLM-engine run's scheduler settings (``manifest.json`` ``config``), vLLM's names.
_VLLM_KNOBS = ("max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold", "enable_prefix_caching",
               "block_size", "num_gpu_blocks")


def _step_model_fixed(manifest: dict) -> dict:
    """The fixed conditions of a ``--step-model`` run: times in ms, measured from the time base of the
    real run the model was fitted on (its workload's arrivals come from that run), so it compares with
    an imported real run of the same format; the step model itself is a fixed condition."""
    model = manifest.get("step_model") if isinstance(manifest.get("step_model"), dict) else {}
    fitted = model.get("fitted_on") if isinstance(model.get("fitted_on"), dict) else {}
    return {"units": "ms", "timeout_ticks": None, "decode_cost": None, "prefill_cost": None,
            "time_base": _TIME_BASES.get(str(fitted.get("format")), "step-model clock (ms from the workload's arrivals)"),
            "step_model": model.get("step_ms")}


#: Where an imported run's times start, by import format (older imports lack ``time_base``).
_TIME_BASES = {"vllm-bench": "client send time", "request-jsonl": "server queued_ts"}


def _real_side(where, manifest, row, requests_path, label) -> Side:
    fixed = {"units": "ms", "workload_sha256": manifest.get("workload_sha256"),
             "time_base": manifest.get("time_base") or _TIME_BASES.get(str(manifest.get("format")))}
    for group in ("engine", "measurement"):
        values = need(manifest.get(group), dict, f"{where}: field {group!r}", "an object", nullable=True) or {}
        for key, value in values.items():
            fixed[f"{group}.{key}"] = value
    scheduler = dict(need(manifest.get("scheduler"), dict, f"{where}: field 'scheduler'", "an object",
                          nullable=True) or {})
    expected = need(manifest.get("request_ids"), list, f"{where}: field 'request_ids'", "a list of ids",
                    nullable=True)
    for index, name in enumerate(expected or ()):
        need(name, str, f"{where}: field 'request_ids'[{index}]", "a string")
    num_expected = count_or_none(manifest.get("num_requests_expected"), f"{where}: field 'num_requests_expected'")
    for key in ("run_failed", "per_request"):
        need(manifest.get(key), bool, f"{where}: field {key!r}", "true or false", nullable=True)
    trace = read_trace(requests_path, row["case"])
    priorities = trace.row_priorities if trace.num_rows else None  # known only when every line has one
    return Side(label, "ms", fixed, scheduler, row, trace, expected, num_expected,
                priorities, run_failed=bool(manifest.get("run_failed")),
                has_trace=bool(manifest.get("per_request")))


# --- evidence (compare.md §3.2) ------------------------------------------------------------------

def check_evidence(side: Side) -> dict:
    """Trace completeness and required metrics of one side (compare.md §3.2).

    Returns ``{"arrived", "in_trace", "duplicated", "lost", "unknown", "missing_metrics",
    "num_lost"}``: ids listed twice, arrived ids absent or never ended, ids nobody sent, and
    :data:`~sched.core.metrics.COMPARE_FIELDS` that are null. ``num_lost`` also counts requests known
    only by number (a real file shorter than its run).
    """
    counts = side.trace.counts
    duplicated = sorted(name for name, count in counts.items() if count > 1)
    never_ended = sorted(side.trace.never_ended)
    seen = side.trace.seen
    if seen is not None:   # counted by request index: counts holds only the ids the workload does not list
        names = side.trace.expected.names
        duplicated = sorted(duplicated + list(compress(names, map((1).__lt__, seen))))
        lost = set(compress(names, map((0).__eq__, seen))) if seen.count(0) else set()
        lost = sorted(lost | {name for name in never_ended if side.trace.expected.find(name, len(names)) is not None})
        unknown = sorted(counts)
        num_lost = len(lost)
    elif not side.has_trace:
        lost, unknown, num_lost = [], [], 0      # no trace at all: missing evidence, not lost requests
    elif side.expected is not None:
        expected = set(side.expected)
        lost = sorted((expected - set(counts)) | (set(never_ended) & expected))
        unknown = sorted(set(counts) - expected)
        num_lost = len(lost)
    else:
        lost, unknown = never_ended, []
        num_lost = len(lost) + max(0, (side.num_expected or 0) - len(counts))
    missing = [f for f in COMPARE_FIELDS if side.summary.get(f) is None]
    if not side.has_trace:
        missing.append("per-request trace")
    return {"arrived": len(side.expected) if side.expected is not None else side.num_expected,
            "in_trace": side.trace.num_ids, "duplicated": duplicated, "lost": lost, "unknown": unknown,
            "num_lost": num_lost, "missing_metrics": missing}
