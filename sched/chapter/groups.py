# One piece (~410 lines): one group's result file read at the boundary (serving-bench.md §4), every field's check next to the schema it belongs to.
"""One group's result file of the chapter's real-engine experiment, read at the boundary (serving-bench.md §4).

Two groups (FCFS baseline ``g0_fcfs``, priority candidate ``g1_priority``) ran the same frozen
workload on one vLLM version; each wrote one JSON result file in the course runner's shape:

- success: ``metrics`` (``successful_requests``, ``failed_requests``,
  ``priority_first_token_order_score``, ``priority_order_score``, ``output_token_throughput_per_s``,
  ``ttft_ms`` and ``tpot_ms`` as objects with ``p95``), ``runs`` (one per repeat, each with its own
  ``metrics`` and ``results``: per request ``ok``, ``priority``, ``e2e_ms``, ``output_text``),
  ``scheduler_identity``, optionally ``normalized_result`` and ``workload``. A file without
  ``runs`` is one run (its own ``metrics`` and ``results``).
- failure: ``schema_version`` ``serving-scheduler-run/v1``, ``scheduler_identity``, ``status``
  ``failed``, ``failure`` (``type``, ``message``). As in the chapter's code, any file whose
  ``failure`` is not empty is a failed group, whatever its ``status`` says.

:func:`read_group` returns the read-only *view* of one file (or raises one
:class:`~sched.base.cmdline.InputError` naming file and field); :func:`check_roles` reads from the
two files which one is the FCFS group and which the priority group. Times in ms, throughput in
output tokens per second. The low-priority class's E2E P95 is computed per repeat by **linear
interpolation** (position (n − 1) · 0.95, the chapter's method) and, beside it, by nearest rank
(the lab's), then averaged over repeats.
"""

from __future__ import annotations

import json
import math
import os

from ..base.cmdline import MAX_COUNT, InputError, need, number_or_none, one_line
from ..core.metrics import percentile
from .json_files import decode, finite_or_none, read_text

__all__ = ["read_group", "missing_group", "check_roles", "p95_linear", "workload_identity", "FAILURE_SCHEMA",
           "GROUP_KEYS"]

FAILURE_SCHEMA = "serving-scheduler-run/v1"
#: The only ``schema_version`` a result file may carry (absent is accepted: the runner's success files may omit it).
SCHEMA_VERSIONS = (FAILURE_SCHEMA,)
#: ``status`` values of a success file (absent is a success too); ``failed`` is a failure record.
SUCCESS_STATUSES = ("ok", "success")
#: The chapter's names of the two groups (its ``source_paths`` keys), by the role this lab gives them.
GROUP_KEYS = {"baseline": "g0_fcfs", "candidate": "g1_priority"}
#: The scheduler policy each role must have run with (``--scheduling-policy`` of the vLLM server).
ROLE_POLICY = {"baseline": "fcfs", "candidate": "priority"}
#: Workload fields that record how a group ran, not which workload it was (never part of its identity).
RUN_RECORD_FIELDS = ("send_priority", "priority_sent", "sent_priority", "priorities_sent")
#: Workload fields that name a frozen workload; when any is present, they are its identity.
IDENTITY_FIELDS = ("id", "name", "workload_id", "workload_sha256", "sha256", "request_count", "num_requests")


def p95_linear(values):
    """P95 by linear interpolation between closest ranks (position (n − 1) · 0.95), or ``None``.

    Example: [100, 200, 300, 400] → position 2.85 → 300 + 0.85 · 100 = 385.0 (nearest rank: 400).
    """
    ordered = sorted(values)
    if not ordered:
        return None
    position = (len(ordered) - 1) * 0.95
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _r4(value):
    return None if value is None else round(float(value), 4)


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def workload_identity(workload):
    """What names a frozen workload, for the chapter's "same workload" check (§4); JSON-ready.

    A workload object that carries any of :data:`IDENTITY_FIELDS` is identified by those fields
    only; otherwise by the whole object without the fields that record how a group ran
    (:data:`RUN_RECORD_FIELDS`, e.g. whether priorities were sent: the one thing the two groups
    change on purpose). A list of requests or a plain name is its own identity; ``None`` stays ``None``.
    """
    if isinstance(workload, dict):
        named = {k: workload[k] for k in IDENTITY_FIELDS if workload.get(k) is not None}
        if named:
            return named
        return {k: v for k, v in workload.items() if k not in RUN_RECORD_FIELDS}
    return workload


# --- reading one group ---------------------------------------------------------------------------

