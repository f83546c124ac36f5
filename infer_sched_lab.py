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
    """SIGTERM before the program's own handler (sched.base.cmdline.interrupts_raise) is in place."""


def _terminated(_signum, _frame):
    raise _Terminated


if __name__ == "__main__":  # SIGTERM while loading: one line, as Ctrl-C (the default would die silently)
    signal.signal(signal.SIGTERM, _terminated)

try:  # Ctrl-C while the program is still loading: one line, as later (nothing was written yet)
    from sched.commands.main import main  # noqa: E402
except KeyboardInterrupt:
    sys.stderr.write("infer_sched_lab.py: error: interrupted; nothing was written\n")
    sys.exit(130)
except _Terminated:
    sys.stderr.write("infer_sched_lab.py: error: terminated (SIGTERM); nothing was written\n")
    sys.exit(143)

if __name__ == "__main__":
    try:  # main() replaces the handler while it runs and puts this one back when no signal came
        code = main()
        if signal.getsignal(signal.SIGTERM) is _terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except _Terminated:  # the few microseconds between loading and main()'s handler, or after it
        sys.stderr.write("infer_sched_lab.py: error: terminated (SIGTERM); nothing was written\n")
        code = 143
    sys.exit(code)
