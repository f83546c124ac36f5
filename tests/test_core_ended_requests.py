"""The vLLM engine's requests packed as they end (sched/core/ended_requests.py) give back the very
records a run that keeps them whole holds, and what reads a case (summary, preemption counts, the
P95 TTFT request, every artifact's bytes) agrees.

The reference is the same run with ``sched.vllm.engine.PACK_ENDED_REQUESTS = False`` (every record
made at the start and kept whole); the random workloads are the differential test's (prefix
caching, preemptions, deadlines, priorities, a client's concurrency limit), run sync with unit
steps (the runs that pack).
"""

import dataclasses
import gc
import random
import unittest
from fractions import Fraction
from unittest import mock

from sched.core.ended_requests import RECORD_FIELDS, EndedRequests, preemption_counts
from sched.core.metrics import summarize
from sched.core.records import Request, Status
from sched.engines import check_case
from sched.output.artifacts import LabRun, render_artifacts, stream_artifacts
from sched.output.lanes import p95_ttft_request
from sched.vllm import engine as vllm_engine
from sched.vllm.async_step import simulate
from sched.vllm.config import VllmKnobs
from sched.workload.specs import RequestSpec
from tests.test_vllm_differential import random_knobs, random_workload

_SLOTS = ("spec", "index", "status", "admitted_at", "hit_tokens", "prefilled_tokens", "prefill_done_at", "done_at",
          "num_preemptions", "preempted_at", "_runs", "_num_closed", "_open_from", "_seq", "_clock")


def _state(request: Request) -> tuple:
    """Every slot (with the type of the runs and of the preemption times) and what is derived."""
    return tuple(getattr(request, name) for name in _SLOTS) + (
        type(request._runs), type(request.preempted_at), request.token_runs, request.token_times,
        request.first_token_at, request.last_token_at, request.num_tokens)


def _run(specs, knobs, timeline, packed, gate=None):
    with mock.patch.object(vllm_engine, "PACK_ENDED_REQUESTS", packed):
        return simulate(specs, knobs, timeline=timeline, max_concurrency=gate)


def _files(result, specs, knobs, stream):
    run = LabRun(specs, knobs, knobs.policy, "test", [result], "full" if stream is None else "counts")
    try:
        files = render_artifacts(run) if stream is None else stream_artifacts(run)
        return {name: text if isinstance(text, str) else "".join(text) for name, text in files.items()}
    finally:
        run.close()   # workload.json's temporary file