def _load(path: str):
    data = decode(read_text(path, "result file"), path)   # BOM accepted, NaN kept to be named, keys once
    return need(data, dict, path, "a JSON object (one group's result)")


def _metric(metrics: dict, key: str, where: str, low=None, high=None):
    value = metrics.get(key)
    if isinstance(value, dict):  # ttft_ms / tpot_ms: an object with at least p95
        return number_or_none(value.get("p95"), f"{where}: field '{key}.p95'", low=0)
    return number_or_none(value, f"{where}: field {key!r}", low, high)


def _check_metrics(metrics, where: str) -> dict:
    metrics = need(metrics, dict, f"{where}: field 'metrics'", "an object", nullable=True) or {}
    for key in ("ttft_ms", "tpot_ms"):
        need(metrics.get(key), dict, f"{where}: field 'metrics.{key}'", "an object with p95", nullable=True)
    return {
        "successful": _count(metrics, "successful_requests", where),
        "failed": _count(metrics, "failed_requests", where),
        "first_token_order_score": _metric(metrics, "priority_first_token_order_score", f"{where}: metrics", 0, 1),
        "order_score": _metric(metrics, "priority_order_score", f"{where}: metrics", 0, 1),
        "throughput_tps": _metric(metrics, "output_token_throughput_per_s", f"{where}: metrics", 0),
        "ttft_p95_ms": _metric(metrics, "ttft_ms", f"{where}: metrics"),
        "tpot_p95_ms": _metric(metrics, "tpot_ms", f"{where}: metrics"),
    }


def _count(metrics: dict, key: str, where: str):
    value = number_or_none(metrics.get(key), f"{where}: field 'metrics.{key}'", 0, MAX_COUNT)
    if value is not None and value != int(value):
        raise InputError(f"{where}: field 'metrics.{key}': must be a whole number, got {value!r}")
    return None if value is None else int(value)


def _blank(text) -> bool:
    """No output: missing, empty, or whitespace only (the chapter strips the text before testing it)."""
    return not (text or "").strip()


def _check_results(results, where: str):
    if results is None:
        return None
    need(results, list, f"{where}: field 'results'", "a list of per-request results")
    for index, row in enumerate(results):
        at = f"{where}: results[{index}]"
        need(row, dict, at, "an object")
        need(row.get("ok"), bool, f"{at}: field 'ok'", "true or false")
        if number_or_none(row.get("priority"), f"{at}: field 'priority'") is not None and type(row["priority"]) is not int:
            # vLLM's priority is an integer; 0.5 would make a class of its own (the low class is the largest value)
            raise InputError(f"{at}: field 'priority': must be a whole number (vLLM's request priority), "
                             f"got {row['priority']!r}")
        if row["ok"] and row.get("e2e_ms") is None:   # an ok request always has an end; never dropped silently
            raise InputError(f"{at}: field 'e2e_ms': missing or null in an ok request; it needs its E2E time (ms)")
        number_or_none(row.get("e2e_ms"), f"{at}: field 'e2e_ms'", low=0)
        need(row.get("output_text"), str, f"{at}: field 'output_text'", "text", nullable=True)
        need(row.get("request_id"), str, f"{at}: field 'request_id'", "text", nullable=True)
    return results


def _workload_count(data: dict, identity: dict, path: str):
    """Requests per repeat declared by the frozen workload (a list, its ``requests``, or its
    ``request_count``/``num_requests``: a whole number >= 1), or ``None`` when nobody says."""
    for field, value in (("workload", data.get("workload")), ("scheduler_identity.workload", identity.get("workload"))):
        if isinstance(value, list):
            return len(value)
        if isinstance(value, dict):
            if isinstance(value.get("requests"), list):
                return len(value["requests"])
            for key in ("request_count", "num_requests"):
                count = value.get(key)
                if count is None:
                    continue
                where = f"{path}: field '{field}.{key}'"
                if isinstance(count, bool) or not isinstance(count, int):
                    raise InputError(f"{where}: must be a whole number of requests, got {count!r}")
                if not 1 <= count <= MAX_COUNT:
                    raise InputError(f"{where}: must be between 1 and {MAX_COUNT}, got {count}")
                return count
    return None


