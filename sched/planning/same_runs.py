"""Settings whose runs are provably another's, so their searches are not run twice.

Two rules, each a proof that two settings give the same run at every request rate, hence the same
search (the search's next rate depends only on the runs before it) and the same ``plan.json``
entry but for the setting's own flags and command. :class:`SharedSearches` groups a plan's
settings by them, searches one per group first and gives the others its result when a rule
holds; the table names the row whose runs a setting shares (``render_table``'s ``same_runs``).

**A ``--max-num-seqs`` never reached.** The engines read ``max_num_seqs`` only as ``n <
max_num_seqs`` (or ``>=``) with ``n`` the running requests, or the open decode runs among them,
at that moment: the admission gate (vllm-engine.md §2 step 4, :mod:`sched.vllm.waiting_side`),
the fast path's and the async decode jumps' tests (:mod:`sched.vllm.fastpath`,
:mod:`sched.vllm.async_jump`) and the invariant check. Every such ``n`` is at most the run's
``peak_num_running`` (:mod:`sched.vllm.load_stats`: the running list after scheduling, largest
over the timeline; the list grows only by admissions, which schedule tokens, so every step that
grows it is logged). So two values both above the peak answer every test alike: the runs are the
same. A search at ``max_num_seqs = M`` whose runs all stayed at or below ``P`` running is the
search at any ``M'`` with ``P < M' <= M`` (by induction over its runs: the same first run at rate
``inf``, so the same next rate, and so on).

**``fcfs`` and ``priority`` with one priority for all.** Let every request have priority ``p``; a
request's key is ``(p, arrival, workload order)``, so keys order requests exactly as
:class:`~sched.vllm.queue.Arrivals` hands them over. Claim, after every change of the queues: (a)
the running list is in ascending key order, (b) every waiting key is above every running key, (c)
the fcfs waiting deque is in ascending key order, the order the priority heap pops. It holds
empty, and:

- an arrival has a key above every request already arrived: it goes to the back of the deque and is
  the largest in the heap (a, b, c kept);
- admission takes the head, the smallest waiting key, above every running key: appended to the
  running list (a) the list stays sorted;
- preemption: fcfs takes the last running request, priority the largest key — the same request by
  (a); it is below every waiting key (b) and above every other running key, so fcfs puts it at the
  front of the deque and the heap pops it first: the same order (c). The victim is the request
  being scheduled only when that request is the last one in the list, where fcfs stops the pass and
  priority's pass has nobody left to go on with; a victim already scheduled in the step (priority's
  extra case) would have to sit before the current request, which (a) rules out;
- an ending (finish, stale finish, timeout) removes a request and keeps every order.

So both policies make the same decision at every step, and give the same records. Two conditions
keep the claim exact: no ``--max-concurrency`` (the client's gate re-stamps arrivals with slot times,
which can put a later send before an earlier one by key), and a run that walks every batch: async
scheduling with prefix caching. The other engines jump over decode-only steps
(:mod:`sched.vllm.fastpath`, :mod:`sched.vllm.async_jump`) and stop a jump at an arrival under
``priority`` only; the requests are the same but the step timeline may be merged differently, and
the mean load columns (:mod:`sched.vllm.load_stats`) read it, so those settings are searched apart.

``tests/test_planning_same_runs.py`` checks both rules on runs that preempt, and that each can fail.
"""

from __future__ import annotations

import copy
from dataclasses import asdict

__all__ = ["uniform_priority", "policies_same_runs", "SharedSearches", "LEGEND"]

#: What the table says of a setting that shares another's runs, by rule (:data:`LEGEND` says why).
REASON_POLICY = "one priority"
REASON_SEQS = "peak {peak} running"
#: The line under a table where a setting shares another's runs.
LEGEND = ("same runs as #N: provably the runs of row N, not searched again: with one priority for all requests "
          "fcfs and priority decide alike; a max-num-seqs above the most requests any of row N's runs had "
          "running at once is never reached")


def uniform_priority(workload) -> bool:
    """Whether every request of ``workload`` (request specs) has the same priority (``None`` as 0)."""
    return len({spec.priority or 0 for spec in workload}) <= 1


def policies_same_runs(workload, knobs, max_concurrency: int | None) -> bool:
    """Whether ``knobs`` under ``fcfs`` and under ``priority`` give identical runs of ``workload`` at
    every request rate (module docstring): one priority for all, no client concurrency limit, async
    scheduling with prefix caching (no deadlines: async scheduling refuses them)."""
    return (max_concurrency is None and knobs.async_scheduling and knobs.enable_prefix_caching
            and knobs.timeout_ticks is None and uniform_priority(workload))


