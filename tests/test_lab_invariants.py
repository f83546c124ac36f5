"""Invariants of finished cases (sched/lab/invariants.py) and the engine's stall guard (exit code 3).

Each rule is shown to hold on the reference runs and to fire when a finished case is broken by hand.
"""

import copy
import dataclasses
import itertools
import os
import random
import unittest
from unittest import mock

from sched.lab import invariants
from sched.vllm import invariants as vllm_invariants
from sched.runs.build import run_lab
from sched.core.config import EngineConfig, cases_for
from sched.lab.engine import Simulation
from sched.engines import InvariantError, check_case
from sched.lab.policy import POLICIES
from sched.core.records import Request, SimulationError, Status
from sched.vllm.config import VllmKnobs
from sched.vllm.engine import simulate_vllm
from sched.workload.specs import SCENARIOS, RequestSpec, scenario
from tests.helpers import FULL, run_cli, temp_dir


def _baseline_case(index: int, **knobs):
    """One finished case of the baseline (0 static, 1 continuous, 2 +APC, 3 +APC+chunk32)."""
    config = EngineConfig(**knobs)
    return Simulation(scenario("baseline"), config, cases_for(config)[index]).run()


def _by_name(result, name):
    return next(r for r in result.requests if r.name == name)


def _tick(result, number):
    return next(k for k in result.ticks if k.tick == number)


def _never_ended(result):
    _by_name(result, "S1").status = Status.DECODE


def _admitted_before_arrival(result):
    s7 = _by_name(result, "S7")  # arrives at 12
    _tick(result, s7.admitted_at).admitted.remove("S7")
    _tick(result, 11).admitted.append("S7")
    s7.admitted_at = 11


def _over_budget(result):
    tick = _tick(result, 0)  # L0 prefills 64 tokens: the whole budget
    tick.prefilled[0] = ("L0", 65)
    tick.budget_used = 65


def _too_many_active(result):
    _tick(result, 5).active.append("ghost")


def _token_times_out_of_order(result):
    s2 = _by_name(result, "S2")
    times = s2.token_times  # a fresh list (stored as runs): change it, then store it back
    times[3], times[4] = times[4], times[3]
    s2.token_times = times


def _extra_token(result):
    s2 = _by_name(result, "S2")
    s2.token_times = s2.token_times + [s2.token_times[-1] + 1]


def _hit_beyond_prefix(result):
    _by_name(result, "S4").hit_tokens = 129  # prefix_tokens is 128


def _prefill_work_lost(result):
    tick = next(k for k in result.ticks if k.prefilled)
    name, tokens = tick.prefilled[0]
    tick.prefilled[0] = (name, tokens - 1)
    tick.budget_used -= 1


def _ended_twice(result):
    result.ticks[-1].finished.append("L0")


#: label -> (case index in the baseline run, how to break it, words of the expected message).
BROKEN = {
    "request never ends": (1, _never_ended, "S1", "never ended"),
    "admitted before arrival": (1, _admitted_before_arrival, "S7", "admitted at 11"),
    "budget exceeded": (1, _over_budget, "tick 0", "budget used 65"),
    "too many active": (1, _too_many_active, "tick 5", "max_active is 4"),
    "token times not increasing": (1, _token_times_out_of_order, "S2", "strictly increase"),
    "more tokens than output_tokens": (1, _extra_token, "S2", "emitted 17 tokens"),
    "hit tokens beyond the prefix": (2, _hit_beyond_prefix, "S4", "hit_tokens 129"),
    "prefill work lost": (3, _prefill_work_lost, "prefill work", "finished prefill"),
    "ended twice": (1, _ended_twice, "L0", "ends 2 times"),
}


