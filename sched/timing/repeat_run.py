"""What makes a run a repeat of another (issue 18, item 5: errors beside the run-to-run noise).

``calibrate RUN --repeat RUN2`` shows, beside each error, how far the same percentile moved between
two real runs of one workload (:func:`sched.timing.calibration_report.repeat_noise`). That column
means run-to-run noise only when RUN2 is another run of the same model on the same workload, so
:func:`check_repeat` refuses, before any replay, a RUN2 that is

- of another model (where both runs name one; names compared without their directory, as
  :func:`short_name` does for runs fitted together);
- the very same run: the same requests file (identical sha256), or a copy whose every request has
  the run's TTFT and E2E to the last digit; a run against itself differs by 0, which would print
  ``±0.0%`` as if the server had no run-to-run noise;
- of another workload: another number of requests, or other prompt lengths (the multiset of
  ``prompt_tokens``; output lengths may differ between repeats when the server samples, so they
  are not compared).

Errors are :class:`~sched.base.cmdline.InputError` lines naming ``--repeat``, the file, and the
request and field where they differ.
"""

from __future__ import annotations

from ..base.cmdline import InputError

__all__ = ["check_repeat", "short_name"]


def short_name(name):
    """A model or GPU name without its directory, lower case (``/models/org/name`` and ``org/name``
    match); ``None`` for no name."""
    return "/".join(str(name).rstrip("/").split("/")[-2:]).lower() if name else None


def check_repeat(run, repeat, source: str, repeat_source: str) -> None:
    """Refuse ``repeat`` (a :class:`~sched.timing.loadrun.RealRun`) as a repeat of ``run``
    (module docstring); ``source`` and ``repeat_source`` are the paths as given on the command line.
    Raises :class:`~sched.base.cmdline.InputError`; returns ``None`` when it is a repeat."""
    mine, theirs = run.fitted_on.get("model"), repeat.fitted_on.get("model")
    if short_name(mine) and short_name(theirs) and short_name(mine) != short_name(theirs):
        raise InputError(f"--repeat {repeat_source}: field 'model': {theirs!r} but {source} is {mine!r}: a repeat "
                         "runs the same model on the same workload again")
    digest = run.fitted_on.get("source_sha256")
    if digest and digest == repeat.fitted_on.get("source_sha256"):
        raise InputError(f"--repeat {repeat_source}: the same requests file as {source} (identical sha256): a "
                         "repeat is another run of the same workload; a file against itself differs by 0 and "
                         "would show no run-to-run noise")
    if len(repeat.records) != len(run.records):
        raise InputError(f"--repeat {repeat_source}: holds {len(repeat.records)} requests but {source} holds "
                         f"{len(run.records)}: a repeat runs the same workload again")
    ours = [record["prompt_tokens"] for record in run.records]
    others = [record["prompt_tokens"] for record in repeat.records]
    if sorted(ours) != sorted(others):
        index = next(i for i, (one, two) in enumerate(zip(ours, others)) if one != two)
        raise InputError(f"--repeat {repeat_source}: request {index} ({repeat.records[index]['name']}): field "
                         f"'prompt_tokens': {others[index]} but request {index} of {source} "
                         f"({run.records[index]['name']}) has {ours[index]}, and the two runs' prompt lengths "
                         "differ: a repeat runs the same workload again")
    if all((one["ttft"], one["e2e"]) == (two["ttft"], two["e2e"]) for one, two in zip(run.records, repeat.records)):
        raise InputError(f"--repeat {repeat_source}: every request has the TTFT and E2E of {source}'s request at the "
                         "same place: the same measurements, not a repeat; a run against itself would show no "
                         "run-to-run noise")
