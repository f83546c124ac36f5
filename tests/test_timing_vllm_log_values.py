"""Numbers read from a run's ``vllm.log`` (sched/timing/otel_run.py): a value the log states
unreadably or out of range is one line naming the file, the line and the field, exit 2.

Before: ``Model loading took 1.2.3 GiB``, ``Available KV cache memory: 5.8.12 GiB`` and
``GPU KV cache size: ,,, tokens`` ended calibrate with exit 3 (an internal error);
``num_gpu_blocks is: -7`` or ``: many`` was skipped and the KV size taken from another line without
a word; a block count past the engine's bound (10^9) was blamed on a ``--num-gpu-blocks`` flag
never given, and a too-large flag was told it "must be at least 2".
"""

import os
import re
import unittest

from sched.base.cmdline import InputError
from sched.timing.loadrun import load_real_run
from tests.helpers import assert_bad_input, temp_dir
from tests.test_timing_calibrate_otel import EXCERPT, copy_run, replace_in

#: The excerpt's log lines (1-based) that carry the numbers.
WEIGHTS_LINE, AVAILABLE_LINE, KV_TOKENS_LINE, BLOCKS_LINE = 16, 22, 23, 27


def edit_log(old, new, drop=None):
    """An edit of the copy's vllm.log: ``old`` -> ``new`` (a regular expression), lines holding ``drop`` removed."""
    def edit(directory):
        path = os.path.join(directory, "vllm.log")
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
        if drop:
            lines = [line if drop not in line else "" for line in lines]   # keep the line numbers
        text = re.sub(old, new, "\n".join(lines))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return edit


class LogNumberTest(unittest.TestCase):
    def refused(self, edit, line, field, value):
        base = copy_run(self, edit)
        with self.assertRaises(InputError) as caught:
            load_real_run(base)
        message = str(caught.exception)
        for mention in (os.path.join(base, "vllm.log"), f"line {line}:", f"field {field!r}", repr(value)):
            self.assertIn(mention, message)

    def test_weights_not_a_number(self):
        self.refused(edit_log(r"Model loading took [\d.]+ GiB", "Model loading took 1.2.3 GiB"),
                     WEIGHTS_LINE, "Model loading took", "1.2.3")

    def test_available_memory_not_a_number(self):
        self.refused(edit_log(r"Available KV cache memory: [\d.]+ GiB", "Available KV cache memory: 5.8.12 GiB"),
                     AVAILABLE_LINE, "Available KV cache memory", "5.8.12")

    def test_kv_tokens_not_a_number(self):
        self.refused(edit_log("119,008 tokens", ",,, tokens"), KV_TOKENS_LINE, "GPU KV cache size", ",,,")

    def test_kv_tokens_with_misplaced_commas(self):
        self.refused(edit_log("119,008 tokens", "11,9008 tokens"), KV_TOKENS_LINE, "GPU KV cache size", "11,9008")

    def test_negative_block_count_is_not_skipped(self):
        self.refused(edit_log("num_gpu_blocks is: 7438", "num_gpu_blocks is: -7"), BLOCKS_LINE, "num_gpu_blocks is",
                     "-7")

    def test_block_count_in_words_is_not_skipped(self):
        self.refused(edit_log("num_gpu_blocks is: 7438", "num_gpu_blocks is: many"), BLOCKS_LINE,
                     "num_gpu_blocks is", "many")

    def test_block_count_past_the_bound(self):
        self.refused(edit_log("num_gpu_blocks is: 7438", "num_gpu_blocks is: 99999999999999999999999"), BLOCKS_LINE,
                     "num_gpu_blocks is", "99999999999999999999999")

    def test_kv_size_that_is_not_whole_blocks_is_said(self):
        """50,000 tokens over 7,438 blocks is 6.72 tokens a block: the two lines disagree. The block count
        is used and the disagreement said (it was silent, and the block size then a bare default)."""
        run = load_real_run(copy_run(self, edit_log("119,008 tokens", "50,000 tokens")))
        self.assertEqual((run.settings["num_gpu_blocks"], run.settings["block_size"]), (7438, 16))
        self.assertTrue(any("50000 tokens is not a whole number of its 7438 blocks" in note for note in run.notes),
                        run.notes)

    def test_the_log_as_shipped_still_reads(self):
        """119,008 KV tokens and 7,438 blocks: block size 119008 / 7438 = 16."""
        run = load_real_run(copy_run(self))
        self.assertEqual((run.settings["num_gpu_blocks"], run.settings["block_size"]), (7438, 16))

    def test_blocks_derived_past_the_bound_name_the_log(self):
        """100,000,000,000 KV tokens / block size 16 = 6,250,000,000 blocks > 10^9, and no flag was given."""
        base = copy_run(self, edit_log("119,008 tokens", "100,000,000,000 tokens", drop="num_gpu_blocks is"))
        with self.assertRaises(InputError) as caught:
            load_real_run(base)
        self.assertIn("vllm.log: field 'num_gpu_blocks'", str(caught.exception))
        self.assertIn("6250000000", str(caught.exception))
        self.assertNotIn("--num-gpu-blocks", str(caught.exception))

    def test_a_kv_size_the_flag_gives_is_not_read(self):
        """With --num-gpu-blocks, the log's KV lines are not needed, so an unreadable one is left alone."""
        base = copy_run(self, edit_log("num_gpu_blocks is: 7438", "num_gpu_blocks is: many"))
        run = load_real_run(base, flags={"num_gpu_blocks": 3000})
        self.assertEqual(run.settings["num_gpu_blocks"], 3000)


class TooManyBlocksFlagTest(unittest.TestCase):
    def test_calibrate_flag(self):
        out = os.path.join(temp_dir(self), "cal")
        assert_bad_input(self, ["calibrate", EXCERPT, "--train-first", "30", "--num-gpu-blocks", "1000000001",
                                "--out", out], "--num-gpu-blocks 1000000001: must be a whole number >= 2 and at most 1e+09")
        self.assertFalse(os.path.exists(out))

    def test_run_flag_says_the_upper_bound(self):
        assert_bad_input(self, ["--engine", "vllm", "--num-gpu-blocks", "1000000001"], "at most 1000000000")


if __name__ == "__main__":
    unittest.main()
