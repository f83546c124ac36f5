"""--gpu and help gpus (issue 18, item 4): the table, carrying a step model, bad names.

Expected coefficients are computed here from the data-sheet figures written in the test
(RTX 4090: 1,008 GB/s, 165.2 dense BF16 TFLOP/s; RTX PRO 6000: 1,792 GB/s, 503.8 TFLOP/s).
"""

import json
import os
import unittest

from sched.base.cmdline import InputError
from sched.timing.gpus import GPUS, carry_to, find_gpu
from sched.timing.stepmodel import StepModel
from tests.helpers import assert_bad_input, read, run_cli, temp_dir

SETTINGS = {"num_gpu_blocks": 400, "block_size": 16, "max_num_batched_tokens": 256, "max_num_seqs": 8,
            "long_prefill_token_threshold": 0, "enable_prefix_caching": False, "policy": "fcfs"}


def model_on(device):
    return StepModel(25.0, 0.09, 0.3, dict(SETTINGS), {"device": device, "model": "m"}, 0.0001)


class GpuTableTest(unittest.TestCase):
    def test_the_issue_gpus_are_there(self):
        names = {gpu.name for gpu in GPUS}
        self.assertTrue({"RTX 4090", "RTX PRO 6000", "RTX A6000", "A100 80GB", "H100 SXM", "L40S"} <= names)
        for gpu in GPUS:
            self.assertTrue(gpu.source and gpu.memory_gb > 0 and gpu.bandwidth_gbs > 0 and gpu.bf16_tflops > 0)

    def test_names_and_driver_names(self):
        self.assertEqual(find_gpu("NVIDIA GeForce RTX 4090").name, "RTX 4090")   # the 4090 run's meta.json
        self.assertEqual(find_gpu("rtx-pro-6000").name, "RTX PRO 6000")

    def test_carry_by_hand(self):
        carried = carry_to(model_on("NVIDIA GeForce RTX 4090"), "RTX PRO 6000")
        self.assertEqual(carried.a_ms, 25.0)                               # host work stays
        self.assertAlmostEqual(carried.b_ms, 0.09 * 165.2 / 503.8)
        self.assertAlmostEqual(carried.c_ms, 0.3 * 165.2 / 503.8)
        self.assertAlmostEqual(carried.d_ms, 0.0001 * 1008 / 1792)
        self.assertEqual(carried.fitted_on["carried_to"]["gpu"], "RTX PRO 6000")

    def test_unknown_names(self):
        with self.assertRaises(InputError) as caught:
            find_gpu("RTX 6000 pro")
        self.assertIn("did you mean 'RTX PRO 6000'?", str(caught.exception))
        with self.assertRaises(InputError) as caught:
            carry_to(model_on(None), "L40S")
        self.assertIn("--run-gpu", str(caught.exception))


class GpuCommandTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.model = os.path.join(self.base, "step-model.json")
        document = {"kind": "step-model", "engine": "vllm", "step_ms": {"a": 25.0, "b": 0.09, "c": 0.3, "d": 0.0001},
                    "settings": SETTINGS, "fitted_on": {"device": "NVIDIA GeForce RTX 4090"}}
        with open(self.model, "w", encoding="utf-8") as out:
            json.dump(document, out)

    def test_help_gpus(self):
        code, out, _ = run_cli(["help", "gpus"])
        self.assertEqual(code, 0)
        for name in ("RTX 4090", "RTX PRO 6000", "RTX A6000", "A100 80GB", "H100 SXM", "L40S", "Sources:"):
            self.assertIn(name, out)

    def test_help_gpus_mistyped_points_to_the_topic(self):
        """'help gpu' listed the commands, none of which is the GPU table a new user was looking for."""
        for word in ("gpu", "gpuz", "gpsu"):
            with self.subTest(word=word):
                assert_bad_input(self, ["help", word], "did you mean 'gpus'?")
        code, out, _ = run_cli(["help", "GPUs"])
        self.assertEqual(code, 0)
        self.assertIn("RTX PRO 6000", out)

    def test_run_carried_is_faster_and_says_so(self):
        out_dir = os.path.join(self.base, "run")
        code, out, err = run_cli(["--engine", "vllm", "--scenario", "baseline", "--step-model", self.model,
                                  "--gpu", "RTX PRO 6000", "--artifacts", out_dir])
        self.assertEqual(code, 0, err)
        self.assertIn("carried from RTX 4090 to RTX PRO 6000", err)
        manifest = json.loads(read(os.path.join(out_dir, "manifest.json")))
        self.assertEqual(manifest["step_model"]["fitted_on"]["carried_to"]["gpu"], "RTX PRO 6000")
        self.assertAlmostEqual(manifest["step_model"]["step_ms"]["b"], 0.09 * 165.2 / 503.8)

    def test_bad_gpu_flags(self):
        assert_bad_input(self, ["--engine", "vllm", "--scenario", "baseline", "--step-model", self.model,
                                "--gpu", "RTX 6000 pro"], "did you mean 'RTX PRO 6000'?")
        assert_bad_input(self, ["--engine", "vllm", "--scenario", "baseline", "--gpu", "L40S"],
                         "--gpu needs --step-model")


if __name__ == "__main__":
    unittest.main()
