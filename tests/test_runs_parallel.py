"""Cases simulated in worker processes give exactly what one process gives (sched/runs/parallel.py)."""

import multiprocessing
from multiprocessing import connection
import random
import time
import unittest
from unittest import mock

from sched.output.artifacts import LabRun, render_artifacts
from sched.core.config import EngineConfig, cases_for
from sched.lab.engine import run_cases
from sched.engines import InvariantError, check_cases
from sched.core.metrics import summarize
from sched.runs import parallel
from sched.runs.parallel import MIN_REQUESTS_FOR_WORKERS, run_cases_in_workers, worth_workers
from sched.core.records import SimulationError
from sched.workload.specs import RequestSpec, scenario

FORK = "fork" in multiprocessing.get_all_start_methods()


def seeded_workload(num_requests: int, seed: int = 7) -> list[RequestSpec]:
    """Bursty arrivals, shared prefixes (so APC hits), long and short prompts, priorities."""
    rng = random.Random(seed)
    arrival, specs = 0, []
    for i in range(num_requests):
        arrival += rng.choice((0, 0, 1, 2, 5))
        specs.append(RequestSpec(f"r{i}", arrival, rng.choice(("a", "b", None)), rng.choice((0, 16, 48)),
                                 rng.randint(1, 200), rng.randint(1, 40), priority=rng.randint(0, 2)))
    return specs


@unittest.skipUnless(FORK, "needs the fork start method")
class WorkersAgreeTest(unittest.TestCase):
    def check_same(self, workload, config, timeline, policy="fcfs"):
        cases = cases_for(config)
        alone = run_cases(workload, config, cases, policy, timeline=timeline)
        check_cases(alone)
        split, summaries = run_cases_in_workers(workload, config, cases, policy, timeline=timeline, workers=2)
        self.assertEqual(summaries, [summarize(result) for result in alone])
        for one, other in zip(alone, split):
            self.assertEqual(one.case, other.case)
            self.assertEqual((one.budget_spent, one.busy_ticks), (other.budget_spent, other.busy_ticks))
            self.assertEqual(one.ticks, other.ticks)
            self.assertEqual(len(one.requests), len(other.requests))
            for a, b in zip(one.requests, other.requests):
                self.assertEqual((a.spec, a.index, a.status, a.admitted_at, a.hit_tokens, a.prefilled_tokens,
                                  a.prefill_done_at, a.done_at, a.token_runs, a.first_token_at, a.last_token_at),
                                 (b.spec, b.index, b.status, b.admitted_at, b.hit_tokens, b.prefilled_tokens,
                                  b.prefill_done_at, b.done_at, b.token_runs, b.first_token_at, b.last_token_at))
        runs = [LabRun(workload, config, policy, "test", results, timeline) for results in (alone, split)]
        self.assertEqual(render_artifacts(runs[0]), render_artifacts(runs[1]))

    def test_every_timeline_detail_and_a_deadline(self):
        """150 requests on the lab knobs with a deadline (some time out), 2 workers for 4 cases."""
        workload = seeded_workload(150)
        for timeline in ("full", "counts", "off"):
            with self.subTest(timeline=timeline):
                self.check_same(workload, EngineConfig(timeout_ticks=300), timeline)

    def test_the_baseline_scenario_with_the_priority_policy(self):
        self.check_same(scenario("baseline"), EngineConfig(), "full", "priority")

    def test_a_broken_invariant_in_a_worker_is_raised_here(self):
        def broken(result):
            raise InvariantError(f"invariant broken in case {result.case.name}, on purpose")
        with mock.patch("sched.runs.parallel.check_case", broken):  # inherited by the forked workers
            with self.assertRaises(InvariantError) as raised:
                run_cases_in_workers(scenario("baseline"), EngineConfig(), cases_for(EngineConfig()), workers=2)
        self.assertIn("on purpose", str(raised.exception))
        self.assertIsInstance(raised.exception, SimulationError)

    def test_progress_is_reported_from_shared_counters(self):
        """The hook is called with a case name, a tick, ended requests and the workload size: for
        this process's own cases as they run, then from the worker's shared counters while waiting."""
        calls, first, real_wait = [], [True], connection.wait

        def wait(readers, timeout):   # the first wait finds nothing ready: the hook runs at least once
            if first.pop() if first else False:
                return []
            return real_wait(readers, timeout)

        with mock.patch("sched.runs.parallel.connection.wait", wait):
            run_cases_in_workers(scenario("baseline"), EngineConfig(), cases_for(EngineConfig()),
                                 progress=lambda *args: calls.append(args), workers=2)
        self.assertTrue(calls)
        for name, tick, ended, total in calls:
            self.assertIn(name, [case.name for case in cases_for(EngineConfig())])
            self.assertEqual(total, 8)
            self.assertTrue(0 <= ended <= 8 and tick >= 0)


@unittest.skipUnless(FORK, "needs the fork start method")
class LateWorkerTest(unittest.TestCase):
    def test_a_worker_that_takes_no_case_while_progress_is_shown(self):
        """The worker starts after this process has taken every case: nothing of its is pending,
        the progress hook is not called for it (it used to fail on an empty list) and the results
        are those of one process."""
        real_work, calls = parallel._work, []

        def late(*args):
            time.sleep(0.15)
            return real_work(*args)

        with mock.patch.object(parallel, "_work", late):
            results, summaries = run_cases_in_workers(scenario("baseline"), EngineConfig(), cases_for(EngineConfig()),
                                                      progress=lambda *args: calls.append(args), workers=2)
        alone = run_cases(scenario("baseline"), EngineConfig(), cases_for(EngineConfig()))
        self.assertEqual(summaries, [summarize(result) for result in alone])
        self.assertTrue(all(name in [c.name for c in cases_for(EngineConfig())] for name, *_ in calls))


class WhenWorkersPayTest(unittest.TestCase):
    def test_small_workloads_stay_in_one_process(self):
        self.assertFalse(worth_workers(scenario("baseline")))
        with mock.patch("sched.runs.parallel.usable_cores", return_value=1):
            self.assertFalse(worth_workers([None] * MIN_REQUESTS_FOR_WORKERS))
        with mock.patch("sched.runs.parallel.usable_cores", return_value=2):
            self.assertEqual(worth_workers([None] * MIN_REQUESTS_FOR_WORKERS), FORK)


if __name__ == "__main__":
    unittest.main()
