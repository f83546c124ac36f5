"""The run clock (sched.core.clock): what each clock writes for a time, a span, a duration and a
step, its unit word and units note, and the clock read back from a manifest.

Every expected string is worked out by hand from the clock's definition: a lab or vLLM-step tick is
printed as it is; a ``--step-model`` tick is one microsecond, printed in milliseconds with at most
three decimals and no trailing zeros (vllm-engine.md §6: 1 ms = 1000 ticks).
"""

import json
import unittest
from fractions import Fraction

from sched.core.clock import (LAB_TICKS, PICTURE_NOTE_MS, UNITS_NOTE, UNITS_NOTE_MS, UNITS_NOTE_VLLM, VLLM_MS,
                              VLLM_STEPS, RunClock)
from sched.core.config import EngineConfig, cases_for
from sched.lab.engine import simulate
from sched.output.artifacts import LabRun, render_artifacts
from sched.output.ms_picture import render_ms_timeline_svg
from sched.output.picture import render_timeline_svg
from sched.vllm.config import VllmKnobs
from sched.workload.specs import scenario


class TickClockTest(unittest.TestCase):
    """Ticks (the lab's, and the vLLM engine's unit steps) are printed as whole ticks."""

    def test_times_spans_and_durations(self):
        for clock in (LAB_TICKS, VLLM_STEPS):
            with self.subTest(clock=clock):
                self.assertEqual(clock.at(9), "tick 9")
                self.assertEqual(clock.span(9, 18), "ticks 9–17")    # 18 excluded
                self.assertEqual(clock.span(9, 10), "tick 9")        # one tick
                self.assertEqual(clock.length(9, 18), "9 ticks")
                self.assertEqual(clock.duration(10), "10")           # TTFT 10 (a bare number of ticks)
                self.assertEqual(clock.duration(10, unit_word=True), "10 ticks")
                self.assertEqual(clock.step(41), "tick 41")
                self.assertEqual(clock.steps([44, 45, 46]), "ticks 44–46")
                self.assertEqual(clock.steps([30]), "tick 30")
                self.assertEqual(clock.step_end(41, {"duration": 7}), 42)   # a step lasts one tick
                self.assertEqual(clock.in_unit(25), 25)
                self.assertEqual((clock.unit, clock.ticks_per_unit, clock.in_ms), ("ticks", 1, False))

    def test_engine_kind_and_note(self):
        self.assertFalse(LAB_TICKS.is_vllm)
        self.assertTrue(VLLM_STEPS.is_vllm)
        self.assertEqual(LAB_TICKS.units_note, UNITS_NOTE)
        self.assertEqual(VLLM_STEPS.units_note, UNITS_NOTE_VLLM)
        self.assertIn("abstract ticks", UNITS_NOTE)
        self.assertIn("one vLLM engine step each", UNITS_NOTE_VLLM)


class MillisecondClockTest(unittest.TestCase):
    """A step-model run: ticks are µs, written in ms (1500 µs = 1.5 ms)."""

    def test_times_spans_and_durations(self):
        c = VLLM_MS
        self.assertEqual(c.at(1500), "1.5 ms")
        self.assertEqual(c.at(0), "0 ms")
        self.assertEqual(c.at(2000), "2 ms")                 # no trailing zeros, no dot
        self.assertEqual(c.at(1234567), "1234.567 ms")
        self.assertEqual(c.at(1), "0.001 ms")                # one tick, the clock's resolution
        self.assertEqual(c.span(9, 18), "0.009–0.018 ms")    # from the start to the end
        self.assertEqual(c.length(0, 2500), "2.5 ms")
        self.assertEqual(c.length(1000, 1250), "0.25 ms")
        self.assertEqual(c.duration(12_340), "12.34 ms")     # always with its unit
        self.assertEqual(c.step(5000), "step at 5 ms")
        self.assertEqual(c.steps([10, 20, 40]), "3 steps")   # steps have no fixed length: counted
        self.assertEqual(c.steps([10]), "1 step")
        self.assertEqual(c.step_end(1000, {"duration": 7500}), 8500)   # tokens stamped at the step's end
        self.assertEqual(c.step_end(1000, {}), 1000)
        self.assertEqual(c.in_unit(1500), Fraction(3, 2))
        self.assertEqual((c.unit, c.ticks_per_unit, c.in_ms, c.is_vllm), ("ms", 1000, True, True))
        self.assertEqual(c.units_note, UNITS_NOTE_MS)
        self.assertIn("milliseconds", UNITS_NOTE_MS)

    def test_rounding_keeps_three_decimals(self):
        self.assertEqual(VLLM_MS.at(1_000_000), "1000 ms")   # 1,000,000 µs
        self.assertEqual(VLLM_MS.duration(999), "0.999 ms")


