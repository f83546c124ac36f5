"""The serving-scheduler benchmark chapter's CPU window model and helpers (serving-bench.md §1–2).

This is *not* the lab's tick engine (:mod:`sched.lab.engine`). One worker serves **batch windows**:
the policy picks up to ``batch_size`` queued requests, the window lasts ``max(service_ms) /
batch_speedup`` milliseconds, and every request of the window completes at its end. A request
arriving during a window waits for the window to end (no preemption). The chapter's ``ttft_ms`` is
the admission wait (window start − arrival), a stand-in that must never be mixed with the lab's
TTFT (first token stamp − arrival, in ticks).

The functions keep the chapter's names and signatures, so a learner's test file written against
them runs unchanged with ``from sched.chapter.window import ...``. Every number returned is
rounded to 4 decimals, as the chapter does. Worked example (serving-bench.md §3)::

    >>> reqs = [{"request_id": "r1", "arrival_ms": 0, "service_ms": 10, "output_tokens": 20},
    ...         {"request_id": "r2", "arrival_ms": 0, "service_ms": 2, "output_tokens": 20},
    ...         {"request_id": "r3", "arrival_ms": 1, "service_ms": 3, "output_tokens": 20}]
    >>> run = simulate_serving_scheduler(reqs)   # fifo, batch 1: windows [r1] 0-10, [r2] 10-12, [r3] 12-15
    >>> run["makespan_ms"], run["throughput_tps"]
    (15.0, 4000.0)
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping

__all__ = ["POLICIES", "select_next_batch", "simulate_serving_scheduler", "summarize_serving_scheduler_runs",
           "compare_scheduler_to_baseline", "validate_scheduler_contract", "build_scheduler_trace_evidence",
           "decide_scheduler_candidate", "recommend_serving_scheduler_run", "normalize_requests"]

#: Policy name -> sort key of a queued request (``position`` is its input position), §1.3.
#: ``fifo`` keeps queue order (``None``: no sort).
POLICIES = {
    "fifo": None,
    "shortest": lambda r: (r["service_ms"], r["position"]),
    "priority": lambda r: (r["priority"], r["arrival_ms"], r["position"]),
}

#: Fields two run records must share (serving-bench.md §2, ``validate_scheduler_contract``).
CONTRACT_FIELDS = ("model_id", "revision", "backend", "request_stream_id", "measurement_key")
#: Candidate fields whose absence is missing evidence (``build_scheduler_trace_evidence``).
EVIDENCE_FIELDS = ("ttft_p95_ms", "tpot_p95_ms", "throughput_tps", "completion_rate", "fairness", "peak_memory_gb")
#: Bounds of the model's inputs (ms, tokens, factor), so every time and rate stays a finite float:
#: a service time below the 4-decimal resolution of the reported times (0.0001 ms) would show as an
#: empty window and divide by almost zero; 1e12 ms is about 31 years; the batching gain is a factor
#: between 1/1000 and 1000.
MIN_SERVICE_MS, MAX_MS, MAX_TOKENS = 1e-4, 1e12, 10**12
MIN_SPEEDUP, MAX_SPEEDUP = 1e-3, 1e3
_SORT_FIELDS = {"shortest": ("service_ms", "position"), "priority": ("priority", "arrival_ms", "position")}
_DELTA_KEYS = (("ttft_ms", "ttft_delta_ms"), ("tpot_ms", "tpot_delta_ms"), ("throughput_tps", "throughput_gain_tps"),
               ("fairness", "fairness_delta"), ("utilization", "utilization_delta"))


def _round(value: float) -> float:
    return round(float(value), 4)


def _is_number(value) -> bool:
    """A finite int or float (``bool`` is not a number; an int beyond 1e300 cannot become a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= 10**300 if isinstance(value, int) else math.isfinite(value)


def _check_knobs(policy, batch_size, batch_speedup=1.0) -> None:
    if not isinstance(policy, str):
        raise TypeError(f"policy: must be a policy name (text), got {policy!r}; choose one of {', '.join(POLICIES)}")
    if policy not in POLICIES:
        raise ValueError(f"policy: unknown {policy!r}; choose one of {', '.join(POLICIES)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"batch_size: must be an integer, got {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size!r}")
    if not _is_number(batch_speedup):
        raise TypeError(f"batch_speedup: must be a finite number, got {batch_speedup!r}")
    if batch_speedup <= 0:
        raise ValueError(f"batch_speedup: must be > 0, got {batch_speedup!r}")
    if not MIN_SPEEDUP <= batch_speedup <= MAX_SPEEDUP:
        raise ValueError(f"batch_speedup: must be between {MIN_SPEEDUP:g} and {MAX_SPEEDUP:g}, got {batch_speedup!r}")


def _field(request, index: int, key: str, default, low: float, strict: bool, high: float, smallest=None):
    """``request[key]`` (or ``default``) checked: a finite number >= ``low`` (> ``low`` when ``strict``),
    <= ``high`` and, when given, >= ``smallest``."""
    value = request.get(key, default)
    where = f"request {index} ({request.get('request_id', f'request-{index}')}): field {key!r}"
    if value is None and default is None:
        raise ValueError(f"{where}: missing")
    if not _is_number(value):
        raise TypeError(f"{where}: must be a finite number, got {value!r}")
    if value < low or (strict and value == low):
        raise ValueError(f"{where}: must be {'>' if strict else '>='} {low:g}, got {value!r}")
    if value > high or (smallest is not None and value < smallest):
        bounds = f"at most {high:g}" if smallest is None else f"between {smallest:g} and {high:g}"
        raise ValueError(f"{where}: must be {bounds}, got {value!r}")
    return value


def normalize_requests(requests) -> list[dict]:
    """The requests of §1 with defaults filled in and ``position`` (input index) added.

    Input: a list of mappings with ``request_id`` (text, default ``request-<index>``, 0-based),
    ``arrival_ms`` (>= 0, default 0), ``service_ms`` (> 0, required), ``output_tokens`` (>= 0,
    default 0), ``priority`` (number, default 0; lower is served earlier). Raises ``TypeError``
    when ``requests`` is not a list or an entry is not a mapping or a field not a number;
    ``ValueError`` for a missing service time or a value out of range (``service_ms`` within
    [:data:`MIN_SERVICE_MS`, :data:`MAX_MS`], ``arrival_ms`` at most ``MAX_MS``, ``output_tokens``
    at most ``MAX_TOKENS``). Messages name the index, the id and the field.
    """
    if not isinstance(requests, list):
        raise TypeError(f"requests: must be a list of request mappings, got {type(requests).__name__}")
    out = []
    for index, request in enumerate(requests):
        if not isinstance(request, Mapping):
            raise TypeError(f"request {index}: must be a mapping, got {type(request).__name__}")
        request_id = request.get("request_id", f"request-{index}")
        if not isinstance(request_id, str):
            raise TypeError(f"request {index}: field 'request_id': must be text, got {request_id!r}")
        priority = request.get("priority", 0)
        if not _is_number(priority):
            raise TypeError(f"request {index} ({request_id}): field 'priority': must be a finite number, "
                            f"got {priority!r}")
        out.append({"request_id": request_id,
                    "arrival_ms": _field(request, index, "arrival_ms", 0, 0, False, MAX_MS),
                    "service_ms": _field(request, index, "service_ms", None, 0, True, MAX_MS, MIN_SERVICE_MS),
                    "output_tokens": _field(request, index, "output_tokens", 0, 0, False, MAX_TOKENS),
                    "priority": priority, "position": index})
    return out


def select_next_batch(queue, policy: str, batch_size: int):
    """``(batch, rest)`` of §1.3: the window's batch and what stays queued, in order.

    ``queue``: queued request mappings, each with ``position`` (its input index; the list order
    when absent). ``fifo`` keeps queue order; ``shortest`` sorts by (``service_ms``, position);
    ``priority`` by (``priority``, ``arrival_ms``, position). The first ``batch_size`` form the
    batch. Raises ``ValueError`` for an unknown policy or ``batch_size < 1``, ``TypeError`` for a
    policy that is not text or a field the policy sorts by that is not a number (naming the index).
    """
    _check_knobs(policy, batch_size)
    if not isinstance(queue, list):
        raise TypeError(f"queue: must be a list, got {type(queue).__name__}")
    key = POLICIES[policy]
    if key is None:
        ordered = list(queue)
    else:
        for index, request in enumerate(queue):
            if not isinstance(request, Mapping):
                raise TypeError(f"queue[{index}]: must be a mapping, got {type(request).__name__}")
            if policy == "shortest" and "service_ms" not in request:
                raise ValueError(f"queue[{index}]: field 'service_ms': missing (the shortest policy sorts by it)")
            for field in _SORT_FIELDS[policy]:
                if field in request and not _is_number(request[field]):
                    raise TypeError(f"queue[{index}]: field {field!r}: must be a finite number (the {policy} policy "
                                    f"sorts by it), got {request[field]!r}")
        ordered = [r for _, r in sorted(
            enumerate(queue), key=lambda item: key({"priority": 0, "arrival_ms": 0, "position": item[0], **item[1]}))]
    return ordered[:batch_size], ordered[batch_size:]


def simulate_serving_scheduler(requests, policy: str = "fifo", batch_size: int = 1, batch_speedup: float = 1.0) -> dict:
    """Run the window model of §1 and return the chapter's result mapping (times in ms).

    Keys: ``policy``, ``batch_size``, ``batch_speedup``, ``request_count``, ``completed_count``,
    ``makespan_ms`` (last end − earliest arrival), ``throughput_tps`` (output tokens per second of
    makespan), ``utilization`` (busy time / makespan), ``avg_queue_wait_ms``, ``fairness``
    (``max(0, 1 − (max wait − min wait) / max(mean wait, 1))``), ``batch_trace`` (per window
    ``start_ms``, ``duration_ms``, ``request_ids``) and ``requests`` in completion order, each
    with ``request_id, arrival_ms, service_ms, output_tokens, priority, start_ms, end_ms,
    queue_wait_ms, ttft_ms`` (= the queue wait, the chapter's stand-in) and ``e2e_ms``.
    Errors: see :func:`normalize_requests` and :func:`select_next_batch`; ``batch_speedup`` outside
    [:data:`MIN_SPEEDUP`, :data:`MAX_SPEEDUP`] (e.g. ``<= 0``) is a ``ValueError``. No requests: counts 0, makespan/throughput/utilization 0.0, fairness 1.0.
    """
    _check_knobs(policy, batch_size, batch_speedup)
    pending = sorted(normalize_requests(requests), key=lambda r: (r["arrival_ms"], r["position"]))
    queue, done, trace = _Queue(POLICIES[policy]), [], []
    now = busy = 0.0
    next_arrival = 0
    while next_arrival < len(pending) or queue:
        if not queue:  # idle: the clock jumps to the next arrival
            now = max(now, pending[next_arrival]["arrival_ms"])
        while next_arrival < len(pending) and pending[next_arrival]["arrival_ms"] <= now:
            queue.push(pending[next_arrival])
            next_arrival += 1
        batch = queue.take(batch_size)
        duration = max(r["service_ms"] for r in batch) / batch_speedup
        start, end = now, now + duration
        trace.append({"start_ms": _round(start), "duration_ms": _round(duration),
                      "request_ids": [r["request_id"] for r in batch]})
        for r in batch:
            wait = start - r["arrival_ms"]
            done.append({"request_id": r["request_id"], "arrival_ms": r["arrival_ms"], "service_ms": r["service_ms"],
                         "output_tokens": r["output_tokens"], "priority": r["priority"], "start_ms": _round(start),
                         "end_ms": _round(end), "queue_wait_ms": _round(wait), "ttft_ms": _round(wait),
                         "e2e_ms": _round(end - r["arrival_ms"])})
        now, busy = end, busy + duration
    return _run_metrics(policy, batch_size, batch_speedup, pending, done, trace, now, busy)


class _Queue:
    """The waiting queue of :func:`simulate_serving_scheduler`, in the order :func:`select_next_batch`
    gives: arrival order for ``fifo``, else a heap on the policy's key. Every key ends with the input
    position, so keys are unique and the heap pops exactly the sorted order (no re-sort per window:
    thousands of requests stay fast)."""

    def __init__(self, key) -> None:
        self.key, self.items = key, ([] if key is not None else deque())

    def __len__(self) -> int:
        return len(self.items)

    def push(self, request: dict) -> None:
        if self.key is None:
            self.items.append(request)
        else:
            heapq.heappush(self.items, (self.key(request), request["position"], request))

    def take(self, count: int) -> list[dict]:
        """The first ``count`` queued requests, removed from the queue."""
        if self.key is None:
            return [self.items.popleft() for _ in range(min(count, len(self.items)))]
        return [heapq.heappop(self.items)[2] for _ in range(min(count, len(self.items)))]


def _run_metrics(policy, batch_size, batch_speedup, pending, done, trace, last_end, busy) -> dict:
    makespan = last_end - pending[0]["arrival_ms"] if pending else 0.0
    waits = [r["queue_wait_ms"] for r in done]
    mean_wait = sum(waits) / len(waits) if waits else 0.0
    fairness = max(0.0, 1 - (max(waits) - min(waits)) / max(mean_wait, 1)) if waits else 1.0
    tokens = sum(r["output_tokens"] for r in done)
    return {
        "policy": policy, "batch_size": batch_size, "batch_speedup": batch_speedup,
        "request_count": len(pending), "completed_count": len(done),
        "makespan_ms": _round(makespan),
        "throughput_tps": _round(tokens / (makespan / 1000)) if makespan > 0 else 0.0,
        "utilization": _round(busy / makespan) if makespan > 0 else 0.0,
        "avg_queue_wait_ms": _round(mean_wait),
        "fairness": _round(fairness),
        "batch_trace": trace,
        "requests": done,
    }


# --- the chapter's helpers over run records (§2) --------------------------------------------------

def _mapping(value, name: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name}: must be a mapping, got {type(value).__name__}")
    return value


def _number(value, where: str):
    if not _is_number(value):
        raise TypeError(f"{where}: must be a finite number, got {value!r}")
    return value


def summarize_serving_scheduler_runs(runs) -> dict:
    """``run_count``, ``best_latency_run`` (name of the lowest ``ttft_ms``, first on a tie; ``None``
    when empty) and ``avg_throughput_tps`` (0.0 when empty) over run mappings with ``name``,
    ``ttft_ms`` and ``throughput_tps``. Raises ``TypeError`` when ``runs`` is not a list,
    ``ValueError`` naming the index of an entry without those keys, ``TypeError`` naming the index
    and field of a value that is not a finite number."""
    if not isinstance(runs, list):
        raise TypeError(f"runs: must be a list of run mappings, got {type(runs).__name__}")
    for index, run in enumerate(runs):
        if not isinstance(run, Mapping) or any(key not in run for key in ("name", "ttft_ms", "throughput_tps")):
            raise ValueError(f"runs[{index}]: needs the keys name, ttft_ms and throughput_tps")
        for key in ("ttft_ms", "throughput_tps"):
            _number(run[key], f"runs[{index}]: field {key!r}")
    if not runs:
        return {"run_count": 0, "best_latency_run": None, "avg_throughput_tps": 0.0}
    best = min(runs, key=lambda run: run["ttft_ms"])
    return {"run_count": len(runs), "best_latency_run": best["name"],
            "avg_throughput_tps": _round(sum(run["throughput_tps"] for run in runs) / len(runs))}


def compare_scheduler_to_baseline(baseline, candidate) -> dict:
    """Candidate − baseline, rounded to 4 decimals: ``ttft_delta_ms``, ``tpot_delta_ms``,
    ``throughput_gain_tps``, ``fairness_delta``, ``utilization_delta``. Both mappings need
    ``ttft_ms, tpot_ms, throughput_tps, fairness, utilization``; a missing key is a ``ValueError``,
    a value that is not a finite number a ``TypeError`` naming the record and field."""
    for name, record in (("baseline", baseline), ("candidate", candidate)):
        _mapping(record, name)
        for key, _ in _DELTA_KEYS:
            if key not in record:
                raise ValueError(f"{name}: missing key {key!r}")
            _number(record[key], f"{name}: field {key!r}")
    return {delta: _round(candidate[key] - baseline[key]) for key, delta in _DELTA_KEYS}


def validate_scheduler_contract(baseline, candidate) -> dict:
    """``{"contract_ok", "issues"}``: ``issues`` lists each of :data:`CONTRACT_FIELDS` whose values
    differ, plus ``scheduler_policy`` when the policy did **not** change (nothing to compare)."""
    _mapping(baseline, "baseline")
    _mapping(candidate, "candidate")
    issues = [key for key in CONTRACT_FIELDS if baseline.get(key) != candidate.get(key)]
    if baseline.get("scheduler_policy") == candidate.get("scheduler_policy"):
        issues.append("scheduler_policy")
    return {"contract_ok": not issues, "issues": issues}


def _trace_complete(candidate) -> bool:
    """The completed ids are exactly the request ids, each once (a lost or duplicated id is not)."""
    request_ids, completed = candidate.get("request_ids"), candidate.get("completed_ids")
    if not isinstance(request_ids, list) or not isinstance(completed, list):
        return False
    return len(completed) == len(set(completed)) and sorted(map(str, completed)) == sorted(map(str, request_ids))


def build_scheduler_trace_evidence(baseline, candidate) -> dict:
    """The evidence of §2 for two run records (the candidate with ``request_ids`` and ``completed_ids``).

    ``hard_failures``: the contract issues, plus ``"baseline"``/``"candidate"`` when that record
    has a ``failure``. ``missing_evidence``: each of :data:`EVIDENCE_FIELDS` absent or null in the
    candidate, ``baseline_throughput_tps`` when the baseline lacks it (no gain can be formed; the
    chapter is silent there), and ``request_trace`` unless the completed ids are exactly the
    request ids, each once (a duplicated or lost request is missing evidence here, ``tune``; the
    lab's ``compare`` rejects a lost one). Also the candidate's ``ttft_p95_ms, tpot_p95_ms,
    completion_rate, fairness`` and ``throughput_gain`` (candidate − baseline tok/s, or ``None``).
    """
    hard = list(validate_scheduler_contract(baseline, candidate)["issues"])
    hard.extend(role for role, record in (("baseline", baseline), ("candidate", candidate))
                if record.get("failure") is not None)
    missing = [key for key in EVIDENCE_FIELDS if candidate.get(key) is None]
    if baseline.get("throughput_tps") is None:
        missing.append("baseline_throughput_tps")
    if not _trace_complete(candidate):
        missing.append("request_trace")
    base_tps, cand_tps = baseline.get("throughput_tps"), candidate.get("throughput_tps")
    gain = None if base_tps is None or cand_tps is None else _round(cand_tps - base_tps)
    return {"hard_failures": hard, "missing_evidence": missing,
            "ttft_p95_ms": candidate.get("ttft_p95_ms"), "tpot_p95_ms": candidate.get("tpot_p95_ms"),
            "throughput_gain": gain, "completion_rate": candidate.get("completion_rate"),
            "fairness": candidate.get("fairness")}


def decide_scheduler_candidate(evidence, max_ttft_p95_ms, max_tpot_p95_ms, min_throughput_gain,
                               min_completion_rate, min_fairness) -> dict:
    """``{"decision", "next_action", "reason"}`` from :func:`build_scheduler_trace_evidence`'s
    evidence and absolute limits (ms, ms, tok/s, fraction, fraction), in the chapter's order:
    ``reject`` (``repair_contract_or_backend``) on any hard failure; ``tune``
    (``collect_request_trace``) on missing evidence; ``accept``
    (``promote_to_deployment_comparison``) when both P95s are within their caps and gain,
    completion rate and fairness reach their floors; else ``tune`` (``adjust_queue_or_batch_policy``)."""
    _mapping(evidence, "evidence")
    if evidence.get("hard_failures"):
        return {"decision": "reject", "next_action": "repair_contract_or_backend",
                "reason": "hard failures: " + ", ".join(map(str, evidence["hard_failures"])) + "."}
    if evidence.get("missing_evidence"):
        return {"decision": "tune", "next_action": "collect_request_trace",
                "reason": "missing evidence: " + ", ".join(map(str, evidence["missing_evidence"])) + "."}
    failed = [name for name, passed in (
        ("ttft_p95_ms", evidence["ttft_p95_ms"] <= max_ttft_p95_ms),
        ("tpot_p95_ms", evidence["tpot_p95_ms"] <= max_tpot_p95_ms),
        ("throughput_gain", evidence["throughput_gain"] >= min_throughput_gain),
        ("completion_rate", evidence["completion_rate"] >= min_completion_rate),
        ("fairness", evidence["fairness"] >= min_fairness)) if not passed]
    if not failed:
        return {"decision": "accept", "next_action": "promote_to_deployment_comparison",
                "reason": "every cap and floor is met with a complete trace and a valid contract."}
    return {"decision": "tune", "next_action": "adjust_queue_or_batch_policy",
            "reason": "outside its limit: " + ", ".join(failed) + "."}


def recommend_serving_scheduler_run(baseline, candidate, min_throughput_gain, min_fairness) -> dict:
    """``{"decision", "next_action", "reason", "deltas"}`` for two metric mappings (see
    :func:`compare_scheduler_to_baseline`). ``accept`` (``promote_to_serving_rollout``) when TTFT
    fell, TPOT did not rise, the gain reaches ``min_throughput_gain`` (tok/s) and the candidate's
    fairness ``min_fairness``; else ``tune`` (``refine_queue_rules_or_worker_split``) when
    throughput and utilisation did not fall; else ``reject`` (``fallback_to_scheduler_audit``).
    Raises ``ValueError`` for ``min_throughput_gain < 0`` or ``min_fairness`` outside [0, 1]."""
    if not _is_number(min_throughput_gain) or min_throughput_gain < 0:
        raise ValueError(f"min_throughput_gain: must be >= 0, got {min_throughput_gain!r}")
    if not _is_number(min_fairness) or not 0 <= min_fairness <= 1:
        raise ValueError(f"min_fairness: must be within [0, 1], got {min_fairness!r}")
    d = compare_scheduler_to_baseline(baseline, candidate)
    if (d["ttft_delta_ms"] < 0 and d["tpot_delta_ms"] <= 0 and d["throughput_gain_tps"] >= min_throughput_gain
            and candidate["fairness"] >= min_fairness):
        return {"decision": "accept", "next_action": "promote_to_serving_rollout", "deltas": d,
                "reason": f"TTFT fell by {-d['ttft_delta_ms']:g} ms without a TPOT rise, throughput gained "
                          f"{d['throughput_gain_tps']:g} tok/s and fairness {candidate['fairness']:g} meets its floor."}
    if d["throughput_gain_tps"] >= 0 and d["utilization_delta"] >= 0:
        return {"decision": "tune", "next_action": "refine_queue_rules_or_worker_split", "deltas": d,
                "reason": "throughput and utilisation held, but latency, the gain floor or fairness fell short."}
    return {"decision": "reject", "next_action": "fallback_to_scheduler_audit", "deltas": d,
            "reason": "throughput or utilisation fell below the baseline."}