class EndedRequestsTest(unittest.TestCase):

    def test_random_runs_give_back_every_record(self):
        seen = {"preempted": 0, "timeout": 0, "restamped": 0, "hits": 0}
        for seed in range(40):
            rng = random.Random(seed)
            specs, size = random_workload(rng)
            knobs = dataclasses.replace(random_knobs(rng, specs, size, rng.random() < 0.8), async_scheduling=False)
            gate = rng.choice([None, None, 1, 3])
            timeline = rng.choice(["full", "counts"])
            with self.subTest(seed=seed):
                packed = _run(specs, knobs, timeline, True, gate)
                whole = _run(specs, knobs, timeline, False, gate)
                self.assertIsInstance(packed.requests, EndedRequests)
                self.assertIsInstance(whole.requests, list)
                self.assertEqual(len(packed.requests), len(specs))
                self.assertEqual([_state(r) for r in packed.requests], [_state(r) for r in whole.requests])
                self.assertEqual(_state(packed.requests[-1]), _state(whole.requests[-1]))
                self.assertEqual([_state(r) for r in packed.requests[1:4]], [_state(r) for r in whole.requests[1:4]])
                self.assertEqual(packed.requests.specs, [r.spec for r in whole.requests])
                check_case(packed)   # the invariants hold, read from the columns
                self.assertEqual(list(packed.requests.fields()), [
                    (*RECORD_FIELDS(r)[:5], tuple(r.preempted_at), *RECORD_FIELDS(r)[6:]) for r in whole.requests])
                self.assertEqual(summarize(packed), summarize(whole))
                self.assertEqual(preemption_counts(packed.requests), preemption_counts(whole.requests))
                found, expected = p95_ttft_request(packed), p95_ttft_request(whole)
                self.assertEqual(None if found is None else _state(found), None if expected is None else _state(expected))
                stream = None if timeline == "full" else True
                self.assertEqual(_files(packed, specs, knobs, stream), _files(whole, specs, knobs, stream))
                seen["preempted"] += preemption_counts(whole.requests)[0]
                seen["timeout"] += sum(r.status is Status.TIMEOUT for r in whole.requests)
                seen["restamped"] += sum(r.spec is not s for r, s in zip(whole.requests, specs))
                seen["hits"] += sum(r.hit_tokens > 0 for r in whole.requests)
        self.assertTrue(all(seen.values()), seen)   # every kind of record was packed and read back

    def test_a_record_the_columns_cannot_hold_is_kept_whole(self):
        specs = [RequestSpec(f"r{i}", i, None, 0, 5, 3) for i in range(3)]
        ended = EndedRequests(specs)
        plain = Request(specs[0], 0, Status.DONE, admitted_at=0, token_times=[2, 3, 4], done_at=4)
        odd = Request(specs[1], 1, Status.DONE, admitted_at=1, token_times=[2, 3, 4], done_at=Fraction(9, 2))
        late = Request(specs[2], 2, Status.TIMEOUT, admitted_at=None, done_at=7)
        late._runs = ()
        for rec in (plain, odd, late):
            ended.add(rec)
        self.assertIs(ended[1], odd)   # a done_at that is no whole tick: the record itself
        self.assertEqual(_state(ended[0])[2:8], (Status.DONE, 0, 0, 0, None, 4))
        self.assertEqual(ended[0].token_runs, [(2, 3)])
        self.assertEqual((ended[2].status, ended[2].admitted_at, ended[2].done_at, ended[2].token_runs),
                         (Status.TIMEOUT, None, 7, []))
        rows = list(ended.summary_fields())
        self.assertEqual(rows[1][:6], (Status.DONE, 1, 1, Fraction(9, 2), 0, None))
        self.assertEqual(list(rows[0][6]), [2, 3])
        self.assertEqual(ended.successful_ttfts(), ([0, 1], [2, 1]))
        self.assertEqual(list(ended.fields()), [(Status.DONE, 4, 0, 0, 0, (), (2, 3), None, specs[0]), RECORD_FIELDS(odd),
                                                (Status.TIMEOUT, 7, None, 0, 0, (), (), None, specs[2])])

    def test_a_request_not_ended(self):
        specs = [RequestSpec("a", 0, None, 0, 5, 3), RequestSpec("b", 1, None, 0, 5, 3)]
        ended = EndedRequests(specs)
        self.assertEqual(_state(ended[1]), _state(Request(specs[1], 1)))   # not arrived yet
        with self.assertRaises(ValueError):
            list(ended.summary_fields())
        with self.assertRaises(ValueError):
            ended.add(Request(specs[0], 0))   # still waiting: nothing to pack

    def test_ended_records_are_let_go_while_the_run_goes_on(self):
        """Only the requests in flight hold a record: none is made before its request arrives, and
        an ended one is let go (200 requests, a few in flight at any step)."""
        specs = [RequestSpec(f"r{i}", i, None, 0, 3, 2) for i in range(200)]
        simulation = vllm_engine.VllmSimulation(specs, VllmKnobs(64, 4), timeline="counts")
        self.assertIsInstance(simulation.requests, EndedRequests)
        live = []

        def progress(case, now, num_ended, num_requests):
            records = sum(1 for o in gc.get_objects() if type(o) is Request)
            live.append(records - len(simulation.running) - simulation.waiting.size)
            self.assertLessEqual(records, 8)

        simulation.run(progress)
        self.assertEqual(max(live), 0)   # every record alive belongs to a request in flight
        self.assertEqual(len(live), simulation.num_steps)

if __name__ == "__main__":
    unittest.main()
