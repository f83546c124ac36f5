"""The four cases of a large run simulated side by side in worker processes (one per core).

The cases of a run never see each other (lab.md §4: each starts cold), so they can be simulated
at the same time. :func:`run_cases_in_workers` forks one worker per other core; this process and
the workers each take the next case nobody has taken, longest expected first, until none is left.
Each case is simulated (:func:`sched.lab.engine.simulate`), checked
(:func:`sched.engines.check_case`) and summarised (:func:`sched.core.metrics.summarize`); a worker then sends back the requests' final state as
columns (:class:`sched.core.packed_requests.PackedRequests`: a few arrays, about 40 bytes a request)
and the timeline records as plain lists, which this process turns back into a
:class:`~sched.core.records.CaseResult` whose requests read as the sequential run's: same records,
same summary, so every artifact has the same bytes. This process packs its own finished cases the
same way before it simulates the next, so a run holds one case's full records at a time.

Only used where it pays (:func:`worth_workers`: a workload of at least
:data:`MIN_REQUESTS_FOR_WORKERS` requests, at least two usable cores, and the ``fork`` start
method, i.e. Linux and the like); small runs, every lab scenario included, stay in one process.
On two cores this process starts with chunked prefill and the worker with continuous; the first
one free takes continuous+APC, the next static. Errors raised in a worker (a broken invariant, a stalled simulation) are raised again
in the parent with the same type and message. Progress of the running cases is read from shared
counters once this process's own cases are done (until then it shows its own), so the terminal
display keeps working.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from multiprocessing import connection

from ..base.cmdline import Interrupted
from ..lab.engine import Simulation
from ..engines import check_case
from ..core.metrics import summarize
from ..core.packed_requests import PackedRequests
from ..core.records import CaseResult, SimulationError

__all__ = ["MIN_REQUESTS_FOR_WORKERS", "usable_cores", "worth_workers", "run_cases_in_workers"]

#: Smallest workload simulated in worker processes: below it, starting processes costs more
#: (tens of milliseconds) than it saves.
MIN_REQUESTS_FOR_WORKERS = 2000

# Worker-side state, inherited through fork (never pickled): the run's inputs and the counters.
_JOB: dict = {}


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worth_workers(workload) -> bool:
    """True when :func:`run_cases_in_workers` pays for ``workload``: at least
    :data:`MIN_REQUESTS_FOR_WORKERS` requests, two usable cores, and ``fork`` available."""
    return (len(workload) >= MIN_REQUESTS_FOR_WORKERS and usable_cores() >= 2
            and "fork" in multiprocessing.get_all_start_methods())


def run_cases_in_workers(workload, config, cases, policy: str = "fcfs", progress=None,
                         timeline: str = "full", workers: int | None = None,
                         render=None, prelude=None) -> tuple[list[CaseResult], list[dict]]:
    """Simulate, check and summarise every case in this process and forked worker processes.

    ``workload``, ``config``, ``cases``, ``policy``, ``timeline``: as for
    :func:`sched.lab.engine.run_cases`; ``progress``: the same display hook, called from this process
    (its own cases as they run, then about four times a second the least advanced case of the
    workers); ``workers``: processes at work, this one included (default: usable cores; at most
    one per case). Every process takes the next case nobody has taken, longest expected first
    (:func:`_expected_cost`), until none is left, so the processes finish close together.

    ``render``: optional ``render(index, result) -> bool``, called in the process that simulated
    case ``index`` once it is checked and summarised (e.g.
    :meth:`sched.output.case_sections.CaseSections.write`: its artifact lines rendered there, side by
    side; it must keep what it makes where the other processes see it); a case it rendered (True)
    comes back without its timeline records (``CaseResult.ticks`` empty: sending and rebuilding
    them would cost more than the rendering saved). ``prelude``: optional ``prelude()``, work of
    the run that needs no case (e.g. :meth:`sched.output.case_sections.CaseSections.write_workload`),
    called once in the first worker before it takes a case (in this process when it has no
    worker); it must keep what it makes where this process sees it.

    Returns ``(results, summaries)``, one each per case in ``cases`` order, equal to
    ``run_cases`` followed by ``check_case`` and ``summarize``. Raises what a worker raised
    (:class:`sched.core.records.SimulationError` and its subclasses, ``KeyboardInterrupt``); a worker
    stopped by a signal from outside raises :class:`sched.base.cmdline.Interrupted` (the run then exits
    128 + that signal), one that ends without a word otherwise :class:`sched.core.records.SimulationError`.
    """
    cases = list(cases)
    workers = max(1, min(workers or usable_cores(), len(cases)))
    context = multiprocessing.get_context("fork")
    counters = context.RawArray("q", 2 * len(cases))   # per case: current tick, requests ended
    order = sorted(range(len(cases)), key=lambda i: _expected_cost(cases[i]), reverse=True)
    _JOB.update(workload=workload, config=config, cases=cases, policy=policy, timeline=timeline,
                counters=counters if progress is not None else None, render=render, order=order,
                taken=context.Value("i", 0),   # how many of ``order`` were taken, shared
                prelude=prelude)
    results, summaries = [None] * len(cases), [None] * len(cases)
    running: dict = {}   # the parent's end of each worker's pipe -> its process
    collecting = gc.isenabled()
    gc.disable()   # many long-lived objects, no reference cycles (as in Simulation.run)
    try:
        for number in range(workers - 1):
            receiver, sender = context.Pipe(duplex=False)
            # The worker closes its copies of the reading ends: with this process gone, its sends fail.
            process = context.Process(target=_work, args=(sender, number == 0, [receiver, *running], os.getpid()),
                                      daemon=True)
            process.start()
            sender.close()
            running[receiver] = process
        if prelude is not None and not running:
            prelude()
        while (index := _take()) is not None:   # this process's own cases: nothing to send back
            results[index], summaries[index] = _finished_case(workload, config, cases[index], policy, timeline,
                                                              progress, render, index)
            gc.disable()   # Simulation.run enables it again on the way out
        while running:
            for receiver in connection.wait(list(running), timeout=0.25):
                process = running[receiver]   # left in ``running`` until received: Ctrl-C meanwhile stops it too
                try:
                    _receive(receiver, workload, config, cases, results, summaries)
                except EOFError:
                    process.join()
                    raise _lost(process.exitcode) from None
                del running[receiver]
                receiver.close()
                process.join()
            pending = [i for i in range(len(cases)) if results[i] is None]   # a worker's, not yet received
            if progress is not None and running and pending:
                index = min(pending, key=lambda i: counters[2 * i + 1])
                progress(cases[index].name, counters[2 * index], counters[2 * index + 1], len(workload))
    finally:
        # An error or Ctrl-C: stop the others at once. SIGKILL, not SIGTERM: a worker's own handler
        # runs only between bytecodes (a sort or a pickle of 10^6 items would delay it by seconds),
        # and a worker has nothing to clean up (its rendered lines are in unlinked temporary files).
        for process in running.values():
            process.kill()
        for receiver, process in running.items():
            process.join()
            receiver.close()
        _JOB.clear()
        if collecting:
            gc.enable()
    _give_back_free_memory()
    return results, summaries


def _lost(exitcode: int | None) -> BaseException:
    """The error for a worker that ended without its results: stopped by a signal from outside
    (killed, or its own clean exit on SIGTERM/SIGHUP: 128 + signal), an :class:`Interrupted` run
    that exits 128 + that signal; any other end, a :class:`SimulationError` (a bug)."""
    signum = -exitcode if exitcode is not None and exitcode < 0 else (
        exitcode - 128 if exitcode is not None and 128 < exitcode < 160 else None)
    try:
        name = signal.Signals(signum).name if signum is not None else None
    except ValueError:
        name = None
    if name is not None:
        return Interrupted(signum, f"a worker process was stopped by {name} before it finished")
    return SimulationError(f"a worker process ended without its results (exit code {exitcode})")


def _take() -> int | None:
    """The index of the next case nobody has taken (longest expected first), or ``None``."""
    taken = _JOB["taken"]
    with taken.get_lock():
        position = taken.value
        if position == len(_JOB["order"]):
            return None
        taken.value = position + 1
    return _JOB["order"][position]


def _receive(receiver, workload, config, cases, results, summaries) -> None:
    """Read one worker's packed cases into ``results`` and ``summaries``; raise what it raised."""
    while True:   # read here, in this thread: the memory is reused
        kind, payload = receiver.recv()
        if kind == "done":
            return
        if kind == "error":
            raise payload
        index, summary, nones, now, record_type, num_records, budget_spent, busy_ticks = payload
        status, *ints = (receiver.recv() for _ in range(1 + len(nones)))
        runs, starts = receiver.recv(), receiver.recv()
        records = [receiver.recv() for _ in range(num_records)]
        requests = PackedRequests.from_columns(workload, (status, ints, nones, runs, starts, now))
        ticks = [record_type(*values) for values in zip(*records)] if record_type is not None else []
        summaries[index] = summary
        results[index] = CaseResult(cases[index], config, requests, ticks, budget_spent, busy_ticks)
        del records, payload