class ClockFromManifestTest(unittest.TestCase):
    def test_fields_read_back(self):
        table = [({}, LAB_TICKS),                                          # a lab run names no engine
                 ({"engine": "vllm"}, VLLM_STEPS),
                 ({"engine": "vllm", "time_unit": "ms"}, VLLM_MS),
                 ({"engine": "VLLM"}, LAB_TICKS),                          # only "vllm" names it
                 ({"engine": ["vllm"], "time_unit": None}, LAB_TICKS),     # wrong types: the readers check
                 ({"time_unit": "ms"}, RunClock("lab", "ms"))]
        for manifest, expected in table:
            with self.subTest(manifest=manifest):
                self.assertEqual(RunClock.from_manifest(manifest), expected)

    def test_bad_values_are_refused(self):
        for engine, unit in (("sglang", "ticks"), ("lab", "s"), ("", "")):
            with self.subTest(engine=engine, unit=unit), self.assertRaises(ValueError):
                RunClock(engine, unit)


class RunCarriesItsClockTest(unittest.TestCase):
    """The clock a run is built with is the one its manifest gives back."""

    def test_lab_and_vllm_runs(self):
        from sched.runs.build import run_lab
        workload = scenario("baseline")
        for config, clock in ((EngineConfig(), LAB_TICKS), (VllmKnobs(), VLLM_STEPS)):
            with self.subTest(engine=clock.engine):
                run = run_lab(workload, config)
                self.assertEqual(run.clock, clock)
                manifest = json.loads(render_artifacts(run)["manifest.json"])
                self.assertEqual(RunClock.from_manifest(manifest), clock)
                self.assertEqual(manifest["units"], clock.units_note)

    def test_default_clock_follows_the_knobs(self):
        self.assertEqual(LabRun([], EngineConfig(), "fcfs", "test", []).clock, LAB_TICKS)
        self.assertEqual(LabRun([], VllmKnobs(), "fcfs", "test", []).clock, VLLM_STEPS)
        self.assertEqual(LabRun([], VllmKnobs(), "fcfs", "test", [], clock=VLLM_MS).clock, VLLM_MS)

    def test_step_model_run(self):
        from sched.timing.msrun import render_ms_artifacts, run_with_step_model
        from sched.timing.stepmodel import StepModel
        settings = {"num_gpu_blocks": 2588, "block_size": 16, "max_num_batched_tokens": 2048, "max_num_seqs": 256,
                    "long_prefill_token_threshold": 0, "enable_prefix_caching": True, "policy": "fcfs"}
        model = StepModel(20.0, 0.1, 0.05, settings, {})
        run = run_with_step_model(scenario("baseline"), VllmKnobs(**settings), model, "scenario:baseline", "full")
        self.assertEqual(run.clock, VLLM_MS)
        files = render_ms_artifacts(run, model, [])
        manifest = json.loads(files["manifest.json"])
        self.assertEqual(RunClock.from_manifest(manifest), VLLM_MS)
        self.assertEqual(manifest["units"], UNITS_NOTE_MS)
        self.assertIn("Latencies (ms)", files["report.html"])
        self.assertNotIn("Latencies (ticks)", files["report.html"])



class PictureNoteTest(unittest.TestCase):
    """The pictures take the run's clock: the note under the title comes from it (lab.md §7,
    vllm-engine.md §6), the same text they were handed before."""

    def test_each_clock_names_its_picture_note(self):
        self.assertEqual(LAB_TICKS.picture_note, UNITS_NOTE)
        self.assertEqual(VLLM_STEPS.picture_note, UNITS_NOTE_VLLM)
        self.assertEqual(PICTURE_NOTE_MS, "Times in ms from a step model fitted to a real run (vLLM 0.33.0's "
                                          "rules): a prediction, not a measurement.")
        self.assertEqual(VLLM_MS.picture_note, PICTURE_NOTE_MS)

    def test_the_pictures_print_their_clocks_note(self):
        config = EngineConfig()
        result = simulate(scenario("baseline"), config, cases_for(config)[0])
        self.assertIn(f">{UNITS_NOTE}</text>", render_timeline_svg([result], LAB_TICKS))
        summary = {"p95_ttft": 1.5, "makespan": 20.0, "succeeded": 4, "arrived": 4}
        by_clock = render_ms_timeline_svg(result, VLLM_MS, summary)
        self.assertIn(f">{PICTURE_NOTE_MS.replace(chr(39), '&#x27;')}</text>", by_clock)
        self.assertEqual(by_clock, render_ms_timeline_svg(result, PICTURE_NOTE_MS, summary))   # the older call

if __name__ == "__main__":
    unittest.main()
