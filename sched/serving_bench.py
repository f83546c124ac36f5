"""The serving-scheduler chapter's functions under the name the chapter imports (serving-bench.md).

``from sched.serving_bench import simulate_serving_scheduler, ...`` keeps working for the chapter's
learners; the code lives in :mod:`sched.chapter.window`.
"""

from .chapter.window import *  # noqa: F401,F403  (the chapter's eight functions, re-exported)
from .chapter.window import __all__  # noqa: F401
