"""The ``counts`` timeline's batched decode records (sched/vllm/records.py) against its own
definition: :meth:`StepLog.add_decode_steps` must leave exactly the records that :meth:`StepLog.add_step`
leaves when given the same steps one by one (vllm-engine.md §5; the merge rule of lab.md §7).

Random runs of single steps and decode-only stretches are fed to both logs, with the record bound
made small so that the span doubles inside a stretch and stretches start in every position of a
merged record; durations are fractional so that a record's duration must be summed as the step by
step merge sums it. ``ISL_FULL=1`` runs 1,500 sequences instead of 150.
"""

import os
import random
import unittest
from unittest import mock

from sched.vllm import records as vllm_records
from sched.vllm.records import StepLog

SEQUENCES = 1500 if os.environ.get("ISL_FULL") == "1" else 150


class _Req:
    """A stand-in request: the log reads its ``spec.name`` only in ``full``."""

    class spec:
        name = "r"


def _fields(log: StepLog) -> list:
    return [tuple(getattr(r, f) for f in r.__slots__) for r in log.records]


def _feed(rng: random.Random, detail: str, bound: int) -> tuple:
    """One random run fed to a batched log and a step-by-step log; returns both logs' records and
    how many stretches were batched."""
    batched, literal = StepLog(detail), StepLog(detail)
    step, t, kv, waiting, stretches = rng.randint(0, 5), rng.choice([0, 0.1, 7]), 3, 0, 0
    with mock.patch.object(vllm_records, "MAX_COUNTS_RECORDS", bound):
        for _ in range(rng.randint(1, 40)):
            if rng.random() < 0.5:   # one step with admissions and a finish
                d = rng.choice([1, 0.1, 0.25, 2.5])
                args = (step, t, d, [(_Req, 3)], 2, 1, [], [_Req], [], [_Req] * rng.randint(0, 1), [], kv,
                        rng.randint(1, 9), waiting)
                batched.add_step(*args)
                literal.add_step(*args)
                step, t = step + 1, t + d
                kv = max(0, kv - rng.randint(0, 3))
                continue
            count, running = rng.choice([1, 2, 3, 5, 8, 17, 40]), rng.randint(1, 9)
            starts, durations, kvs, waits = [], [], [], []
            for _ in range(count):   # blocks held and the queue only grow within a stretch
                kv += rng.choice([0, 0, 1, 2])
                waiting += rng.choice([0, 0, 0, 1])
                d = rng.choice([1, 1, 0.1, 0.3]) if rng.random() < 0.3 else 1
                starts.append(t)
                durations.append(d)
                kvs.append(kv)
                waits.append(waiting)
                t += d
            decode = rng.choice([running, 2 * running])
            batched.add_decode_steps(step, starts, durations, decode, kvs, running, waits)
            for j in range(count):
                literal.add_step(step + j, starts[j], durations[j], (), 0, decode, (), (), (), (), (), kvs[j], running,
                                 waits[j])
            step += count + rng.choice([0, 0, 1, 3])   # idle steps between (a gap in the ordinals)
            stretches += 1
    return _fields(batched), _fields(literal), stretches, batched._span


class StepLogBatchTest(unittest.TestCase):

    def test_batched_decode_steps_equal_step_by_step(self):
        rng = random.Random(20261202)
        spans = set()
        for i in range(SEQUENCES):
            bound = rng.choice([4, 5, 8, 13, 32768])
            for detail in ("counts", "full", "off"):
                batched, literal, stretches, span = _feed(random.Random(rng.random()), detail, bound)
                self.assertEqual(batched, literal, f"sequence {i}, {detail}, bound {bound}")
                if detail == "counts":
                    spans.add(span)
        self.assertTrue({1, 2, 4, 8} <= spans, spans)   # the span doubled inside runs, several times

    def test_ranges_as_sequences(self):
        # Unit steps given as ranges: the same records as lists.
        for bound in (5, 32768):
            with mock.patch.object(vllm_records, "MAX_COUNTS_RECORDS", bound):
                a, b = StepLog("counts"), StepLog("counts")
                for first in (0, 3, 30, 31, 50):
                    a.add_decode_steps(first, range(first, first + 3), [1] * 3, 4, [5, 5, 6], 4, [0, 1, 1])
                    b.add_decode_steps(first, list(range(first, first + 3)), [1, 1, 1], 4, [5, 5, 6], 4, [0, 1, 1])
            self.assertEqual(_fields(a), _fields(b))

    def test_hand_checked_records(self):
        # Span 4 (as after two halvings): a stretch of 7 steps from step 10 after
        # a record starting at step 9 fills that record (steps 9..12), then makes 13..16.
        log = StepLog("counts")
        log._span = 4
        log.add_step(9, 9, 1, (), 0, 2, (), (), (), (), (), 5, 2, 0)
        log.add_decode_steps(10, range(10, 17), [1] * 7, 2, [5, 6, 6, 6, 7, 7, 8], 2, [0, 0, 1, 1, 1, 2, 2])
        self.assertEqual(_fields(log), [
            # step tick steps duration prompt decode preempted admitted hits finished timeouts kv running waiting
            (9, 9, 4, 4, 0, 8, 0, 0, 0, 0, 0, 6, 2, 1),
            (13, 13, 4, 4, 0, 8, 0, 0, 0, 0, 0, 8, 2, 2),
        ])


if __name__ == "__main__":
    unittest.main()
