"""calibrate's run readers on hostile files (OpenTelemetry spans, profile.yaml, vllm.log, benchmark results).

Each case was a wrong result accepted silently or an internal error before: the reader must refuse
with one line naming the file, the request (span) and the field, exit 2. The expected rules are
OTLP's and vLLM's (a request leaves the queue before its first token; Unix times are >= 0; a span
ends after it starts; ``gpu_memory_utilization`` is in (0, 1]; ``async_scheduling`` is a bool) and
YAML's (no tabs in indentation; flow style, anchors and deeper nesting are not this reader's shape,
so they are refused rather than misread).
"""

import json
import os
import unittest

from sched.base.cmdline import InputError
from sched.timing.gpus import find_gpu
from sched.timing.loadrun import load_real_run
from tests.helpers import assert_bad_input, read, run_cli, temp_dir
from tests.test_timing_calibrate_otel import copy_run, edit_spans, replace_in

#: The fourth span of the excerpt's traces.json (line 3), its TTFT and its queue time as written there.
SPAN = "cmpl-54cf0446b2554a909834df810f502055-0"


def edit_span(directory, key, value, field="attributes"):
    """Set attribute ``key`` (or, with ``field`` None, the span's own ``key``) of span :data:`SPAN`."""
    def edit(span):
        names = [a for a in span["attributes"] if a["key"] == "gen_ai.request.id"]
        if not names or names[0]["value"]["stringValue"] != SPAN:
            return
        if field is None:
            span[key] = value
        else:
            for item in span["attributes"]:
                if item["key"] == key:
                    item["value"] = value
    edit_spans(directory, edit, name=None)


