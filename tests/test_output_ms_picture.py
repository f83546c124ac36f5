"""The millisecond picture of a step-model run (vllm-engine.md §6): the congested window, always
the P95 TTFT request, and the colour vocabulary of the other two time lines (README §12.1, docs/handbook/calibration.md §18)."""

import json
import math
import os
import re
import unittest
from unittest import mock

from sched.output.colours import PHASE_COLOURS
from sched.output.ms_picture import congested_window
from sched.output.picture import PHASES
from sched.output.vllm_picture import VLLM_PHASES
from tests.helpers import EXPECTED, read, run_cli, temp_dir
from tests.test_timing_step_model_tools import STEP_MODEL, TIGHT


class _Request:
    def __init__(self, arrival, admitted_at):
        self.spec = type("Spec", (), {"arrival": arrival})()
        self.admitted_at, self.done_at = admitted_at, admitted_at


class CongestedWindowTest(unittest.TestCase):
    def test_the_docstring_example(self):
        """Queue waits [0, 5, 9, 1], windows of 2: 0+5, 5+9, 9+1 → the second window (index 1)."""
        requests = [_Request(10, 10), _Request(10, 15), _Request(10, 19), _Request(10, 11)]
        self.assertEqual(congested_window(requests, 2), 1)
        self.assertEqual(congested_window(requests, 4), 0)
        self.assertEqual(congested_window(requests[:1], 2), 0)

    def test_ties_keep_the_earliest_window(self):
        self.assertEqual(congested_window([_Request(0, 3), _Request(0, 3), _Request(0, 3)], 1), 0)


class MsPictureTest(unittest.TestCase):
    """The baseline with L0's prompt made 3,128 tokens long: L0 waits for nothing but its own long
    prefill (the P95 TTFT request), while U6 and S7 wait longest in the queue."""

    @classmethod
    def setUpClass(cls):
        cls.base = temp_dir(cls)

    @classmethod
    def addCleanup(cls, function, *args, **kwargs):   # temp_dir() from setUpClass
        cls.addClassCleanup(function, *args, **kwargs)

    def ms_run(self, lanes: int) -> str:
        model = os.path.join(self.base, "step-model.json")
        with open(model, "w", encoding="utf-8") as out:
            json.dump(STEP_MODEL, out)
        with open(os.path.join(EXPECTED, "baseline", "workload.json"), encoding="utf-8") as handle:
            workload = json.load(handle)
        workload["requests"][0]["suffix_tokens"] = 3000
        path = os.path.join(self.base, "long-l0.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(workload, out)
        target = os.path.join(temp_dir(self), "run")
        with mock.patch("sched.output.ms_picture.MAX_LANES", lanes):
            code, _, err = run_cli(["--engine", "vllm", "--step-model", model, "--num-gpu-blocks", "400",
                                    "--timeline", "full", "--workload", path, "--artifacts", target])
        self.assertEqual(code, 0, err)
        return target

    def test_the_window_and_the_p95_request_outside_it(self):
        run = self.ms_run(lanes=2)
        rows = [json.loads(line) for line in read(os.path.join(run, "requests.jsonl")).splitlines()]
        waits = [r["queue_wait_ms"] for r in rows]
        sums = [waits[i] + waits[i + 1] for i in range(len(waits) - 1)]
        start = sums.index(max(sums))
        ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["ttft_ms"])
        p95 = ok[math.ceil(0.95 * len(ok)) - 1]["name"]
        window = [r["name"] for r in rows[start:start + 2]]
        self.assertEqual((window, p95), (["U6", "S7"], "L0"))   # by hand: waits 290 + 464; TTFT 1074.5 ms
        svg = read(os.path.join(run, "timeline.svg"))
        self.assertEqual(re.findall(r'<g data-request="([^"]+)"', svg), window + [p95])
        self.assertEqual(re.findall(r'data-p95-request="([^"]+)"', svg), [p95])
        self.assertIn(f"Showing requests {start + 1}–{start + 2} of {len(rows)}", svg)
        self.assertIn("the P95 TTFT request, outside the window", svg)

    def test_all_requests_and_the_band_when_they_fit(self):
        svg = read(os.path.join(self.ms_run(lanes=40), "timeline.svg"))
        self.assertEqual(re.findall(r'<g data-request="([^"]+)"', svg), ["L0", "S1", "S2", "U3", "S4", "S5", "U6", "S7"])
        self.assertEqual(re.findall(r'data-p95-request="([^"]+)"', svg), ["L0"])
        self.assertNotIn("Showing requests", svg)


class ColourVocabularyTest(unittest.TestCase):
    def test_one_colour_per_phase_in_every_picture(self):
        for phase, colour in PHASE_COLOURS.items():
            for name, phases in (("tick picture", PHASES), ("vLLM lanes", VLLM_PHASES)):
                if phase in phases:
                    with self.subTest(phase=phase, picture=name):
                        self.assertEqual(phases[phase][0], colour)
        self.assertEqual(VLLM_PHASES["preempted"][0], "#f4c6dc")

    def test_preemption_is_the_same_mark_in_the_tick_and_ms_pictures(self):
        """A vermillion triangle above the lane (the X is a timeout in the tick picture)."""
        tick = os.path.join(temp_dir(self), "vllm41")
        self.assertEqual(run_cli([*TIGHT, "--artifacts", tick])[0], 0)
        model = os.path.join(temp_dir(self), "step-model.json")
        with open(model, "w", encoding="utf-8") as out:
            json.dump(STEP_MODEL, out)
        ms = os.path.join(temp_dir(self), "ms")
        self.assertEqual(run_cli(["--engine", "vllm", "--step-model", model, "--artifacts", ms])[0], 0)
        for run in (tick, ms):
            svg = read(os.path.join(run, "timeline.svg"))
            marks = re.findall(r'<path data-mark="preemption"[^>]*>', svg)
            with self.subTest(run=os.path.basename(run)):
                self.assertTrue(marks)
                for mark in marks:
                    self.assertRegex(mark, r'h10l-5 8z" fill="#d55e00"')
            self.assertIn('fill="#f4c6dc"', svg)


if __name__ == "__main__":
    unittest.main()
