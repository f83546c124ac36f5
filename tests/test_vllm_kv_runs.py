"""The prefix-caching pool's runs of private blocks (sched/vllm/kv_cache.py) against the literal pool
(every block a block object, interned from its tokens; vllm-engine.md §3 as worded), operation by
operation on random sequences of admissions, steps, preemptions and endings.

The engine-level differential test (tests/test_vllm_differential.py) rarely reaches the pool's
rare paths: a preempted request whose hit leaves blocks of its run cached (its last block, when it
was allocated up to a block boundary in the step that preempted it, and nothing evicted it before
it came back), after which its private blocks have two cached copies. Here the operations are
drawn freely, so they are reached often (deadlines too, while running and while waiting after a
preemption); the test checks that they were.

Compared after every operation: each waiting request's hit length and the blocks its admission
would take, and the free block count. ``ISL_FULL=1`` runs 2,000 sequences instead of 300.

A request that ends after its blocks were freed (a deadline; with async scheduling its last token
arriving after a preemption) is forgotten by the pool: its run is nobody's (taken as blank blocks
when oldest) and no reference to it is kept (hand-computed counts, and engine runs against the
literal engine).
"""

import os
import random
import unittest
from collections import Counter
from unittest import mock

from sched.vllm import engine as vllm_engine
from sched.vllm.async_step import make_simulation
from sched.vllm.config import VllmKnobs
from sched.vllm.kv_cache import LiteralPrefixKV, PrefixCachingKV
from sched.workload.specs import RequestSpec
from tests.test_vllm_differential import request_rows

SEQUENCES = 2000 if os.environ.get("ISL_FULL") == "1" else 300


class _Seq:
    """A stand-in request: what the pool reads and writes."""

    def __init__(self, spec: RequestSpec, kv) -> None:
        self.spec, self.prompt, self.output = spec, spec.prompt_tokens, spec.output_tokens
        self.num_tokens, self.computed, self.generated = spec.prompt_tokens, 0, 0
        self.blocks, self.num_cached, self.hashes, self.first_private = kv.new_table(), 0, [], None
        self.state = "waiting"
        self.rec_preempted = False


def _specs(rng: random.Random) -> list[RequestSpec]:
    specs = []
    for i in range(rng.randint(2, 8)):
        kind = rng.choice(["own", "key", "key+own", "blocks"])
        output = rng.randint(1, 12)
        if kind == "blocks":   # workload block chains: shared, then (for some) nobody else's
            chain = rng.choice([(1,), (1, 2), (1, 2, 3), (1, 4), (5,)])
            specs.append(RequestSpec(f"r{i}", 0, None, 0, len(chain) * 4 - rng.choice([0, 1, 3]), output,
                                     prefix_blocks=chain, block_size=4))
        elif kind == "own":
            specs.append(RequestSpec(f"r{i}", 0, None, 0, rng.randint(1, 14), output))
        else:
            specs.append(RequestSpec(f"r{i}", 0, rng.choice("AB"), rng.choice([2, 5, 8]),
                                     0 if kind == "key" else rng.randint(1, 10), output))
    return specs


def _observe(kv, seqs) -> tuple:
    waiting = [(len(kv.find_hit(s)), kv.blocks_to_allocate(s, s.num_tokens, kv.find_hit(s)))
               for s in seqs if s.state == "waiting"]
    return kv.num_free, waiting