def _repeat(run: dict, where: str) -> dict:
    metrics = _check_metrics(run.get("metrics"), where)
    results = _check_results(run.get("results"), where)
    if results is not None:
        successful = sum(1 for r in results if r["ok"])
        failed = len(results) - successful
        empty = sum(1 for r in results if r["ok"] and _blank(r.get("output_text")))
        ids = [r.get("request_id") for r in results]
        ids = ids if all(isinstance(i, str) for i in ids) else None
    else:
        successful, failed, empty, ids = metrics["successful"], metrics["failed"], None, None
    size = len(results) if results is not None else (
        None if None in (successful, failed) else successful + failed)
    return {"metrics": metrics, "results": results, "successful": successful, "failed": failed,
            "size": size, "ids": ids, "empty_outputs": empty}


def _check_repeat_indices(runs: list, path: str) -> None:
    """Each repeat's ``repeat`` index (when the runner wrote one) is a whole number given once."""
    seen = {}
    for i, run in enumerate(runs):
        if not isinstance(run, dict) or run.get("repeat") is None:
            continue
        index = run["repeat"]
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise InputError(f"{path}: runs[{i}]: field 'repeat': must be a whole number >= 0, got {index!r}")
        if index in seen:
            raise InputError(f"{path}: runs[{i}]: field 'repeat': repeat {index} is already runs[{seen[index]}]; "
                             "each repeat is written once (was a file appended twice?)")
        seen[index] = i


def _schema(data: dict, path: str):
    version = data.get("schema_version")
    if version is not None and version not in SCHEMA_VERSIONS:
        raise InputError(f"{path}: field 'schema_version': unknown {one_line(str(version))!r}; this lab reads "
                         f"{', '.join(SCHEMA_VERSIONS)} (the course runner's result files)")
    return version


def _failure(data: dict, path: str):
    """The failure object of a failed group, or ``None``: ``status: failed`` needs one with ``type`` and
    ``message``; any other non-empty ``failure`` makes the group failed too (the chapter's rule)."""
    failure = data.get("failure")
    if data.get("status") == "failed":
        failure = need(failure, dict, f"{path}: field 'failure'", "an object with type and message")
        for key in ("type", "message"):
            need(failure.get(key), str, f"{path}: field 'failure.{key}'", "text")
        return failure
    if not failure:
        return None
    if isinstance(failure, dict):
        for key in ("type", "message"):
            need(failure.get(key), str, f"{path}: field 'failure.{key}'", "text", nullable=True)
        return {"type": failure.get("type") or "failure", "message": failure.get("message") or
                json.dumps(finite_or_none(failure), sort_keys=True)}
    return {"type": "failure", "message": str(failure) if isinstance(failure, str) else json.dumps(failure)}


def missing_group(path: str, role: str) -> dict:
    """The view of a group whose result file does not exist: a failed group (the chapter writes its
    ``backend_failure_record`` for it), named by the path the learner gave."""
    return {"role": role, "source": path, "identity": {}, "workload": None, "normalized_config": None,
            "status": "failed", "missing": True, "schema_version": None, "simulated": False, "evidence_level": None,
            "failure": {"type": "ResultFileMissing", "message": f"no result file at {path}"}}


