"""The four-term step model (issue 18, item 2): the engine's KV argument, the file, identification, the fit.

Every expected value is computed by hand in the test (block counts from ``ceil(tokens / 16)``,
stamps from the formula), or is a property that holds by construction (the fast path and the
step-by-step walk ask the step time the same questions in the same order).
"""

import json
import random
import unittest

from sched.timing.fit import FrozenSchedule, Step, fit_coefficients
from sched.timing.identify import bootstrap_spread, identify_terms
from sched.timing.stepmodel import SETTINGS, StepModel, parse_step_model, step_model_to_json
from sched.vllm.config import VllmKnobs
from sched.vllm.engine import VllmSimulation
from sched.workload.specs import RequestSpec

SETTINGS_16 = {"num_gpu_blocks": 1000, "block_size": 16, "max_num_batched_tokens": 512, "max_num_seqs": 8,
               "long_prefill_token_threshold": 0, "enable_prefix_caching": False, "policy": "fcfs"}


def spec(name, arrival, prompt, output):
    return RequestSpec(name=name, arrival=arrival, prefix_key=None, prefix_tokens=0, suffix_tokens=prompt,
                       output_tokens=output)


def knobs(blocks=1000, caching=False):
    return VllmKnobs(max_num_batched_tokens=512, max_num_seqs=8, long_prefill_token_threshold=0,
                     enable_prefix_caching=caching, block_size=16, num_gpu_blocks=blocks, policy="fcfs")


def recording(log):
    def step_time(prompt, decode, kv_blocks):
        log.append((prompt, decode, kv_blocks))
        return 1000 + 10 * prompt + 100 * decode + kv_blocks
    step_time.reads_kv_blocks = True
    return step_time


class EngineKvArgumentTest(unittest.TestCase):
    def test_one_request_by_hand(self):
        """Prompt 32, output 3, block 16: the prefill holds ceil(32/16) = 2 blocks; the first decode
        computes token 33 (3 blocks), the second token 34 (3 blocks). Three steps, three questions."""
        log = []
        sim = VllmSimulation([spec("r", 0, 32, 3)], knobs(), timeline="counts", step_time=recording(log))
        result = sim.run()
        self.assertEqual(log, [(32, 0, 2), (0, 1, 3), (0, 1, 3)])
        # Stamps: 1000 + 320 + 2 = 1322, then + (1000 + 100 + 3) twice.
        self.assertEqual(result.requests[0].token_times, [1322, 2425, 3528])

    def test_fast_path_asks_what_the_walk_asks(self):
        """The jump over decode-only steps asks once per step with the blocks held then: the same
        questions, in the same order, as walking every step (random workloads, seeded)."""
        generator = random.Random(18)
        for case in range(6):
            workload = [spec(f"q{i}", generator.randrange(0, 20000), generator.randrange(1, 300),
                             generator.randrange(1, 120)) for i in range(12)]
            workload.sort(key=lambda s: s.arrival)
            fast, walked = [], []
            first = VllmSimulation(workload, knobs(blocks=60), timeline="counts", step_time=recording(fast)).run()
            second = VllmSimulation(workload, knobs(blocks=60), timeline="counts", step_time=recording(walked),
                                    per_step=True).run()
            with self.subTest(case=case):
                self.assertEqual(fast, walked)
                self.assertEqual([r.token_times for r in first.requests], [r.token_times for r in second.requests])
                self.assertTrue(any(d > 1 for _, d, _ in fast), "the case should batch decodes")

    def test_two_argument_step_time_unchanged(self):
        """An unmarked step time is still called with two arguments."""
        calls = []

        def step_time(prompt, decode):
            calls.append((prompt, decode))
            return 5
        VllmSimulation([spec("r", 0, 32, 3)], knobs(), timeline="counts", step_time=step_time).run()
        self.assertEqual(calls[0], (32, 0))


def document(step_ms, **extra):
    return dict({"kind": "step-model", "engine": "vllm", "step_ms": step_ms, "settings": dict(SETTINGS_16),
                 "fitted_on": {}}, **extra)


