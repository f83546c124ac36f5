"""numpy's pairwise summation of values given as slices of one list (sched.core.pairwise_sum.Pieces):
the same double as the same values in one list, against numpy's order written out leaf by leaf
(:func:`tests.test_core_bench_sums.numpy_order_sum`).

Leaves hold at most 128 values and the running sums are made 64 leaves (8,192 values) at a time, so
the sizes tried sit on both sides of those edges (0, 1, 7, 8, 127, 128, 129, 8191, 8192, 8193) and
the cuts are drawn so that slices begin and end inside leaves, on leaf edges, are empty, or hold one
value.
"""

import math
import random
import unittest

from sched.core import pairwise_sum as module
from sched.core.bench_metrics import CountedSample, _stats, np_mean, np_std
from sched.core.pairwise_sum import Pieces as PiecesOf, pairwise_sum
from tests.helpers import FULL
from tests.test_core_bench_sums import numpy_order_sum, samples

SIZES = (0, 1, 7, 8, 127, 128, 129, 8191, 8192, 8193)


def Pieces(source: list, cuts: list) -> PiecesOf:
    """The slices ``source[start:stop]`` for each pair of ``cuts``."""
    return PiecesOf(source, [start for start, _ in cuts], [stop for _, stop in cuts])


def random_cuts(rng: random.Random, source: list, size: int, longest: int) -> list:
    """Cuts of ``source`` holding ``size`` values in all: lengths 0 .. ``longest`` (0 and 1 often),
    anywhere in ``source``."""
    cuts, left = [], size
    while left:
        length = min(left, len(source), rng.choice((0, 1, rng.randint(0, longest), rng.randint(0, longest))))
        start = rng.randint(0, len(source) - length)
        cuts.append((start, start + length))
        left -= length
    if rng.random() < 0.5:
        cuts.insert(rng.randint(0, len(cuts)), (3, 3))   # an empty cut somewhere
    return cuts


def ways():
    """The ways of summing the leaves this Python can use (the builtin ``sum`` only before 3.12)."""
    chosen = module._leaf_sums
    return [way for way in (module._leaf_sums_by_columns, module._leaf_sums_by_builtin)
            if way is not module._leaf_sums_by_builtin or chosen is way]