def _give_back_free_memory() -> None:
    """Return the heap memory freed while unpacking (the received columns) to the system, where
    the C library can (glibc's ``malloc_trim``), so the run's peak does not grow; else nothing."""
    try:
        import ctypes
        ctypes.CDLL(None).malloc_trim(0)
    except (ImportError, OSError, AttributeError):
        pass


def _expected_cost(case) -> int:
    """Rough relative cost of a case, as measured on the Azure conversation trace (seconds for
    simulation, checks, summary and rendering): chunked prefill the most (its prompts take several
    walked ticks), then continuous, continuous+APC (hits shorten prefills) and static (its arrivals
    mostly only join the queue). Taken longest first (:func:`run_cases_in_workers`): the last,
    shortest case goes to whichever process is free first."""
    if case.batching.value == "static":
        return 1
    return 4 if case.chunk_tokens is not None else (2 if case.apc else 3)


def _work(sender, first: bool, readers: list, parent: int) -> None:
    """In a worker: the run's prelude if ``first``, then simulate, check and summarise the next
    case nobody has taken until none is left; then send every packed result (or the first error)
    and ``done`` through ``sender``. Everything is computed before anything is sent: the parent
    reads only once its own cases are done, and a full pipe would stall this worker.

    The worker never outlives the parent (process ``parent``): it asks the system to end it with
    the parent (Linux), stops between cases once the parent is gone, and closes its inherited
    copies of the pipes' reading ends (``readers``) so a send to a vanished parent fails at once."""
    for reader in readers:
        reader.close()
    _end_with_parent(parent)
    try:
        if first and _JOB["prelude"] is not None:
            _JOB["prelude"]()
        packed = []
        while os.getppid() == parent and (index := _take()) is not None:
            packed.append((index, _packed_case(index)))
        if os.getppid() != parent:
            os._exit(1)   # the parent is gone: nobody reads the results
    except BaseException as exc:   # Ctrl-C included: the parent raises it again
        sender.send(("error", exc))
    else:
        for index, (summary, requests, record_type, records, budget_spent, busy_ticks) in packed:
            # One message per column: the parent's receive buffers stay small and are reused,
            # where one large message would leave megabytes of freed memory in its heap.
            status, ints, nones, runs, starts, now = requests.columns()
            sender.send(("ok", (index, summary, nones, now, record_type, len(records), budget_spent, busy_ticks)))
            for column in (status, *ints, runs, starts, *records):
                sender.send(column)
        sender.send(("done", None))
    finally:
        sender.close()


