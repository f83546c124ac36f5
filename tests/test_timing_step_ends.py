"""A millisecond run's token stamps as spans of its step ends (sched.timing.step_ends), by hand and
against the per-token definitions they replace.

Hand-made case (stamps in µs; status ok unless said):

- A: tokens at 100, 250, 400          -> ends 0..2, one span (0, 3); gaps 150, 150
- B: tokens at 250, 400, 700, 900     -> B skipped nothing: one span (1, 4); gaps 150, 300, 200
- C: tokens at 100, 250, 900          -> sat out 400 and 700: spans (0, 2), (5, 1); gaps 150, 650
- D: no token (timed out)             -> ()
- E: runs [[50, 2]] (two tokens 50, 51: a run of two) -> no spans (None); gap 1
- F: timed out after tokens at 700, 900 -> one span (3, 2); its gap 200 is not counted (not ok)

The distinct stamps of A, B, C, F (E has no spans): 100, 250, 400, 700, 900 -> ends indices 0..4.
"""

import math
import random
import unittest
from collections import Counter
from types import SimpleNamespace

from sched.core.metrics import gap_histogram
from sched.core.pairwise_sum import pairwise_sum
from sched.core.records import Request, Status
from sched.timing.bench_rows import bench_requests
from sched.timing.step_ends import StepEnds, ms_text
from sched.workload.specs import RequestSpec
from tests.test_core_bench_sums import numpy_order_sum


def request(name: str, times: list, status: Status = Status.DONE) -> Request:
    spec = RequestSpec(name, 0, None, 0, 16, max(1, len(times)))
    return Request(spec, 0, status=status, admitted_at=0, token_times=times, done_at=times[-1] if times else 1000)


def case():
    return [request("A", [100, 250, 400]), request("B", [250, 400, 700, 900]), request("C", [100, 250, 900]),
            request("D", [], Status.TIMEOUT), request("E", [50, 51]), request("F", [700, 900], Status.TIMEOUT)]


class HandMadeTest(unittest.TestCase):
    def setUp(self):
        self.requests = case()
        self.ends = StepEnds(self.requests)

    def test_ends_and_spans(self):
        self.assertEqual(self.ends.ends, [100, 250, 400, 700, 900])
        self.assertEqual(self.ends.spans, [(0, 3), (1, 4), (0, 2, 4, 1), (), None, (3, 2)])

    def test_itl_histogram(self):
        """Ok requests only: A 150, 150; B 150, 300, 200; C 150, 650; E 1 (its run of two)."""
        expected = Counter({150: 4, 300: 1, 200: 1, 650: 1, 1: 1})
        self.assertEqual(self.ends.itl_histogram(), expected)
        self.assertEqual(gap_histogram(self.requests), expected)   # the definition it replaces

    def test_pooled_itl_in_request_order(self):
        """Seconds at 10**6 ticks a second, in request then token order; squares about a centre."""
        sample = self.ends.pooled_itl(1_000_000.0)
        gaps = [150, 150, 150, 300, 200, 150, 650, 1]
        self.assertEqual(sample.values, [g / 1_000_000.0 for g in gaps])
        self.assertEqual(sample.counts, {0.00015: 4, 0.0003: 1, 0.0002: 1, 0.00065: 1, 0.000001: 1})
        centre = 0.0002
        self.assertEqual(sample.squares(centre), [(g / 1e6 - centre) * (g / 1e6 - centre) for g in gaps])

    def test_texts(self):
        """requests.jsonl's token_runs pairs and token_times_ms values (without the outer brackets)."""
        self.assertEqual(list(self.ends.runs_texts()),
                         ["[100, 1], [250, 1], [400, 1]", "[250, 1], [400, 1], [700, 1], [900, 1]",
                          "[100, 1], [250, 1], [900, 1]", "", None, "[700, 1], [900, 1]"])
        self.assertEqual(list(self.ends.times_ms_texts()),
                         ["0.1, 0.25, 0.4", "0.25, 0.4, 0.7, 0.9", "0.1, 0.25, 0.9", "", None, "0.7, 0.9"])
        self.assertEqual([ms_text(v) for v in (None, 0, 1, 1500, 123456789)], ["null", "0.0", "0.001", "1.5", "123456.789"])

    def test_ms_text_is_rounded_ms(self):
        """An int µs time's text is ``repr(round(t / 1000, 3))`` (json.dumps' text of the rounded
        ms) without the round: every t from -1000 to 10**5, near each power of ten up to 10**15, and
        random ones up to 2**53; a float is rounded."""
        rng = random.Random(5)
        values = [*range(-1000, 100_000), *(10 ** k + d for k in range(16) for d in range(-50, 51)),
                  *(rng.randrange(2 ** 53) for _ in range(10_000))]
        self.assertEqual([ms_text(t) for t in values], [repr(round(t / 1000, 3)) for t in values])
        self.assertEqual(ms_text(1234.5678), "1.235")