class SpanTest(unittest.TestCase):
    def refused(self, edit, *mentions):
        base = copy_run(self, edit)
        with self.assertRaises(InputError) as caught:
            load_real_run(base)
        for mention in ("traces.json", SPAN) + mentions:
            self.assertIn(mention, str(caught.exception))

    def test_queue_time_after_the_first_token(self):
        """time_in_queue 50 s > time_to_first_token 0.058 s: a queue wait longer than TTFT was kept."""
        self.refused(lambda d: edit_span(d, "gen_ai.latency.time_in_queue", {"doubleValue": 50.0}),
                     "'gen_ai.latency.time_in_queue'", "after the first token")

    def test_token_count_too_large_says_the_range(self):
        """10^20 prompt tokens was told it 'must be a non-negative number'; it is one, only too large."""
        self.refused(lambda d: edit_span(d, "gen_ai.usage.prompt_tokens", {"intValue": "99999999999999999999"}),
                     "'gen_ai.usage.prompt_tokens'", "from 0 to 1e9")

    def test_attributes_not_a_list(self):
        """An object where OTLP has a list of attributes was reported as a missing request id."""
        def edit(directory):
            path = os.path.join(directory, "traces.json")
            with open(path, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
            batch = json.loads(lines[0])
            batch["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] = {}
            lines[0] = json.dumps(batch)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("\n".join(lines) + "\n")
        base = copy_run(self, edit)
        with self.assertRaises(InputError) as caught:
            load_real_run(base)
        self.assertIn("traces.json: line 1: span 0: field 'attributes': must be a list", str(caught.exception))

    def test_negative_start_time(self):
        """startTimeUnixNano -5: the run's origin moved 56 years back and the replay was judged on that."""
        self.refused(lambda d: edit_span(d, "startTimeUnixNano", "-5", field=None), "'startTimeUnixNano'",
                     "negative")

    def test_span_ending_before_it_starts(self):
        self.refused(lambda d: edit_span(d, "endTimeUnixNano", "1", field=None), "'endTimeUnixNano'",
                     "before the span's start")

    def test_unreadable_numbers_are_not_called_missing(self):
        """OTLP JSON writes a NaN double as the text "NaN"; a 5,000-digit intValue is not a count either."""
        self.refused(lambda d: edit_span(d, "gen_ai.latency.time_to_first_token", {"doubleValue": "NaN"}),
                     "'gen_ai.latency.time_to_first_token'", "'NaN' is not a number")
        self.refused(lambda d: edit_span(d, "gen_ai.usage.prompt_tokens", {"intValue": "9" * 5000}),
                     "'gen_ai.usage.prompt_tokens'", "not a whole number")
        self.refused(lambda d: edit_span(d, "gen_ai.usage.prompt_tokens", {"intValue": 12.7}),
                     "'gen_ai.usage.prompt_tokens'", "not a whole number")


PROFILE_LINE = "  prefix_tokens: 0"


class ProfileTest(unittest.TestCase):
    def profile(self, old, new):
        return copy_run(self, lambda d: replace_in(os.path.join(d, "profile.yaml"), old, new))

    def refused(self, old, new, *mentions):
        with self.assertRaises(InputError) as caught:
            load_real_run(self.profile(old, new))
        for mention in ("profile.yaml",) + mentions:
            self.assertIn(mention, str(caught.exception))

    def test_flow_style_is_not_silently_ignored(self):
        """data: {prefix_tokens: 1024, ...} declared a prefix the replay dropped (prefix 0)."""
        self.refused("data:\n", "data: {prefix_tokens: 1024}\nold:\n", "line 6", "'data'", "flow style")

    def test_key_given_twice(self):
        """prefix_tokens 1024 then 0: the last one won silently."""
        self.refused(PROFILE_LINE, "  prefix_tokens: 1024\n  prefix_tokens: 0", "line 8", "given twice")

    def test_third_level_is_not_folded_into_the_section(self):
        """'prefix:' with 'tokens: 5' under it became data.tokens = 5."""
        self.refused(PROFILE_LINE, "  prefix:\n    tokens: 5\n  prefix_tokens: 0", "'prefix'", "third level")

    def test_anchor_and_tab(self):
        self.refused("data:", "data: &shape", "'data'", "anchors")
        self.refused(PROFILE_LINE, "\tprefix_tokens: 1024", "line 7", "tab in the indentation")

    def test_inline_data_naming_a_prefix(self):
        self.refused("data:\n", "data: prefix_tokens=1024,prompt_tokens=64\nold:\n", "'data'", "inline")

    def test_comment_after_a_tab_is_a_comment(self):
        """YAML: '#' after any white space starts a comment; 1024 is read, as after a space."""
        run = load_real_run(self.profile(PROFILE_LINE, "  prefix_tokens: 1024\t# shared system prompt"))
        self.assertEqual(run.prefix_tokens, 1024)


class SettingsTest(unittest.TestCase):
    def without_kv(self, extra_args=""):
        def edit(d):
            path = os.path.join(d, "vllm.log")
            with open(path, encoding="utf-8") as handle:
                lines = [line for line in handle if not any(
                    marker in line for marker in ("num_gpu_blocks is", "GPU KV cache size", "Available KV cache memory"))]
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("".join(lines))
            if extra_args:
                replace_in(path, "'max_model_len': 4096", "'max_model_len': 4096, " + extra_args)
        return copy_run(self, edit)

    def test_gpu_memory_utilization_out_of_range_in_the_log(self):
        """'abc' was an internal error (exit 3, a 80 GiB string repetition); 5.0 derived 5x the blocks."""
        sizing = {"kv_bytes_per_token": 524288, "gpu": find_gpu("A100 80GB")}
        for raw in ("'abc'", "5.0", "0", "True"):
            with self.subTest(raw=raw):
                with self.assertRaises(InputError) as caught:
                    load_real_run(self.without_kv(f"'gpu_memory_utilization': {raw}"), sizing=sizing)
                self.assertIn("vllm.log", str(caught.exception))
                self.assertIn("'gpu_memory_utilization'", str(caught.exception))

    def test_gpu_memory_utilization_in_a_benchmark(self):
        """'nan' was exit 3; 'abc' silently became 0.9; '5' was used."""
        base = temp_dir(self)
        for raw in ("nan", "abc", "5", "-0.5"):
            with self.subTest(raw=raw):
                run = {"backend": "vllm", "model_id": "org/Some-7B", "num_prompts": 3, "input_lens": [100, 200, 50],
                       "output_lens": [5, 6, 7], "start_times": [10.0, 10.1, 10.3], "ttfts": [0.05, 0.06, 0.07],
                       "itls": [[0.03] * 4, [0.03] * 5, [0.03] * 6], "errors": ["", "", ""],
                       "block_size": "16", "max_num_seqs": "8", "max_num_batched_tokens": "256",
                       "enable_prefix_caching": "false", "gpu_memory_utilization": raw}
                path = os.path.join(base, "bench.json")
                with open(path, "w", encoding="utf-8") as out:
                    json.dump(run, out)
                with self.assertRaises(InputError) as caught:
                    load_real_run(path, sizing={"gpu": find_gpu("L40S"), "kv_bytes_per_token": 524288})
                self.assertIn("bench.json: field 'gpu_memory_utilization'", str(caught.exception))

    def test_async_scheduling_must_be_a_bool(self):
        """'False' (a string) in the log's args ran async; 'maybe' in a benchmark's metadata too."""
        with self.assertRaises(InputError) as caught:
            load_real_run(copy_run(self, lambda d: replace_in(
                os.path.join(d, "vllm.log"), "'max_model_len': 4096", "'max_model_len': 4096, 'async_scheduling': 'False'")))
        self.assertIn("vllm.log: line 2: field 'async_scheduling'", str(caught.exception))
        run = load_real_run(copy_run(self, lambda d: replace_in(
            os.path.join(d, "vllm.log"), "'max_model_len': 4096", "'max_model_len': 4096, 'async_scheduling': None")))
        self.assertFalse(run.settings["async_scheduling"])   # None: vLLM 0.11's default, off
        base = temp_dir(self)
        path = os.path.join(base, "bench.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"backend": "vllm", "model_id": "org/Some-7B", "input_lens": [100], "output_lens": [5],
                       "start_times": [10.0], "ttfts": [0.05], "itls": [[0.03] * 4], "errors": [""],
                       "num_gpu_blocks": "100", "block_size": "16", "max_num_seqs": "8",
                       "max_num_batched_tokens": "256", "enable_prefix_caching": "false",
                       "async_scheduling": "maybe"}, out)
        with self.assertRaises(InputError) as caught:
            load_real_run(path)
        self.assertIn("bench.json: field 'async_scheduling'", str(caught.exception))

    def test_benchmark_without_per_request_lists(self):
        """Without output_lens the message was '--train-first 10: must be between 1 and 0'."""
        path = os.path.join(temp_dir(self), "bench.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"backend": "vllm", "model_id": "org/Some-7B", "input_lens": [100], "start_times": [10.0],
                       "ttfts": [0.05], "itls": [[0.03] * 4], "errors": [""], "num_gpu_blocks": "100"}, out)
        assert_bad_input(self, ["calibrate", path, "--train-first", "1", "--out", os.path.join(temp_dir(self), "c")],
                         "field 'output_lens': missing: calibrate needs per-request times")

    def test_too_few_blocks_from_the_flag_names_the_flag(self):
        """--num-gpu-blocks 1 was reported as vllm.log's 'must be >= 1, got 1'."""
        base = copy_run(self)
        assert_bad_input(self, ["calibrate", base, "--train-first", "45", "--num-gpu-blocks", "1",
                                "--out", os.path.join(temp_dir(self), "c")], "--num-gpu-blocks 1: must be a whole "
                                                                             "number >= 2, got 1")

    def test_bad_log_value_exits_2_from_the_command(self):
        out = os.path.join(temp_dir(self), "cal")
        assert_bad_input(self, ["calibrate", self.without_kv("'gpu_memory_utilization': 'abc'"), "--train-first", "45",
                                "--kv-bytes-per-token", "524288", "--run-gpu", "A100 80GB", "--out", out],
                         "'gpu_memory_utilization'")
        self.assertFalse(os.path.exists(out))


