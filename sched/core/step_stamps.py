"""A step-time run's token stamps kept as step ordinals, read as µs through the case's step ends.

A vLLM run given a step time (vllm-engine.md §6) stamps each token with the ordinal of the step that
sampled it and learns each step's end (µs) as it goes; at the end every token's stamp is the end of
its step. Written token by token, that is a list of µs per token (4.1 million on the Azure trace with
the 4090 settings); kept as runs of step ordinals on one list of step ends, it is a few numbers per
request. :func:`restamp` does the latter whenever each token is a run of its own in µs (step ends
more than 1 µs apart): the request becomes a :class:`StepStampedRequest`, whose every public reading
gives the µs values. Readers that take ``_runs`` in C, one tuple per request (the summary, the
compact ``requests.jsonl`` lines, the vLLM invariants' screen), ask :func:`shared_step_ends` and read
the first and last stamp through it; :class:`sched.timing.step_ends.StepEnds` takes its spans from
the ordinals.
"""

from __future__ import annotations

from .packed_requests import ColumnRequests
from .records import Request

__all__ = ["StepStampedRequest", "restamp", "shared_step_ends", "through_step_ends"]


def restamp(request: Request, times: list, spaced: bool) -> None:
    """Make ``request`` (ended) read each token's stamp ``s`` as ``times[s]`` (``times`` increasing;
    the step-time clock, µs): the same runs as setting its ``token_times`` to those times. ``spaced``:
    any two times of ``times`` differ by more than 1, so every token is a run of its own; the request
    then keeps its runs of step ordinals and becomes a :class:`StepStampedRequest` (no per-token work
    or memory); otherwise (or with a run still open) its stamps are replaced one by one."""
    if not spaced or request._open_from is not None:
        request.token_times = [times[start + k] for start, count in request.token_runs for k in range(count)]
        return
    request._clock = times   # no run is open any more: the clock it reads its stamps with is the step ends
    request.__class__ = StepStampedRequest


class StepStampedRequest(Request):
    """A request of a run with a step time whose stamps stay step ordinals (:func:`restamp`).

    ``_runs`` holds runs of consecutive step ordinals; ``_clock[s]`` is the end (µs) of step ``s``:
    the slot that held the simulation's current tick while a run could be open now holds the clock
    the stamps are read with, one list shared by the case, increasing by more than 1 µs from step to
    step (so each token is a run of its own in µs). Every public reading (:attr:`token_runs`,
    :attr:`flat_token_runs`, :attr:`token_times`, :attr:`first_token_at`, :attr:`last_token_at`)
    gives the µs values a request with stamps replaced one by one would give; ``num_tokens`` and the
    other fields are the request's own. :class:`sched.timing.step_ends.StepEnds` reads the runs of
    ordinals directly (its spans). Only an ended request is restamped, so no run is open.
    """

    __slots__ = ()

    @property
    def token_times(self) -> list[int]:
        """The µs stamp of each emitted output token, strictly increasing (a new list)."""
        ends, runs = self._clock, self._runs
        if len(runs) == 2:
            return ends[runs[0]:runs[0] + runs[1]]
        return [t for i in range(0, len(runs), 2) for t in ends[runs[i]:runs[i] + runs[i + 1]]]

    @token_times.setter
    def token_times(self, times) -> None:
        self.__class__, self._clock = Request, None   # stamps given one by one: an ordinary request again
        Request.token_times.__set__(self, times)

    @property
    def token_runs(self) -> list[tuple[int, int]]:
        """Each token a run ``(µs stamp, 1)``, in order."""
        return [(t, 1) for t in self.token_times]

    @property
    def flat_token_runs(self) -> list[int]:
        """:attr:`token_runs` flattened, ``[stamp, 1, stamp, 1, ...]`` (a new list)."""
        times = self.token_times
        flat = [1] * (2 * len(times))
        flat[0::2] = times
        return flat

    @property
    def first_token_at(self) -> int | None:
        runs = self._runs
        return self._clock[runs[0]] if runs else None

    @property
    def last_token_at(self) -> int | None:
        runs = self._runs
        return self._clock[runs[-2] + runs[-1] - 1] if runs else None


def shared_step_ends(requests) -> list | None:
    """The list of step ends (µs by step ordinal) through which every one of ``requests`` reads its
    stamps (each a :class:`StepStampedRequest` on that one list), or ``None`` when none does. A
    reader that takes ``_runs`` directly (in C, one tuple per request) reads step ordinals then, and
    turns the first and last into µs through this list. Requests of which only some keep step
    ordinals (never one finished case) get their stamps one by one here, and ``None`` is returned.
    ``requests``: any sequence of records (a list, a tuple, ...); requests packed as columns
    (:class:`sched.core.packed_requests.ColumnRequests`) keep no step ordinals: ``None``."""
    if isinstance(requests, ColumnRequests) or not requests:
        return None
    first = requests[0]
    table = first._clock if type(first) is StepStampedRequest else None
    stamped = StepStampedRequest
    if table is not None and all(type(r) is stamped and r._clock is table for r in requests):
        return table
    for r in requests:
        if type(r) is stamped:
            r.token_times = r.token_times
    return None


def through_step_ends(runs, ends: list) -> tuple:
    """``(first stamp, last stamp, tokens)`` of a request's flat runs of step ordinals ``runs``
    (``(first, count, ...)``, as a :class:`StepStampedRequest` keeps them), the stamps read through
    ``ends`` (µs by step ordinal, :func:`shared_step_ends`); ``(None, None, 0)`` without a token."""
    if not runs:
        return None, None, 0
    return ends[runs[0]], ends[runs[-2] + runs[-1] - 1], runs[1] if len(runs) == 2 else sum(runs[1::2])
