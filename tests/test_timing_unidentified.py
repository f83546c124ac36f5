"""A coefficient the data cannot identify is said to be unidentified, not reported as a number
(sched/timing/identify.py; issue 18).

Two ways a term is unidentified: the training window cannot separate it (held at 0, the reason
said), or its fitted value is smaller than its own bootstrap uncertainty, ``|value| < sd`` (held at
its fit). Either way every place that shows the step model says the word: calibrate's report, the
formula (``?``), a step-model run's table header, the ``--gpu`` note, explain. step-model.json keeps
the value used in ``step_ms`` with ``identified: {term: false}``. A step-model run whose
``--max-num-seqs``/``--max-num-batched-tokens`` differ from the fitted ones (or whose
``--num-gpu-blocks`` is larger) while ``c`` or ``d`` is unidentified warns that the step model cannot tell what a larger batch costs, and records it in
manifest.json (only then). Expected values are written by hand from these rules.
"""

import json
import os
import unittest

from sched.analysis.explain_input import step_formula
from sched.base.cmdline import InputError
from sched.timing.calibration_report import render_terms
from sched.timing.identify import unidentified_by_spread
from sched.timing.msrun import batch_cost_warning
from sched.timing.stepmodel import StepModel, parse_step_model, step_model_to_json
from sched.vllm.config import VllmKnobs
from tests.helpers import assert_bad_input, read, run_cli, temp_dir

SETTINGS = {"num_gpu_blocks": 41, "block_size": 16, "max_num_batched_tokens": 64, "max_num_seqs": 4,
            "long_prefill_token_threshold": 32, "enable_prefix_caching": True, "policy": "fcfs"}
#: A hand-written step model whose c is smaller than its uncertainty (held at its fit) and d held at 0.
UNIDENTIFIED = {"kind": "step-model", "engine": "vllm", "step_ms": {"a": 2.0, "b": 0.25, "c": 1e-9, "d": 0.0},
                "settings": SETTINGS, "fitted_on": {"model": "a hand-written model", "device": "RTX 4090"},
                "uncertainty": {"a": 0.1, "b": 0.01, "c": 0.00026, "d": None},
                "unidentified": {"c": "|c| < 0.00026 ms per decoded sequence at 1 sd; held at its fit (1e-09)",
                                 "d": "held at 0"},
                "identified": {"a": True, "b": True, "c": False, "d": False}}
IDENTIFIED = dict(UNIDENTIFIED, step_ms={"a": 2.0, "b": 0.25, "c": 0.5, "d": 0.0},
                  uncertainty={"a": 0.1, "b": 0.01, "c": 0.02, "d": None}, unidentified={"d": "held at 0"},
                  identified={"a": True, "b": True, "c": True, "d": False})


def knobs(**changes):
    values = dict(max_num_batched_tokens=64, max_num_seqs=4, long_prefill_token_threshold=32,
                  enable_prefix_caching=True, block_size=16, num_gpu_blocks=41)
    values.update(changes)
    return VllmKnobs(**values)


class DecisionRuleTest(unittest.TestCase):
    def test_smaller_than_its_uncertainty(self):
        """|c| = 1e-9 < sd 0.00026: unidentified; |b| = 0.08 > 0.0004: identified; d held at 0 already
        (named by identify_terms) is not named twice; a term without an sd is never judged here."""
        found = unidentified_by_spread((24.65, 0.08477, 1e-9, 4e-12), {"a": 0.61, "b": 0.00038, "c": 0.00026,
                                                                        "d": 1.4e-5}, {"d": "held at 0"})
        self.assertEqual(set(found), {"c"})
        self.assertIn("|c| < 0.00026 ms per decoded sequence at 1 sd", found["c"])
        self.assertIn("held at its fit (1e-09)", found["c"])
        found = unidentified_by_spread((1.0, 0.5, 0.2, 0.1), {"a": 0.1, "b": None, "c": 0.2, "d": 0.3}, {})
        self.assertEqual(set(found), {"d"})    # c = its sd: identified; b has no sd: not judged
        self.assertIn("|d| < 0.3 ms per KV context token at 1 sd; held at its fit (0.1)", found["d"])

    def test_value_equal_to_sd_is_identified(self):
        self.assertEqual(unidentified_by_spread((1.0, 0.0, 0.2, 0.0), {"c": 0.2}, {}), {})


