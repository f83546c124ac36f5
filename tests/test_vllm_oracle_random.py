"""The vLLM engine against vLLM 0.33.0's own scheduler on seeded-random regression cases
(``tests/data/vllm-oracle-random``, see its README; vllm-engine.md).

The cases were picked from a random search over workloads the public corpora cover little: async
scheduling with prefix caching (shared prefixes shorter than a block, exact block multiples,
block-id chains), small KV (preemption, eviction of cached blocks), chunk caps, 1 to 8 slots, token
budgets of 16 to 512, priorities, bursts and gaps, 1-token outputs. Each async case has its
synchronous twin on the same workload and knobs. Per request the engine must give vLLM's admission
step, prefix-hit tokens, first-token and finish stamps (oracle step + 1) and number of preemptions;
per step the same requests in the same order with the same tokens, the same preempted requests and
the same KV blocks in use. The counts timeline (decode jumps and open runs) must give the same
requests. The decisions came from vLLM itself (the oracle tool), never from this code.
"""

import hashlib
import json
import os
import unittest

from sched.engines import check_case
from sched.vllm.async_step import simulate
from tests import test_vllm_oracle_async as oracle_async
from tests.test_vllm_oracle import MAX_SHOWN, request_diffs, step_diffs

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vllm-oracle-random")


def manifest() -> list:
    return oracle_async.manifest(CORPUS)


def load_case(entry: dict):
    """(workload, knobs, oracle document) of one MANIFEST entry; the knobs as the case file states them."""
    return oracle_async.load_case(entry, CORPUS)


def shown(problems: list[str]) -> str:
    more = [f"... and {len(problems) - MAX_SHOWN} more"] if len(problems) > MAX_SHOWN else []
    return "\n  ".join(problems[:MAX_SHOWN] + more)


class RandomOracleCasesTest(unittest.TestCase):
    def test_the_corpus_is_whole(self):
        """Every case names the workload it was made from (sha256 of the file) and its twin."""
        cases = manifest()
        self.assertEqual(len(cases), 20)
        self.assertEqual(sum(entry["knobs"]["async_scheduling"] for entry in cases), 10)
        for entry in cases:
            with self.subTest(case=entry["id"]):
                with open(os.path.join(CORPUS, entry["workload"]), "rb") as handle:
                    self.assertEqual(hashlib.sha256(handle.read()).hexdigest(), entry["workload_sha256"])
                with open(os.path.join(CORPUS, entry["output"]), encoding="utf-8") as handle:
                    doc = json.load(handle)
                self.assertEqual(doc["workload"]["sha256"], entry["workload_sha256"])
                self.assertEqual(doc["vllm_version"], "0.33.0")
                self.assertEqual(doc["knobs"], entry["knobs"])

    def test_every_case_matches_vllm(self):
        for entry in manifest():
            with self.subTest(case=entry["id"]):
                workload, knobs, doc = load_case(entry)
                result = simulate(workload, knobs, timeline="full")
                problems = request_diffs(doc, result) + step_diffs(doc, result)
                self.assertEqual(problems, [], f"{entry['id']} differs from vLLM:\n  {shown(problems)}")
                self.assertEqual(sum(r.num_preemptions for r in result.requests), doc["summary"]["total_preemptions"])
                self.assertEqual(max(r.done_at for r in result.requests) - 1, doc["summary"]["last_step"])
                check_case(result)

    def test_the_counts_timeline_matches_too(self):
        """Decode jumps and open runs (timeline counts) give vLLM's requests as well."""
        for entry in manifest():
            with self.subTest(case=entry["id"]):
                workload, knobs, doc = load_case(entry)
                problems = request_diffs(doc, simulate(workload, knobs, timeline="counts"))
                self.assertEqual(problems, [], f"{entry['id']} (counts) differs from vLLM:\n  {shown(problems)}")


if __name__ == "__main__":
    unittest.main()