def read_group(path: str, role: str) -> dict:
    """The read-only view of one group's result file (§4 "Reading them"); JSON-ready.

    Keys: ``role``, ``source`` (the path as given), ``status`` (``"ok"`` or ``"failed"``),
    ``identity``, ``failure``, ``workload`` (the file's workload, or its identity's), and for a
    success: ``repeats`` (count), ``workload_count`` (requests per repeat; from the workload, else
    each repeat's results), ``successful``/``failed`` (the file's own ``metrics``: the chapter's
    counts, compared with the workload's request count), ``repeat_successful``/``repeat_failed``/
    ``repeat_sizes``/``repeat_ids`` (per repeat, from its per-request results, else its
    ``metrics``), ``outputs_complete`` (every ok request has output text that is not blank;
    ``None`` without per-request results), ``empty_outputs``, ``first_token_order_score``
    (overall), ``first_token_order_scores`` (per repeat), ``order_score`` (completion order,
    diagnostic), ``throughput_tps``, ``ttft_p95_ms``, ``tpot_p95_ms``, ``low_priority`` (the least
    urgent priority value, the largest), ``low_priority_e2e_p95_ms`` (mean over repeats of the
    linear-interpolation P95), ``low_priority_e2e_p95_ms_nearest_rank`` and
    ``low_priority_e2e_p95_by_repeat``.
    Raises :class:`~sched.base.cmdline.InputError` naming the file and field for unusable input: among
    others NaN/Infinity where a number is read, an ok request without a finite ``e2e_ms``, a
    ``status`` other than ``ok``/``success``/``failed``, an unknown ``schema_version``, a repeat
    index given twice, a declared request count that is not a whole number 1..10^9, and overall
    counts beyond every request the repeats can hold.
    """
    data = _load(path)
    identity = need(data.get("scheduler_identity"), dict, f"{path}: field 'scheduler_identity'", "an object")
    schema = _schema(data, path)
    normalized = need(data.get("normalized_result"), dict, f"{path}: field 'normalized_result'", "an object",
                      nullable=True) or {}
    config = need(normalized.get("config"), dict, f"{path}: field 'normalized_result.config'", "an object",
                  nullable=True)
    workload = data.get("workload", identity.get("workload"))
    view = {"role": role, "source": path, "identity": finite_or_none(identity), "workload": finite_or_none(workload),
            "failure": None, "normalized_config": finite_or_none(config), "missing": False, "schema_version": schema,
            "simulated": need(data.get("simulated"), bool, f"{path}: field 'simulated'", "true or false",
                              nullable=True) is True,
            "evidence_level": need(data.get("evidence_level"), str, f"{path}: field 'evidence_level'", "a string",
                                   nullable=True)}
    status = data.get("status")
    if status is not None and status != "failed" and status not in SUCCESS_STATUSES:
        raise InputError(f"{path}: field 'status': must be one of {', '.join(SUCCESS_STATUSES)} (a success file) "
                         f"or failed (a failure record), got {status!r}")
    failure = _failure(data, path)
    if failure is not None:
        return dict(view, status="failed", failure=finite_or_none(failure))
    count = _workload_count(data, identity, path)
    runs = data.get("runs")
    if runs is None:
        if data.get("metrics") is None and data.get("results") is None:
            raise InputError(f"{path}: field 'runs': missing (and no top-level metrics or results); not a result file")
        runs = [data]
    need(runs, list, f"{path}: field 'runs'", "a list of repeats")
    if not runs:
        raise InputError(f"{path}: field 'runs': empty; a success file holds at least one repeat")
    _check_repeat_indices(runs, path)
    repeats = [_repeat(need(run, dict, f"{path}: runs[{i}]", "an object"), f"{path}: runs[{i}]")
               for i, run in enumerate(runs)]
    _one_priority_per_request(repeats, path)
    overall = _check_metrics(data.get("metrics"), path)
    numbers = _group_numbers(repeats, overall, count)
    _cross_check(overall, numbers, config, identity, path)
    return dict(view, status="ok", **numbers)


def _one_priority_per_request(repeats: list[dict], path: str) -> None:
    """A frozen workload gives each request one priority: a ``request_id`` whose ``priority``
    differs between repeats (or lines) is refused, naming the repeat (the low-priority class, the
    largest value, would otherwise change from repeat to repeat)."""
    seen: dict[str, tuple] = {}
    for index, repeat in enumerate(repeats):
        for row in repeat["results"] or ():
            name, priority = row.get("request_id"), row.get("priority")
            if not isinstance(name, str) or priority is None:
                continue
            first = seen.setdefault(name, (priority, index))
            if first[0] != priority:
                raise InputError(f"{path}: runs[{index}]: request {one_line(name)!r}: field 'priority': {priority!r}, "
                                 f"but runs[{first[1]}] gives it {first[0]!r}; one workload gives a request one priority")


def _cross_check(overall: dict, numbers: dict, config, identity: dict, path: str) -> None:
    """The overall counts cannot exceed every request the file says ran: requests per repeat times
    the repeats it holds or declares (``repeats`` in its config)."""
    sizes = [n for n in numbers["repeat_sizes"] if n is not None] + [numbers["workload_count"] or 0]
    if not any(sizes):
        return   # nothing says how many requests ran: nothing to contradict
    declared = [v for v in ((config or {}).get("repeats"), identity.get("repeats"))
                if isinstance(v, int) and not isinstance(v, bool)]
    most = max(sizes) * max([numbers["repeats"]] + declared)
    for key in ("successful", "failed"):
        if overall[key] is not None and overall[key] > most:
            raise InputError(f"{path}: field 'metrics.{key}_requests': says {overall[key]}, more than the "
                             f"{most} requests its repeats can hold; the file contradicts itself")