class RandomRunsTest(unittest.TestCase):
    """Random cases: requests sampling at step ends with pauses and runs of two; every derived value
    equal to its per-token definition (the ITL histogram, the pooled sample, each request's texts)."""

    def test_against_per_token_definitions(self):
        rng = random.Random(11)
        for _ in range(40):
            steps = sorted(rng.sample(range(1, 10**7), rng.randint(1, 60)))
            requests = []
            for index in range(rng.randint(1, 25)):
                start = rng.randrange(len(steps))
                times = [t for t in steps[start:start + rng.randint(0, 30)] if rng.random() > 0.15]
                if times and rng.random() < 0.1:
                    times.append(times[-1] + 1)   # a run of two tokens: no spans for this request
                requests.append(request(f"r{index}", times, rng.choice((Status.DONE, Status.DONE, Status.TIMEOUT))))
            ends = StepEnds(requests)
            self.assertEqual(ends.itl_histogram(), gap_histogram(requests))
            ok = [r for r in requests if r.status is Status.DONE]
            pooled = [(b - a) / 1e6 for r in ok for a, b in zip(r.token_times, r.token_times[1:])]
            sample = ends.pooled_itl(1e6)
            self.assertEqual(sample.values, pooled)
            self.assertEqual(sample.counts, dict(Counter(pooled)))
            self.assertEqual(sample.squares(0.5), [(x - 0.5) * (x - 0.5) for x in pooled])
            for r, runs_text, times_text, spans in zip(requests, ends.runs_texts(), ends.times_ms_texts(), ends.spans):
                if spans is None:
                    self.assertIsNone(runs_text)
                    self.assertNotEqual(r.flat_token_runs[1::2].count(1) * 2, len(r.flat_token_runs))
                    continue
                self.assertEqual(runs_text, ", ".join(f"[{t}, 1]" for t in r.token_times))
                self.assertEqual(times_text, ", ".join(repr(round(t / 1000, 3)) for t in r.token_times))


class PooledSumsTest(unittest.TestCase):
    """The pooled ITL sample of a larger case (more than 8,193 gaps: many leaves and two groups of
    leaves) read as slices of the step ends' gaps: its sums in numpy's order are those of the
    per-token list, with requests of one span, of several spans (gaps between spans), without spans
    (runs of two tokens) and timed out, their slices crossing leaf edges anywhere."""

    def test_sums_against_the_per_token_list(self):
        rng = random.Random(3)
        steps = sorted(rng.sample(range(1, 10**8), 900))
        requests = []
        for index in range(160):
            start = rng.randrange(len(steps))
            times = [t for t in steps[start:start + rng.randint(0, 200)] if rng.random() > 0.03]
            if times and rng.random() < 0.1:
                times.append(times[-1] + 1)   # no spans for this request
            requests.append(request(f"r{index}", times, Status.TIMEOUT if rng.random() < 0.1 else Status.DONE))
        ends = StepEnds(requests)
        self.assertTrue(any(spans is None for spans in ends.spans))
        self.assertTrue(any(spans and len(spans) > 2 for spans in ends.spans))
        pooled = [(b - a) / 1e6 for r in requests if r.status is Status.DONE
                  for a, b in zip(r.token_times, r.token_times[1:])]
        self.assertGreater(len(pooled), 8193)
        sample = ends.pooled_itl(1e6)
        self.assertEqual((len(sample.values), list(sample.values)), (len(pooled), pooled))
        total = pairwise_sum(sample.values)
        self.assertEqual(repr(total), repr(numpy_order_sum(pooled)))
        centre = (0.0 + total) / len(pooled)
        squares = [(x - centre) * (x - centre) for x in pooled]
        self.assertEqual(list(sample.squares(centre)), squares)
        self.assertEqual(repr(pairwise_sum(sample.squares(centre))), repr(numpy_order_sum(squares)))
        self.assertFalse(math.isnan(total))


class BenchRequestsTest(unittest.TestCase):
    def test_counts_and_first_stamps_from_spans(self):
        """The hand-made case: a request's token count and TTFT (first stamp − arrival 0, in s) from
        its spans when the step ends are given: A 3 tokens from 100 µs, B 4 from 250, C 3 from 100,
        E (no spans: its runs) 2 from 50; D and F timed out."""
        requests = case()
        result = SimpleNamespace(requests=requests)
        by_spans, duration = bench_requests(result, itl=False, ends=StepEnds(requests))
        self.assertEqual([(r.success, r.output_len, r.ttft) for r in by_spans],
                         [(True, 3, 100e-6), (True, 4, 250e-6), (True, 3, 100e-6), (False, 0, 0.0),
                          (True, 2, 50e-6), (False, 0, 0.0)])
        self.assertEqual((by_spans, duration), bench_requests(result, itl=False))


if __name__ == "__main__":
    unittest.main()