class SeveralRunsTest(unittest.TestCase):
    def test_runs_of_two_tensor_parallel_sizes(self):
        """The four terms hold no split-model communication: TP 1 and TP 2 were fitted as one model."""
        other = copy_run(self, lambda d: replace_in(os.path.join(d, "vllm.log"), "tensor_parallel_size=1",
                                                    "tensor_parallel_size=2"))
        out = os.path.join(temp_dir(self), "cal")
        assert_bad_input(self, ["calibrate", copy_run(self), other, "--train-first", "45", "--out", out],
                         "field 'tensor_parallel_size': 2 but")
        self.assertFalse(os.path.exists(out))

    def test_the_same_run_twice(self):
        """Its requests counted twice: a fit 'over two runs' with half the true uncertainty."""
        base = copy_run(self)
        out = os.path.join(temp_dir(self), "cal")
        assert_bad_input(self, ["calibrate", base, base, "--train-first", "45", "--out", out],
                         "the same run as")
        self.assertFalse(os.path.exists(out))


class OneTokenTest(unittest.TestCase):
    def test_every_request_one_token_names_the_run(self):
        """No TPOT anywhere: the line named no file and no request before."""
        def one_token(span):
            for item in span["attributes"]:
                if item["key"] == "gen_ai.usage.completion_tokens":
                    item["value"] = {"intValue": "1"}
        base = copy_run(self, lambda directory: edit_spans(directory, one_token, name=None))
        out = os.path.join(temp_dir(self), "cal")
        assert_bad_input(self, ["calibrate", base, "--train-first", "45", "--out", out],
                         f"{base}: every training request (cmpl-e8a164d6e8844f5bb1e1530fd72d3c66-0 .. ")
        self.assertFalse(os.path.exists(out))


