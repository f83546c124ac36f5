"""The millisecond run's per-token shortcuts give what the plain per-token paths give.

- ``sched.core.step_stamps.restamp`` (step ordinals -> step ends) builds the same token runs as setting
  ``token_times`` token by token; when two step ends are 1 µs apart their tokens merge into one run.
- ``requests.jsonl`` of a step-model run written as text (ms fields appended, each stamp formatted
  once, or sliced from the step ends' texts: :mod:`sched.timing.step_ends`) is, line for line, what
  decoding each line and encoding it again with the ms fields gives; so is ``timeline.jsonl``.
"""

import json
import unittest
from dataclasses import replace

from sched.core.records import Request, CurrentTick
from sched.core.step_stamps import restamp
from sched.runs.bench import synthetic
from sched.output.jsonl_lines import request_lines, timeline_lines
from sched.timing import msrun
from sched.timing.ms_lines import _ms, _request_line, request_lines_ms, timeline_lines_ms
from sched.timing.step_ends import StepEnds
from sched.timing.replay import knobs_from_settings
from sched.timing.stepmodel import StepModel
from sched.workload.specs import RequestSpec

SETTINGS = {"num_gpu_blocks": 400, "block_size": 16, "max_num_batched_tokens": 256, "max_num_seqs": 8,
            "long_prefill_token_threshold": 0, "enable_prefix_caching": True, "policy": "fcfs"}


def _request(runs):
    request = Request.fresh(RequestSpec("r", 0, None, 0, 10, 9), 0, CurrentTick())
    for start, count in runs:
        request.emit(start, count)
    return request


class RestampTest(unittest.TestCase):
    def test_spaced_times_give_one_run_per_token(self):
        times = [None, 100, 250, 400, 700, 1000, 1300]
        fast, slow = _request([(1, 3), (5, 2)]), _request([(1, 3), (5, 2)])
        restamp(fast, times, spaced=True)
        slow.token_times = [times[s] for s in (1, 2, 3, 5, 6)]
        self.assertEqual(fast.token_runs, [(100, 1), (250, 1), (400, 1), (1000, 1), (1300, 1)])
        self.assertEqual(fast.token_runs, slow.token_runs)
        self.assertEqual(fast.num_tokens, 5)

    def test_ends_one_microsecond_apart_merge(self):
        # Steps 2 and 3 end 1 µs apart: their two tokens are one run [50, 2].
        times = [None, 10, 50, 51, 90]
        request = _request([(1, 4)])
        restamp(request, times, spaced=False)
        self.assertEqual(request.token_runs, [(10, 1), (50, 2), (90, 1)])
        self.assertEqual(request.num_tokens, 4)


class MsRequestLinesTest(unittest.TestCase):
    def test_text_lines_equal_decoded_and_encoded_lines(self):
        workload = synthetic(60, seed=3)
        # Preempted requests (several spans of step ends) in the first two; in the third a deadline of
        # 1.5 s (sync scheduling) ends every request, one of them after its last token.
        for async_scheduling, timeout in ((False, None), (True, None), (False, 1_500_000)):
            with self.subTest(async_scheduling=async_scheduling, timeout=timeout):
                knobs = replace(knobs_from_settings(SETTINGS, async_scheduling=async_scheduling), timeout_ticks=timeout)
                model = StepModel(5.0, 0.01, 0.3, dict(SETTINGS), {"model": "m"})
                run = msrun.run_with_step_model(workload, knobs, model, "w.json", "counts")
                slow = [_request_line(line) for line in request_lines(run)]
                self.assertEqual(list(request_lines_ms(run)), slow)
                self.assertEqual(list(request_lines_ms(run, [StepEnds(r.requests) for r in run.results])), slow)
                self.assertTrue(any('"tpot_ms": null' not in line for line in slow) or timeout)
                records = run.results[0].ticks
                decoded = [json.dumps({**json.loads(line), "start_ms": _ms(k.tick), "duration_ms": _ms(k.duration)},
                                      ensure_ascii=False) + "\n" for line, k in zip(timeline_lines(run), records)]
                self.assertEqual(list(timeline_lines_ms(run)), decoded)
                # The compact lines (one-token runs written as "[s, 1]" each) are json.dumps' text.
                lines = list(request_lines(run))
                self.assertTrue(any(line.count(", 1]") > 3 for line in lines) or timeout)
                for line, r in zip(lines, run.results[0].requests):
                    self.assertEqual(json.dumps(json.loads(line), ensure_ascii=False), line)
                    self.assertEqual(json.loads(line)["token_runs"], [list(pair) for pair in r.token_runs])


if __name__ == "__main__":
    unittest.main()
