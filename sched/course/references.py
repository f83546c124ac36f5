"""The reference a course run is graded against: the lab's golden directory ``expected/<name>``
when the course run has one, otherwise the handbook command's simulation written to a scratch
directory (same bytes as the command's ``--artifacts``; tests/test_course.py checks both ways
agree on every golden directory)."""

from __future__ import annotations

import os

from .plan import CourseRun, reference_config, reference_workload
from .resimulate import simulate_files

__all__ = ["reference_directory"]


def reference_directory(run: CourseRun, project: str, scratch: str) -> str:
    """The directory holding ``run``'s reference artifacts: ``<project>/expected/<reference>`` if it
    exists, else ``<scratch>/<name>`` (made on the first call, reused after). ``scratch`` is a
    directory the caller owns and removes."""
    if run.reference is not None:
        golden = os.path.join(project, "expected", run.reference)
        if os.path.isdir(golden):
            return golden
    target = os.path.join(scratch, run.name)
    if not os.path.isdir(target):
        source = run.source or f"scenario:{run.scenario}"
        files = simulate_files(reference_workload(run), reference_config(run), run.policy, source)
        os.makedirs(target)
        for name, text in files.items():
            with open(os.path.join(target, name), "w", encoding="utf-8", newline="\n") as out:
                out.write(text)
    return target
