"""The band of a --gpu carry (issue 18, item 4): each end's terms by hand, and the run that prints it.

Every expected value is computed here from figures written in the test: RTX 4090 1,008 GB/s and
165.2 dense BF16 TFLOP/s (measured matmul share 1), RTX PRO 6000 1,792 GB/s and 503.8 TFLOP/s
(measured matmul share 0.535), L40S 864 GB/s and 362.05 TFLOP/s (no measured share); an "8B"
model name is 8e9 parameters x 2 bytes = 16e9 bytes of weights.
"""

import json
import os
import unittest

from sched.base.cmdline import InputError
from sched.timing.gpus import GPUS, carry_ends, carry_to, find_gpu, render_gpus, weight_read
from sched.timing.stepmodel import StepModel
from tests.helpers import assert_bad_input, read, run_cli, temp_dir

SETTINGS = {"num_gpu_blocks": 400, "block_size": 16, "max_num_batched_tokens": 256, "max_num_seqs": 8,
            "long_prefill_token_threshold": 0, "enable_prefix_caching": False, "policy": "fcfs"}


def model_on(device, name="meta-llama/Llama-3.1-8B", a=25.0):
    return StepModel(a, 0.09, 0.3, dict(SETTINGS), {"device": device, "model": name}, 0.0001)


