"""Randomised runs: seeded random workloads and knobs through all four cases and every policy.

Each case checks the invariants of sched/lab/invariants.py on every simulated configuration and that
replaying the exported ``workload.json`` reproduces every artifact byte for byte (lab.md §7).
``ISL_FUZZ_CASES`` sets the number of cases (default 50 in the learner's ``python3 -m unittest``;
``.ci/run`` sets 2000), ``ISL_FUZZ_SEED`` the seed (default 20261130); case ``n`` draws from its
own ``random.Random(f"{seed}/{n}")``, so a failure names the seed and the case number, prints the
workload and knobs, and ``ISL_FUZZ_FIRST=n ISL_FUZZ_CASES=1`` reruns exactly that case.
The cases run in test methods of :data:`CHUNK` cases each, so ``-v`` reports progress every second
or so.

The two pictures (``timeline.svg``, ``report.html``) are pure functions of the same results but cost
twice as much to draw as everything else together: they are drawn and compared on every
``ISL_FUZZ_PICTURE_EVERY``-th case (default 50), stubbed otherwise.
"""

import contextlib
import json
import os
import random
import unittest
from unittest import mock

from sched.output.artifacts import render_artifacts
from sched.runs.build import run_lab
from sched.core.config import EngineConfig
from sched.lab.policy import POLICIES
from sched.workload.specs import RequestSpec, WorkloadError
from sched.workload.validation import parse_workload

# The learner's run (and the suite run again inside the extracted lab ZIP) is short; CI sets 2000.
NUM_CASES = int(os.environ.get("ISL_FUZZ_CASES", "50"))
FIRST_CASE = int(os.environ.get("ISL_FUZZ_FIRST", "0"))
SEED = int(os.environ.get("ISL_FUZZ_SEED", "20261130"))
PICTURE_EVERY = int(os.environ.get("ISL_FUZZ_PICTURE_EVERY", "50"))
#: Cases per test method (about a second of work on a 2-core machine).
CHUNK = 50
#: Cases whose generated workloads and knobs are checked for coverage (generation only: cheap).
COVERAGE_CASES = 2000
#: Corrupted workloads validated at least (validation only: 500 cost about a quarter of a second);
#: with ``ISL_FUZZ_CASES`` above it, that many.
CORRUPTED_CASES = 500


def case_rng(number: int) -> random.Random:
    """The generator of case ``number``: independent of every other case."""
    return random.Random(f"{SEED}/{number}")


def _without_pictures():
    """Stub the two picture renderers of sched.output.artifacts (every other artifact is still rendered)."""
    return mock.patch.multiple("sched.output.artifacts", render_timeline_svg=lambda *args: "",
                               render_report=lambda *args: "")


def random_workload(rng: random.Random) -> list[RequestSpec]:
    """0–40 requests (about 10 on average): bursty arrivals with the odd long idle gap, a few shared
    prefix keys (one length each), prompts of 1–48 tokens, 1–5 output tokens, some priorities.

    Lengths are small so that 2000 cases, each simulated twice, stay within about ten seconds."""
    keys = {f"K{i}": rng.randint(1, 24) for i in range(rng.randint(0, 4))}
    with_priority = rng.random() < 0.3
    arrival, specs = 0, []
    for index in range(rng.randint(0, rng.choice((5, 12, 40)))):  # sizes 0–40, small ones more often
        arrival += rng.choice((0, 0, 0, 1, 1, 2, 3, 5, 8)) if rng.random() < 0.98 else rng.randint(50, 10**6)
        key = rng.choice((None, *keys)) if keys else None
        prefix = keys[key] if key else 0
        suffix = rng.randint(0 if prefix else 1, 24)
        priority = rng.choice((None, -2, 0, 1, 3)) if with_priority else None
        name = rng.choice(("r", "請求", "req-")) + str(index)
        specs.append(RequestSpec(name, arrival, key, prefix, suffix, rng.randint(1, 5), priority))
    return specs


def random_config(rng: random.Random) -> EngineConfig:
    """Knobs from tight (budget = decode cost, one slot, 1-token chunks) to roomy, with or without
    a deadline."""
    decode_cost = rng.randint(1, 12)
    return EngineConfig(budget=decode_cost + rng.choice((0, rng.randint(0, 16), rng.randint(0, 96))),
                        decode_cost=decode_cost, max_active=rng.randint(1, 8),
                        chunk_tokens=rng.randint(1, 48),
                        timeout_ticks=rng.choice((None, rng.randint(1, 80))))


def draw_case(number: int):
    """The workload, knobs and policy of case ``number``."""
    rng = case_rng(number)
    return random_workload(rng), random_config(rng), rng.choice(tuple(POLICIES))


