"""Regenerate the reference directories in ``expected/`` (a deliberate act, never to pass a test).

    python3 -m tests.regenerate_expected

Run it only after a change to the model that lab.md explains, then read ``git diff expected/``
and account for every changed value from the spec before committing.
"""

import os
import sys

from tests.helpers import EXPECTED, REFERENCE_RUNS, run_cli


def regenerate() -> int:
    for name, args in REFERENCE_RUNS.items():
        code, _, err = run_cli([*args, "--artifacts", os.path.join(EXPECTED, name), "--force"])
        if code != 0:
            sys.stderr.write(err)
            return code
        print(f"regenerated expected/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(regenerate())