class BandByHandTest(unittest.TestCase):
    def test_4090_to_pro_6000(self):
        ends = carry_ends(model_on("RTX 4090"), "RTX PRO 6000")
        read_ms = 16e9 / 1008e9 * 1000                                   # 15.873 ms of a is the weight read
        self.assertAlmostEqual(ends["fast"]["a"], 25.0 - read_ms + read_ms * 1008 / 1792)   # 18.056 ms
        self.assertAlmostEqual(ends["fast"]["a"], 18.0556, places=3)
        self.assertEqual(ends["slow"]["a"], 25.0)                                         # all host work
        peak, achieved = 165.2 / 503.8, 165.2 * 1.0 / (503.8 * 0.535)                     # 0.3279, 0.6129
        self.assertAlmostEqual(ends["fast"]["b"], 0.09 * peak)
        self.assertAlmostEqual(ends["slow"]["b"], 0.09 * achieved)
        self.assertAlmostEqual(ends["fast"]["c"], 0.3 * peak)
        self.assertAlmostEqual(ends["slow"]["c"], 0.3 * achieved)
        for end in ("fast", "slow"):
            self.assertAlmostEqual(ends[end]["d"], 0.0001 * 1008 / 1792)               # bandwidth at both ends
        self.assertIn("15.9 ms at 1008 GB/s", ends["weights"])

    def test_pro_6000_to_4090_swaps_the_ends(self):
        # A slower GPU: the weight read grows, so it is the slow end; the achieved ratio is the smaller one.
        ends = carry_ends(model_on("RTX PRO 6000"), "RTX 4090")
        read_ms = 16e9 / 1792e9 * 1000                                   # 8.929 ms
        self.assertEqual(ends["fast"]["a"], 25.0)
        self.assertAlmostEqual(ends["slow"]["a"], 25.0 - read_ms + read_ms * 1792 / 1008)   # 31.944 ms
        self.assertAlmostEqual(ends["fast"]["b"], 0.09 * 503.8 * 0.535 / 165.2)            # x 1.632
        self.assertAlmostEqual(ends["slow"]["b"], 0.09 * 503.8 / 165.2)                    # x 3.050

    def test_no_measured_share_keeps_b_at_the_data_sheet(self):
        ends = carry_ends(model_on("RTX 4090"), "L40S")
        self.assertAlmostEqual(ends["fast"]["b"], 0.09 * 165.2 / 362.05)
        self.assertAlmostEqual(ends["slow"]["b"], 0.09 * 165.2 / 362.05)
        self.assertIn("achieved share of the data sheet's BF16 FLOP/s: RTX 4090 1.0 (measured), "
                      "L40S not measured (1.0 assumed): b and c x 0.4563 at achieved", ends["matmul"])   # 165.2/362.05

    def test_unknown_size_keeps_a_at_both_ends(self):
        ends = carry_ends(model_on("RTX 4090", name="my-model"), "RTX PRO 6000")
        self.assertEqual((ends["fast"]["a"], ends["slow"]["a"]), (25.0, 25.0))
        self.assertIn("give --weights-gb", ends["weights"])
        # given: 4 GiB read at 1008 GB/s = 4.2613 ms of a
        given = carry_ends(model_on("RTX 4090", name="my-model"), "RTX PRO 6000", 4 * 1024 ** 3)
        read_ms = 4 * 1024 ** 3 / 1008e9 * 1000
        self.assertAlmostEqual(given["fast"]["a"], 25.0 - read_ms * (1 - 1008 / 1792))

    def test_model_name_not_text_is_an_unknown_size(self):
        # fitted_on is free provenance: a number where the model's name goes is read as no size, not a crash
        ends = carry_ends(model_on("RTX 4090", name=7), "RTX PRO 6000")
        self.assertEqual(ends["fast"]["a"], 25.0)
        self.assertIn("give --weights-gb", ends["weights"])

    def test_absurd_parameter_count_is_an_unknown_size(self):
        """'Llama-99999999999999B' (a name edited by hand in step-model.json) read 1.9e14 GiB of weights
        and printed a 2e14 ms weight read; '0B' read 0 GiB. Neither is a model's size: unknown, a kept."""
        for name in ("org/Llama-99999999999999B", "org/Llama-0B"):
            with self.subTest(name=name):
                ends = carry_ends(model_on("RTX 4090", name=name), "RTX PRO 6000")
                self.assertEqual((ends["fast"]["a"], ends["slow"]["a"]), (25.0, 25.0))
                self.assertIn("give --weights-gb", ends["weights"])
        # the largest count still read: 100,000 billion parameters x 2 bytes
        self.assertIn("parameter count", carry_ends(model_on("RTX 4090", name="org/M-100000B"), "H100 SXM")["weights"])

    def test_tensor_parallel_reads_a_shard_per_gpu(self):
        """Fitted with tensor_parallel_size 2: each 4090 reads 16e9 / 2 bytes, 7.937 ms of a (it read all 16e9,
        15.9 ms, as if one GPU held the whole model)."""
        model = model_on("RTX 4090")
        model = StepModel(model.a_ms, model.b_ms, model.c_ms, model.settings,
                          dict(model.fitted_on, tensor_parallel_size=2), model.d_ms)
        ends = carry_ends(model, "RTX PRO 6000")
        read_ms = 8e9 / 1008e9 * 1000
        self.assertAlmostEqual(ends["fast"]["a"], 25.0 - read_ms + read_ms * 1008 / 1792)   # 21.528 ms
        self.assertIn("1/2 per GPU at tensor_parallel_size 2", ends["weights"])
        self.assertIn("7.94 ms at 1008 GB/s", ends["weights"])

    def test_tensor_parallel_size_not_a_count_is_refused(self):
        for shards in ("two", 0, 2.5, True):
            with self.subTest(shards=shards):
                model = model_on("RTX 4090")
                model = StepModel(model.a_ms, model.b_ms, model.c_ms, model.settings,
                                  dict(model.fitted_on, tensor_parallel_size=shards), model.d_ms)
                with self.assertRaises(InputError) as caught:
                    carry_ends(model, "RTX PRO 6000")
                self.assertIn("fitted_on.tensor_parallel_size", str(caught.exception))

    def test_weight_read_longer_than_a_takes_all_of_a(self):
        read_ms, said = weight_read(model_on("RTX 4090", a=10.0), find_gpu("RTX 4090"))
        self.assertEqual(read_ms, 10.0)                                  # 15.9 ms > a = 10 ms
        self.assertIn("all of a taken as weight read", said)
        ends = carry_ends(model_on("RTX 4090", a=10.0), "RTX PRO 6000")
        self.assertAlmostEqual(ends["fast"]["a"], 10.0 * 1008 / 1792)

    def test_central_carry_unchanged_and_band_recorded(self):
        carried = carry_to(model_on("RTX 4090"), "RTX PRO 6000")
        self.assertEqual(carried.a_ms, 25.0)
        self.assertAlmostEqual(carried.b_ms, 0.09 * 165.2 / 503.8)
        band = carried.fitted_on["carried_to"]["band"]
        self.assertAlmostEqual(band["fast"]["a"], 18.0556, places=3)
        self.assertIn("a kept: all host work", band["slow"]["assumes"])

    def test_help_gpus_lists_measured_shares_with_sources(self):
        text = render_gpus()
        for gpu in GPUS:
            if gpu.matmul_fraction is not None:
                self.assertIn(f"matmul achieved {gpu.matmul_fraction:g}: ", text)
                self.assertTrue(gpu.matmul_source)
        self.assertIn("Fast end", text)
        self.assertIn("Slow end", text)


class BandCommandTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.model = os.path.join(self.base, "step-model.json")
        document = {"kind": "step-model", "engine": "vllm", "step_ms": {"a": 25.0, "b": 0.09, "c": 0.3, "d": 0.0001},
                    "settings": SETTINGS, "fitted_on": {"device": "NVIDIA GeForce RTX 4090",
                                                        "model": "meta-llama/Llama-3.1-8B"}}
        with open(self.model, "w", encoding="utf-8") as out:
            json.dump(document, out)

    def run_band(self, *extra):
        out_dir = os.path.join(self.base, "run")
        code, out, err = run_cli(["--engine", "vllm", "--scenario", "baseline", "--step-model", self.model,
                                  "--gpu", "RTX PRO 6000", "--artifacts", out_dir, *extra])
        self.assertEqual(code, 0, err)
        return out, err, out_dir

    def test_band_printed_with_the_result(self):
        out, err, out_dir = self.run_band()
        self.assertIn("--gpu band (RTX 4090 -> RTX PRO 6000)", out)
        self.assertIn("--gpu band (RTX 4090 -> RTX PRO 6000)", read(os.path.join(out_dir, "table.txt")))
        rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()
                if line.startswith(("  central ", "  fast ", "  slow "))}
        p50 = {name: float(cells[0]) for name, cells in rows.items()}
        self.assertLessEqual(p50["fast"], p50["central"])     # every step of the fast end is shorter
        self.assertLessEqual(p50["central"], p50["slow"])     # and of the slow end longer
        self.assertIn("14.9 GiB", err)
        manifest = json.loads(read(os.path.join(out_dir, "manifest.json")))
        self.assertIn("band", manifest["step_model"]["fitted_on"]["carried_to"])

    def test_note_says_the_kv_cache_is_kept(self):
        _, err, _ = self.run_band()
        self.assertIn("KV cache: num-gpu-blocks 400 kept from the fitted run (the step model's settings)", err)   # SETTINGS
        self.assertIn("give --num-gpu-blocks", err)
        _, err, _ = self.run_band("--num-gpu-blocks", "900", "--force")
        self.assertIn("KV cache: num-gpu-blocks 900 from --num-gpu-blocks", err)
        self.assertNotIn("kept from the fitted run", err)

    def test_measured_shares_read_as_a_sentence(self):
        out, _, _ = self.run_band()
        self.assertIn("achieved share of the data sheet's BF16 FLOP/s: RTX 4090 1.0 (measured), RTX PRO 6000 0.535 "
                      "(measured)", out)
        self.assertNotIn("one-sided", out)   # 0.6129 (achieved) vs 0.3279 (data sheet): both ends move

    def test_band_without_a_measured_share_is_one_sided(self):
        # 4090 (share 1) -> H100 SXM (no share, 3,350 GB/s > 1,008): the achieved ratio is the data-sheet ratio and
        # a stays whole at the slow end, so the slow end is the central carry (the case of the report).
        out_dir = os.path.join(self.base, "h100")
        code, out, err = run_cli(["--engine", "vllm", "--scenario", "baseline", "--step-model", self.model,
                                  "--gpu", "H100 SXM", "--artifacts", out_dir])
        self.assertEqual(code, 0, err)
        self.assertIn("H100 SXM not measured (1.0 assumed)", out)
        self.assertIn("The slow end is the central carry (same a, b, c, d): the band is one-sided, spanning only "
                      "the fast side", out)
        self.assertIn("the band is one-sided", read(os.path.join(out_dir, "table.txt")))
        # and a GPU with less bandwidth (L40S, 864 GB/s): the weight read grows, so the fast end is the central one
        code, out, err = run_cli(["--engine", "vllm", "--scenario", "baseline", "--step-model", self.model,
                                  "--gpu", "L40S"])
        self.assertIn("The fast end is the central carry (same a, b, c, d): the band is one-sided, spanning only "
                      "the slow side", out)

    def test_weights_flag(self):
        out, err, _ = self.run_band("--weights-gb", "4")
        self.assertIn("4.0 GiB (--weights-gb)", err)

    def test_bad_flags(self):
        base = ["--engine", "vllm", "--scenario", "baseline", "--step-model", self.model]
        assert_bad_input(self, base + ["--weights-gb", "4"], "--weights-gb needs --gpu")
        assert_bad_input(self, base + ["--gpu", "L40S", "--weights-gb", "0"], "--weights-gb")
        assert_bad_input(self, base + ["--gpu", "L40S", "--weights-gb", "nan"], "--weights-gb")
        assert_bad_input(self, base + ["--gpu", "H100"], "did you mean 'H100 SXM'?")
        assert_bad_input(self, base + ["--gpu", "PRO 6000 RTX"], "did you mean 'RTX PRO 6000'?")


if __name__ == "__main__":
    unittest.main()