class TooFewRequestsTest(unittest.TestCase):
    def test_no_uncertainty_from_one_or_two_requests(self):
        """A bootstrap of 1 or 2 training requests resamples the same requests: '± 0' claimed an exact
        coefficient (the excerpt's first request alone printed 'd = 0 ± 0'). Fewer than 5: no ±, and
        b, c, d fitted there are unidentified, held at their fit."""
        base = temp_dir(self)
        path = os.path.join(base, "bench.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"backend": "vllm", "model_id": "m", "input_lens": [100, 200, 50], "output_lens": [5, 6, 7],
                       "start_times": [10.0, 10.1, 10.3], "ttfts": [0.05, 0.06, 0.07],
                       "itls": [[0.03] * 4, [0.03] * 5, [0.03] * 6], "errors": ["", "", ""],
                       "num_gpu_blocks": "100", "block_size": "16", "max_num_seqs": "8",
                       "max_num_batched_tokens": "256", "enable_prefix_caching": "false"}, out)
        out = os.path.join(base, "cal")
        code, stdout, err = run_cli(["calibrate", path, "--train-first", "2", "--max-replays", "2", "--out", out])
        self.assertEqual(code, 0, err)
        terms = [line for line in stdout.splitlines() if line.startswith(("  a ", "  b ", "  c ", "  d "))]
        self.assertEqual(len(terms), 4, stdout)
        self.assertFalse([line for line in terms if "±" in line], terms)
        model = json.loads(read(os.path.join(out, "step-model.json")))
        self.assertTrue(model["identified"]["a"])
        for term in "bcd":
            self.assertFalse(model["identified"][term], term)
            self.assertIsNone(model["uncertainty"].get(term))
        said = [term for term in "bcd" if "only 2 training requests" in model["unidentified"][term]]
        held = [term for term in "bcd" if "held at 0" in model["unidentified"][term]]
        self.assertEqual(sorted(said + held), ["b", "c", "d"])


class GpuNameTest(unittest.TestCase):
    def test_a_family_name_is_not_read_as_one_variant(self):
        """'A100' was the A100 80GB SXM (2,039 GB/s) and 'H100' the H100 SXM (3,350 GB/s, 989 TFLOP/s):
        an A100 40GB (1,555 GB/s) or an H100 PCIe (2,000 GB/s, 756 TFLOP/s) got the other's figures."""
        for name, closest in (("A100", "A100 80GB"), ("H100", "H100 SXM")):
            with self.subTest(name=name):
                with self.assertRaises(InputError) as caught:
                    find_gpu(name)
                self.assertIn(f"--gpu {name!r}: not in the lab's GPU table; did you mean {closest!r}?",
                              str(caught.exception))
        self.assertEqual(find_gpu("NVIDIA A100-SXM4-80GB").name, "A100 80GB")   # the driver's name still reads
        self.assertEqual(find_gpu("NVIDIA H100 80GB HBM3").name, "H100 SXM")


if __name__ == "__main__":
    unittest.main()
