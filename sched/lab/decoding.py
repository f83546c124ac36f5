"""The decoding side of a lab-engine case (lab.md §3, steps 4 and 6 of a tick): *open runs* of
consecutive token stamps, the requests they complete, and the per-tick decode walk of a tick whose
budget cannot pay every decoding request.

A decoding request holds an open run that grows by itself while every tick decodes it: the stamp
of its last token is scheduled once (``_completions``, a heap) instead of each token being
stamped tick by tick. :class:`DecodingSide` is a part of :class:`sched.lab.engine.Simulation`
(its methods run on the one simulation instance, whose ``__init__`` makes the state they use:
``_active``, ``_stalled``, ``_completions``, ``_num_ended``); the state stays on the instance so
that :mod:`sched.lab.steady` and the tick's hot loop read it directly.
"""

from __future__ import annotations

import heapq

from ..core.records import Request, Status

__all__ = ["DecodingSide"]

_DECODE, _DONE = Status.DECODE, Status.DONE


def _first(item: tuple):
    return item[0]


class DecodingSide:
    """Open runs, completions and the in-order decode walk of one simulation (module docstring)."""

    __slots__ = ()

    def _open_run(self, request: Request, seq: int, start: int) -> None:
        """Start the request's open run at stamp ``start``; schedule the stamp of its last token."""
        request._open_from = start
        last = start + request.spec.output_tokens - request._num_closed - 1
        heapq.heappush(self._completions, (last, seq, start, request))

    def _complete(self, stamp: int) -> list[str]:
        """End, in active order, every request whose open run reaches its last token at ``stamp``;
        returns their names."""
        heap = self._completions
        done = []
        while heap and heap[0][0] <= stamp:
            _, seq, start, request = heapq.heappop(heap)
            if request.status is _DECODE and request._open_from == start:   # else a stale entry
                done.append((seq, request))
        if not done:
            return []
        done.sort(key=_first)   # admission order = active order
        active = self._active
        for seq, request in done:
            request._close_run(stamp)
            request.status = _DONE
            request.done_at = stamp
            del active[seq]
        self._num_ended += len(done)
        return [request.spec.name for _, request in done]

    def _decode_in_order(self, t: int, remaining: int) -> tuple[list[str], list[str]]:
        """The per-tick decode walk for a tick whose budget cannot pay every decoding request."""
        decoded, finished = [], []
        cost = self.config.decode_cost
        for seq, request in list(self._active.items()):
            if request.status is not Status.DECODE:
                continue
            if remaining < cost:
                # Skipped for lack of budget: emits nothing this tick; its run closes at t.
                if seq not in self._stalled:
                    request._close_run(t)
                    self._stalled[seq] = request
                continue
            remaining -= cost
            if seq in self._stalled:
                del self._stalled[seq]
                self._open_run(request, seq, t + 1)
            decoded.append(request.name)
            if request._num_closed + t + 1 - request._open_from + 1 == request.spec.output_tokens:
                request._close_run(t + 1)
                self._end(request, Status.DONE, t + 1)
                finished.append(request.name)
                del self._active[seq]
        return decoded, finished

    def _end(self, request: Request, status: Status, at: int) -> None:
        request.status = status
        request.done_at = at
        self._num_ended += 1