class InvariantsHoldTest(unittest.TestCase):
    def test_reference_runs_pass(self):
        for name in SCENARIOS:
            for timeout in (None, 30):
                for policy in POLICIES:
                    with self.subTest(scenario=name, timeout=timeout, policy=policy):
                        config = EngineConfig(timeout_ticks=timeout)
                        for result in run_lab(scenario(name), config, policy).results:
                            check_case(result)  # raises on a broken rule

    def test_admission_at_the_deadline_is_caught(self):
        """deadline30: U6 (arrival 11) times out at 41; admitting it at 41 breaks the rule."""
        result = _baseline_case(0, timeout_ticks=30)
        u6 = _by_name(result, "U6")
        self.assertIs(u6.status, Status.TIMEOUT)
        self.assertEqual(u6.done_at, 41)
        check_case(result)
        u6.admitted_at = 41
        with self.assertRaisesRegex(InvariantError, r"U6.*admitted at 41"):
            check_case(result)


class InvariantsCatchTest(unittest.TestCase):
    def test_each_broken_rule_is_named(self):
        for label, (index, breaker, *needles) in BROKEN.items():
            with self.subTest(label):
                result = copy.deepcopy(_baseline_case(index))
                check_case(result)
                breaker(result)
                with self.assertRaises(InvariantError) as caught:
                    check_case(result)
                for needle in needles:
                    self.assertIn(needle, str(caught.exception))
                self.assertIn(f"case {result.case.name}", str(caught.exception))

    def test_broken_case_in_the_cli_is_exit_3_and_no_artifacts(self):
        def broken_run_cases(*args, **kwargs):
            from sched.lab.engine import run_cases
            results = run_cases(*args, **kwargs)
            _extra_token(results[1])
            return results
        out = os.path.join(temp_dir(self), "run")
        with mock.patch("sched.runs.build.run_cases", broken_run_cases):
            code, stdout, err = run_cli(["--artifacts", out])
        self.assertEqual(code, 3)
        self.assertEqual(stdout, "")
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("internal error", err)
        self.assertIn("emitted 17 tokens", err)
        self.assertFalse(os.path.exists(out))


def _outcome(check, result, prefilled):
    """The message ``check(result, prefilled)`` raises (None when it passes)."""
    try:
        check(result, prefilled)
    except Exception as error:   # an InvariantError; anything else is a bug of the checks
        return f"{type(error).__name__}: {error}"
    return None


def _rule_by_rule(result, prefilled):
    """The straightforward per-request pass: every request through _check_request."""
    for request in result.requests:
        invariants._check_request(result, request, prefilled)


def _clone(r):
    """An independent copy of a finished request."""
    clone = Request(r.spec, r.index, r.status, r.admitted_at, r.hit_tokens, r.prefilled_tokens, r.prefill_done_at,
                    r.token_times, r.done_at)
    clone.num_preemptions, clone.preempted_at = r.num_preemptions, list(r.preempted_at)
    return clone


def _shift(request, step):
    """Every token and the end ``step`` ticks later."""
    request.token_times = [t + step for t in request.token_times]
    request.done_at = None if request.done_at is None else request.done_at + step


def _hit(request, hit):
    """A new hit count, the request's own prefill work kept at prompt − hit."""
    request.prefilled_tokens += request.hit_tokens - hit
    request.hit_tokens = hit


