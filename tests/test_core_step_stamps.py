"""A step-time run's requests keep their stamps as step ordinals (sched.core.step_stamps.StepStampedRequest).

``restamp(request, times, spaced=True)`` no longer writes a µs stamp per token: the request keeps its
runs of step ordinals and reads each stamp ``s`` as ``times[s]``. By hand (µs):

    times = [None, 100, 250, 400, 700, 1000, 1300]      (step s ends at times[s]; nobody samples in step 4)
    runs of ordinals (1, 3), (5, 2)  ->  tokens at 100, 250, 400, 1000, 1300

Every reading gives the µs values; the readers that take ``_runs`` in C (the summary, the compact
``requests.jsonl`` lines, the invariants' screen) read the first and last stamp through the step ends
(``shared_step_ends``); ``StepEnds`` takes its spans straight from the ordinals. Each is checked
against the same requests with their µs stamps written token by token (the per-token definition).
"""

import random
import unittest
from dataclasses import replace

from sched.core.invariants import InvariantError
from sched.core.metrics import summarize
from sched.core.records import CaseResult, CurrentTick, Request, Status
from sched.core.step_stamps import StepStampedRequest, restamp, shared_step_ends
from sched.output.jsonl_lines import request_lines
from sched.runs.bench import synthetic
from sched.timing import msrun
from sched.timing.replay import knobs_from_settings
from sched.timing.step_ends import StepEnds
from sched.timing.stepmodel import StepModel
from sched.vllm.invariants import check_vllm_case
from sched.core.invariants import fail
from sched.workload.specs import RequestSpec

TIMES = [None, 100, 250, 400, 700, 1000, 1300]


def _request(runs, output=5, index=0):
    request = Request.fresh(RequestSpec(f"r{index}", 0, None, 0, 10, output), index, CurrentTick())
    for start, count in runs:
        request.emit(start, count)
    request.status, request.admitted_at = Status.DONE, 0
    return request


class HandMadeTest(unittest.TestCase):
    def setUp(self):
        self.request = _request([(1, 3), (5, 2)])
        self.request.done_at = 1300
        restamp(self.request, TIMES, spaced=True)

    def test_every_reading_gives_microseconds(self):
        r = self.request
        self.assertIs(type(r), StepStampedRequest)
        self.assertEqual(r.token_times, [100, 250, 400, 1000, 1300])
        self.assertEqual(r.token_runs, [(100, 1), (250, 1), (400, 1), (1000, 1), (1300, 1)])
        self.assertEqual(r.flat_token_runs, [100, 1, 250, 1, 400, 1, 1000, 1, 1300, 1])
        self.assertEqual((r.first_token_at, r.last_token_at, r.num_tokens), (100, 1300, 5))

    def test_setting_stamps_makes_an_ordinary_request(self):
        r = self.request
        r.token_times = [5, 9]
        self.assertIs(type(r), Request)
        self.assertEqual((r.token_runs, r.first_token_at, r.last_token_at, r.num_tokens), ([(5, 1), (9, 1)], 5, 9, 2))

    def test_spans_straight_from_the_ordinals(self):
        """Step s is ends[s - 1]; the step nobody sampled in (4, 700 µs) is an end no span names."""
        other = _request([(2, 2)], output=2, index=1)
        other.done_at = 400
        restamp(other, TIMES, spaced=True)
        ends = StepEnds([self.request, other])
        self.assertEqual(ends.ends, [100, 250, 400, 700, 1000, 1300])
        self.assertEqual(ends.spans, [(0, 3, 4, 2), (1, 2)])
        self.assertEqual(list(ends.runs_texts()), ["[100, 1], [250, 1], [400, 1], [1000, 1], [1300, 1]",
                                                   "[250, 1], [400, 1]"])
        self.assertEqual(list(ends.times_ms_texts()), ["0.1, 0.25, 0.4, 1.0, 1.3", "0.25, 0.4"])
        self.assertEqual(ends.itl_histogram(), {150: 3, 600: 1, 300: 1})   # 150, 150, 600, 300; 150

    def test_shared_step_ends(self):
        other = _request([(2, 2)], output=2, index=1)
        restamp(other, TIMES, spaced=True)
        self.assertIs(shared_step_ends([self.request, other]), TIMES)
        self.assertIs(shared_step_ends((self.request, other)), TIMES)   # any sequence
        self.assertIsNone(shared_step_ends([_request([(3, 1)])]))
        self.assertIsNone(shared_step_ends([]))
        # Only some keep ordinals: those get their µs stamps one by one, and no list is shared.
        plain = _request([(7, 1)], output=1, index=2)
        mixed = [self.request, plain]
        self.assertIsNone(shared_step_ends(mixed))
        self.assertEqual([type(r) for r in mixed], [Request, Request])
        self.assertEqual(self.request.token_runs, [(100, 1), (250, 1), (400, 1), (1000, 1), (1300, 1)])


