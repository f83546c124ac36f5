"""``plan``'s recommendation line says when its margin is below the search's resolution.

Each answer lies within ``resolution`` below its setting's true boundary (the bisection stops when
the bracket is that narrow), so two answers 0.5% apart with a 1% resolution do not rank the two
settings. Found by using ``plan`` with ``--attainment 0.95``: "+0.1% over the next slower setting"
read as a win. The plan is run once on a small hand-made workload; the answers are then set by hand
(4.0 and 3.98 req/s: +0.50%; 4.0 and 3.0: +33.3%) and the recommendation and text rebuilt.
"""

import copy
import json
import os
import shutil
import tempfile
import unittest

from sched.planning.plan import plan_files
from sched.planning.report import recommend
from tests.helpers import read, run_cli
from tests.test_planning_plan import plan_inputs
from tests.test_planning_tampered_inputs import STEP_MODEL


class RecommendationTextTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        base = tempfile.mkdtemp(prefix="isl-test-")
        cls.addClassCleanup(shutil.rmtree, base, ignore_errors=True)
        workload, model = plan_inputs(base, model=STEP_MODEL)
        out_dir = os.path.join(base, "plan")
        code, _, err = run_cli(["plan", "--workload", workload, "--step-model", model, "--goodput", "ttft:300",
                                "--max-num-seqs", "2,8", "--workers", "1", "--out", out_dir])
        assert code == 0, err
        cls.document = json.loads(read(os.path.join(out_dir, "plan.json")))

    def text_for(self, best, runner):
        document = copy.deepcopy(self.document)
        for config, rate in zip(document["configs"], (best, runner)):
            config["max_request_rate"], config["non_monotone"] = rate, False
        document["recommendation"] = recommend(document["configs"])
        return plan_files(document, ["max_num_seqs"])["plan.txt"]

    def test_a_margin_below_the_resolution_is_said(self):
        self.assertEqual(self.document["resolution"], 0.01)
        text = self.text_for(4.0, 3.98)
        self.assertIn("+0.50% over the next slower setting (below the 1.00% resolution: the search cannot tell "
                      "them apart)", text)

    def test_a_margin_above_it_is_not(self):
        text = self.text_for(4.0, 3.0)
        self.assertIn("+33.3% over the next slower setting", text)
        self.assertNotIn("cannot tell them apart", text)


if __name__ == "__main__":
    unittest.main()