#: Aimed at one rule each, keeping the others where they can.
_TARGETED = (
    lambda rng, r: _shift(r, rng.choice((1, 2, 30))),                                   # past the deadline
    lambda rng, r: _hit(r, max(0, min(r.hit_tokens + 1, r.spec.prompt_tokens - 1))),     # a hit without APC
    lambda rng, r: _hit(r, r.spec.prefix_tokens + 1),                                   # beyond the prefix
    lambda rng, r: _hit(r, r.spec.prompt_tokens),                                       # the whole prompt
    lambda rng, r: setattr(r, "hit_tokens", 1),                                         # a hit, not admitted
    lambda rng, r: setattr(r, "prefilled_tokens", r.spec.prompt_tokens - r.hit_tokens),  # unfinished, all work
    lambda rng, r: setattr(r, "prefill_done_at", None),                                 # tokens, prefill unfinished
    lambda rng, r: r._runs and r._runs.__setitem__(-1, 0),                              # a run of no token
    lambda rng, r: setattr(r, "status", Status.TIMEOUT),
    lambda rng, r: setattr(r, "status", Status.DONE),
    lambda rng, r: setattr(r, "done_at", None),
    lambda rng, r: setattr(r, "token_times", []),
    lambda rng, r: setattr(r, "admitted_at", r.spec.arrival + 30),                      # at the deadline
    lambda rng, r: (setattr(r, "spec", dataclasses.replace(r.spec, suffix_tokens=0)),   # the whole prompt, shared
                    setattr(r, "hit_tokens", r.spec.prefix_tokens), setattr(r, "prefilled_tokens", 0)),
    lambda rng, r: (setattr(r, "token_times", []), setattr(r, "done_at", None),         # ok, no token, no end
                    setattr(r, "spec", dataclasses.replace(r.spec, output_tokens=0))),
    lambda rng, r: (_queued_timeout(r), setattr(r, "hit_tokens", 16)),                  # a hit, never admitted
    lambda rng, r: setattr(r, "hit_tokens", 16),                                        # one block's hit
    lambda rng, r: r.token_times and (                                                  # timed out, one token too many
        setattr(r, "status", Status.TIMEOUT), setattr(r, "done_at", max(r.spec.arrival + 30, r.token_times[-1])),
        setattr(r, "spec", dataclasses.replace(r.spec, output_tokens=len(r.token_times) - 1))),
    lambda rng, r: r.token_times and r.admitted_at is not None and _shift(r, r.admitted_at - r.token_times[0]),
    lambda rng, r: setattr(r, "num_preemptions", r.num_preemptions + rng.choice((-1, 1))),
)


def _queued_timeout(r):
    """The request timed out in the queue."""
    r.status, r.done_at, r.admitted_at, r.token_times = Status.TIMEOUT, r.spec.arrival + 30, None, []
    r.prefill_done_at, r.prefilled_tokens, r.hit_tokens = None, 0, 0


def _random_workload(rng):
    """12 requests arriving over 20 ticks with 1-24 output tokens, a third sharing a 64-token prefix,
    a third blocks of 16 tokens (docs/handbook/real-traffic.md §14.1)."""
    def spec(i):
        kind, suffix = rng.randrange(3), rng.randint(1, 160)
        blocks = tuple(range(rng.randint(1, 3))) if kind == 2 else None
        return RequestSpec(f"R{i}", rng.randint(0, 20), "P" if kind == 1 else None, 64 if kind == 1 else 0,
                           suffix + (48 if blocks else 0), rng.randint(1, 24), prefix_blocks=blocks,
                           block_size=16 if blocks else None)
    return [spec(i) for i in range(12)]


