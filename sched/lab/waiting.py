"""The waiting side of a lab-engine case (lab.md §3, steps 1–3 of a tick): arrivals joining the
waiting queue, deadlines ending requests, admission into free slots in policy order.

:class:`WaitingSide` is a part of :class:`sched.lab.engine.Simulation` (its methods run on the one
simulation instance, whose ``__init__`` makes the state they use: ``_arrivals``,
``_arrival_ticks``, ``_next_arrival``, ``_arrived``, ``_deadline_cursor``, ``_waiting`` (a heap by
policy key, lazily pruned), ``_num_waiting``, the active list's dicts and the prefix cache). The
state stays on the instance so that :mod:`sched.lab.steady` and the tick's hot loop read it
directly.
"""

from __future__ import annotations

import heapq

from ..core.config import Batching
from ..core.records import Status

__all__ = ["WaitingSide"]

_WAITING, _PREFILL = Status.WAITING, Status.PREFILL


class WaitingSide:
    """Arrivals, deadlines and admission of one simulation (see the module docstring)."""

    __slots__ = ()

    def _arrive(self, t: int) -> None:
        """Step 1 of tick ``t``: every request with arrival <= t joins the waiting queue."""
        next_arrival, arrival_ticks = self._next_arrival, self._arrival_ticks
        arrivals, waiting, key, arrived = self._arrivals, self._waiting, self._key, self._arrived
        decode_cost = self.config.decode_cost
        while next_arrival < len(arrival_ticks) and arrival_ticks[next_arrival] <= t:
            request = arrivals[next_arrival]
            next_arrival += 1
            arrived.append(request)
            heapq.heappush(waiting, (key(request.spec, request.index, decode_cost), request))
            self._num_waiting += 1
        self._next_arrival = next_arrival

    def _waiting_names(self) -> list[str]:
        return [r.name for _, r in sorted(self._waiting, key=lambda item: item[0]) if r.status is Status.WAITING]
    def _expire(self, t: int) -> list[str]:
        """Step 2 of tick ``t``: every unended request whose deadline (arrival + ``timeout_ticks``) is
        at or before ``t`` ends as a timeout at its deadline, freeing its slot before admission;
        returns their names in arrival order."""
        timeout = self.config.timeout_ticks
        if timeout is None:
            return []
        expired = []
        while self._deadline_cursor < len(self._arrived):
            request = self._arrived[self._deadline_cursor]
            if request.spec.arrival + timeout > t:
                break
            self._deadline_cursor += 1
            if request.status.ended:
                continue
            # Ends at its deadline with what it already emitted (last stamp <= t); nothing is
            # invented for it.
            if request.status is Status.WAITING:
                self._num_waiting -= 1
            else:
                seq = request._seq
                request._close_run(t)
                del self._active[seq]
                self._prefilling.pop(seq, None)
                self._stalled.pop(seq, None)
            self._end(request, Status.TIMEOUT, request.spec.arrival + timeout)
            expired.append(request.name)
        return expired

    def _admit(self, t: int) -> tuple[list[str], list[str]]:
        """Admit waiting requests in policy order while slots are free; returns the names
        admitted and those among them that hit the prefix cache."""
        active = self._active
        if not self._num_waiting or (self.case.batching is Batching.STATIC and active):
            return [], []  # static: a new batch only once the whole previous batch ended
        admitted, hits = [], []
        waiting, prefilling = self._waiting, self._prefilling
        room = self.config.max_active - len(active)
        cache = self._cache if self.case.apc else None
        seq = self._num_admitted
        while waiting and room > 0:
            request = heapq.heappop(waiting)[1]
            if request.status is not _WAITING:
                continue  # timed out while queued
            request.status = _PREFILL
            request.admitted_at = t
            name = request.spec.name
            if cache is not None:
                request.hit_tokens = cache.hit_tokens(request.spec)
                if request.hit_tokens:
                    hits.append(name)
            request._seq = seq
            active[seq] = request
            prefilling[seq] = request
            admitted.append(name)
            seq += 1
            room -= 1
        self._num_waiting -= len(admitted)
        self._num_admitted = seq
        return admitted, hits
