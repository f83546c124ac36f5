"""calibrate used as a new engineer might (sched/timing/loadrun.py, runmeta.py): each is one line, exit 2,
nothing written, and the line says what calibrate reads.

Before: an unknown result file was told to "pass --format", a flag calibrate does not have; ``--meta``
given with an OpenTelemetry run directory or a vllm bench serve file was ignored without a word; a
model, GPU or vLLM version that is a number in meta.json or a benchmark file was recorded in
step-model.json as the run's name.
"""

import json
import os
import shutil
import unittest

from tests.helpers import PROJECT, assert_bad_input, run_cli, temp_dir
from tests.test_timing_calibrate_otel import EXCERPT

RUN_4090 = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090-run")
META = os.path.join(RUN_4090, "meta.json")


def bench_file(directory, **changes):
    """A three-request vllm bench serve --save-detailed file naming its engine settings (--metadata)."""
    run = {"backend": "vllm", "model_id": "org/Some-7B", "num_prompts": 3, "input_lens": [100, 200, 50],
           "output_lens": [5, 6, 7], "start_times": [10.0, 10.1, 10.3], "ttfts": [0.05, 0.06, 0.07],
           "itls": [[0.03] * 4, [0.03] * 5, [0.03] * 6], "errors": ["", "", ""], "num_gpu_blocks": "100",
           "block_size": "16", "max_num_seqs": "8", "max_num_batched_tokens": "256", "enable_prefix_caching": "false"}
    run.update(changes)
    path = os.path.join(directory, "bench.json")
    with open(path, "w", encoding="utf-8") as out:
        json.dump(run, out)
    return path


class MisuseTest(unittest.TestCase):
    def setUp(self):
        self.base = temp_dir(self)
        self.out = os.path.join(self.base, "cal")

    def refused(self, run, mention, *flags):
        assert_bad_input(self, ["calibrate", run, "--train-first", "2", "--out", self.out, *flags], mention)
        self.assertFalse(os.path.exists(self.out))

    def test_unknown_format_names_what_calibrate_reads(self):
        path = os.path.join(self.base, "result.json")
        with open(path, "w", encoding="utf-8") as out:
            out.write('{"rows": []}\n')
        self.refused(path, "calibrate reads")
        _, _, err = run_cli(["calibrate", path, "--train-first", "2", "--out", self.out])
        self.assertNotIn("--format", err)   # a flag calibrate does not have

    def test_meta_with_an_otel_directory(self):
        self.refused(EXCERPT, "--meta", "--meta", META)
        self.refused(EXCERPT, "OpenTelemetry run directory", "--meta", META)

    def test_meta_with_a_bench_file(self):
        self.refused(bench_file(self.base), "vllm bench serve result", "--meta", META)

    def run_with_meta(self, key, value) -> str:
        """A copy of the 4090 run whose meta.json has ``key`` set to ``value``; its requests.jsonl."""
        run = os.path.join(self.base, "run")
        shutil.copytree(RUN_4090, run)
        with open(os.path.join(run, "meta.json"), encoding="utf-8") as handle:
            meta = json.load(handle)
        meta[key] = value
        with open(os.path.join(run, "meta.json"), "w", encoding="utf-8") as handle:
            json.dump(meta, handle)
        return os.path.join(run, "requests.jsonl")

    def test_model_that_is_a_number_in_meta_json(self):
        self.refused(self.run_with_meta("model", 5), "meta.json: field 'model': must be a name (text), got 5")

    def test_vllm_version_that_is_a_number_in_meta_json(self):
        self.refused(self.run_with_meta("vllm_version", 19), "field 'vllm_version'")

    def test_model_id_that_is_a_number_in_a_bench_file(self):
        self.refused(bench_file(self.base, model_id=7), "bench.json: field 'model_id': must be a name (text), got 7")

    def test_the_bench_file_as_written_reads(self):
        """The same file with its model named: calibrate fits it (exit 0)."""
        code, _, err = run_cli(["calibrate", bench_file(self.base), "--train-first", "2", "--max-replays", "1",
                                "--out", self.out])
        self.assertEqual(code, 0, err)


if __name__ == "__main__":
    unittest.main()