class FuzzTest(unittest.TestCase):
    """Test methods ``test_cases_<first>_<last>`` are added below, one per :data:`CHUNK` cases."""

    def run_cases(self, first: int, last: int) -> None:
        for number in range(first, last + 1):
            workload, config, policy = draw_case(number)
            pictures = number % PICTURE_EVERY == 0
            try:
                # run_lab checks every case's invariants (sched/lab/invariants.py) and raises on a broken one.
                run = run_lab(workload, config, policy, "fuzz:original")
                with contextlib.nullcontext() if pictures else _without_pictures():
                    files = render_artifacts(run)
                    replayed = parse_workload(files["workload.json"], source="workload.json")
                    replay = render_artifacts(run_lab(replayed, config, policy, "fuzz:replay"))
                self.assertEqual(len(files["timeline.svg"]) > 0, pictures)
                self.assertEqual(replayed, workload)
                original_manifest, replay_manifest = (json.loads(f.pop("manifest.json")) for f in (files, replay))
                self.assertEqual(files, replay)
                self.assertEqual((original_manifest.pop("source"), replay_manifest.pop("source")),
                                 ("fuzz:original", "fuzz:replay"))
                self.assertEqual(original_manifest, replay_manifest)
            except Exception as exc:  # name the case that broke, with everything needed to rerun it
                workload_json = json.dumps([spec.to_json() for spec in workload], ensure_ascii=False)
                raise AssertionError(f"seed {SEED}, case {number} (rerun: ISL_FUZZ_SEED={SEED} ISL_FUZZ_FIRST="
                                     f"{number} ISL_FUZZ_CASES=1): policy {policy}, {config}, workload "
                                     f"{workload_json}: {type(exc).__name__}: {exc}") from exc

    def test_generator_covers_what_it_claims(self):
        """Over the first 2000 cases (drawn, not simulated): every policy, sizes 0, 1 and 40, many
        deadlines and priorities."""
        seen = {"policies": set(), "sizes": set(), "timeouts": 0, "priorities": 0}
        for number in range(COVERAGE_CASES):
            workload, config, policy = draw_case(number)
            seen["policies"].add(policy)
            seen["sizes"].add(len(workload))
            seen["timeouts"] += config.timeout_ticks is not None
            seen["priorities"] += any(spec.priority is not None for spec in workload)
        self.assertEqual(seen["policies"], set(POLICIES))
        self.assertTrue({0, 1, 40} <= seen["sizes"], sorted(seen["sizes"]))
        self.assertGreater(seen["timeouts"], COVERAGE_CASES // 4)
        self.assertGreater(seen["priorities"], COVERAGE_CASES // 10)


def _add_chunks() -> None:
    for first in range(FIRST_CASE, FIRST_CASE + NUM_CASES, CHUNK):
        last = min(first + CHUNK, FIRST_CASE + NUM_CASES) - 1

        def test(self, first=first, last=last):
            self.run_cases(first, last)
        test.__doc__ = f"Fuzz cases {first}-{last} (seed {SEED}): invariants and byte-identical replay."
        setattr(FuzzTest, f"test_cases_{first:05d}_{last:05d}", test)


_add_chunks()


#: Values a corrupted field may take: every JSON type, edge numbers, near-miss strings.
ODD_VALUES = (None, True, False, -1, 0, 1, 2.5, 3.0, 10**7, -(10**12), "", " ", "7", "SYS", "two\nlines", [], [1], {}, {"a": 1},
              float("nan"), float("inf"))


def corrupt(rng: random.Random, text: str) -> str:
    """One random mistake in a workload's JSON text: a field set to an odd value, renamed, dropped,
    duplicated from another request, or a character deleted or inserted."""
    data = json.loads(text)
    requests = data["requests"]
    mistake = rng.randrange(6)
    if mistake == 0 or not requests:
        position = rng.randrange(len(text) + 1)
        return text[:position] + rng.choice('{}[],:"0a -') + text[position + 1:]
    request = rng.choice(requests)
    field = rng.choice(sorted(request))
    if mistake == 1:
        request[field] = rng.choice(ODD_VALUES)
    elif mistake == 2:
        request[field[:-1] + rng.choice("sx_")] = request.pop(field)
    elif mistake == 3:
        del request[field]
    elif mistake == 4:
        request.update({f: v for f, v in rng.choice(requests).items() if f in ("name", "prefix_key")})
    else:
        data[rng.choice(("requests", "description", "extra"))] = rng.choice(ODD_VALUES)
    return json.dumps(data, ensure_ascii=False)


class CorruptedWorkloadTest(unittest.TestCase):
    def test_any_mistake_is_a_workload_error_or_a_valid_workload(self):
        """Random single mistakes in random workloads: the validator never crashes, and whatever it
        accepts survives a canonical round trip unchanged."""
        rng = random.Random(SEED)
        refused, num_cases = 0, max(NUM_CASES, CORRUPTED_CASES)
        for number in range(num_cases):
            text = corrupt(rng, json.dumps({"requests": [spec.to_json() for spec in random_workload(rng)]}))
            try:
                specs = parse_workload(text, source="w.json")
            except WorkloadError as exc:
                refused += 1
                self.assertTrue(exc.problems, text)
                self.assertTrue(all(problem.startswith("w.json: ") and "\n" not in problem
                                    for problem in exc.problems), exc.problems)
                continue
            except Exception as exc:
                raise AssertionError(f"seed {SEED}, case {number}: {text}: {type(exc).__name__}: {exc}") from exc
            self.assertEqual(parse_workload(json.dumps({"requests": [s.to_json() for s in specs]})), specs)
            self.assertTrue(all(spec.name.isprintable() for spec in specs), text)
        self.assertGreater(refused, num_cases // 2)


if __name__ == "__main__":
    unittest.main()
