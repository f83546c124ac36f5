"""The chapter's functions from any directory (docs/handbook/window-model.md §16.2; docs/handbook/serving-bench.md 16.2).

Each check starts a fresh interpreter in an empty directory outside the project, as a learner's
notebook does: the plain ``from sched.serving_bench import ...`` meets the standard library's
``sched`` there; ``sys.path.insert(0, LAB)`` and the alias module ``infer_sched_lab_bench`` work.
The chapter's §3 fact checked each time: r1–r3 under fifo, batch 1 → makespan 15.0 ms.
"""

import os
import subprocess
import sys
import unittest

from tests.helpers import PROJECT, temp_dir

FACTS = os.path.join(PROJECT, "tests", "data", "serving-bench", "chapter-facts.json")
EIGHT = ("select_next_batch", "simulate_serving_scheduler", "summarize_serving_scheduler_runs",
         "compare_scheduler_to_baseline", "validate_scheduler_contract", "build_scheduler_trace_evidence",
         "decide_scheduler_candidate", "recommend_serving_scheduler_run")
CHECK = ("import json\n"
         "requests = json.load(open({facts!r}))\n"
         "print(simulate_serving_scheduler(requests)['makespan_ms'])\n")


class ImportFromAnyDirectoryTest(unittest.TestCase):
    def run_elsewhere(self, code: str):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return subprocess.run([sys.executable, "-c", code], cwd=temp_dir(self), env=env, capture_output=True,
                              text=True, timeout=60)

    def test_the_plain_import_meets_the_standard_librarys_sched(self):
        done = self.run_elsewhere("from sched.serving_bench import simulate_serving_scheduler\n")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("'sched' is not a package", done.stderr)

    def test_sys_path_insert_first(self):
        done = self.run_elsewhere(f"import sys\nsys.path.insert(0, {PROJECT!r})\n"
                                  "from sched.serving_bench import simulate_serving_scheduler\n"
                                  + CHECK.format(facts=FACTS))
        self.assertEqual((done.returncode, done.stdout.strip()), (0, "15.0"), done.stderr)

    def test_alias_module_even_after_the_standard_sched(self):
        done = self.run_elsewhere(f"import sched, sys\nsys.path.append({PROJECT!r})\n"
                                  "from infer_sched_lab_bench import simulate_serving_scheduler, __all__\n"
                                  + CHECK.format(facts=FACTS)
                                  + f"print(all(name in __all__ for name in {EIGHT!r}), hasattr(sched, 'scheduler'))\n")
        self.assertEqual((done.returncode, done.stdout.split()), (0, ["15.0", "True", "True"]), done.stderr)


if __name__ == "__main__":
    unittest.main()
