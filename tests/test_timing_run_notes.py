"""The notes a ``--step-model`` run prints and writes (sched/core/clock.py, sched/timing/msrun.py) say
what the step model is and where it holds.

Before: the units note wrote the step time as ``a + b*prompt + c*decode``, leaving out the KV-context
term ``d`` every step model has (step-model.json's formula); the footnote said every model was
"fitted on one run", also when several runs were fitted together, and that async scheduling "can
shift real results" although the replay follows the run's async scheduling
(settings.async_scheduling, vllm-engine.md §7). A workload too large for the step model's own
``num_gpu_blocks`` was blamed on a ``--num-gpu-blocks`` flag never given.
"""

import json
import os
import unittest

from sched.core.clock import UNITS_NOTE_MS
from sched.timing.msrun import _fitted_on_note
from sched.timing.stepmodel import StepModel
from tests.helpers import assert_bad_input, temp_dir

SETTINGS = {"num_gpu_blocks": 400, "block_size": 16, "max_num_batched_tokens": 256, "max_num_seqs": 8,
            "long_prefill_token_threshold": 0, "enable_prefix_caching": False, "policy": "fcfs",
            "async_scheduling": True}


class NotesTest(unittest.TestCase):
    def test_units_note_names_all_four_terms(self):
        self.assertIn("step_ms = a + b*prompt + c*decode + d*kv_tokens", UNITS_NOTE_MS)

    def test_one_run(self):
        model = StepModel(25.0, 0.09, 0.3, dict(SETTINGS), {"model": "org/M-8B", "device": "RTX 4090"}, 0.0)
        note = _fitted_on_note(model)
        self.assertIn("fitted on one run of org/M-8B on RTX 4090", note)
        self.assertNotIn("async scheduling", note)   # replayed as the run did, not an unknown

    def test_runs_fitted_together(self):
        fitted_on = {"model": "org/M-8B", "device": "RTX 4090", "runs": [{"source": "one"}, {"source": "two"},
                                                                         {"source": "three"}]}
        note = _fitted_on_note(StepModel(25.0, 0.09, 0.3, dict(SETTINGS), fitted_on, 0.0))
        self.assertIn("fitted on 3 runs of org/M-8B", note)


class TooFewBlocksTest(unittest.TestCase):
    """The baseline's L0 (prompt 512 + output 24 tokens) holds 535 tokens = 34 blocks of 16; 12 blocks
    leave 11 usable, enough for every other request (at most 175 tokens = 11 blocks)."""

    def step_model(self, blocks):
        path = os.path.join(temp_dir(self), "step-model.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"kind": "step-model", "engine": "vllm", "step_ms": {"a": 2.0, "b": 0.25, "c": 0.5},
                       "settings": {"num_gpu_blocks": blocks, "block_size": 16, "max_num_batched_tokens": 64,
                                    "max_num_seqs": 4, "long_prefill_token_threshold": 0,
                                    "enable_prefix_caching": False, "policy": "fcfs"},
                       "fitted_on": {"model": "a hand-written model"}}, out)
        return path

    def test_blocks_from_the_step_model_are_named_so(self):
        path = self.step_model(12)
        assert_bad_input(self, ["--engine", "vllm", "--step-model", path],
                         f"request 0 (L0): prompt 512 + output 24 tokens need 34 KV blocks of 16 tokens, but {path}'s "
                         "settings.num_gpu_blocks 12 leaves 11 usable")

    def test_blocks_from_the_flag_are_named_so(self):
        assert_bad_input(self, ["--engine", "vllm", "--step-model", self.step_model(41), "--num-gpu-blocks", "12"],
                         "but --num-gpu-blocks 12 leaves 11 usable")


if __name__ == "__main__":
    unittest.main()