class StepModelFileTest(unittest.TestCase):
    def test_round_trip_keeps_value_and_flag(self):
        model = parse_step_model(json.dumps(UNIDENTIFIED), "m.json")
        self.assertEqual(model.c_ms, 1e-9)              # the value the engine uses
        self.assertEqual(model.identified, {"a": True, "b": True, "c": False, "d": False})
        self.assertEqual(model.formula, "step_ms = 2 + 0.25·prompt + ?·decode + ?·kv_token")
        written = json.loads(step_model_to_json(model))
        self.assertEqual(written["identified"], {"a": True, "b": True, "c": False, "d": False})
        self.assertEqual(written["step_ms"]["c"], 1e-9)
        self.assertEqual(written["uncertainty"]["c"], 0.00026)

    def test_flag_alone_marks_the_term(self):
        document = dict(IDENTIFIED, identified={"c": False}, unidentified={})
        model = parse_step_model(json.dumps(document), "m.json")
        self.assertIn("?·decode", model.formula)
        self.assertFalse(model.identified["c"])

    def test_old_files_have_no_flag(self):
        """A file without uncertainty (earlier calibrate) writes no 'identified': its bytes stay."""
        model = StepModel(2.0, 0.25, 0.5, dict(SETTINGS), {})
        self.assertNotIn("identified", json.loads(step_model_to_json(model)))
        self.assertEqual(model.formula, "step_ms = 2 + 0.25·prompt + 0.5·decode")

    def test_contradiction_and_bad_flag(self):
        for identified, mention in (({"c": True, "d": False}, "'identified.c'"), ({"c": "no"}, "'identified.c'"),
                                    ({"e": False}, "'identified.e'"), ([False], "'identified'")):
            with self.subTest(identified=identified):
                with self.assertRaises(InputError) as caught:
                    parse_step_model(json.dumps(dict(UNIDENTIFIED, identified=identified)), "bad.json")
                self.assertIn(mention, str(caught.exception))


class ReportTest(unittest.TestCase):
    def test_the_word_not_the_number(self):
        model = parse_step_model(json.dumps(UNIDENTIFIED), "m.json")
        lines = render_terms({"model": model, "uncertainty": {"a": 0.1, "b": 0.01, "c": 0.00026, "d": None},
                              "unidentified": model.unidentified, "held_at_zero": ["d"]})
        self.assertEqual(lines[0], "  a = 2 ± 0.1 ms per step (fixed per-step cost: host work, launches, weights "
                                   "read once)")
        self.assertEqual(lines[2], "  c unidentified (|c| < 0.00026 ms per decoded sequence at 1 sd; held at its fit)")
        self.assertEqual(lines[3], "  d unidentified (held at 0): held at 0")
        self.assertNotIn("1e-09", "\n".join(lines))

    def test_explain_formula(self):
        manifest = {"step_model": {"step_ms": {"a": 24.65, "b": 0.08477, "c": 1e-9, "d": 4e-12},
                                   "identified": {"a": True, "b": True, "c": False, "d": False}}}
        self.assertEqual(step_formula(manifest, " ms"), "24.65 + 0.08477*prompt + ?*decode + ?*kv_token ms "
                                                        "(c, d unidentified; the run held them at 1e-09, 4e-12)")
        del manifest["step_model"]["identified"]   # older runs: numbers as before
        self.assertEqual(step_formula(manifest), "24.65 + 0.08477*prompt + 1e-09*decode + 4e-12*kv_token")


