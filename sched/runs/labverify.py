"""``zip --verify``: the lab ZIP tried as a learner would, in one command (docs/instructor.md).

The ZIP is extracted into a temporary folder (the course data beside the lab, as the handbook
expects), the baseline is run there by the extracted lab itself (``python3 infer_sched_lab.py
--artifacts runs/baseline``) and checked against the packed golden files with the extracted
lab's ``check``. Nothing of the project is used but the ZIP.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from .labzip import DATA_FOLDER, TOP_FOLDER

__all__ = ["verify_lab_zip"]

#: Most seconds one step of the verification may take (the baseline runs in well under one).
STEP_TIMEOUT = 300


def _step(argv: list[str], cwd: str) -> tuple[bool, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)   # the extracted lab's own code, nothing else
    try:
        done = subprocess.run([sys.executable, "infer_sched_lab.py", *argv], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"no answer within {STEP_TIMEOUT} s"
    output = (done.stdout + done.stderr).strip()
    return done.returncode == 0, output


def verify_lab_zip(path: str) -> list[str]:
    """Extract the lab ZIP ``path``, run its baseline and ``check`` it against its own
    ``expected/baseline``; returns the report's lines, the last one starting with ``verified`` or
    ``NOT verified`` (what failed, with the lab's own message). Raises nothing for a broken ZIP:
    that is a failed verification."""
    scratch = tempfile.mkdtemp(prefix="isl-verify-")
    try:
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                archive.extractall(scratch)   # our own ZIP, just written: its names were made here
        except (OSError, zipfile.BadZipFile) as exc:
            return [f"NOT verified: cannot extract {path} ({exc})"]
        lab = os.path.join(scratch, TOP_FOLDER)
        data = sum(1 for name in names if name.startswith(f"{DATA_FOLDER}/"))
        lines = [f"extracted {len(names)} files ({data} of course data under {DATA_FOLDER}/)"]
        ok, output = _step(["--artifacts", "runs/baseline"], lab)
        if not ok:
            return lines + [f"NOT verified: the baseline run failed in the extracted lab: {output[-500:]}"]
        lines.append("ran the baseline in the extracted lab: python3 infer_sched_lab.py --artifacts runs/baseline")
        ok, output = _step(["check", "runs/baseline", "expected/baseline"], lab)
        if not ok:
            return lines + [f"NOT verified: check runs/baseline expected/baseline: {output[-800:]}"]
        lines.append("checked it: " + output.splitlines()[-1])
        return lines + [f"verified: {path} builds a lab whose baseline equals its expected/baseline"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
