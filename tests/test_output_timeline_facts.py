"""The time-line facts of lab.md §6, recomputed from the baseline's ``requests.jsonl``."""

import json
import os
import unittest

from tests.helpers import EXPECTED, read


def _requests(reference: str = "baseline") -> dict:
    rows = [json.loads(line) for line in read(os.path.join(EXPECTED, reference, "requests.jsonl")).splitlines()]
    return {(row["case"], row["name"]): row for row in rows}


class TimelineFactsTest(unittest.TestCase):
    def setUp(self):
        self.rows = _requests()

    def test_static_s1_waits_for_the_whole_batch(self):
        s1 = self.rows[("static", "S1")]
        self.assertEqual((s1["arrival"], s1["admitted_at"], s1["first_token_at"]), (1, 32, 36))
        self.assertEqual((s1["ttft"], s1["queue_wait"]), (35, 31))

    def test_continuous_s1_still_waits_behind_l0_prefill(self):
        s1 = self.rows[("continuous", "S1")]
        self.assertEqual((s1["admitted_at"], s1["first_token_at"], s1["ttft"]), (1, 12, 11))

    def test_apc_ttfts_hits_and_s7(self):
        names = ["L0", "S1", "S2", "U3", "S4", "S5", "U6", "S7"]
        ttfts = [self.rows[("continuous+APC", n)]["first_token_at"] - self.rows[("continuous+APC", n)]["arrival"]
                 for n in names]
        self.assertEqual(ttfts, [9, 11, 13, 14, 20, 22, 26, 25])
        hits = {n: self.rows[("continuous+APC", n)]["hit_tokens"] for n in names}
        self.assertEqual(hits, {"L0": 0, "S1": 0, "S2": 0, "U3": 0, "S4": 128, "S5": 128, "U6": 0, "S7": 128})
        s7 = self.rows[("continuous+APC", "S7")]
        self.assertEqual((s7["admitted_at"], s7["first_token_at"]), (32, 37))

    def test_chunk32_helps_s1_and_hurts_the_tail(self):
        case = "continuous+APC+chunk32"
        self.assertEqual(self.rows[(case, "S1")]["ttft"], 6)
        self.assertEqual(self.rows[(case, "S1")]["first_token_at"], 7)
        self.assertEqual(self.rows[(case, "L0")]["done_at"], 40)
        self.assertEqual(self.rows[("continuous+APC", "L0")]["done_at"], 32)
        s7 = self.rows[(case, "S7")]
        self.assertEqual((s7["admitted_at"], s7["first_token_at"], s7["ttft"]), (39, 41, 29))

    def test_prefix_broken_has_no_hits(self):
        rows = _requests("prefix-broken")
        self.assertEqual(sum(row["hit_tokens"] for row in rows.values()), 0)
        summary = json.loads(read(os.path.join(EXPECTED, "prefix-broken", "summary.json")))["cases"]
        self.assertEqual([c["hit_tokens"] for c in summary], [0, 0, 0, 0])


if __name__ == "__main__":
    unittest.main()