SETTINGS = {"num_gpu_blocks": 300, "block_size": 16, "max_num_batched_tokens": 256, "max_num_seqs": 8,
            "long_prefill_token_threshold": 0, "enable_prefix_caching": True, "policy": "fcfs"}


def _plain_copy(result: CaseResult) -> CaseResult:
    """The same case with every request's µs stamps written token by token (ordinary requests)."""
    copies = []
    for r in result.requests:
        copy = Request(r.spec, r.index, status=r.status, admitted_at=r.admitted_at, hit_tokens=r.hit_tokens,
                       token_times=r.token_times, done_at=r.done_at)
        copy.num_preemptions, copy.preempted_at = r.num_preemptions, r.preempted_at
        copies.append(copy)
    return replace(result, requests=copies)


class StepModelRunTest(unittest.TestCase):
    """Small step-model runs (sync and async, preemptions, a deadline): the readers in C give what the
    per-token stamps give."""

    def runs(self):
        workload = synthetic(80, seed=5)
        for async_scheduling, timeout in ((False, None), (True, None), (False, 1_500_000)):
            knobs = replace(knobs_from_settings(SETTINGS, async_scheduling=async_scheduling), timeout_ticks=timeout)
            run = msrun.run_with_step_model(workload, knobs, StepModel(5.0, 0.01, 0.3, dict(SETTINGS), {"model": "m"}),
                                            "w.json", "counts")
            yield run, run.results[0]

    def test_summary_lines_and_spans_equal_the_per_token_ones(self):
        for run, result in self.runs():
            with self.subTest(async_scheduling=result.config.async_scheduling, timeout=result.config.timeout_ticks):
                self.assertTrue(all(type(r) is StepStampedRequest for r in result.requests))
                self.assertTrue(any(r.num_preemptions for r in result.requests))
                plain = _plain_copy(result)
                ends, plain_ends = StepEnds(result.requests), StepEnds(plain.requests)
                self.assertEqual(ends.itl_histogram(), plain_ends.itl_histogram())
                self.assertEqual(list(ends.runs_texts()), list(plain_ends.runs_texts()))
                self.assertEqual(list(ends.times_ms_texts()), list(plain_ends.times_ms_texts()))
                self.assertEqual(ends.pooled_itl(1e6).values, plain_ends.pooled_itl(1e6).values)
                gaps = ends.itl_histogram()
                self.assertEqual(summarize(result, gaps), summarize(plain, gaps))
                self.assertEqual(summarize(result), summarize(plain))
                self.assertEqual(list(request_lines(run)), list(request_lines(replace(run, results=[plain]))))
                as_tuple = replace(result, requests=tuple(result.requests))   # any sequence of records
                self.assertEqual(summarize(as_tuple, gaps), summarize(plain, gaps))
                check_vllm_case(result, fail)

    def test_the_invariants_see_a_broken_stamp(self):
        seen = {"preempted": 0, "several runs": 0}
        for _, result in self.runs():
            ok = next(r for r in result.requests if r.status is Status.DONE and r.num_tokens > 1)
            ok.done_at += 1   # ended ok, but not at its last token's stamp
            with self.assertRaisesRegex(InvariantError, f"request {ok.index} .*ended ok at"):
                check_vllm_case(result, fail)
            ok.done_at -= 1
            ok.admitted_at, admitted = ok.first_token_at, ok.admitted_at   # its first token not after admission
            with self.assertRaisesRegex(InvariantError, f"request {ok.index} .*token times"):
                check_vllm_case(result, fail)
            ok.admitted_at = admitted
            # A preempted request (checked rule by rule): its last token's stamp is not its end.
            preempted = next((r for r in result.requests if r.num_preemptions and r.status is Status.DONE), None)
            if preempted is not None:
                seen["preempted"] += 1
                preempted.done_at -= 1
                with self.assertRaisesRegex(InvariantError, f"request {preempted.index} .*ended ok at"):
                    check_vllm_case(result, fail)
                preempted.done_at += 1
            # Ordinals out of order: a request's second of three or more runs starting where its first does.
            several = next((r for r in result.requests if len(r._runs) >= 6 and r.status is Status.DONE), None)
            if several is not None:
                seen["several runs"] += 1
                runs = several._runs
                several._runs = [*runs[:2], runs[0], *runs[3:]]
                with self.assertRaisesRegex(InvariantError, f"request {several.index} .*strictly increase"):
                    check_vllm_case(result, fail)
                several._runs = runs
            check_vllm_case(result, fail)
        self.assertTrue(all(seen.values()), seen)


if __name__ == "__main__":
    unittest.main()
