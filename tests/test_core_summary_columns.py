"""``summarize`` keeps its per-request columns as 8-byte integer arrays (:mod:`sched.core.samples`) (lab.md §5's samples, one
value per successful request); a value an array cannot hold (a float, an integer beyond 64 bits)
turns that column into a list holding it exactly. Percentiles over the columns are checked against
plain computations in tests/test_analysis_streamed.py; here, the columns themselves."""

import unittest
from array import array
from fractions import Fraction

from sched.core import metrics, samples


class SummaryColumnsTest(unittest.TestCase):
    def test_integers_stay_in_arrays(self):
        columns = [array("q"), [], array("q")]
        samples.extend_columns(columns, [(1, None, 3), (4, 2, 6)])
        samples.extend_columns(columns, [(7, 0, 9)])
        self.assertEqual([type(c) for c in columns], [array, list, array])
        self.assertEqual([list(c) for c in columns], [[1, 4, 7], [None, 2, 0], [3, 6, 9]])

    def test_a_value_beyond_32_bits_widens_the_array(self):
        columns = [array("i"), array("i")]
        metrics_rows = [(1, 2), (3, 4)]
        samples.extend_columns(columns, metrics_rows)
        samples.extend_columns(columns, [(5, 2**40), (6, -2**63)])
        self.assertEqual([c.typecode for c in columns], ["i", "q"])
        self.assertEqual(list(columns[1]), [2, 4, 2**40, -2**63])

    def test_a_value_an_array_cannot_hold_turns_the_column_into_a_list(self):
        for odd in (2.5, 2**64, Fraction(1, 3), -2**63 - 1):
            with self.subTest(odd=odd):
                columns = [array("i"), array("i")]
                samples.extend_columns(columns, [(1, 1), (2, 2)])
                samples.extend_columns(columns, [(3, odd), (4, 5)])
                self.assertEqual([type(c) for c in columns], [array, list])
                self.assertEqual(columns[1], [1, 2, odd, 5])
                self.assertEqual(type(columns[1][2]), type(odd))

    def test_drawn_values_keep_the_column_kind(self):
        self.assertEqual(samples.like(array("q", [3, 4]), iter([3])), array("q", [3]))
        self.assertEqual(samples.like([3, 2.5], iter([2.5])), [2.5])

    def test_ordered_sample_gives_the_nearest_rank_either_way(self):
        """A sample of few values is kept as a histogram, one of many as the sorted list; the
        percentiles (the ceil(p/100 · n)-th smallest), mean, least and greatest are the same."""
        import math
        import random
        rng = random.Random(7)
        for label, values in (("few", [rng.randrange(40) for _ in range(5000)]),
                              ("many", [rng.randrange(10**9) for _ in range(5000)])):
            with self.subTest(label):
                ordered = samples.ordered_sample(array("q", values), chunk=512)
                self.assertIs(type(ordered) is list, label == "many")
                plain = sorted(values)
                for p in (1, 50, 90, 95, 99, 100):
                    self.assertEqual(metrics._rank(ordered, p), plain[math.ceil(p / 100 * len(plain)) - 1])
                stats = metrics._sorted_stats("x", ordered)
                self.assertEqual(stats["mean_x"], Fraction(sum(values), len(values)))
                self.assertEqual(stats["x_samples"], len(values))
                self.assertEqual(samples.low_high(ordered), (min(values), max(values)))
        for label, values in (("few floats", [rng.randrange(6) / 4 for _ in range(3000)]),
                              ("many floats", [rng.random() for _ in range(3000)])):
            with self.subTest(label):
                ordered = samples.ordered_sample(array("d", values), chunk=256)
                plain = sorted(values)
                for rank in (0, 1, 1499, 2998, 2999):
                    value, lo, hi = samples.at_rank(ordered, rank)
                    self.assertEqual(value, plain[rank])
                    self.assertEqual((lo, hi), (plain.index(value), len(plain) - plain[::-1].index(value)))
                with self.assertRaises(IndexError):
                    samples.at_rank(ordered, 3000)
        empty = samples.ordered_sample(array("q"))
        self.assertEqual(metrics._sorted_stats("x", empty)["mean_x"], None)
        self.assertIsNone(metrics._rank(empty, 50))


if __name__ == "__main__":
    unittest.main()