class PiecesSumTest(unittest.TestCase):
    def assert_same_double(self, a: float, b: float, what) -> None:
        self.assertEqual((repr(a), math.copysign(1, a)), (repr(b), math.copysign(1, b)), what)

    def test_hand_case_from_four_values(self):
        """tests.test_core_bench_sums' 136 values [big, 63 × 1.0, −big, 71 × 2.0] (big = 2**53) as
        cuts of the 4-value list [big, 1.0, −big, 2.0], one value per cut: numpy's order gives 198.0
        (left to right would give 142.0); also as 3 cuts, and as one cut of the whole list."""
        big = 2.0 ** 53
        source = [big, 1.0, -big, 2.0]
        cuts = [(0, 1)] + [(1, 2)] * 63 + [(2, 3)] + [(3, 4)] * 71
        self.assertEqual(len(Pieces(source, cuts)), 136)
        self.assertEqual(pairwise_sum(Pieces(source, cuts)), 198.0)
        flat = [big] + [1.0] * 63 + [-big] + [2.0] * 71
        self.assertEqual(list(Pieces(source, cuts)), flat)
        self.assertEqual(pairwise_sum(Pieces(flat, [(0, 64), (64, 65), (65, 136)])), 198.0)
        self.assertEqual(pairwise_sum(Pieces(flat, [(0, 136)])), 198.0)

    def test_sizes_at_leaf_and_group_edges(self):
        """Each size of :data:`SIZES` (and a few more in the full run), as random cuts of a shorter
        list and as one cut: the same double as numpy's order over the values joined, on each way
        of summing the leaves."""
        rng = random.Random(41)
        sizes = SIZES + ((16383, 16384, 16385, 65541, 99999) if FULL else ())
        chosen = module._leaf_sums
        try:
            for way in ways():
                module._leaf_sums = way
                for size in sizes:
                    for longest in (3, 130, 1000):
                        source = samples(rng, max(size, 1) // 3 + 8)
                        cuts = random_cuts(rng, source, size, longest)
                        pieces = Pieces(source, cuts)
                        joined = [x for start, stop in cuts for x in source[start:stop]]
                        self.assertEqual((len(pieces), list(pieces)), (size, joined))
                        expected = numpy_order_sum(joined)
                        self.assert_same_double(pairwise_sum(pieces), expected, (way.__name__, size, longest))
                        self.assert_same_double(pairwise_sum(Pieces(joined, [(0, size)])), expected, (size, "one cut"))
                        self.assert_same_double(pairwise_sum(joined), expected, (size, "a list"))
        finally:
            module._leaf_sums = chosen

    def test_cuts_on_every_leaf_edge(self):
        """8,193 values in 129 leaves, cut exactly where each leaf begins and ends, and cut one value
        before and after each edge."""
        rng = random.Random(5)
        values = samples(rng, 8193)
        sizes = []
        module._leaf_sizes(8193, sizes)
        edges = [0]
        for size in sizes:
            edges.append(edges[-1] + size)
        expected = numpy_order_sum(values)
        for shift in (0, -1, 1):
            points = sorted({min(max(e + shift, 0), 8193) for e in edges} | {0, 8193})
            cuts = list(zip(points, points[1:]))
            self.assert_same_double(pairwise_sum(Pieces(values, cuts)), expected, shift)

    def test_signed_zeros_and_empty(self):
        self.assert_same_double(pairwise_sum(Pieces([], [])), -0.0, "no cut")
        self.assert_same_double(pairwise_sum(Pieces([1.0], [(0, 0), (1, 1)])), -0.0, "empty cuts")
        self.assert_same_double(pairwise_sum(Pieces([-0.0], [(0, 1)] * 300)), -0.0, "300 negative zeros")
        self.assert_same_double(pairwise_sum(Pieces([-0.0, 0.0], [(0, 1)] * 299 + [(1, 2)])), 0.0, "one positive zero")

    def test_equal_to_the_values_in_order(self):
        pieces = Pieces([1.0, 2.0, 3.0], [(2, 3), (0, 0), (0, 2)])
        self.assertEqual(pieces, [3.0, 1.0, 2.0])
        self.assertEqual([3.0, 1.0, 2.0], pieces)
        self.assertEqual(pieces, Pieces([3.0, 1.0, 2.0], [(0, 3)]))
        self.assertNotEqual(pieces, [1.0, 2.0, 3.0])
        self.assertNotEqual(pieces, [3.0, 1.0])
        self.assertNotEqual(pieces, (3.0, 1.0, 2.0))

    def test_cut_outside_the_list(self):
        for cut in ((-1, 2), (2, 1), (0, 5)):
            with self.assertRaises(ValueError):
                Pieces([1.0, 2.0, 3.0], [(0, 1), cut])
        with self.assertRaises(ValueError):
            PiecesOf([1.0, 2.0], [0, 1], [1])

    def test_bench_statistics_of_pieces(self):
        """A counted sample whose values and squares are pieces gives the statistics of the joined
        list: the mean and std in numpy's order, the median and percentiles by counting."""
        rng = random.Random(9)
        source = [rng.choice((0.024645, 0.08085, 0.196056)) + rng.random() * 1e-3 for _ in range(300)]
        cuts = random_cuts(rng, source, 8193, 300)
        joined = [x for start, stop in cuts for x in source[start:stop]]
        counts = {}
        for x in joined:
            counts[x] = counts.get(x, 0) + 1
        sample = CountedSample(Pieces(source, cuts), counts,
                               lambda c: Pieces([(x - c) * (x - c) for x in source], cuts))
        self.assertEqual(np_mean(Pieces(source, cuts)), np_mean(joined))
        self.assertEqual(np_std(Pieces(source, cuts)), np_std(joined))
        self.assertEqual(_stats(sample, "itl", (50, 99)), _stats(joined, "itl", (50, 99)))


if __name__ == "__main__":
    unittest.main()
