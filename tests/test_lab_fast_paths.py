"""The fast writers of large runs give exactly the text of the plain ones (speed)."""

import json
import random
import unittest
from dataclasses import replace

from sched.workload import plain as plain_module, rules as rules_module, validation as validation_module
from sched.output.artifacts import LabRun, render_artifacts
from sched.runs.build import run_lab
from sched.core.config import EngineConfig
from sched.workload.specs import (SCENARIOS, RequestSpec, WorkloadError, scenario, workload_json_and_sha256, workload_sha256,
                            workload_to_json)
from tests.test_runs_parallel import seeded_workload


class CompactRequestLinesTest(unittest.TestCase):
    def test_compact_lines_carry_the_full_lines_facts(self):
        """Each counts-detail line is canonical JSON equal to the full line with token_times
        turned into [first stamp, count] runs; timeouts (queued and mid-decode) included."""
        for label, workload, config in (("deadline30", scenario("baseline"), EngineConfig(timeout_ticks=30)),
                                        ("priority-mix", scenario("priority-mix"), EngineConfig()),
                                        ("seeded", seeded_workload(120), EngineConfig(timeout_ticks=200))):
            full = render_artifacts(run_lab(workload, config, timeline="full"))["requests.jsonl"].splitlines()
            compact = render_artifacts(run_lab(workload, config, timeline="counts"))["requests.jsonl"].splitlines()
            statuses = set()
            for line, expected in zip(compact, full, strict=True):
                with self.subTest(workload=label, line=expected[:60]):
                    row, want = json.loads(line), json.loads(expected)
                    self.assertEqual(line, json.dumps(row, ensure_ascii=False))
                    times = want.pop("token_times")
                    runs = []
                    for t in times:
                        if runs and runs[-1][0] + runs[-1][1] == t:
                            runs[-1][1] += 1
                        else:
                            runs.append([t, 1])
                    self.assertEqual(row.pop("token_runs"), runs)
                    self.assertEqual(row, want)
                    statuses.add((want["status"], want["admitted_at"] is None, bool(times)))
            if label != "priority-mix":
                self.assertIn(("timeout", False, True), statuses, label)   # timed out mid-decode


class PlainRequestShortcutTest(unittest.TestCase):
    def test_the_shortcut_never_accepts_what_the_full_check_refuses(self):
        """Seeded random request objects mixing good and bad values: whenever the shortcut accepts
        one, the full check finds no problem and the same fields; every plain one is accepted."""
        rng = random.Random(12)
        values = {"name": ["a", " ", "", "tab\there", 7, None, "é", "n" * 64, "n" * 65],
                  "arrival": [0, 5, -1, 10**9, 10**9 + 1, True, 2.0, "3", None],
                  "prefix_key": [None, "K", "", " ", 3],
                  "prefix_tokens": [0, 16, -1, 10**6, 10**6 + 1, False, 1.5],
                  "suffix_tokens": [0, 8, -2, 10**6 + 1, None],
                  "output_tokens": [1, 0, 4, 10**6, 10**6 + 1, True],
                  "priority": [None, 0, -3, 10**9, 10**9 + 1, True, "1"],
                  "extra": [1]}
        accepted = 0
        for _ in range(3000):
            raw = {field: options[0] if rng.random() < 0.8 else rng.choice(options)   # options[0] is good
                   for field, options in values.items()
                   if rng.random() < (0.97 if field in plain_module.PLAIN_KEYS else 0.3)}
            fast = plain_module.plain_fields(raw)
            problems, fields = rules_module.field_problems(raw, rules_module.REQUEST_RULES, "f")
            if fast is not None:
                accepted += 1
                self.assertEqual((problems, fields), ([], fast), raw)
            elif not problems and set(raw) <= plain_module.PLAIN_KEYS | {"priority"}:
                self.fail(f"a plain request took the long way: {raw}")
        self.assertGreater(accepted, 50)

    def test_repeated_fields_take_the_full_check(self):
        text = '{"requests": [{"name": "a", "name": "b", "arrival": 0, "prefix_key": null, "prefix_tokens": 0, ' \
               '"suffix_tokens": 1, "output_tokens": 1}]}'
        with self.assertRaises(WorkloadError) as raised:
            validation_module.parse_workload(text)
        self.assertIn("given more than once", str(raised.exception))


class WorkloadTextOnceTest(unittest.TestCase):
    def test_text_and_hash_equal_the_two_plain_functions(self):
        blocks = [replace(RequestSpec("b0", 0, None, 0, 40, 2), prefix_blocks=(1, "x"), block_size=16)]
        imported = [replace(spec, tick_ms=30.0) for spec in scenario("baseline")]
        cases = {name: scenario(name) for name in SCENARIOS}
        cases.update(empty=[], blocks=blocks, imported=imported, names=[RequestSpec('é"\\', 0, None, 0, 1, 1)])
        for label, workload in cases.items():
            with self.subTest(workload=label):
                self.assertEqual(workload_json_and_sha256(workload),
                                 (workload_to_json(workload, units=True), workload_sha256(workload)))

    def test_the_manifest_hash_is_the_canonical_one(self):
        run = run_lab(scenario("baseline"), EngineConfig())
        files = render_artifacts(LabRun(run.workload, run.config, run.policy, run.source, run.results))
        self.assertEqual(json.loads(files["manifest.json"])["workload_sha256"], workload_sha256(run.workload))


class FreshRequestTest(unittest.TestCase):
    def test_fresh_equals_the_constructor(self):
        """Request.fresh (the engine's way to build its requests) sets every slot as
        Request(spec, index, _clock=clock) does."""
        from sched.core.records import Request, CurrentTick
        from sched.workload.specs import scenario
        clock, spec = CurrentTick(), scenario("baseline")[3]
        made, fresh = Request(spec, 3, _clock=clock), Request.fresh(spec, 3, clock)
        for slot in Request.__slots__:
            with self.subTest(slot=slot):
                self.assertEqual(getattr(fresh, slot), getattr(made, slot))
        self.assertIsNot(fresh._runs, Request.fresh(spec, 3, clock)._runs)   # each its own list


if __name__ == "__main__":
    unittest.main()
