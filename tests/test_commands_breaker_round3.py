"""The third breaker round: 12 causes of bad input getting in through the newer commands (the vLLM
engine, ``--step-model`` runs, ``calibrate``, ``diff``, ``explain``, ``sweep --executor dask://``),
and vLLM's rule that ``--max-num-batched-tokens`` may not be below ``--max-num-seqs``.

One table, one row per case found: what it prepares, the command, and what is promised instead
(exit code 2, one stderr line naming the file, the request and the field, no traceback, nothing
written). The cause number of each row is the breaker's. SIGHUP while the program loads (cause 12)
needs a real process and is a row of :mod:`tests.test_base_interrupts`; NaN in a compared summary
(cause 6) is also pinned in :mod:`tests.test_analysis_compare`.
"""

import json
import os
import shutil
import sys
import types
import unittest
from unittest import mock

from tests.helpers import PROJECT, read, run_cli, temp_dir

#: vllm-engine.md §6's example model: 2 ms per step, 0.25 ms per prompt token, 0.5 ms per decode token.
SETTINGS = {"num_gpu_blocks": 41, "block_size": 16, "max_num_batched_tokens": 64, "max_num_seqs": 4,
            "long_prefill_token_threshold": 32, "enable_prefix_caching": True, "policy": "fcfs"}
STEP_MODEL = {"kind": "step-model", "engine": "vllm", "step_ms": {"a": 2.0, "b": 0.25, "c": 0.5},
              "settings": SETTINGS, "fitted_on": {"model": "a hand-written model", "device": "no GPU"}}
TIGHT = ["--engine", "vllm", "--max-num-batched-tokens", "64", "--max-num-seqs", "4", "--long-prefill-token-threshold",
         "32", "--enable-prefix-caching", "--num-gpu-blocks", "41", "--timeline", "full"]
#: The LLMServingSim excerpts (tests/data/SOURCES.md): 300 requests with meta.json and timeseries.csv,
#: and 20 requests with meta.json.
REAL_RUN = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090-run")
EXCERPT = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090")


class _Holder(unittest.TestCase):
    def runTest(self):
        pass


def _text_edit(old: str, new: str):
    def edit(text):
        assert old in text, old
        return text.replace(old, new, 1)
    return edit


def _json_edit(change):
    def edit(text):
        data = json.loads(text)
        change(data)
        return json.dumps(data, indent=2) + "\n"
    return edit


def _set(path: str, value):
    """A change setting ``a.b.c`` of a JSON object to ``value``."""
    def change(data):
        *parents, last = path.split(".")
        for key in parents:
            data = data[key]
        data[last] = value
    return change


def _lines_edit(change):
    """A JSON-lines file with ``change(list of records)`` applied."""
    def edit(text):
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        change(records)
        return "".join(json.dumps(r) + "\n" for r in records)
    return edit


def _step_edit(tick: int, change):
    """timeline.jsonl with ``change(record)`` applied to the step at ``tick``."""
    return _lines_edit(lambda records: change(next(r for r in records if r["tick"] == tick)))


