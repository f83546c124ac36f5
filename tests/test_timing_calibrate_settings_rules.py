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
from tests.helpers import PROJECT, assert_bad_input, read, temp_dir
from tests.test_timing_calibrate_otel import EXCERPT, copy_run, replace_in

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


def bench_file(test, **metadata):
    """A three-request ``vllm bench serve --save-detailed`` file with ``metadata`` added."""
    run = {"backend": "vllm", "model_id": "org/Some-7B", "num_prompts": 3, "input_lens": [100, 200, 50],
           "output_lens": [5, 6, 7], "start_times": [10.0, 10.1, 10.3], "ttfts": [0.05, 0.06, 0.07],
           "itls": [[0.03] * 4, [0.03] * 5, [0.03] * 6], "errors": ["", "", ""], "generated_texts": ["", "", ""],
           "block_size": "16", "max_num_seqs": "8", "max_num_batched_tokens": "256", "num_gpu_blocks": "1000",
           "enable_prefix_caching": "false", **metadata}
    path = os.path.join(temp_dir(test), "bench.json")
    with open(path, "w", encoding="utf-8") as out:
        json.dump(run, out)
    return path


class AsyncDefaultOneRuleTest(unittest.TestCase):
    """A run that does not say whether async scheduling was on is replayed with its vLLM version's
    default (off before 0.14, on since; off when the version is unknown), whatever its format."""

    def test_meta_json_of_a_newer_vllm(self):
        def drop(meta):
            del meta["resolved_config"]["scheduler_config"]["async_scheduling"]
        run = load_real_run(copy_4090(self, drop))       # vLLM 0.19.0: on by default
        self.assertIs(run.settings["async_scheduling"], True)
        self.assertTrue(any("async_scheduling not in meta.json: on (vLLM 0.19.0's default" in note
                            for note in run.notes))

    def test_meta_json_saying_its_mode_wins(self):
        self.assertIs(load_real_run(os.path.join(RUN_4090, "requests.jsonl")).settings["async_scheduling"], True)

    def test_bench_files(self):
        for version, expected in (("0.15.0", True), ("0.11.0", False), (None, False)):
            with self.subTest(version=version):
                extra = {} if version is None else {"vllm_version": version}
                run = load_real_run(bench_file(self, **extra))
                self.assertIs(run.settings["async_scheduling"], expected)
                self.assertTrue(any(note.startswith(f"async_scheduling not in bench.json: "
                                                    f"{'on' if expected else 'off'} (vLLM {version or '?'}'s default")
                                    for note in run.notes))

    def test_bench_file_saying_its_mode(self):
        run = load_real_run(bench_file(self, vllm_version="0.15.0", async_scheduling="false"))
        self.assertIs(run.settings["async_scheduling"], False)

    def test_otel_run_the_same_rule(self):
        newer = copy_run(self, lambda d: replace_in(os.path.join(d, "vllm.log"), "version 0.11.0", "version 0.15.1"))
        self.assertIs(load_real_run(newer).settings["async_scheduling"], True)
        self.assertIs(load_real_run(EXCERPT).settings["async_scheduling"], False)


class KvTooSmallNamesItsSourceTest(unittest.TestCase):
    """A request that cannot fit the KV cache blames what set its size: the flag, vllm.log, or meta.json.
    The excerpt's first span (cmpl-e8a164d6...-0) holds 2,027 prompt + output tokens: 127 blocks of 16."""

    def bad(self, run, flags, mention):
        out = os.path.join(temp_dir(self), "cal")
        assert_bad_input(self, ["calibrate", run, "--train-first", "5", *flags, "--out", out], mention)
        self.assertFalse(os.path.exists(out))

    def test_the_flag(self):
        self.bad(EXCERPT, ["--num-gpu-blocks", "10"], "10 KV blocks of 16 tokens: the KV size from --num-gpu-blocks "
                                                      "10 contradicts the run")

    def test_the_log(self):
        def small(directory):
            log = os.path.join(directory, "vllm.log")
            replace_in(log, "num_gpu_blocks is: 7438", "num_gpu_blocks is: 20")
            replace_in(log, "GPU KV cache size: 119,008 tokens", "GPU KV cache size: 320 tokens")
        self.bad(copy_run(self, small), [], "20 KV blocks of 16 tokens: the KV size from vllm.log contradicts the run")

    def test_the_log_with_a_block_size_flag(self):
        def small(directory):
            log = os.path.join(directory, "vllm.log")
            replace_in(log, "num_gpu_blocks is: 7438", "num_gpu_blocks is: 20")
            replace_in(log, "GPU KV cache size: 119,008 tokens", "GPU KV cache size: 320 tokens")
        # 320 tokens / 32 = 10 blocks of 32: 9 usable hold 288 tokens, not 2,027.
        self.bad(copy_run(self, small), ["--block-size", "32"],
                 "10 KV blocks of 32 tokens: the KV size from vllm.log and --block-size 32 contradicts the run")

    def test_a_block_size_leaving_fewer_than_two_blocks(self):
        # 119,008 tokens / 60,000 = 1 block: below vLLM's two, said with both values (not as the log's fault).
        self.bad(EXCERPT, ["--block-size", "60000"], "--block-size 60000: vllm.log's KV capacity of 119008 tokens "
                                                     "holds 1 blocks")

    def test_meta_json(self):
        def small(meta):
            for section in (meta["kv_cache"], meta["resolved_config"]["cache_config"]):
                section["num_gpu_blocks"] = 3
            meta["kv_cache"]["num_kv_tokens"] = 48
        self.bad(copy_4090(self, small), [], "3 KV blocks of 16 tokens: the KV size from meta.json contradicts the run")


if __name__ == "__main__":
    unittest.main()
