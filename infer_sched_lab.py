#!/usr/bin/env python3
"""infer-sched-lab: run the inference-scheduler lab (see README.md).

    python3 infer_sched_lab.py --artifacts runs/baseline
"""

import os
import signal
import sys

# The package is named ``sched`` like a standard-library module; make sure this project's copy is
# the one imported, also when this file is installed as the ``infer-sched-lab`` console script.
_HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.abspath(sys.path[0] or os.curdir) != _HERE:
    sys.path.insert(0, _HERE)



class _Terminated(BaseException):
    """SIGTERM or SIGHUP before the program's own handler (sched.base.cmdline.interrupts_raise) is in place."""


#: The signal -> its words and exit code (128 + the signal), as the program's own handler says them.
_EARLY = {signal.SIGTERM: ("terminated (SIGTERM)", 143)}
if hasattr(signal, "SIGHUP"):
    _EARLY[signal.SIGHUP] = ("hung up (SIGHUP: the terminal closed)", 129)


def _terminated(signum, _frame):
    for other in _EARLY:   # a second signal cannot cut the one line short
        signal.signal(other, signal.SIG_IGN)
    raise _Terminated(signum)


def _early_line(exc: _Terminated) -> int:
    words, code = _EARLY[exc.args[0]]
    sys.stderr.write(f"infer_sched_lab.py: error: {words}; nothing was written\n")
    return code


if __name__ == "__main__":  # SIGTERM or SIGHUP while loading: one line, as Ctrl-C (the default dies silently)
    for _signum in _EARLY:
        signal.signal(_signum, _terminated)

try:  # Ctrl-C while the program is still loading: one line, as later (nothing was written yet)
    from sched.commands.main import main  # noqa: E402
except KeyboardInterrupt:
    sys.stderr.write("infer_sched_lab.py: error: interrupted; nothing was written\n")
    sys.exit(130)
except _Terminated as _exc:
    sys.exit(_early_line(_exc))

if __name__ == "__main__":
    code = None
    try:  # main() replaces the handler while it runs and puts this one back when no signal came
        code = main()
        # The command is over (its output complete, or refused): a Ctrl-C from here on changes nothing
        # (Python's own handler would print a traceback, or end the exit with status 0).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for _signum in _EARLY:
            if signal.getsignal(_signum) is _terminated:
                signal.signal(_signum, signal.SIG_DFL)
    except _Terminated as _exc:  # the few microseconds between loading and main()'s handler, or after it
        code = _early_line(_exc)
    except KeyboardInterrupt:  # before main()'s handler was in place, or just after it was put back
        if code is None:
            sys.stderr.write("infer_sched_lab.py: error: interrupted; nothing was written\n")
            code = 130
    sys.exit(code)
