"""Where the learner's ``python3 -m unittest`` spends its time: per test, class and module.

A developer tool (never run by the tests). It discovers the suite as ``python3 -m unittest`` does
(``tests/``, top level ``.``; the environment decides the heavy variants, e.g. ``ISL_FULL=1``),
runs it in this process and prints:

- a header line: tests run, failures, errors, skipped; discovery and run time, wall and CPU (s);
  the CPU spent in Python's garbage collections per generation (count and s);
- modules, classes and tests, slowest first, by CPU (s): this process's user + sys and that of the
  child processes it waited for (``os.times``). A test's time runs from the end of the previous
  test to its own end, so a class's ``setUpClass`` (and a module's ``setUpModule``) counts in the
  first test that follows it.

Usage, from the repository root::

    python3 tools/suite_times.py [--pattern 'test*.py'] [--top 40] [--json times.json]

CPU time is the figure to compare on a shared machine (wall time grows with the other load); compare
two versions as paired runs, one after the other, several times.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import sys
import time
import unittest


def cpu_seconds() -> float:
    """User + system CPU of this process and of the children it has waited for (s)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class GcClock:
    """CPU time (s) and number of Python's garbage collections, per generation (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.count = collections.Counter()
        self.seconds = collections.Counter()
        self._start = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.count[info["generation"]] += 1
            self.seconds[info["generation"]] += time.process_time() - self._start


class TimedResult(unittest.TextTestResult):
    """Records, per test id, the wall and CPU seconds since the previous test ended."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._wall, self._cpu = time.perf_counter(), cpu_seconds()

    def stopTest(self, test) -> None:
        super().stopTest(test)
        wall, cpu = time.perf_counter(), cpu_seconds()
        self.wall[test.id()] = wall - self._wall
        self.cpu[test.id()] = cpu - self._cpu
        self._wall, self._cpu = wall, cpu


def grouped(times: dict[str, float], parts: int) -> collections.Counter:
    """Sum of ``times`` per id prefix of ``parts`` dotted parts after ``tests.`` (1: module, 2: class)."""
    sums: collections.Counter = collections.Counter()
    for test_id, seconds in times.items():
        names = test_id.split(".")
        names = names[1:] if names[0] == "tests" else names
        sums[".".join(names[:parts])] += seconds
    return sums


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pattern", default="test*.py", help="test file pattern (as unittest's -p)")
    parser.add_argument("--top", type=int, default=40, help="rows shown per table")
    parser.add_argument("--json", help="also write {test id: [wall s, CPU s]} to this file")
    args = parser.parse_args(argv)
    clock = GcClock()
    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    suite = unittest.TestLoader().discover("tests", pattern=args.pattern, top_level_dir=".")
    load_wall, load_cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    with open(os.devnull, "w", encoding="utf-8") as quiet:
        result = unittest.TextTestRunner(stream=quiet, resultclass=TimedResult, verbosity=0).run(suite)
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    gcs = ", ".join(f"gen{g} {clock.count[g]}× {clock.seconds[g]:.2f} s" for g in (0, 1, 2))
    print(f"{result.testsRun} tests, {len(result.failures)} failures, {len(result.errors)} errors, "
          f"{len(result.skipped)} skipped; discovery {load_wall:.2f} s wall {load_cpu:.2f} s CPU; "
          f"in all {wall:.2f} s wall {cpu:.2f} s CPU; garbage collections: {gcs}")
    for title, table in (("modules", grouped(result.cpu, 1)), ("classes", grouped(result.cpu, 2)),
                         ("tests", grouped(result.cpu, 3))):
        print(f"--- {title}, CPU s")
        for name, seconds in table.most_common(args.top):
            print(f"{seconds:7.2f}  {name}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({k: [result.wall[k], result.cpu[k]] for k in result.cpu}, out, indent=1)
    for test, trace in result.failures + result.errors:
        print(f"FAILED {test.id()}\n{trace}", file=sys.stderr)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