class SharedSearches:
    """Which of a plan's searches to run, and the results of the others (module docstring).

    ``tasks``: ``[(model index, searched, VllmKnobs)]`` (:func:`sched.planning.plan.settle_settings`).
    Settings of one step model that differ only in ``max_num_seqs`` (and in the policy, when
    :func:`policies_same_runs`) form a group, ordered by ``max_num_seqs`` from the largest, ``fcfs``
    first. :meth:`take` gives the next task to search; :meth:`resolve` takes a finished search and
    settles every task of its group whose runs it provably gives. A search's result must carry
    ``peak_num_running`` (the largest over its runs, ``None`` when unknown)."""

    def __init__(self, workload, tasks: list[tuple], max_concurrency: int | None) -> None:
        self.tasks = tasks
        groups: dict[tuple, list[int]] = {}
        for number, (index, _, knobs) in enumerate(tasks):
            fields = asdict(knobs)
            del fields["max_num_seqs"]
            if policies_same_runs(workload, knobs, max_concurrency):
                fields["policy"] = None
            groups.setdefault((index, tuple(sorted(fields.items()))), []).append(number)
        self.groups = [sorted(members, key=lambda n: (-tasks[n][2].max_num_seqs, tasks[n][2].policy != "fcfs", n))
                       for members in groups.values()]
        self._group_of = {n: g for g, members in enumerate(self.groups) for n in members}
        self.results: dict[int, dict] = {}
        #: ``{task: (task searched, reason)}`` for the tasks given another's result.
        self.same_as: dict[int, tuple[int, str]] = {}
        #: Tasks taken and not yet resolved.
        self.in_flight: set[int] = set()
        #: Searches whose result was used (a speculative one settled meanwhile by another is not counted).
        self.num_searches = 0

    def take(self, speculate: bool = False) -> int | None:
        """The next task to search (marked in flight), or ``None``: the group's first unsettled task
        (largest ``max_num_seqs``) of a group with no search in flight, groups in the order of their
        first task. ``speculate``: when there is none, the next unsettled task of a group whose
        search is in flight, with fewer ``max_num_seqs`` than each of those (for a worker that would
        idle; that search may turn out needless, but a task the searches in flight surely settle,
        the other policy of one of them, is never taken)."""
        for busy_too in ((False, True) if speculate else (False,)):
            for members in self.groups:
                flying = [self.tasks[n][2].max_num_seqs for n in members if n in self.in_flight]
                if flying and not busy_too:
                    continue
                for number in members:
                    if number not in self.results and number not in self.in_flight:
                        if flying and self.tasks[number][2].max_num_seqs >= min(flying):
                            continue
                        self.in_flight.add(number)
                        return number
        return None

    def resolve(self, number: int, result: dict) -> None:
        """The search of task ``number`` gave ``result``: keep it (unless the task was settled
        meanwhile: the same result) and give it to every unsettled task of its group that shares its
        runs: the other policy at the same ``max_num_seqs`` (one group only when the policies run
        alike), and any ``max_num_seqs`` from above the search's peak running up to its own."""
        self.in_flight.discard(number)
        if number in self.results:
            return
        self.results[number] = result
        self.num_searches += 1
        for other in self.groups[self._group_of[number]]:
            if other in self.results:
                continue
            why = self._settles(number, other, result)
            if why is None:
                continue
            self.results[other] = copy.deepcopy(result)
            self.same_as[other] = (number, why)
            self.in_flight.discard(other)   # a speculative search of it is not needed any more

    def _settles(self, number: int, other: int, result: dict) -> str | None:
        """Why the search of ``number`` (its ``result``) gives the runs of ``other``, a task of its group;
        ``None`` when no rule says so."""
        seqs, other_seqs = self.tasks[number][2].max_num_seqs, self.tasks[other][2].max_num_seqs
        peak = result.get("peak_num_running")
        reasons = []
        if self.tasks[other][2].policy != self.tasks[number][2].policy:
            reasons.append(REASON_POLICY)
        if other_seqs != seqs:
            if peak is None or not peak < other_seqs <= seqs:
                return None
            reasons.append(REASON_SEQS.format(peak=peak))
        return ", ".join(reasons or ["the same settings"])

    def table_notes(self) -> dict[int, tuple[int, str]]:
        """``{task: (task, why)}`` as a search of each group in turn gives it, whatever the order the
        searches finished in (a speculative search may have ended first): the same table for any
        number of workers. All tasks must be resolved."""
        notes = {}
        for members in self.groups:
            settled: set[int] = set()
            for number in members:
                if number in settled:
                    continue
                settled.add(number)
                for other in members:
                    why = None if other in settled else self._settles(number, other, self.results[number])
                    if why is not None:
                        settled.add(other)
                        notes[other] = (number, why)
        return notes

    @property
    def done(self) -> bool:
        """Whether every task has its result."""
        return len(self.results) == len(self.tasks)

    def ordered_results(self) -> list[dict]:
        """Every task's result in task order (all must be resolved)."""
        return [self.results[number] for number in range(len(self.tasks))]
