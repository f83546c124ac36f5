"""The lab's re-timed arrivals against vLLM 0.33.0's own ``get_request`` (tests/data/vllm-bench-oracle/arrivals.json).

``tools/vllm_bench_oracle.py`` seeded numpy's global generator with ``np.random.seed(seed)`` (as
``vllm bench serve`` does for ``--seed``), ran vLLM's ``get_request`` for ``num_requests`` requests at
``request_rate`` and ``burstiness`` on a stubbed clock, and recorded each request's send time in
seconds (provenance in ``tests/data/SOURCES.md``). The lab's :func:`bench_send_times` must give the
same times within a relative difference of 1e-9 (they are in fact the same doubles): Poisson,
burstier and more even gamma shapes, a shape of 0.05, seed 2**32 − 1, 1,000 requests, and the
``inf`` rate and burstiness.
"""

import json
import math
import os
import unittest

from sched.workload.bench_arrivals import bench_send_times, retime
from sched.workload.specs import RequestSpec

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vllm-bench-oracle", "arrivals.json")
TOLERANCE = 1e-9

with open(FIXTURE, encoding="utf-8") as _handle:
    ORACLE = json.load(_handle)


def number(value):
    return math.inf if value == "inf" else value


class VllmSendTimesTest(unittest.TestCase):
    def test_fixture_is_vllms(self):
        self.assertEqual(ORACLE["vllm_version"], "0.33.0")
        shapes = {number(case["burstiness"]) for case in ORACLE["cases"]}
        self.assertTrue({0.05, 0.3, 1.0, 4.0, math.inf} <= shapes)
        self.assertIn(math.inf, {number(case["request_rate"]) for case in ORACLE["cases"]})

    def test_every_triple(self):
        for case in ORACLE["cases"]:
            rate, burstiness, seed = number(case["request_rate"]), number(case["burstiness"]), case["seed"]
            with self.subTest(rate=rate, burstiness=burstiness, seed=seed):
                times = bench_send_times(case["num_requests"], rate, burstiness, seed)
                expected = case["send_times"]
                self.assertEqual(len(times), len(expected))
                for i, (mine, theirs) in enumerate(zip(times, expected)):
                    difference = 0.0 if mine == theirs else abs(mine - theirs) / max(abs(mine), abs(theirs))
                    self.assertLess(difference, TOLERANCE, (i, mine, theirs))

    def test_retimed_workload_holds_them_to_the_microsecond(self):
        """The workload a run re-times (``--request-rate 6 --burstiness 0.5 --seed 3``) sends request
        ``i`` at vLLM's ``i``-th time rounded to whole µs."""
        case = next(c for c in ORACLE["cases"] if (c["request_rate"], c["burstiness"], c["seed"]) == (6.0, 0.5, 3))
        specs = [RequestSpec(name=f"r{i}", arrival=0, prefix_key=None, prefix_tokens=0, suffix_tokens=8,
                             output_tokens=2) for i in range(case["num_requests"])]
        arrivals = [spec.arrival for spec in retime(specs, 6.0, 0.5, 3)]
        self.assertEqual(arrivals, [round(t * 1_000_000) for t in case["send_times"]])


if __name__ == "__main__":
    unittest.main()
