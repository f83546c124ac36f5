#!/usr/bin/env python3
"""infer-sched-lab: run the inference-scheduler lab (see README.md).

    python3 infer_sched_lab.py --artifacts runs/baseline
"""

import os
import sys

# The package is named ``sched`` like a standard-library module; make sure this project's copy is
# the one imported, also when this file is installed as the ``infer-sched-lab`` console script.
_HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.abspath(sys.path[0] or os.curdir) != _HERE:
    sys.path.insert(0, _HERE)

try:  # Ctrl-C while the program is still loading: one line, as later (nothing was written yet)
    from sched.cli import main  # noqa: E402
except KeyboardInterrupt:
    sys.stderr.write("infer_sched_lab.py: error: interrupted; nothing was written\n")
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())
