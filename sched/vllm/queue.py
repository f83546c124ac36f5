"""Requests as vLLM's scheduler sees them, and its waiting queue (vllm-engine.md §2 steps 1, 3, 4).

A :class:`Seq` carries one request's token counts (prompt, sampled, computed) and its block table;
its shared record (:class:`sched.core.records.Request`) gets the stamps. The :class:`WaitingQueue` is
``fcfs`` (arrival order; a preempted request goes back to the **front**) or ``priority`` (a heap
on ``(priority, arrival, workload order)``, lower first; a preempted request goes back **by its
key**, as vLLM's priority queue does). Requests that time out while queued are dropped lazily.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections import deque
from itertools import islice, repeat
from operator import attrgetter, le

from ..core.records import Request

__all__ = ["Seq", "WaitingQueue", "Arrivals", "running_order"]

_ARRIVAL, _SPEC_ARRIVAL = attrgetter("arrival"), attrgetter("spec.arrival")


class Seq:
    """The scheduler's view of one request (vLLM's ``Request``).

    ``num_tokens`` = prompt + output tokens sampled so far; ``computed`` = tokens whose KV is
    computed (or being computed this step); ``blocks``: the block table (a count, or a list of
    blocks with prefix caching); ``state``: future, waiting, running or ended. While ``open_from``
    is set the request decodes one token per step from that step on and its counts are those of
    that step (:class:`sched.vllm.fastpath.DecodeRuns` brings them up to date). With async
    scheduling (:mod:`sched.vllm.async_step`) ``placeholders`` counts output tokens scheduled to be
    sampled but not yet known, and ``stale`` those still in flight when the request was preempted;
    both stay 0 otherwise. With prefix caching ``hashes`` and ``num_cached`` are the pool's
    (:mod:`sched.vllm.block_hashes`), and ``first_private`` the index of its first private block
    (``None`` until known: given when the request arrives, or found when the pool first asks).
    """

    __slots__ = ("rec", "spec", "index", "key", "prompt", "output", "num_tokens", "computed", "generated",
                 "blocks", "num_cached", "hashes", "first_private", "state", "open_from", "placeholders", "stale")

    def __init__(self, rec: Request, table, first_private=None) -> None:
        spec = rec.spec
        self.rec, self.spec, self.index = rec, spec, rec.index
        self.key = (spec.priority or 0, spec.arrival, rec.index)   # vLLM: (priority, arrival_time)
        self.prompt, self.output = spec.prompt_tokens, spec.output_tokens
        self.num_tokens = self.prompt
        self.computed = 0
        self.generated = 0
        self.blocks = table
        self.num_cached = 0
        # The prefix-caching pool's (its tables start as lists); never read without it, so no list.
        self.hashes: list[int] | tuple = [] if type(table) is list else ()
        self.first_private = first_private   # prefix caching: its first private block, once known
        self.state = "future"
        self.open_from = None
        self.placeholders = 0
        self.stale = 0


def running_order(seqs, running) -> list:
    """``seqs`` (requests of the running list ``running``, a dict used as an ordered set) sorted
    into the running list's order, in which vLLM frees the requests finishing in a step (the free
    queue's order). A few are placed by a scan of the list each (in C), many through a map of every
    place."""
    if len(seqs) <= 16:
        return sorted(seqs, key=list(running).index)
    order = {seq: i for i, seq in enumerate(running)}
    return sorted(seqs, key=order.__getitem__)


class WaitingQueue:
    """vLLM's waiting queue under ``fcfs`` or ``priority``; ``size`` counts the live requests."""

    def __init__(self, priority: bool) -> None:
        self.priority = priority
        self._items: deque | list = [] if priority else deque()
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def push(self, seq: Seq) -> None:
        """An arrival: at the back (fcfs) or in its place by key (priority)."""
        if self.priority:
            heapq.heappush(self._items, (seq.key, seq))
        else:
            self._items.append(seq)
        self.size += 1

    def push_preempted(self, seq: Seq) -> None:
        """A preempted request: at the front (fcfs) or in its place by key (priority)."""
        if self.priority:
            heapq.heappush(self._items, (seq.key, seq))
        else:
            self._items.appendleft(seq)
        self.size += 1

    def peek(self) -> Seq:
        """The head (the queue must not be empty)."""
        items = self._items
        if self.priority:
            while items[0][1].state != "waiting":
                heapq.heappop(items)
            return items[0][1]
        while items[0].state != "waiting":
            items.popleft()
        return items[0]

    def pop(self) -> Seq:
        """Remove and return the head."""
        head = self.peek()
        if self.priority:
            heapq.heappop(self._items)
        else:
            self._items.popleft()
        self.size -= 1
        return head

    def discard(self, seq: Seq) -> None:
        """Forget a queued request that has just ended (its state is no longer ``waiting``)."""
        self.size -= 1