def _end_with_parent(parent: int) -> None:
    """Ask the system to kill this process when its parent ends (Linux ``prctl(PR_SET_PDEATHSIG)``;
    elsewhere nothing), and end now if the parent already has."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)   # 1: PR_SET_PDEATHSIG
    except (ImportError, OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _finished_case(workload, config, case, policy, timeline, progress, render, index) -> tuple[CaseResult, dict]:
    """Case ``index`` simulated, checked, rendered (``render``, if any: then its timeline records
    are dropped), its requests packed as columns and summarised from them: ``(result, summary)``.
    Packed before the summary, so the summary's own columns never sit beside the full records,
    and before the next case builds its own."""
    simulation = Simulation(workload, config, case, policy, timeline=timeline)
    result = simulation.run(progress)
    now = simulation.now
    del simulation
    check_case(result)
    if render is not None and render(index, result):
        result.ticks = []   # rendered: what they held is in render's output now
    result.requests = PackedRequests.pack(result.requests, workload, now)
    _give_back_free_memory()
    return result, summarize(result)


def _packed_case(index: int) -> tuple:
    job = _JOB
    counters = job["counters"]
    hook = None
    if counters is not None:
        def hook(_name, now, ended, _total):
            counters[2 * index] = now
            counters[2 * index + 1] = ended
    gc.disable()   # the worker only builds long-lived objects; it ends after the run
    result, summary = _finished_case(job["workload"], job["config"], job["cases"][index], job["policy"],
                                     job["timeline"], hook, job["render"], index)
    # The requests as columns (a few arrays, pickled as bytes); the timeline records one list per
    # field: the parent's copies of these few large lists are freed whole once rebuilt.
    ticks = result.ticks
    fields = type(ticks[0]).__slots__ if ticks else ()
    records = [[getattr(k, name) for k in ticks] for name in fields]
    return (summary, result.requests, type(ticks[0]) if ticks else None, records, result.budget_spent,
            result.busy_ticks)