def _play(seed: int, counts) -> None:
    rng = random.Random(seed)
    specs = _specs(rng)
    size = rng.choice([1, 1, 2, 3, 4])
    need = max(-(-(s.prompt_tokens + s.output_tokens) // size) for s in specs)
    capacity = need + rng.choice([0, 1, 3, 8, 20])
    fast, literal = PrefixCachingKV(capacity + 1, size), LiteralPrefixKV(capacity + 1, size)
    fast.note_prompts(specs)
    literal.note_prompts(specs)
    pools = [(fast, [_Seq(spec, fast) for spec in specs]), (literal, [_Seq(spec, literal) for spec in specs])]
    for _ in range(rng.randint(10, 80)):
        pick = rng.randrange(len(specs))
        action = rng.random()
        results = []
        for kv, seqs in pools:
            seq = seqs[pick]
            if seq.state == "waiting" and action > 0.95 and seq.rec_preempted:   # its deadline, after a preemption
                kv.forget(seq)
                seq.state = "ended"
                seq.hashes = []
                results.append("expired")
            elif seq.state == "waiting":
                hit = kv.find_hit(seq)
                if kv.blocks_to_allocate(seq, seq.num_tokens, hit) > kv.num_free:
                    results.append("blocked")
                    continue
                computed = len(hit) * size
                chunk = max(1, int((seq.num_tokens - computed) * action)) if action < 0.5 else seq.num_tokens - computed
                kv.allocate(seq, computed + chunk, hit)
                seq.computed, seq.state = computed, "running"
                results.append(("admitted", len(hit)))
                _advance(seq, computed + chunk)
            elif seq.state == "running":
                if 0.15 <= action < 0.18:   # its deadline while running: freed as a preemption frees
                    kv.free(seq)
                    kv.forget(seq)
                    seq.state = "ended"
                    seq.hashes = []
                    results.append("expired")
                    continue
                if action < 0.15:   # preempted (sometimes right after its blocks for a step were taken)
                    if action < 0.08 and seq.computed < seq.num_tokens:
                        target = seq.num_tokens
                        if kv.blocks_to_allocate(seq, target) <= kv.num_free:
                            kv.allocate(seq, target)
                    kv.free(seq)
                    seq.computed, seq.state, seq.rec_preempted = 0, "waiting", True
                    results.append("preempted")
                    continue
                target = min(seq.num_tokens, seq.computed + random.Random(action).randint(1, 6))
                if kv.blocks_to_allocate(seq, target) > kv.num_free:
                    results.append("no room")
                    continue
                kv.allocate(seq, target)
                results.append("step")
                _advance(seq, target)
            else:
                results.append(seq.state)
            if seq.state == "running" and seq.generated >= seq.output:
                kv.free(seq)
                seq.state = "ended"
                seq.hashes = []
        if len(results) == 2:
            assert results[0] == results[1], (seed, results)
        assert _observe(fast, pools[0][1]) == _observe(literal, pools[1][1]), seed
    counts["sequences"] += 1


def _advance(seq, target: int) -> None:
    seq.computed = target
    if seq.computed == seq.num_tokens:
        seq.generated += 1
        seq.num_tokens += 1


class PrivateRunsTest(unittest.TestCase):

    def test_the_pool_with_runs_equals_the_literal_pool(self):
        counts = {"sequences": 0, "_regroup": 0, "_materialize": 0, "_ungroup": 0, "forget": 0}
        originals = {name: getattr(PrefixCachingKV, name) for name in ("_regroup", "_materialize", "_ungroup", "forget")}

        def counting(name):
            def method(self, *args):
                counts[name] += 1
                return originals[name](self, *args)
            return method

        with mock.patch.multiple(PrefixCachingKV, **{name: counting(name) for name in originals}):
            for seed in range(SEQUENCES):
                with self.subTest(seed=seed):
                    _play(seed, counts)
        # The rare paths were taken (module docstring).
        self.assertGreater(counts["_regroup"], 0)
        self.assertGreater(counts["_materialize"], 0)
        self.assertGreater(counts["_ungroup"], 0)
        self.assertGreater(counts["forget"], 0)

    def test_a_finished_requests_private_blocks_behind_a_run_are_one_run(self):
        """Hand computation, 20 usable blocks of 4 tokens, own prompts. q (10 private blocks) ends
        with nothing cached in the free queue: its blocks join the blank ones (nobody can hit them,
        nothing cached is older): 20 free, no queue entry. p (3 blocks) is preempted: its run is one
        entry; r (5 blocks) ends behind it: one more entry, a run of 5. A 64-token prompt takes 16
        blocks: the 12 blank ones, then p's 3 (oldest first) and 1 of r's run; the 4 left of r's
        run, at the oldest end now, are taken as blank blocks by the next 4 taken."""
        kv = PrefixCachingKV(21, 4)
        specs = [RequestSpec(name, 0, None, 0, tokens, 1) for name, tokens in
                 (("q", 40), ("p", 12), ("r", 20), ("s", 64), ("u", 16))]
        kv.note_prompts(specs)
        q, p, r, s, u = (_Seq(spec, kv) for spec in specs)
        kv.allocate(q, 40)
        self.assertEqual((kv.num_free, q.num_cached, kv.held(q)), (10, 10, 10))
        self.assertEqual(kv._cached, {})          # nothing entered in the cache index
        q.generated = 1
        kv.free(q)
        self.assertEqual((kv.num_free, kv._blank, len(kv._back)), (20, 20, 0))
        kv.allocate(p, 12)
        kv.allocate(r, 20)
        kv.free(p)                                # preempted: no token sampled
        r.generated = 1
        kv.free(r)
        self.assertEqual((kv.num_free, kv._blank, [run.count for run in kv._back.values()]), (20, 12, [3, 5]))
        kv.allocate(s, 64)
        self.assertEqual((kv.num_free, kv._blank, [run.count for run in kv._back.values()]), (4, 0, [4]))
        self.assertEqual(kv.find_hit(p), [])      # p's run evicted
        kv.allocate(u, 16)
        self.assertEqual((kv.num_free, kv._blank, len(kv._back)), (0, 0, 0))

    def test_the_blocks_of_ended_requests_join_the_blank_ones(self):
        """Hand computation, 40 usable blocks of 4 tokens, own prompts: a and b (10 blocks each)
        end one after the other with nothing cached in the free queue: their blocks join the blank
        ones (nobody can hit them); c (5 blocks) is preempted: its run is the one queue entry. A
        140-token prompt (35 blocks) takes the 15 blank blocks and the 20 of a and b, and leaves
        c's run: c hits floor(19 / 4) = 4 blocks when it comes back. The literal pool (one run
        for a and b, one for c) gives the same counts."""
        specs = [RequestSpec(name, 0, None, 0, tokens, 1) for name, tokens in
                 (("a", 40), ("b", 40), ("c", 20), ("e", 140))]
        observed = []
        for kv in (PrefixCachingKV(41, 4), LiteralPrefixKV(41, 4)):
            kv.note_prompts(specs)
            a, b, c, e = (_Seq(spec, kv) for spec in specs)
            for seq in (a, b):
                kv.allocate(seq, 40)
            for seq in (a, b):   # both sampled their only token: ended
                seq.generated = 1
                kv.free(seq)
            kv.allocate(c, 20)
            kv.free(c)           # preempted: no token sampled
            entries = len(kv._back)
            kv.allocate(e, 140)
            observed.append((entries, kv.num_free, len(kv.find_hit(c))))
        self.assertEqual(observed[0], (1, 5, 4))         # c's run
        self.assertEqual(observed[1][0], 25)             # the literal pool: one entry a block (20 + 5)
        self.assertEqual(observed[0][1:], observed[1][1:])

    def test_the_run_of_a_request_ended_by_its_deadline_is_nobodys(self):
        """Hand computation, 20 usable blocks of 4 tokens, own prompts (5 output tokens each). q
        holds 10 blocks, p 3 (12 tokens: 3 full private blocks, cached); p reaches its deadline
        while running: freed as a preemption frees (no token sampled), its run is one queue entry
        and the pool remembers p (its own run, for a hit when it comes back): 10 free, 7 blank. p
        has ended (forget): the pool holds p no longer. r takes the 7 blank blocks; s (8 tokens)
        takes 2 more: from p's run, which nobody can hit, so it is taken as blank blocks: 1 free,
        1 blank, nothing cached in the queue (kept as a run that only shrank, it would stay a
        queue entry of 1). The literal pool gives the same free counts."""
        specs = [RequestSpec(name, 0, None, 0, tokens, 5) for name, tokens in
                 (("q", 40), ("p", 12), ("r", 28), ("s", 8))]
        free_counts = []
        for kv in (PrefixCachingKV(21, 4), LiteralPrefixKV(21, 4)):
            kv.note_prompts(specs)
            q, p, r, s = (_Seq(spec, kv) for spec in specs)
            kv.allocate(q, 40)
            kv.allocate(p, 12)
            kv.free(p)
            counts = [kv.num_free]
            if type(kv) is PrefixCachingKV:
                self.assertEqual((kv._blank, len(kv._back), list(kv._own)), (7, 1, [p]))
            kv.forget(p)
            kv.allocate(r, 28)
            kv.allocate(s, 8)
            counts.append(kv.num_free)
            free_counts.append(counts)
            if type(kv) is PrefixCachingKV:
                self.assertEqual((kv._own, kv._blank, len(kv._back)), ({}, 1, 0))
        self.assertEqual(free_counts, [[10, 1], [10, 1]])


class EndedRequestsTest(unittest.TestCase):
    """An engine run leaves no ended request in the pool: requests ended by their deadline while
    running or waiting after a preemption, and (async scheduling) requests whose last token came in
    after they were preempted; the records are the literal engine's (every fast path off)."""

    def run_both(self, workload, knobs):
        forgotten = Counter()
        forget = PrefixCachingKV.forget

        def counting(kv, seq):
            forgotten[seq.state, seq in kv._own] += 1
            forget(kv, seq)

        with mock.patch.object(PrefixCachingKV, "forget", counting):
            sim = make_simulation(workload, knobs, timeline="full")
            fast = sim.run()
        with mock.patch.object(vllm_engine, "FAST_PATHS", False):
            literal = make_simulation(workload, knobs, timeline="full").run()
        self.assertEqual(request_rows(fast), request_rows(literal))
        self.assertEqual(fast.ticks, literal.ticks)
        self.assertEqual((sim.kv._own, sim.kv._copied), ({}, set()))
        return forgotten

    def test_deadlines(self):
        rng = random.Random(1)
        workload = [RequestSpec(f"r{i}", i // 2, None, 0, rng.randint(5, 30), rng.randint(5, 40)) for i in range(16)]
        forgotten = self.run_both(workload, VllmKnobs(64, 8, 0, True, 4, 20, "fcfs", 100))
        # Both kinds of deadline met a request the pool remembered (the scenario reaches them).
        self.assertGreater(forgotten["running", True], 0)
        self.assertGreater(forgotten["waiting", True], 0)

    def test_last_token_after_a_preemption(self):
        rng = random.Random(1)
        workload = [RequestSpec(f"r{i}", i // 3, None, 0, rng.randint(5, 30), rng.randint(5, 40)) for i in range(40)]
        forgotten = self.run_both(workload, VllmKnobs(64, 8, 0, True, 4, 30, "fcfs", async_scheduling=True))
        self.assertGreater(forgotten["ended", True], 0)


if __name__ == "__main__":
    unittest.main()
