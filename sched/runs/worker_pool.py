"""A process pool's workers and the stop signals: what a sweep (:mod:`sched.runs.sweep`) and a
capacity plan (:mod:`sched.planning.plan`) both need so that Ctrl-C or SIGTERM leaves no worker running.

Use: ``ProcessPoolExecutor(..., initializer=worker_signals)``; :func:`mask_stop_signals` with
``signal.SIG_BLOCK`` around the submits that fork the workers, ``signal.SIG_UNBLOCK`` after;
:func:`stop_workers` on any exception. POSIX signals; elsewhere the masking does nothing.
"""

from __future__ import annotations

import signal
from concurrent.futures import ProcessPoolExecutor


def worker_signals() -> None:
    """In each worker: Ctrl-C at the terminal reaches the whole process group, and the parent alone
    answers it (one line); SIGTERM, which the parent sends its workers when it stops, ends a worker
    at once and silently."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    mask_stop_signals(signal.SIG_UNBLOCK)  # blocked while the parent forked it


#: Blocked while the pool forks its workers: a signal landing inside a fork's clean-up hooks would
#: be swallowed by Python; blocked, it waits and is answered right after (workers unblock their own).
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def mask_stop_signals(how) -> None:
    """Block (``signal.SIG_BLOCK``) or unblock (``signal.SIG_UNBLOCK``) SIGINT and SIGTERM in this thread."""
    if hasattr(signal, "pthread_sigmask"):  # POSIX; elsewhere there is no fork to guard
        signal.pthread_sigmask(how, _STOP_SIGNALS)


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """End a process pool's workers now (a sweep interrupted by Ctrl-C or SIGTERM): pending points
    are cancelled and every worker gets SIGTERM, so none outlives the sweep or holds its pipes."""
    # The standard library offers no public way to end busy workers before Python 3.14.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
