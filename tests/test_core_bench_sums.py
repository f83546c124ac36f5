"""numpy's pairwise summation (sched.core.pairwise_sum) and percentiles read from counts
(sched.core.bench_metrics.CountedSample), against numpy's algorithm written out here leaf by leaf
and against hand-made cases; against numpy itself where it happens to be installed (never required).

The reference :func:`numpy_order_sum` follows numpy's ``pairwise_sum`` (``loops_utils.h.src``) as
written: fewer than 8 values left to right; at most 128 with 8 running sums ``r[j] = a[j]``,
``r[j] += a[i + j]`` for ``i = 8, 16, ...`` below the largest multiple of 8, combined
``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, then the rest added one by one; more split
at ``n / 2`` rounded down to a multiple of 8.
"""

import math
import random
import unittest

from sched.core import pairwise_sum as module
from sched.core.bench_metrics import CountedSample, _linear, _stats, linear_percentile, np_median, np_std
from sched.core.pairwise_sum import pairwise_sum
from tests.helpers import FULL


def numpy_order_sum(a: list) -> float:
    n = len(a)
    if n < 8:
        res = -0.0
        for x in a:
            res += x
        return res
    if n <= 128:
        r = list(a[:8])
        whole = n - n % 8
        for i in range(8, whole, 8):
            for j in range(8):
                r[j] += a[i + j]
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for x in a[whole:]:
            res += x
        return res
    half = n // 2
    half -= half % 8
    return numpy_order_sum(a[:half]) + numpy_order_sum(a[half:])


def samples(rng: random.Random, n: int) -> list:
    kind = rng.choice(("exp", "wide", "ties", "signs"))
    if kind == "exp":
        return [rng.expovariate(4) for _ in range(n)]
    if kind == "wide":   # magnitudes 1e-20 .. 1e20 of both signs: the order of additions shows in the bits
        return [rng.uniform(-1, 1) * 10.0 ** rng.randint(-20, 20) for _ in range(n)]
    if kind == "ties":   # few distinct values, as a step-model run's ITLs
        return [rng.choice((0.024645, 0.08085, 0.196056)) for _ in range(n)]
    return [rng.choice((-0.0, 0.0, 1e300, -1e300, 1e-300, 3.5)) for _ in range(n)]


class PairwiseSumTest(unittest.TestCase):
    def assert_same_double(self, a: float, b: float, what) -> None:
        self.assertEqual((repr(a), math.copysign(1, a)), (repr(b), math.copysign(1, b)), what)

    def test_the_order_matters_and_is_numpys(self):
        """136 values, big = 2**53 (above it doubles are 2 apart: big + 1 is a tie, rounded to the
        even big): [big, 63 × 1.0, −big, 71 × 2.0]. Split at 68 rounded down to 64: leaves of 64 and 72.
        Leaf 1: r0 = big + 7 × 1.0 = big (each 1.0 lost), r1..r7 = 8.0 each -> big + 56.
        Leaf 2: r0 = −big + 8 × 2.0 (exact below 2**53), r1..r7 = 18.0 each -> −big + 16 + 126.
        Sum: 56 + 142 = 198.0. Left to right: every 1.0 is lost, then −big, then 71 × 2.0: 142.0."""
        big = 2.0 ** 53
        values = [big] + [1.0] * 63 + [-big] + [2.0] * 71
        self.assertEqual(pairwise_sum(values), 198.0)
        self.assertEqual(numpy_order_sum(values), 198.0)
        left_to_right = 0.0
        for x in values:
            left_to_right += x
        self.assertEqual(left_to_right, 142.0)

    def test_empty_and_signed_zeros(self):
        self.assert_same_double(pairwise_sum([]), -0.0, "empty: numpy's -0.0 start")
        self.assert_same_double(pairwise_sum([-0.0] * 300), -0.0, "300 negative zeros stay negative")
        self.assert_same_double(pairwise_sum([0.0] + [-0.0] * 299), 0.0, "one positive zero")

    def test_random_against_numpys_order(self):
        """Every size up to 300 (each branch: < 8, one leaf, a split, the last leaf's rest) and
        larger ones, on both ways of summing the leaves (the builtin ``sum`` in C doubles before
        Python 3.12, column by column with ``map(add, ...)`` on any Python): the same double as the
        leaf-by-leaf reference."""
        rng = random.Random(23)
        sizes = list(range(0, 301)) + [1000, 1025, 8193, 20011]
        if FULL:   # more and larger sizes
            sizes += [1023, 1024, 8191, 8192, 65536, 65541, 99999] + [rng.randint(300, 40000) for _ in range(40)]
        chosen = module._leaf_sums
        try:
            for way in (module._leaf_sums_by_columns, module._leaf_sums_by_builtin):
                if way is module._leaf_sums_by_builtin and chosen is not way:
                    continue   # Python 3.12+: the builtin sum is compensated, not numpy's plain additions
                module._leaf_sums = way
                for n in sizes:
                    values = samples(rng, n)
                    self.assert_same_double(pairwise_sum(values), numpy_order_sum(values), (way.__name__, n))
        finally:
            module._leaf_sums = chosen

    def test_against_numpy_where_installed(self):
        try:
            import numpy
        except ImportError:
            self.skipTest("numpy not installed (the reference above stands alone)")
        rng = random.Random(5)
        for n in (129, 136, 1000, 8193, 30011):
            values = samples(rng, n)
            self.assertEqual(repr(0.0 + pairwise_sum(values)), repr(float(numpy.sum(numpy.array(values)))), n)