class Arrivals:
    """Requests in arrival order (ties by workload order) and, once arrived, their deadlines
    (``arrival + timeout``: one timeout for all, so deadlines fall in arrival order).

    ``requests``: the records (:class:`sched.core.records.Request`) or ready :class:`Seq` objects;
    with ``new_table`` (the pool's empty block table) each record becomes its :class:`Seq` when it
    arrives, so a long trace holds a Seq only for the requests that have arrived and not ended.
    With ``make`` (``make(spec, index) -> record``, and ``new_table``) ``requests`` is the workload
    itself (specs in workload order) and each record is made too only when its request arrives:
    memory follows what is running or waiting, not the whole workload. ``private_starts`` (name ->
    index of the request's first private block, the prefix-caching pool's
    :attr:`~sched.vllm.block_hashes.BlockHashes.private_starts`) gives each Seq its ``first_private``."""

    def __init__(self, requests, timeout, new_table=None, make=None, private_starts=None) -> None:
        self._new_table = new_table
        self._starts = private_starts
        self._make = make
        if make is None:
            self._pending = sorted(requests, key=lambda s: (s.spec.arrival, s.index))
            self._order = None
            self._when = _SPEC_ARRIVAL
        else:   # the specs in arrival order, and their indices in the workload
            arrivals = list(map(_ARRIVAL, requests))
            if all(map(le, arrivals, islice(arrivals, 1, None))):
                self._pending, self._order = list(requests), range(len(requests))
            else:
                order = sorted(range(len(requests)), key=arrivals.__getitem__)   # stable: ties in workload order
                self._pending, self._order = list(map(requests.__getitem__, order)), array("q", order)
            del arrivals
            self._when = _ARRIVAL
        self._next = 0
        self._arrived: list[Seq] = []
        self._cursor = 0
        self.timeout = timeout
        #: The next arrival time, or ``None`` when every request has arrived.
        self.upcoming = self._when(self._pending[0]) if self._pending else None

    def due(self, t) -> list[Seq]:
        """The requests arriving at or before ``t`` not yet returned, in arrival order."""
        start = self._next
        pending, when = self._pending, self._when
        while self._next < len(pending) and when(pending[self._next]) <= t:
            self._next += 1
        self.upcoming = when(pending[self._next]) if self._next < len(pending) else None
        arrived = pending[start:self._next]
        pending[start:self._next] = repeat(None, len(arrived))   # the queues hold them now
        if self._make is not None:
            arrived = list(map(self._make, arrived, self._order[start:self._next]))
        if self._new_table is not None:
            arrived = self._seqs(arrived)
        if self.timeout is not None:
            self._arrived += arrived
        return arrived

    def _seqs(self, records) -> list[Seq]:
        """The arriving ``records`` as :class:`Seq` objects, each with an empty block table."""
        new_table, starts = self._new_table, self._starts
        if starts:
            return [Seq(rec, new_table(), starts.get(rec.spec.name)) for rec in records]
        return [Seq(rec, new_table()) for rec in records]

    def count_due(self, times, base: int = 0) -> list[int]:
        """For each of the ascending ``times`` (a list or a range), ``base`` + how many requests not
        yet returned by :meth:`due` arrive at or before it (nothing is returned). Costs one binary
        search per such arrival, the list built in runs of equal counts."""
        pending, at, size, when = self._pending, self._next, len(times), self._when
        if not size:
            return []
        last, end = times[-1], len(pending)
        counts, done = [], 0
        while at < end and (arrival := when(pending[at])) <= last:
            first = bisect_left(times, arrival, done)   # the first time at or after the arrival
            if first > done:
                counts += [base] * (first - done)
                done = first
            base += 1
            at += 1
        counts += [base] * (size - done)
        return counts

    def next_deadline(self):
        """The earliest deadline not yet passed to :meth:`expired` (``None`` without a timeout)."""
        if self.timeout is None or self._cursor >= len(self._arrived):
            return None
        return self._arrived[self._cursor].spec.arrival + self.timeout

    def expired(self, t) -> list[Seq]:
        """The arrived requests whose deadline is at or before ``t``, each returned once."""
        start = self._cursor
        while self._cursor < len(self._arrived) and self._arrived[self._cursor].spec.arrival + self.timeout <= t:
            self._cursor += 1
        expired = self._arrived[start:self._cursor]
        self._arrived[start:self._cursor] = repeat(None, len(expired))   # past their deadline: let go
        return expired

    def deadline_due(self, now) -> bool:
        """Whether a deadline not yet passed to :meth:`expired` falls at or before ``now``."""
        deadline = self.next_deadline()
        return deadline is not None and deadline <= now

    def jump_limit(self, priority: bool, waiting_blocked: bool):
        """The earliest time a decode-only jump must stop before: the next arrival when it can
        matter (it could be admitted at once — ``waiting_blocked`` false — or, under ``priority``
        or with deadlines, change the queue's order or deadlines) and the next deadline."""
        until = self.upcoming
        if until is not None and not (priority or self.timeout is not None or not waiting_blocked):
            until = None
        deadline = self.next_deadline()
        if deadline is not None:
            until = deadline if until is None else min(until, deadline)
        return until
