"""The one error of ``explain`` (lab.md §7): the artifacts cannot tell a request's story.

Kept apart so both storytellers (:mod:`sched.analysis.explain`, :mod:`sched.analysis.vllm_explain`)
raise it without importing each other.
"""

__all__ = ["ExplainError"]


class ExplainError(ValueError):
    """The artifacts cannot tell the story: missing directory or file, unknown request, bad line."""