class FourTermFileTest(unittest.TestCase):
    def test_three_term_file_is_d_zero(self):
        model = parse_step_model(json.dumps(document({"a": 2.0, "b": 0.25, "c": 0.5})), "old.json")
        self.assertEqual(model.d_ms, 0.0)
        self.assertEqual(model.step_time(), model.step_us)    # the engine's two-argument call
        self.assertEqual(model.step_us(4, 2), 4000)            # 2 + 1 + 1 ms
        self.assertNotIn("kv_token", model.formula)

    def test_kv_term_in_ms(self):
        """d = 0.001 ms per KV token, 10 blocks of 16 = 160 tokens: 0.16 ms on top of 2 + 1 + 1 ms."""
        model = parse_step_model(json.dumps(document({"a": 2.0, "b": 0.25, "c": 0.5, "d": 0.001})), "new.json")
        self.assertAlmostEqual(model.step_ms(4, 2, 10), 4.16)
        step_time = model.step_time()
        self.assertTrue(step_time.reads_kv_blocks)
        self.assertEqual(step_time(4, 2, 10), 4160)

    def test_round_trip_with_uncertainty_and_unidentified(self):
        model = StepModel(6.5, 0.02, 0.0, dict(SETTINGS_16), {"model": "m"}, 0.0001,
                          {"a": 0.01, "b": 0.0007, "d": 1e-6, "c": None}, {"c": "one request at a time"})
        text = step_model_to_json(model)
        again = parse_step_model(text, "x.json")
        self.assertEqual((again.a_ms, again.b_ms, again.c_ms, again.d_ms), (6.5, 0.02, 0.0, 0.0001))
        self.assertEqual(again.unidentified, {"c": "one request at a time"})
        self.assertEqual(json.loads(text)["uncertainty"]["c"], None)
        self.assertIn("?·decode", again.formula)   # never printed as a measured 0
        self.assertNotIn("0·decode", again.formula)

    def test_bad_new_fields(self):
        from sched.base.cmdline import InputError
        for extra, mention in (({"unidentified": {"e": "x"}}, "'unidentified.e'"),
                               ({"uncertainty": {"a": -1}}, "'uncertainty.a'"),
                               ({"uncertainty": [1]}, "'uncertainty'")):
            with self.subTest(mention):
                with self.assertRaises(InputError) as caught:
                    parse_step_model(json.dumps(document({"a": 1.0, "b": 0, "c": 0}, **extra)), "bad.json")
                self.assertIn(mention, str(caught.exception))


def decode_steps(sizes, contexts):
    return [Step(i, 1, 0, d, k) for i, (d, k) in enumerate(zip(sizes, contexts))]


class IdentifyTest(unittest.TestCase):
    def test_one_request_at_a_time(self):
        """Prefills of different sizes, then decodes of one sequence with a growing context:
        a and c are one number there (c unidentified); b and d can be told apart."""
        steps = [Step(0, 1, 500, 0, 512)] + decode_steps([1] * 50, range(600, 650)) + \
            [Step(60, 1, 900, 0, 912)] + decode_steps([1] * 50, range(1000, 1050))
        unknown = identify_terms(steps, len(steps) - 1)
        self.assertEqual(set(unknown), {"c"})
        self.assertIn("one request at a time", unknown["c"])

    def test_context_in_step_with_batch(self):
        """Every sequence holds exactly 1,000 tokens: K = 1000·D, a straight line, so d is not identified."""
        sizes = [1, 2, 3, 4, 5, 6, 7, 8] * 5
        steps = [Step(0, 1, 100, 0, 0), Step(1, 1, 200, 0, 0)] + decode_steps(sizes, [1000 * d for d in sizes])
        self.assertEqual(set(identify_terms(steps, len(steps) - 1)), {"d"})

    def test_all_four(self):
        generator = random.Random(4)
        sizes = [generator.randrange(1, 30) for _ in range(200)]
        contexts = [d * generator.randrange(200, 3000) for d in sizes]
        steps = [Step(0, 1, 100, 0, 0), Step(1, 1, 300, 0, 0)] + decode_steps(sizes, contexts)
        self.assertEqual(identify_terms(steps, len(steps) - 1), {})

    def test_window_limits_what_is_seen(self):
        """Only the steps up to ``last_index`` count: a batch that grows later does not help."""
        steps = [Step(0, 1, 100, 0, 0), Step(1, 1, 300, 0, 0)] + decode_steps([1] * 20 + [5] * 20, range(40))
        self.assertIn("c", identify_terms(steps, 21))
        self.assertNotIn("c", identify_terms(steps, len(steps) - 1))


class FitRecoveryTest(unittest.TestCase):
    def test_recovers_known_coefficients(self):
        """A schedule whose measured times were made by (a, b, c, d) = (5, 0.02, 0.3, 0.0001) by hand:
        the search (one frozen schedule, as the replay never changes it here) finds them again, and
        the bootstrap of exact data has a spread far below the values."""
        truth = (5.0, 0.02, 0.3, 0.0001)
        generator = random.Random(7)
        steps, t = [], 0.0
        for _ in range(400):
            prompt = generator.choice([0, 0, 0, generator.randrange(50, 2000)])
            decode = generator.randrange(1, 40)
            kv = decode * generator.randrange(100, 4000)
            duration = truth[0] + truth[1] * prompt + truth[2] * decode + truth[3] * kv
            steps.append(Step(t, duration, prompt, decode, kv))
            t += duration
        ends = []
        total = 0.0
        for step in steps:
            total += step.duration
            ends.append(total)
        targets = []
        for _ in range(60):
            first = generator.randrange(0, 300)
            done = generator.randrange(first, 400)
            arrival = steps[first].start - generator.uniform(0, 5)
            targets.append((arrival, first, done, ends[first] - arrival, ends[done] - arrival))

        def replay(a, b, c, d):
            return steps, targets
        found, loss, history, converged = fit_coefficients(replay, (8.0, 0.0, 0.0, 0.0), 8)
        self.assertTrue(converged)
        self.assertLess(loss, 1e-2)
        for value, want in zip(found, truth):
            self.assertAlmostEqual(value / want, 1.0, delta=0.02)
        spread = bootstrap_spread(steps, targets, found, (True, True, True, True), rounds=5)
        self.assertLess(spread["c"], 0.1 * truth[2])
        frozen = FrozenSchedule(steps, targets)
        self.assertAlmostEqual(frozen.end(10, *truth), ends[10])


if __name__ == "__main__":
    unittest.main()