def _group_numbers(repeats: list[dict], overall: dict, count) -> dict:
    all_results = [row for r in repeats for row in (r["results"] or [])]
    priorities = [row["priority"] for row in all_results if row.get("priority") is not None]
    low = max(priorities) if priorities else None
    linear, nearest = [], []
    for r in repeats:
        sample = [row["e2e_ms"] for row in r["results"] or () if row["ok"] and row.get("priority") == low
                  and row.get("e2e_ms") is not None] if low is not None else []
        linear.append(_r4(p95_linear(sample)))
        nearest.append(_r4(percentile(sample, 95)))
    empties = [r["empty_outputs"] for r in repeats]
    empty = None if None in empties else sum(empties)
    return {
        "repeats": len(repeats), "workload_count": count,
        "repeat_sizes": [r["size"] for r in repeats], "repeat_ids": [r["ids"] for r in repeats],
        "repeat_successful": [r["successful"] for r in repeats], "repeat_failed": [r["failed"] for r in repeats],
        "successful": overall["successful"], "failed": overall["failed"],
        "outputs_complete": None if empty is None else empty == 0, "empty_outputs": empty,
        "first_token_order_score": overall["first_token_order_score"],
        "first_token_order_scores": [r["metrics"]["first_token_order_score"] for r in repeats],
        "order_score": overall["order_score"],
        "throughput_tps": overall["throughput_tps"], "ttft_p95_ms": overall["ttft_p95_ms"],
        "tpot_p95_ms": overall["tpot_p95_ms"], "low_priority": low,
        "low_priority_e2e_p95_ms": _r4(_mean(linear)),
        "low_priority_e2e_p95_ms_nearest_rank": _r4(_mean(nearest)),
        "low_priority_e2e_p95_by_repeat": linear,
    }


# --- which group is which -------------------------------------------------------------------------

def _policy_of(view: dict):
    policy = view["identity"].get("scheduler_policy")
    where = f"{view['source']}: field 'scheduler_identity.scheduler_policy'"
    if policy is None:
        raise InputError(f"{where}: missing; the file must say which group it is (fcfs or priority)")
    if policy not in ROLE_POLICY.values():
        raise InputError(f"{where}: must be fcfs or priority (vLLM's --scheduling-policy), got {one_line(str(policy))!r}")
    return policy


def check_roles(baseline: dict, candidate: dict, baseline_path: str, candidate_path: str) -> None:
    """Read from the files which one is the FCFS group and which the priority group (§4).

    The baseline file must have ``scheduler_identity.scheduler_policy`` ``fcfs``, the candidate
    ``priority`` (its ``role``, when it is ``baseline`` or ``candidate``, must agree), and the candidate must have sent the
    workload's priorities (``send_priority`` not false). The same file given twice, two files of
    one policy, or the two given in swapped order raise one :class:`InputError`. A missing group
    (``missing`` view) is not checked: it has no identity.
    """
    if os.path.realpath(baseline_path) == os.path.realpath(candidate_path):
        raise InputError(f"{candidate_path}: the same file as the baseline; give the FCFS group's file and then "
                         "the priority group's")
    views = [v for v in (baseline, candidate) if not v.get("missing")]
    policies = {v["role"]: _policy_of(v) for v in views}
    if len(views) == 2 and policies["baseline"] == policies["candidate"]:
        raise InputError(f"{candidate_path}: field 'scheduler_identity.scheduler_policy': both files are the "
                         f"{policies['baseline']} group ({baseline_path} too); give the FCFS group's file and then "
                         "the priority group's")
    if len(views) == 2 and policies["baseline"] == "priority":
        raise InputError(f"{baseline_path}: field 'scheduler_identity.scheduler_policy': the first file is the "
                         f"priority group and {candidate_path} the fcfs group (swapped); give the FCFS group's "
                         "file first")
    for view in views:
        role, policy = view["role"], policies[view["role"]]
        if policy != ROLE_POLICY[role]:
            raise InputError(f"{view['source']}: field 'scheduler_identity.scheduler_policy': the {role} must be the "
                             f"{ROLE_POLICY[role]} group, this file is the {policy} group")
        written = view["identity"].get("role")
        if isinstance(written, str) and written in ROLE_POLICY and written != role:
            raise InputError(f"{view['source']}: field 'scheduler_identity.role': says {one_line(str(written))!r}, "
                             f"but this file is given as the {role} ({policy} group)")
    lows = [v.get("low_priority") for v in views]
    if len(views) == 2 and None not in lows and lows[0] != lows[1]:   # the fourth gate would compare two classes
        raise InputError(f"{candidate_path}: field 'priority': its low-priority class (the largest priority) is "
                         f"{lows[1]!r} but {baseline_path}'s is {lows[0]!r}; one workload has one set of classes")
    if not candidate.get("missing") and candidate["identity"].get("send_priority") is False:
        raise InputError(f"{candidate_path}: field 'scheduler_identity.send_priority': false in the priority group; "
                         "without the workload's priorities every request ties and the policy cannot act")
