"""The output side of vLLM's async scheduling (vllm-engine.md §7, *outputs one batch late*).

Under ``--async-scheduling`` a batch's sampled tokens are known only when the engine loop takes the
oldest queued batch and processes its output (vLLM's ``update_from_output``), after the next batch
has been scheduled. :class:`AsyncOutputs` holds that side: turning a batch's placeholders (or stale
placeholders of a request preempted meanwhile) into tokens stamped at the batch's end, caching the
blocks they complete, finishing and freeing the requests that reached their output length, and
logging each processed batch as one step (an empty batch that only preempted waits to merge into a
batch of the same step, since vLLM logs one step per tick).

:class:`AsyncOutputs` holds no state of its own: :class:`sched.vllm.async_step.AsyncVllmSimulation`
inherits it, and every attribute it reads (``kv``, ``running``, ``waiting``, ``open_runs``, ``log``,
``_held``, ``_reported_finish``) is the simulation's. A batch is a :class:`sched.vllm.async_step.Batch`.
"""

from __future__ import annotations

from ..core.records import SimulationError, Status

__all__ = ["AsyncOutputs"]


class AsyncOutputs:
    """Processing and logging the output of one async simulation's batches, one batch late."""

    def process(self, batch) -> bool:
        """The batch's output (vLLM's ``update_from_output``): its sampled tokens, stamped at its
        end, the blocks they complete cached, finished requests freed. Returns whether any token
        arrived."""
        if not batch.samplers:   # only open runs (their tokens are the runs'), or nobody sampled
            self._log(batch, [])
            return bool(batch.num_open)
        kv, finished = self.kv, []
        stamp, caching, bs = batch.step + 1, kv.caching, kv.block_size
        for seq in batch.samplers:
            running = seq.state == "running"
            if running:
                seq.placeholders -= 1
            else:                       # preempted while this batch was in flight: a stale token
                seq.stale -= 1
            seq.generated += 1
            seq.num_tokens += 1
            # seq.rec.emit(stamp), inlined (Request._append_run of one token): once per token
            runs = seq.rec._runs
            if runs and runs[-2] + runs[-1] == stamp:
                runs[-1] += 1
            else:
                runs += (stamp, 1)
            seq.rec._num_closed += 1
            if running and caching and (seq.computed - seq.placeholders) // bs > seq.num_cached:
                kv.cache_full(seq, seq.computed - seq.placeholders)
            if seq.generated == seq.output:
                finished.append(seq)
        if batch.merged and len(finished) > 1:   # runs closed into it: free in running order
            # (a request preempted since, its last token stale, is freed by no one: any place will do)
            order = {seq: i for i, seq in enumerate(self.running)}
            finished.sort(key=lambda seq: order.get(seq, -1))
        others = None if self.open_runs is None else self.open_runs.others
        for seq in finished:
            if others is not None:
                others.pop(seq, None)
            if seq.state == "running":
                kv.free(seq)
                del self.running[seq]
                seq.state = "ended"
            else:                       # its last token came in after it was preempted
                seq.state = "ended"
                self.waiting.discard(seq)
                kv.forget(seq)          # the run its preemption left is nobody's now
            self.end(seq, Status.DONE, batch.end)
            self._reported_finish = True
        self._log(batch, finished)
        return bool(batch.samplers or batch.num_open)

    def _log(self, batch, finished: list) -> None:
        """Log a processed batch that scheduled or preempted anyone. An empty batch that only
        preempted waits for a batch of the same step to merge into (vLLM logs one step per tick)."""
        held = self._held
        if held is not None and (held.step != batch.step or not (batch.scheduled or batch.num_open or batch.preempted)):
            self._held = None
            self._add(held, [])
        elif held is not None:
            if held.start != batch.start:   # an empty batch always waits for the GPU the next one runs on
                raise SimulationError(f"vllm async: step {batch.step} starts at {held.start} and at {batch.start}")
            self._held = None
            batch.preempted = held.preempted + batch.preempted
        if batch.end is None and batch.preempted and not finished:
            self._held = batch
        elif batch.scheduled or batch.num_open or batch.preempted or finished:
            self._add(batch, finished)

    def _add(self, batch, finished: list) -> None:
        """Add ``batch`` to the run's step log, with the requests it ``finished``."""
        duration = 0 if batch.end is None else batch.end - batch.start
        self.log.add_step(batch.step, batch.start, duration, batch.scheduled, batch.num_prompt, batch.num_decode,
                          batch.preempted, batch.admitted, batch.hits, finished, [], batch.kv_used,
                          batch.num_running, batch.num_waiting)

    def _log_left(self, batches) -> None:
        """At the end of the run: log the batches still queued (scheduled after the last finish,
        oldest last in ``batches``, emptied) and an empty batch still held."""
        while batches:
            self._log(batches.pop(), [])
        if self._held is not None:
            self._add(self._held, [])
            self._held = None