class BatchCostWarningTest(unittest.TestCase):
    def test_when_it_applies(self):
        model = parse_step_model(json.dumps(UNIDENTIFIED), "m.json")
        self.assertIsNone(batch_cost_warning(model, knobs()))                     # fitted settings
        self.assertIsNone(batch_cost_warning(model, knobs(num_gpu_blocks=30)))    # fewer blocks: a smaller batch
        self.assertIsNone(batch_cost_warning(model, knobs(long_prefill_token_threshold=16)))
        self.assertIn("larger batch costs (--num-gpu-blocks 80, fitted with 41)",
                      batch_cost_warning(model, knobs(num_gpu_blocks=80)))   # more KV admits a bigger batch
        larger = batch_cost_warning(model, knobs(max_num_seqs=8))
        self.assertIn("c (per decoded sequence) and d (per KV context token) unidentified", larger)
        self.assertIn("cannot tell what a larger batch costs (--max-num-seqs 8, fitted with 4)", larger)
        smaller = batch_cost_warning(model, knobs(max_num_batched_tokens=32))
        self.assertIn("what a smaller batch costs (--max-num-batched-tokens 32, fitted with 64)", smaller)
        only_d = parse_step_model(json.dumps(IDENTIFIED), "m.json")
        self.assertIn("d (per KV context token) unidentified", batch_cost_warning(only_d, knobs(max_num_seqs=8)))
        known = StepModel(2.0, 0.25, 0.5, dict(SETTINGS), {}, 0.001, {"a": 0.1, "b": 0.01, "c": 0.02, "d": 0.0001})
        self.assertIsNone(batch_cost_warning(known, knobs(max_num_seqs=8)))

    def test_run_warns_and_records_only_when_it_applies(self):
        directory = temp_dir(self)
        path = os.path.join(directory, "step-model.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(UNIDENTIFIED, out)
        wide, same = os.path.join(directory, "wide"), os.path.join(directory, "same")
        code, stdout, err = run_cli(["--engine", "vllm", "--step-model", path, "--max-num-seqs", "8",
                                     "--artifacts", wide])
        self.assertEqual(code, 0, err)
        self.assertIn("warning: c (per decoded sequence) and d (per KV context token) unidentified: the step model "
                      "cannot tell what a larger batch costs", err)
        self.assertIn("step_ms = 2 + 0.25·prompt + ?·decode + ?·kv_token", stdout.splitlines()[0])
        manifest = json.loads(read(os.path.join(wide, "manifest.json")))["step_model"]
        self.assertEqual(manifest["identified"], {"a": True, "b": True, "c": False, "d": False})
        self.assertEqual(len(manifest["warnings"]), 1)
        self.assertIn("larger batch", manifest["warnings"][0])
        code, _, err = run_cli(["--engine", "vllm", "--step-model", path, "--artifacts", same])
        self.assertEqual((code, err), (0, ""))
        self.assertNotIn("warnings", json.loads(read(os.path.join(same, "manifest.json")))["step_model"])
        code, story, err = run_cli(["explain", "S1", "--artifacts", same])
        self.assertEqual(code, 0, err)
        self.assertIn("?*decode", story)
        self.assertIn("(c, d unidentified; the run held them at 1e-09, 0)", story)

    def test_gpu_note_says_it(self):
        directory = temp_dir(self)
        path = os.path.join(directory, "step-model.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(UNIDENTIFIED, out)
        code, _, err = run_cli(["--engine", "vllm", "--step-model", path, "--gpu", "RTX PRO 6000",
                                "--artifacts", os.path.join(directory, "r")])
        self.assertEqual(code, 0, err)
        self.assertIn("c, d unidentified: scaled, still not measured", err)

    def test_serving_bench_simulate_with_a_calibrated_model(self):
        """A step model as calibrate now writes it (d, async scheduling, unidentified c) runs the chapter's
        stand-in, which warns about its max_num_seqs 2 against the fitted 4; the built-in model does not."""
        directory = temp_dir(self)
        path = os.path.join(directory, "step-model.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(dict(UNIDENTIFIED, settings=dict(SETTINGS, async_scheduling=True)), out)
        code, stdout, err = run_cli(["serving-bench", "simulate", "--out-dir", os.path.join(directory, "a"),
                                     "--step-model", path])
        self.assertEqual(code, 0, err)
        self.assertIn("cannot tell what a smaller batch costs (--max-num-seqs 2, fitted with 4)", err)
        self.assertIn("?·decode", stdout)
        code, _, err = run_cli(["serving-bench", "simulate", "--out-dir", os.path.join(directory, "b")])
        self.assertEqual((code, err), (0, ""))

    def test_contradictory_file_exits_2(self):
        directory = temp_dir(self)
        path = os.path.join(directory, "step-model.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(dict(UNIDENTIFIED, identified={"c": True}), out)
        assert_bad_input(self, ["--engine", "vllm", "--step-model", path, "--artifacts",
                                os.path.join(directory, "r")], "'identified.c'")


if __name__ == "__main__":
    unittest.main()


def assert_said_as_unidentified(test: unittest.TestCase, model: dict, stdout: str) -> None:
    """The rule on a real calibrate output: a term of step-model.json (``model``) whose value is
    smaller than its uncertainty, or whose uncertainty is null (held at 0), is ``identified: false``,
    is printed as ``X unidentified`` with a ``?`` in the formula, never as its number; any other
    term is identified and printed with its value."""
    formula = next(line for line in stdout.splitlines() if line.startswith("  step_ms = "))
    names = {"b": "prompt", "c": "decode", "d": "kv_token"}
    for term, value in model["step_ms"].items():
        sd = model["uncertainty"].get(term)
        unknown = sd is None or abs(value) < sd
        with test.subTest(term=term, value=value, sd=sd):
            test.assertEqual(model["identified"][term], not unknown)
            test.assertEqual(f"\n  {term} unidentified (" in stdout, unknown)
            test.assertEqual(f"\n  {term} = " in stdout, not unknown)
            if term in names and unknown:
                test.assertIn(f"?·{names[term]}", formula)