def _break_one_field(rng, request):
    """Change one field of ``request``, by a small step, to a rule's boundary or aimed at one rule."""
    spec, times = request.spec, request.token_times
    step = rng.choice((-2, -1, 1, 2, 40))
    field = rng.choice(("status", "done_at", "admitted_at", "hit_tokens", "prefilled_tokens", "prefill_done_at",
                        "tokens", "spec") + ("aimed",) * 8)
    if field == "aimed":
        rng.choice(_TARGETED)(rng, request)
    elif field == "status":
        request.status = rng.choice(list(Status))
    elif field == "tokens":
        request.token_times = rng.choice((
            [], times[:-1], times + [times[-1] + 1] if times else [5], [t + step for t in times],
            times[:len(times) // 2] + [t + 2 for t in times[len(times) // 2:]]))   # two runs
    elif field == "spec":
        key = rng.choice(("arrival", "output_tokens", "prefix_tokens", "suffix_tokens"))
        value = rng.choice((getattr(spec, key) + step, len(times) - 1 if key == "output_tokens" else 0))
        request.spec = dataclasses.replace(spec, **{key: max(0, value)})
    else:   # a tick (None until it happens) or a count of tokens
        value = getattr(request, field) or 0
        choices = (0, max(0, value + step)) + ((None,) if field.endswith("_at") else ())
        setattr(request, field, rng.choice(choices))


class InvariantsScreenTest(unittest.TestCase):
    """check_case passes most requests through a one-expression screen and sends the rest to the
    rule-by-rule check: for every request of finished cases (scenarios and seeded random workloads,
    with and without deadlines and per-tick records), changed by each aimed breaker and by seeded
    random field changes (3 per request in the learner's run, 8 with ``ISL_FULL=1``), the screen must
    raise the very message the rule-by-rule pass raises, and pass exactly when it passes."""

    def assert_screen_matches(self, rng, results, screen, rule_by_rule):
        outcomes = set()
        for result, prefilled in results:
            for request in result.requests:
                breakers = [[aimed] for aimed in _TARGETED]
                breakers += [[_break_one_field] * rng.randint(1, 3) for _ in range(8 if FULL else 3)]
                for breaker in breakers:
                    single = dataclasses.replace(result, requests=[_clone(request)])
                    for change in breaker:
                        change(rng, single.requests[0])
                    expected = _outcome(rule_by_rule, single, prefilled)
                    self.assertEqual(_outcome(screen, single, prefilled), expected,
                                     f"{result.case.name}, {request.name}: {single.requests[0]!r}")
                    outcomes.add(expected is None)
        self.assertEqual(outcomes, {True, False})   # both passing and broken requests were met

    def workloads(self, rng):
        workloads = [scenario(name) for name in ("baseline", "token-gaps")]
        return workloads + [sorted(_random_workload(rng), key=lambda spec: spec.arrival) for _ in range(2)]

    def test_lab_engine(self):
        rng = random.Random(11)
        results = []
        for workload, timeout, timeline in itertools.product(self.workloads(rng), (None, 30), ("full", "off")):
            for result in run_lab(workload, EngineConfig(timeout_ticks=timeout), timeline=timeline).results:
                results.append((result, invariants._check_ticks(result)[0] if timeline == "full" else None))
        self.assert_screen_matches(rng, results, invariants._check_requests, _rule_by_rule)

    def test_vllm_engine(self):
        rng = random.Random(12)
        results = [(simulate_vllm(workload, VllmKnobs(64, 4, enable_prefix_caching=caching, num_gpu_blocks=blocks,
                                                      timeout_ticks=timeout)), None)
                   for workload, caching, blocks, timeout in itertools.product(
                       self.workloads(rng), (False, True), (None, 40), (None, 30))]
        self.assert_screen_matches(
            rng, results, lambda result, _: vllm_invariants._check_requests(result, invariants._fail),
            lambda result, _: [vllm_invariants._check_request(result, r, invariants._fail) for r in result.requests])


class StallGuardTest(unittest.TestCase):
    def test_engine_stops_instead_of_looping(self):
        """A budget of 4 with decode cost 8 (refused by EngineConfig, forced here): L0 finishes its
        512-token prefill at tick 127, then can never decode; tick 128 makes no progress."""
        config = EngineConfig(max_active=1)
        object.__setattr__(config, "budget", 4)
        simulation = Simulation(scenario("baseline"), config, cases_for(config)[1])
        with self.assertRaisesRegex(SimulationError, r"tick 128: no request can make progress"):
            simulation.run()

    def test_cli_turns_a_stall_into_exit_3(self):
        out = os.path.join(temp_dir(self), "run")
        with mock.patch.object(EngineConfig, "__post_init__", lambda self: None):
            code, stdout, err = run_cli(["--budget", "4", "--artifacts", out])
        self.assertEqual(code, 3)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("internal error", err)
        self.assertIn("no request can make progress", err)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
