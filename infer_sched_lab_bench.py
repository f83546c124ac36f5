"""The serving-scheduler chapter's eight functions, importable from any directory (docs/handbook/window-model.md §16.2).

The lab's package is called ``sched``, like a module of Python's standard library. Outside the
project's root, ``from sched.serving_bench import ...`` finds the standard library's ``sched``
first and fails (``'sched' is not a package``). This module has a name of its own: put the
project's root anywhere on ``sys.path`` (``sys.path.append(LAB)`` is enough, or ``PYTHONPATH``),
then

    from infer_sched_lab_bench import simulate_serving_scheduler, select_next_batch, ...

It loads the lab's package under a private name (``_infer_sched_lab``) from the folder beside
this file, so it works even when the standard library's ``sched`` is already imported, and it
never replaces that module. The names and behaviour are those of :mod:`sched.serving_bench`
(serving-bench.md §1–2).
"""

import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PRIVATE = "_infer_sched_lab"


def _lab_package():
    """The lab's ``sched`` package loaded as ``_infer_sched_lab`` (once per process)."""
    if _PRIVATE not in sys.modules:
        folder = os.path.join(_HERE, "sched")
        spec = importlib.util.spec_from_file_location(_PRIVATE, os.path.join(folder, "__init__.py"),
                                                      submodule_search_locations=[folder])
        package = importlib.util.module_from_spec(spec)
        sys.modules[_PRIVATE] = package
        try:
            spec.loader.exec_module(package)
        except BaseException:
            del sys.modules[_PRIVATE]
            raise
    return sys.modules[_PRIVATE]


_lab_package()
from _infer_sched_lab.serving_bench import *  # noqa: E402,F401,F403  (the chapter's eight functions)
from _infer_sched_lab.serving_bench import __all__  # noqa: E402,F401
