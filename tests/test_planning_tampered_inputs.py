"""``plan`` given a tampered step model: one line naming the file and the field, exit 2, nothing written.

Found by using ``plan`` as a new engineer would: a step model whose ``fitted_on.device`` is a
number ended ``plan`` with an internal error (exit 3, the table measures the GPU's name), and so did
``fitted_on.model`` as a number with ``--gpu-memory-utilization`` (the weights' size is read from the
model's name). Both are names the lab looks up (formats: ``step-model.json``), so they must be text.
A file whose own settings vLLM would refuse was blamed on flags nobody gave, and the same step
model given twice was searched twice and reported as a tie.
"""

import json
import os
import unittest

from tests.helpers import assert_bad_input, temp_dir

STEP_MODEL = {"kind": "step-model", "engine": "vllm", "step_ms": {"a": 5.0, "b": 0.05, "c": 0.5},
              "settings": {"num_gpu_blocks": 200, "block_size": 16, "max_num_batched_tokens": 512, "max_num_seqs": 8,
                           "long_prefill_token_threshold": 0, "enable_prefix_caching": False, "policy": "fcfs"},
              "fitted_on": {"model": "meta-llama/Llama-3.1-8B", "device": "NVIDIA GeForce RTX 4090"}}


class TamperedStepModelTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.workload = os.path.join(self.base, "w.json")
        with open(self.workload, "w", encoding="utf-8") as out:
            json.dump({"requests": [{"name": f"r{i}", "arrival": 0, "prefix_key": None, "prefix_tokens": 0,
                                     "suffix_tokens": 100, "output_tokens": 20} for i in range(4)]}, out)

    def model_with(self, key, value):
        path = os.path.join(self.base, f"m-{key}.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(dict(STEP_MODEL, fitted_on=dict(STEP_MODEL["fitted_on"], **{key: value})), out)
        return path

    def test_names_that_are_not_text(self):
        out_dir = os.path.join(self.base, "never")
        for key, value, extra in (("device", 5, []), ("device", ["RTX 4090"], []),
                                  ("model", 5, ["--gpu-memory-utilization", "0.9", "--kv-bytes-per-token", "131072"])):
            with self.subTest(key=key, value=value):
                path = self.model_with(key, value)
                assert_bad_input(self, ["plan", "--workload", self.workload, "--step-model", path, "--goodput",
                                        "ttft:300", "--workers", "1", "--out", out_dir, *extra],
                                 f"{path}: field 'fitted_on.{key}': must be text or null")
                self.assertFalse(os.path.exists(out_dir))

    def test_the_same_file_on_the_run_command(self):
        out_dir = os.path.join(self.base, "never")
        path = self.model_with("device", 5)
        assert_bad_input(self, ["--engine", "vllm", "--workload", self.workload, "--step-model", path,
                                "--artifacts", out_dir], "field 'fitted_on.device'")
        self.assertFalse(os.path.exists(out_dir))

    def test_settings_vllm_refuses_name_the_file(self):
        """A file whose own max_num_batched_tokens is below its max_num_seqs was refused as if the flags
        had said so ("--max-num-batched-tokens 8 is below --max-num-seqs 256"), flags nobody gave."""
        path = os.path.join(self.base, "m-refused.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(dict(STEP_MODEL, settings=dict(STEP_MODEL["settings"], max_num_batched_tokens=4)), out)
        out_dir = os.path.join(self.base, "never")
        for argv in (["plan", "--workload", self.workload, "--step-model", path, "--goodput", "ttft:300",
                      "--workers", "1", "--out", out_dir],
                     ["--engine", "vllm", "--workload", self.workload, "--step-model", path, "--artifacts", out_dir]):
            with self.subTest(command=argv[0]):
                assert_bad_input(self, argv, f"{path}: field 'settings.max_num_batched_tokens': 4 is below "
                                             "settings.max_num_seqs 8")
                self.assertFalse(os.path.exists(out_dir))

    def test_the_same_step_model_twice(self):
        """It was searched twice and reported as a tie ("tied with 1 other setting"): two identical rows."""
        path = self.model_with("device", "NVIDIA GeForce RTX 4090")
        out_dir = os.path.join(self.base, "never")
        again = os.path.join(self.base, ".", os.path.basename(path))
        assert_bad_input(self, ["plan", "--workload", self.workload, "--step-model", path, again, "--goodput",
                                "ttft:300", "--workers", "1", "--out", out_dir], f"--step-model: {again} is given twice")
        self.assertFalse(os.path.exists(out_dir))

    def test_null_device_is_still_read(self):
        """``null`` says nothing was recorded: the file is read (a plan without ``--gpu`` needs no GPU name)."""
        path = self.model_with("device", None)
        out_dir = os.path.join(self.base, "plan")
        from tests.helpers import run_cli
        code, _, err = run_cli(["plan", "--workload", self.workload, "--step-model", path, "--goodput", "ttft:300000",
                                "--workers", "1", "--out", out_dir])
        self.assertEqual(code, 0, err)
        self.assertTrue(os.path.exists(os.path.join(out_dir, "plan.json")))


if __name__ == "__main__":
    unittest.main()
