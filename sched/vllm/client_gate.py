"""Arrivals behind a benchmark client's concurrency limit: ``vllm bench serve --max-concurrency N``.

The client sends request ``i`` at its send time (the workload's arrival) but only once fewer than
``N`` requests are in flight: each request holds a semaphore from its start until its last output
chunk; waiters are served in send order (``asyncio.Semaphore`` is fair). The request's clock (its
TTFT and E2EL, and the time the server sees it arrive) starts when it gets the semaphore:
``start_i = max(send_i, the time a slot freed for it)``, a slot freeing when an earlier request ends
(its last token, or its deadline). :class:`GatedArrivals` gives the engine those start times: a
request is re-stamped with its start as its arrival when it is released (its record's spec, hence
``requests.jsonl``'s ``arrival``, is that start time); without a limit nothing changes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from .queue import Arrivals, Seq

__all__ = ["GatedArrivals"]


class GatedArrivals(Arrivals):
    """:class:`~sched.vllm.queue.Arrivals` with at most ``limit`` requests in flight (module docstring).

    The engine calls :meth:`release` with the time each request ends. Start times never decrease
    (send times and slot times both come in order), so deadlines stay in arrival order.
    """

    def __init__(self, requests, timeout, limit: int, new_table=None, make=None, private_starts=None) -> None:
        if limit < 1:
            raise ValueError(f"max concurrency must be >= 1, got {limit}")
        super().__init__(requests, timeout, new_table, make, private_starts)
        self._slots = deque([0] * limit)   # when each free slot became free (0: from the start)
        self._refresh()

    def _refresh(self) -> None:
        if self._next >= len(self._pending) or not self._slots:
            self.upcoming = None
            return
        send = self._when(self._pending[self._next])
        self.upcoming = send if send >= self._slots[0] else self._slots[0]

    def due(self, t) -> list:
        """The requests whose start time is at or before ``t``, in send order, re-stamped with it."""
        pending, released, when, make = self._pending, [], self._when, self._make
        while self._next < len(pending) and self._slots:
            item = pending[self._next]
            send = when(item)
            start = max(send, self._slots[0])
            if start > t:
                break
            self._slots.popleft()
            pending[self._next] = None   # the queues hold it now
            if make is not None:   # a spec: its record made now, re-stamped below like any record
                item = make(item, self._order[self._next])
            self._next += 1
            if start != send:
                spec = replace(item.spec, arrival=start)
                if isinstance(item, Seq):
                    item.spec = item.rec.spec = spec
                    item.key = (spec.priority or 0, start, item.index)
                else:
                    item.spec = spec   # a record: its Seq, made below, takes the new arrival as its key
            released.append(item)
        if self._new_table is not None:
            released = self._seqs(released)
        self._refresh()
        if self.timeout is not None:
            self._arrived += released
        return released

    def count_due(self, times, base: int = 0) -> list[int]:
        """For each of the ascending ``times``, ``base`` + how many requests :meth:`due` would release
        by then with the slots free now (no request ends inside a decode jump, so none frees one)."""
        slots, at, counts = list(self._slots), self._next, []
        for t in times:
            while at < len(self._pending) and at - self._next < len(slots) and \
                    max(self._when(self._pending[at]), slots[at - self._next]) <= t:
                at += 1
            counts.append(base + at - self._next)
        return counts

    def release(self, at) -> None:
        """A request ended at ``at``: its slot is free from then on."""
        self._slots.append(at)
        self._refresh()
