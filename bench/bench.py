#!/usr/bin/env python3
"""Benchmark of the event-driven engine: a thin wrapper of ``python3 infer_sched_lab.py bench``
(the code is :mod:`sched.runs.bench`; docs/handbook/real-traffic.md §14.7, docs/reference.md §4).

    python3 bench/bench.py [--engine lab|vllm] [--azure PATH] [--mooncake PATH] [--sizes 1000,10000,100000,1000000]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sched.commands.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
