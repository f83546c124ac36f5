"""A finished case's requests kept as columns give back the very records packed
(sched/core/packed_requests.py), and what reads them (the P95 TTFT request, the artifacts) agrees."""

import pickle
import random
import unittest

from sched.core.config import EngineConfig, cases_for
from sched.core.metrics import summarize
from sched.core.packed_requests import PackedRequests
from sched.core.records import CaseResult, CurrentTick, Request, Status
from sched.lab.engine import Simulation
from sched.output.artifacts import LabRun, render_artifacts
from sched.output.lanes import p95_ttft_request
from sched.workload.specs import RequestSpec

_SLOTS = ("spec", "index", "status", "admitted_at", "hit_tokens", "prefilled_tokens", "prefill_done_at", "done_at",
          "num_preemptions", "preempted_at", "_runs", "_num_closed", "_open_from", "_seq")


def _workload(num_requests: int, seed: int = 3) -> list[RequestSpec]:
    """Bursty arrivals, shared prefixes (APC hits) and priorities."""
    rng = random.Random(seed)
    arrival, specs = 0, []
    for i in range(num_requests):
        arrival += rng.choice((0, 0, 1, 3))
        specs.append(RequestSpec(f"r{i}", arrival, rng.choice(("a", None)), rng.choice((0, 16)),
                                 rng.randint(1, 90), rng.randint(1, 20), priority=rng.randint(0, 1)))
    return specs


def _state(request: Request) -> tuple:
    return tuple(getattr(request, name) for name in _SLOTS) + (request.token_runs, request.first_token_at,
                                                               request.last_token_at, request.num_tokens)


class PackedCaseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        """Every case of 120 requests with a deadline of 60 ticks: some time out before admission
        (admitted_at None), some in prefill (prefill_done_at None), the rest succeed."""
        cls.workload = _workload(120)
        cls.config = EngineConfig(timeout_ticks=60)
        cls.finished = []
        for case in cases_for(cls.config):
            simulation = Simulation(cls.workload, cls.config, case, timeline="counts")
            cls.finished.append((simulation.run(), simulation.now))

    def test_every_field_comes_back(self):
        statuses = set()
        for result, now in self.finished:
            packed = PackedRequests.pack(result.requests, self.workload, now)
            self.assertEqual(len(packed), len(result.requests))
            self.assertEqual([_state(r) for r in packed], [_state(r) for r in result.requests])
            self.assertEqual(_state(packed[-1]), _state(result.requests[-1]))
            self.assertEqual([_state(r) for r in packed[5:9]], [_state(r) for r in result.requests[5:9]])
            with self.assertRaises(IndexError):
                packed[len(packed)]
            statuses |= {r.status for r in packed}
        self.assertEqual(statuses, {Status.DONE, Status.TIMEOUT})   # the deadline bit: None fields packed
        self.assertTrue(any(r.admitted_at is None for result, _ in self.finished for r in result.requests))

    def test_columns_sent_to_another_process_come_back_equal(self):
        result, now = self.finished[1]
        columns = pickle.loads(pickle.dumps(PackedRequests.pack(result.requests, self.workload, now).columns()))
        packed = PackedRequests.from_columns(self.workload, columns)
        self.assertEqual([_state(r) for r in packed], [_state(r) for r in result.requests])
        self.assertTrue(all(r.spec is spec for r, spec in zip(packed, self.workload)))   # this process's specs

    def test_summary_p95_request_and_artifacts_read_the_same(self):
        packed_results = [CaseResult(result.case, result.config, PackedRequests.pack(result.requests, self.workload, now),
                                     result.ticks, result.budget_spent, result.busy_ticks)
                          for result, now in self.finished]
        results = [result for result, _ in self.finished]
        for result, packed in zip(results, packed_results):
            self.assertEqual(summarize(packed), summarize(result))
            one, other = p95_ttft_request(result), p95_ttft_request(packed)
            self.assertEqual(_state(one), _state(other))
        runs = [LabRun(self.workload, self.config, "fcfs", "test", r, "counts") for r in (results, packed_results)]
        self.assertEqual(render_artifacts(runs[0]), render_artifacts(runs[1]))


class PackedValuesTest(unittest.TestCase):
    def request(self, spec, index, **fields) -> Request:
        request = Request.fresh(spec, index, CurrentTick(0))
        for name, value in fields.items():
            setattr(request, name, value)
        return request

    def test_values_past_32_bits_are_kept(self):
        """A tick of 2^40 (hand-made records): its column takes 8-byte values, nothing is cut."""
        specs = [RequestSpec("a", 0, None, 0, 4, 2), RequestSpec("b", 1, None, 0, 4, 1)]
        big = 1 << 40
        requests = [self.request(specs[0], 0, status=Status.DONE, admitted_at=big, prefill_done_at=big + 1,
                                 done_at=big + 3, _runs=[big + 2, 2], _num_closed=2, _seq=0),
                    self.request(specs[1], 1, status=Status.TIMEOUT, done_at=5)]
        packed = PackedRequests.pack(requests, specs, big + 3)
        self.assertEqual([_state(r) for r in packed], [_state(r) for r in requests])
        self.assertEqual(packed[0].token_runs, [(big + 2, 2)])
        self.assertEqual(packed[1].admitted_at, None)
        self.assertEqual(packed.successful_ttfts(), ([0], [big + 2]))   # TTFT = first stamp - arrival

    def test_only_ended_requests_in_workload_order_are_packed(self):
        specs = [RequestSpec("a", 0, None, 0, 4, 2), RequestSpec("b", 1, None, 0, 4, 1)]
        open_run = [self.request(specs[0], 0, status=Status.DECODE, _open_from=3), self.request(specs[1], 1)]
        swapped = [self.request(specs[1], 1), self.request(specs[0], 0)]
        preempted = [self.request(specs[0], 0, num_preemptions=1), self.request(specs[1], 1)]
        for requests in (open_run, swapped, preempted, open_run[:1]):
            with self.assertRaises(ValueError):
                PackedRequests.pack(requests, specs, 9)

    def test_an_empty_case(self):
        packed = PackedRequests.pack([], [], 0)
        self.assertEqual((len(packed), list(packed), packed.successful_ttfts()), (0, [], ([], [])))


if __name__ == "__main__":
    unittest.main()