class BreakerRoundThreeTest(unittest.TestCase):
    """Each row: (cause, label, prepare() -> argv, exit code, words on stderr)."""

    @classmethod
    def setUpClass(cls):
        cls.holder = _Holder()
        cls.shared = temp_dir(cls.holder)
        cls.model = cls.shared_file("step-model.json", json.dumps(STEP_MODEL))
        slow = json.loads(json.dumps(STEP_MODEL))
        slow["step_ms"]["a"] = 200.0
        cls.slow_model = cls.shared_file("slow-model.json", json.dumps(slow))
        cls.fast_run, cls.slow_run, cls.tight = (os.path.join(cls.shared, n) for n in ("fast", "slow", "tight"))
        for target, model in ((cls.fast_run, cls.model), (cls.slow_run, cls.slow_model)):
            code, _, err = run_cli(["--engine", "vllm", "--step-model", model, "--artifacts", target])
            assert code == 0, err
        code, _, err = run_cli([*TIGHT, "--artifacts", cls.tight])
        assert code == 0, err

    @classmethod
    def tearDownClass(cls):
        cls.holder.doCleanups()

    @classmethod
    def shared_file(cls, name, text):
        path = os.path.join(cls.shared, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def setUp(self):
        self.base = temp_dir(self)

    def path(self, name):
        return os.path.join(self.base, name)

    def copy(self, source: str, name: str, **edits) -> str:
        """A copy of directory ``source`` with ``edits`` ({file name with '.' as '_': text -> text})."""
        target = self.path(name)
        shutil.copytree(source, target)
        for key, edit in edits.items():
            name = key.replace("_jsonl", ".jsonl").replace("_json", ".json").replace("_csv", ".csv")
            file = os.path.join(target, name)
            text = read(file)
            with open(file, "w", encoding="utf-8") as handle:
                handle.write(edit(text))
        return target

    def write(self, name: str, text: str) -> str:
        path = self.path(name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def model_file(self, name: str, edit) -> str:
        path = self.path(name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(edit(json.dumps(STEP_MODEL)))
        return path

    def cases(self):
        b = self
        calibrate = lambda run: ["calibrate", os.path.join(run, "requests.jsonl"), "--train-first", "10",  # noqa: E731
                                 "--out", b.path("cal")]
        # 1. diff and the manifest of a step-model run
        yield (1, "diff: manifest engine tampered", lambda: ["diff", b.fast_run, b.copy(
            b.slow_run, "eng", manifest_json=_json_edit(_set("engine", "vllm-fast")))],
            2, "manifest.json: field 'engine': must be vllm")
        yield (1, "diff: manifest tick_ms 0", lambda: ["diff", b.fast_run, b.copy(
            b.slow_run, "tick", manifest_json=_json_edit(_set("tick_ms", 0)))],
            2, "manifest.json: field 'tick_ms': must be a number of ms > 0")
        yield (1, "diff: NaN step coefficient in manifest.json", lambda: ["diff", b.fast_run, b.copy(
            b.slow_run, "nan", manifest_json=_text_edit('"a": 200.0', '"a": NaN'))],
            2, "field 'step_model.step_ms.a': must be a finite number, got NaN")
        yield (1, "diff: a step-model manifest without its step model", lambda: ["diff", b.fast_run, b.copy(
            b.slow_run, "nomodel", manifest_json=_json_edit(lambda d: d.pop("step_model")))],
            2, "a --step-model run has time_unit ms, engine vllm and a step_model together")
        # 2. calibrate must not write a workload.json the run refuses
        yield (2, "calibrate: one request queued 2 x 10^6 s before the others", lambda: calibrate(b.copy(
            REAL_RUN, "early", requests_jsonl=_lines_edit(lambda r: r[5].__setitem__("queued_ts", -2e6)))),
            2, "field 'arrival': must be at most 1000000000 (ticks)")
        # 3. duplicate keys and floats as integers
        yield (3, "step-model.json: a coefficient written twice", lambda: [
            "--engine", "vllm", "--step-model", b.model_file("dup.json", _text_edit('"a": 2.0', '"a": 2.0, "a": 20.0')),
            "--artifacts", b.path("run")], 2, "field 'step_ms.a': written twice in one object")
        yield (3, "step-model.json: num_gpu_blocks 2588.0", lambda: [
            "--engine", "vllm", "--step-model", b.model_file("float.json", _text_edit('"num_gpu_blocks": 41',
                                                                                     '"num_gpu_blocks": 2588.0')),
            "--artifacts", b.path("run")], 2, "field 'settings.num_gpu_blocks': must be a whole number written without "
                                              "a decimal point, got 2588.0")
        yield (3, "real-run line: output_toks written twice", lambda: [
            "import-results", os.path.join(b.copy(EXCERPT, "dupline", requests_jsonl=_text_edit(
                '"output_toks": 769', '"output_toks": 769, "output_toks": 7')), "requests.jsonl"),
            "--artifacts", b.path("real")], 2, "line 2 (bench-1): field 'output_toks': written twice")
        yield (3, "real-run line: input_toks 1034.0", lambda: [
            "import-results", os.path.join(b.copy(EXCERPT, "floatline", requests_jsonl=_text_edit(
                '"input_toks": 1034', '"input_toks": 1034.0')), "requests.jsonl"),
            "--artifacts", b.path("real")], 2, "line 2 (bench-1): field 'input_toks': must be a whole number written "
                                               "without a decimal point, got 1034.0")
        yield (3, "vLLM bench result: num_prompts written twice", lambda: [
            "import-results", b.write("bench.json", '{"backend": "vllm", "num_prompts": 2, "duration": 1.5, '
                                                    '"num_prompts": 200}'), "--policy", "fcfs",
            "--artifacts", b.path("real")], 2, "bench.json: field 'num_prompts': written twice")
        yield (3, "meta.json: a setting written twice", lambda: calibrate(b.copy(
            REAL_RUN, "dupmeta", meta_json=_text_edit('"num_requests": 300',
                                                      '"num_requests": 300, "num_requests": 30'))),
            2, "meta.json: field 'num_requests': written twice")
        # 4. an unusable timeseries.csv is not "absent"
        for label, text, words in (
                ("garbage", "\x00garbage\n", "timeseries.csv: line 1: no column 't'"),
                ("empty", "", "timeseries.csv: line 1: empty"),
                ("a NaN count", "t,running,waiting\n1.0,NaN,2\n", "line 2: column 'running': must be a whole count"),
                ("a negative running count", "t,running,waiting\n1.0,-3,2\n", "column 'running': must be a whole "
                                                                              "count >= 0, got '-3'"),
                ("an unclosed quote", 't,running,waiting\n1.0,2,3\n2.0,"5,2\n3.0,1,1\n', "line 3: not CSV")):
            yield (4, f"calibrate: timeseries.csv {label}", lambda text=text, label=label: calibrate(b.copy(
                REAL_RUN, label.replace(" ", "-"), timeseries_csv=lambda _: text)), 2, words)
        # 5. NaN provenance must not reach manifest.json
        yield (5, "step-model.json: NaN in fitted_on", lambda: [
            "--engine", "vllm", "--step-model", b.model_file("nanprov.json", _text_edit(
                '"device": "no GPU"', '"device": "no GPU", "training_loss": NaN')),
            "--artifacts", b.path("run")], 2, "field 'fitted_on.training_loss': must be a finite number, got NaN")
        # 6. compare reads NaN as diff does
        yield (6, "compare: NaN P95 TTFT in summary.json", lambda: [
            "compare", b.fast_run, b.copy(b.slow_run, "nansum", summary_json=_json_edit(
                lambda d: d["cases"][0].__setitem__("p95_ttft", float("nan")))), "--case", "vllm",
            "--out", b.path("decision.json")],
            2, "field 'cases[0].p95_ttft': must be a finite number, got NaN")
        # 7. a 0-token prompt is bad input, not an internal error
        yield (7, "calibrate: a prompt of 0 tokens", lambda: calibrate(b.copy(
            REAL_RUN, "zero", requests_jsonl=_lines_edit(lambda r: r[0].__setitem__("input_toks", 0)))),
            2, "request 0 (bench-0): field 'suffix_tokens': the prompt has 0 tokens")
        # 8. explain tells only possible values
        yield (8, "explain: config.max_num_batched_tokens 'many'", lambda: ["explain", "S4", "--artifacts", b.copy(
            b.tight, "many", manifest_json=_json_edit(_set("config.max_num_batched_tokens", "many")))],
            2, "field 'config.max_num_batched_tokens': must be a finite number, got \"many\"")
        yield (8, "explain: a string KV size", lambda: ["explain", "S4", "--artifacts", b.copy(
            b.tight, "kv", manifest_json=_json_edit(_set("config.num_gpu_blocks", "41")))],
            2, "field 'config.num_gpu_blocks'")
        yield (8, "explain: NaN step coefficient", lambda: ["explain", "S4", "--artifacts", b.copy(
            b.fast_run, "nanexp", manifest_json=_text_edit('"a": 2.0', '"a": NaN'))],
            2, "field 'step_model.step_ms.a': must be a finite number, got NaN")
        yield (8, "explain: 10^18 tokens in one step", lambda: ["explain", "S4", "--artifacts", b.copy(
            b.tight, "huge", timeline_jsonl=_step_edit(18, lambda r: r["scheduled"].__setitem__("S4", 10**18)))],
            2, "more than max_num_batched_tokens 64")
        yield (8, "explain: preempted for a request the step does not touch", lambda: ["explain", "U3", "--artifacts",
            b.copy(b.tight, "nobody", timeline_jsonl=_step_edit(12, lambda r: r["preempted_for"].__setitem__(
                "U3", "nobody-xyz")))], 2, "'U3' preempted for 'nobody-xyz', a request this step neither schedules")
        # 11. provenance is printed: one line of printable text
        yield (11, "step-model.json: a newline in the model name", lambda: [
            "--engine", "vllm", "--step-model", b.model_file("nl.json", _text_edit(
                '"a hand-written model"', '"m\\nP95 TTFT 1 ms | forged"')), "--artifacts", b.path("run")],
            2, "field 'fitted_on.model': holds the control character \\n")
        # vLLM's own rule (SchedulerConfig): max_num_batched_tokens >= max_num_seqs
        yield ("vLLM", "--max-num-batched-tokens 64 with the default 256 seqs", lambda: [
            "--engine", "vllm", "--max-num-batched-tokens", "64", "--artifacts", b.path("run")],
            2, "--max-num-batched-tokens 64 is below --max-num-seqs 256")
        yield ("vLLM", "--max-num-batched-tokens 8 --max-num-seqs 16", lambda: [
            "--engine", "vllm", "--max-num-batched-tokens", "8", "--max-num-seqs", "16", "--artifacts", b.path("run")],
            2, "raise --max-num-batched-tokens to at least 16 or lower --max-num-seqs to at most 8")
        yield ("vLLM", "a step model fitted with 64 tokens and 256 seqs", lambda: [
            "--engine", "vllm", "--step-model", b.model_file("seqs.json", _text_edit('"max_num_seqs": 4',
                                                                                    '"max_num_seqs": 256')),
            "--artifacts", b.path("run")], 2,
            "seqs.json: field 'settings.max_num_batched_tokens': 64 is below settings.max_num_seqs 256")

    def test_each_case_is_one_line_exit_2_and_nothing_written(self):
        for cause, label, prepare, code, words in self.cases():
            with self.subTest(f"cause {cause}: {label}"):
                got, out, err = run_cli(prepare())
                self.assertEqual(got, code, err)
                self.assertNotIn("Traceback", err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(words, err)
                for name in ("run", "real", "cal", "decision.json"):
                    self.assertFalse(os.path.exists(self.path(name)), name)

    def test_the_manifest_reader_knows_what_the_engines_know(self):
        """sched.analysis may not import the engines or the step model (docs/architecture.md), so the
        manifest reader spells their policies and bounds out; they must stay the same."""
        from sched.analysis import run_manifest
        from sched.lab.policy import POLICIES
        from sched.timing.stepmodel import MAX_COEFFICIENT_MS, MIN_STEP_MS
        from sched.vllm.config import VLLM_POLICIES
        self.assertEqual(set(run_manifest.POLICIES), set(POLICIES) | set(VLLM_POLICIES))
        self.assertEqual(run_manifest.VLLM_POLICIES, VLLM_POLICIES)
        self.assertEqual((run_manifest.MAX_COEFFICIENT_MS, run_manifest.MIN_STEP_MS), (MAX_COEFFICIENT_MS, MIN_STEP_MS))

    def test_diff_names_a_different_step_model(self):
        """Cause 1: two step-model runs whose models differ (a = 2 ms vs 200 ms per step) were
        "configuration: same"; the configuration line now names the coefficient."""
        code, out, err = run_cli(["diff", self.fast_run, self.slow_run])
        self.assertEqual(code, 1, err)
        self.assertIn("configuration: step model a 2.0 -> 200.0 ms", out)
        self.assertNotIn("configuration: same", out)

    def test_a_calibration_that_exits_0_can_be_run(self):
        """Cause 2, the other side: whatever calibrate accepts it can write as a workload the run
        accepts (the validator is the run's); here the excerpt unchanged, read only (no replay)."""
        from sched.timing.calibrate import load_real_run, run_workload
        from sched.workload.specs import workload_to_json
        from sched.workload.validation import parse_workload
        run = load_real_run(os.path.join(REAL_RUN, "requests.jsonl"))
        self.assertEqual(len(parse_workload(workload_to_json(run_workload(run)))), 300)
        self.assertEqual(len(run.timeseries), 184)   # the excerpt's 184 rows, read as before

    def test_something_not_dask_answering_is_one_line(self):
        """Cause 9: a server that is not Dask answers; its first bytes read as an absurd message
        length, and the client raised MemoryError (exit 3). A stand-in client raises it here."""
        def client(*_args, **_kwargs):
            raise MemoryError
        fake = types.ModuleType("dask.distributed")
        fake.Client = client
        # Only these two names are swapped (patch.dict would also drop every module the sweep imports
        # meanwhile, and a later import would make classes that no longer pickle as the same).
        stand_ins = {"dask": types.ModuleType("dask"), "dask.distributed": fake}
        saved = {name: sys.modules.get(name) for name in stand_ins}
        sys.modules.update(stand_ins)
        try:
            code, out, err = run_cli(["sweep", "--executor", "dask://127.0.0.1:8080", "--loads", "1"])
        finally:
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module
        self.assertEqual((code, out), (2, ""), err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("something answered at tcp://127.0.0.1:8080 but it is not a Dask scheduler", err)

    def test_out_of_memory_is_not_an_internal_error(self):
        """Cause 10: an address-space limit (ulimit -v) ends allocation with MemoryError; that is
        the environment, so exit 2 with one line saying so, never exit 3 "internal error"."""
        with mock.patch("sched.commands.run.run_lab", side_effect=MemoryError):
            code, out, err = run_cli(["--artifacts", self.path("run")])
        self.assertEqual((code, out), (2, ""), err)
        self.assertEqual(err, "infer_sched_lab.py: error: out of memory (the process reached its memory or "
                              "address-space limit); nothing was written; try a smaller workload, --timeline counts "
                              "or off, or a higher limit\n")
        self.assertFalse(os.path.exists(self.path("run")))


if __name__ == "__main__":
    unittest.main()
