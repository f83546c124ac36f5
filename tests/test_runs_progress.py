"""Progress on stderr: only on a terminal, only after about a second, never in artifacts (README §12)."""

import io
import os
import unittest

from sched.commands.run import _Progress, _progress_for
from sched.core.config import EngineConfig, cases_for
from sched.lab.engine import Simulation
from sched.workload.specs import scenario
from tests.helpers import run_cli, temp_dir


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


class ProgressTest(unittest.TestCase):
    def test_only_a_terminal_gets_progress(self):
        self.assertIsNone(_progress_for(io.StringIO()))
        self.assertIsInstance(_progress_for(Terminal()), _Progress)

    def test_silent_for_the_first_second_then_throttled_and_erased(self):
        stream, clock = Terminal(), FakeClock()
        progress = _Progress(stream, clock=clock, delay=1.0, every=0.25)
        clock.now += 0.5
        progress("static", 10, 2, 8)
        self.assertEqual(stream.getvalue(), "")
        clock.now += 0.6
        progress("static", 20, 3, 8)
        line = "simulating static: tick 20, 3/8 requests ended"
        self.assertEqual(stream.getvalue(), "\r" + line)
        clock.now += 0.1
        progress("static", 21, 3, 8)  # within 0.25 s of the last line: not shown
        self.assertNotIn("tick 21", stream.getvalue())
        progress.note("rendering artifacts")  # a change of stage is shown at once, padded over the old line
        self.assertTrue(stream.getvalue().endswith("\rrendering artifacts" + " " * (len(line) - 19)))
        progress.close()
        self.assertTrue(stream.getvalue().endswith("\r" + " " * len("rendering artifacts") + "\r"))

    def test_quick_run_leaves_no_trace(self):
        stream, clock = Terminal(), FakeClock()
        progress = _Progress(stream, clock=clock)
        progress("static", 1, 0, 8)
        progress.close()
        self.assertEqual(stream.getvalue(), "")

    def test_non_interactive_run_prints_no_progress(self):
        out_dir = os.path.join(temp_dir(self), "run")
        code, out, err = run_cli(["--artifacts", out_dir])
        self.assertEqual((code, err), (0, ""))
        self.assertNotIn("simulating", out)
        self.assertNotIn("\r", out)

    def test_engine_hook_sees_every_tick_and_changes_nothing(self):
        cfg = EngineConfig()
        case = cases_for(cfg)[3]
        calls, jump_calls = [], []
        hooked = Simulation(scenario("baseline"), cfg, case, per_tick=True).run(lambda *args: calls.append(args))
        plain = Simulation(scenario("baseline"), cfg, case).run()
        jumping = Simulation(scenario("baseline"), cfg, case).run(lambda *args: jump_calls.append(args))
        self.assertEqual([r.token_times for r in hooked.requests], [r.token_times for r in plain.requests])
        self.assertEqual([r.token_times for r in jumping.requests], [r.token_times for r in plain.requests])
        self.assertEqual(len(calls), len(plain.ticks))  # per-tick walk: once per tick
        # The event-driven walk calls it once per step (a jump over steady decoding is one call).
        self.assertLessEqual(len(jump_calls), len(calls))
        self.assertEqual(calls[-1], ("continuous+APC+chunk32", 56, 8, 8))  # makespan 56, lab.md §6
        self.assertEqual(jump_calls[-1], calls[-1])


if __name__ == "__main__":
    unittest.main()
