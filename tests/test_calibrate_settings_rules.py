"""calibrate's readers agree on the engine settings a run implies (issue 18, a breaker's four findings).

Expected values by hand from the files in tests/data:

- the BLIS excerpt's vllm.log: ``GPU KV cache size: 119,008 tokens``, ``num_gpu_blocks is: 7438``
  (block size 16), vLLM 0.11.0; the RTX 4090 run's meta.json: ``kv_cache.num_kv_tokens`` 41,408,
  ``num_gpu_blocks`` 2,588 at ``block_size`` 16, vLLM 0.19.0, ``async_scheduling: true``.
"""

import json
import os
import shutil
import unittest

from sched.timing.loadrun import load_real_run
from tests.helpers import PROJECT, read, temp_dir
from tests.test_calibrate_otel import EXCERPT, copy_run, replace_in

RUN_4090 = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090-run")


def copy_4090(test, edit_meta=None):
    """A copy of the RTX 4090 run; ``edit_meta(meta)`` changes its meta.json."""
    base = temp_dir(test)
    meta = json.loads(read(os.path.join(RUN_4090, "meta.json")))
    if edit_meta:
        edit_meta(meta)
    with open(os.path.join(base, "meta.json"), "w", encoding="utf-8") as out:
        json.dump(meta, out)
    shutil.copy(os.path.join(RUN_4090, "requests.jsonl"), base)
    return os.path.join(base, "requests.jsonl")


class BlockSizeFlagKeepsTokensTest(unittest.TestCase):
    """A --block-size flag keeps the KV capacity in tokens the files state: floor(tokens / flag)."""

    def test_otel_run(self):
        run = load_real_run(EXCERPT, flags={"block_size": 48})
        # 119,008 tokens / 48 = 2479.33: 2479 blocks of 48 tokens (not the log's 7438 blocks of 16).
        self.assertEqual((run.settings["num_gpu_blocks"], run.settings["block_size"]), (2479, 48))
        self.assertTrue(any(note.startswith("num_gpu_blocks 2479 = ") and "119008 tokens" in note
                            for note in run.notes))

    def test_otel_run_count_given_too(self):
        run = load_real_run(EXCERPT, flags={"block_size": 48, "num_gpu_blocks": 1000})
        self.assertEqual(run.settings["num_gpu_blocks"], 1000)    # the count given wins as it stands

    def test_same_block_size_changes_nothing(self):
        self.assertEqual(load_real_run(EXCERPT, flags={"block_size": 16}).settings["num_gpu_blocks"], 7438)

    def test_meta_json_run(self):
        run = load_real_run(copy_4090(self), flags={"block_size": 48})
        # 41,408 tokens / 48 = 862.67: 862 blocks.
        self.assertEqual((run.settings["num_gpu_blocks"], run.settings["block_size"]), (862, 48))
        self.assertTrue(any(note.startswith("num_gpu_blocks 862 = ") for note in run.notes))


if __name__ == "__main__":
    unittest.main()
