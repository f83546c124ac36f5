"""``calibrate --repeat``: only another run of the same model and workload gives a run-to-run noise
(issue 18, item 5; sched/timing/repeat_run.py).

A repeat of another model, of another workload, or the run itself (the same file, or a copy with the
same measurements) was taken as the repeat: the noise column then compared two different servers,
or printed ±0.0% as if a real server had no run-to-run noise. The genuine repeat below is the
excerpt with every time 10% longer, so each TTFT and E2E percentile moves by exactly 10% (nearest
rank of values all scaled by 1.1 is the scaled value), computed by hand, not by the code.
"""

import json
import os
import unittest

from tests.helpers import assert_bad_input, full_only, read, run_cli, temp_dir
from tests.test_timing_calibrate_otel import EXCERPT, copy_run, edit_spans, replace_in

LATENCIES = ("gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e", "gen_ai.latency.time_in_queue")


def slower(span, factor=1.1):
    """Every latency of ``span`` ``factor`` times longer (the span's end moved with its E2E)."""
    for item in span["attributes"]:
        if item["key"] in LATENCIES:
            item["value"] = {"doubleValue": item["value"]["doubleValue"] * factor}
        if item["key"] == "gen_ai.latency.e2e":
            span["endTimeUnixNano"] = str(int(span["startTimeUnixNano"]) + round(item["value"]["doubleValue"] * 1e9))


def attribute(span, key):
    return next(item for item in span["attributes"] if item["key"] == key)


class RefusedRepeatTest(unittest.TestCase):
    def refused(self, repeat, *mentions):
        out = os.path.join(temp_dir(self), "cal")
        for mention in ("--repeat",) + mentions:
            assert_bad_input(self, ["calibrate", EXCERPT, "--train-first", "45", "--repeat", repeat,
                                    "--max-replays", "1", "--out", out], mention)
        self.assertFalse(os.path.exists(out))

    def test_the_run_itself(self):
        self.refused(EXCERPT, "the same requests file")

    def test_a_copy_with_the_same_measurements(self):
        """Rewritten line by line (another sha256), the same TTFT and E2E of every request."""
        self.refused(copy_run(self, lambda d: edit_spans(d, lambda span: None)), "the same measurements")

    def test_another_model(self):
        repeat = copy_run(self, lambda d: (edit_spans(d, slower), replace_in(
            os.path.join(d, "vllm.log"), "served_model_name=meta-llama/Llama-2-7b-hf", "served_model_name=org/Other-13b")))
        self.refused(repeat, "field 'model'", "org/Other-13b")

    def test_another_workload(self):
        """The first request's prompt 1,527 tokens in the run, 1,528 in the 'repeat'."""
        def edit(span):
            slower(span)
            item = attribute(span, "gen_ai.usage.prompt_tokens")
            if item["value"]["intValue"] == "1527":
                item["value"] = {"intValue": "1528"}
        self.refused(copy_run(self, lambda d: edit_spans(d, edit)), "field 'prompt_tokens'", "1528", "1527")


class GenuineRepeatTest(unittest.TestCase):
    @full_only("a whole calibration with a repeat run")
    def test_every_time_ten_percent_longer_is_ten_percent_noise(self):
        repeat = copy_run(self, lambda d: edit_spans(d, slower))
        out = os.path.join(temp_dir(self), "cal")
        code, stdout, err = run_cli(["calibrate", EXCERPT, "--train-first", "45", "--repeat", repeat,
                                     "--max-replays", "1", "--out", out])
        self.assertEqual(code, 0, err)
        self.assertIn("run-to-run", stdout)
        table = json.loads(read(os.path.join(out, "calibration.json")))["held_out_table"]
        checked = 0
        for row in table:
            if row["metric"] in ("ttft", "e2e"):
                self.assertAlmostEqual(row["noise"], 0.1, places=3, msg=row)
                self.assertEqual(row["within_noise"], abs(row["error"]) <= row["noise"])
                checked += 1
        self.assertEqual(checked, 8)


if __name__ == "__main__":
    unittest.main()
