"""Invariants of finished cases (sched/invariants.py) and the engine's stall guard (exit code 3).

Each rule is shown to hold on the reference runs and to fire when a finished case is broken by hand.
"""

import copy
import os
import unittest
from unittest import mock

from sched.run_cli import run_lab
from sched.config import EngineConfig, cases_for
from sched.engine import Simulation
from sched.invariants import InvariantError, check_case
from sched.policy import POLICIES
from sched.records import SimulationError, Status
from sched.workload import SCENARIOS, scenario
from tests.helpers import run_cli, temp_dir


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
            from sched.engine import run_cases
            results = run_cases(*args, **kwargs)
            _extra_token(results[1])
            return results
        out = os.path.join(temp_dir(self), "run")
        with mock.patch("sched.run_cli.run_cases", broken_run_cases):
            code, stdout, err = run_cli(["--artifacts", out])
        self.assertEqual(code, 3)
        self.assertEqual(stdout, "")
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("internal error", err)
        self.assertIn("emitted 17 tokens", err)
        self.assertFalse(os.path.exists(out))


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