def module_linear(ranked, p: float) -> float:
    at, size = ranked
    return _linear(at, size, p)


class CountedSampleTest(unittest.TestCase):
    """Median and linear percentiles read from counts: the same doubles as on the sorted list."""

    def test_by_hand(self):
        """[0.1, 0.1, 0.3, 0.2] as counts {0.1: 2, 0.2: 1, 0.3: 1}: sorted [0.1, 0.1, 0.2, 0.3];
        median (0.1 + 0.2) / 2; P50 at index 1.5 -> 0.1 + (0.2 − 0.1) × 0.5 taken from the upper end
        (t >= 0.5): 0.2 − 0.1 × 0.5; P99 at 2.97 -> 0.3 − 0.1 × 0.03; P0 the smallest, P100 the largest."""
        values = [0.1, 0.1, 0.3, 0.2]
        at, size = CountedSample(values, {0.1: 2, 0.2: 1, 0.3: 1}).ranked()
        self.assertEqual([at(k) for k in range(size)], [0.1, 0.1, 0.2, 0.3])
        row = _stats(CountedSample(values, {0.1: 2, 0.2: 1, 0.3: 1}), "itl", (0, 50, 99, 100))
        self.assertEqual(row["median_itl_ms"], (0.1 + 0.2) / 2 * 1000)
        self.assertEqual(row["p50_itl_ms"], (0.2 - (0.2 - 0.1) * 0.5) * 1000)
        self.assertEqual(row["p99_itl_ms"], (0.3 - (0.3 - 0.2) * (1 - (3 * 0.99 - 2))) * 1000)
        self.assertEqual((row["p0_itl_ms"], row["p100_itl_ms"]), (0.1 * 1000, 0.3 * 1000))

    def test_random_against_the_sorted_list(self):
        rng = random.Random(7)
        for _ in range(100):
            values = [rng.choice((0.1, 0.2, 0.25, 1e-3, 7.0)) * rng.randint(1, 4) for _ in range(rng.randint(1, 300))]
            counts = {}
            for v in values:
                counts[v] = counts.get(v, 0) + 1
            centre = sum(values) / len(values)
            sample = CountedSample(values, counts, lambda c: [(x - c) * (x - c) for x in values])
            percentiles = (0, 25, 50, 90, 99, 99.9, 100, rng.uniform(0, 100))
            self.assertEqual(_stats(sample, "x", percentiles), _stats(values, "x", percentiles))
            ranked = CountedSample(values, counts).ranked()
            for p in percentiles:
                self.assertEqual(module_linear(ranked, p), linear_percentile(values, p))
            self.assertEqual(np_median(values) * 1000, _stats(sample, "x", ())["median_x_ms"])
            self.assertEqual(np_std(values, centre), np_std(values, centre, [(x - centre) ** 2 for x in values]))


if __name__ == "__main__":
    unittest.main()
