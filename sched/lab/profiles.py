"""Engine profiles: named sets of the lab's knobs (lab.md §3; docs/handbook/real-traffic.md §14).

A profile fills every knob the command line leaves unset; an explicit flag always wins.

``lab`` (the default) is lab.md §3: budget 64 units, decode cost 8, max active 4, chunk 32.

``vllm`` reads the knobs the way a vLLM-like engine step works, so that a tick is one engine step
(see ``sched.workload.importers.DEFAULT_TICK_MS`` for its length in milliseconds):

- ``budget`` 2048 tokens per step, like vLLM's ``max_num_batched_tokens``: its documented default
  ``SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048`` (docs.vllm.ai, API reference
  ``vllm.config.scheduler``), also the value of the lab's real run in
  ``data/results/llmservingsim-vllm-rtx4090-llama3.1-8b/meta.json``;
- ``decode_cost`` 1: a decoding sequence schedules one token per step, and a prefill token costs
  one token of the same budget;
- ``max_active`` 256, like ``max_num_seqs``: the value the vLLM 0.19.0 server used in that real run
  (its engine defaults for the API server; the bare ``SchedulerConfig`` class default is 128);
- neither number is "vLLM's default": the vLLM docs say both class defaults (2048, 128) are mainly
  for convenience in testing and that real usage sets them in ``EngineArgs.create_engine_config``
  from how the engine is launched; 2048 and 256 are the values the lab's real run used;
- chunked prefill on: a prompt larger than what is left of the budget is split over steps, as the
  lab's engine always does; ``chunk_tokens`` 512 caps one request's chunk per step in the chunked
  case, the role of vLLM's ``long_prefill_token_threshold`` (off by default in vLLM; 512 is the
  lab's choice, one Mooncake block).
"""

from __future__ import annotations

__all__ = ["PROFILES", "KNOBS", "profile_knobs"]

#: The knobs a profile sets, in flag order.
KNOBS = ("budget", "decode_cost", "max_active", "chunk_tokens")

#: Profile name -> knob values (budget units, units per decode token, requests, tokens).
PROFILES = {
    "lab": {"budget": 64, "decode_cost": 8, "max_active": 4, "chunk_tokens": 32},
    "vllm": {"budget": 2048, "decode_cost": 1, "max_active": 256, "chunk_tokens": 512},
}


def profile_knobs(name: str, **overrides) -> dict:
    """The knobs of profile ``name`` with every non-None override applied (KeyError if unknown)."""
    knobs = dict(PROFILES[name])
    knobs.update({k: v for k, v in overrides.items() if v is not None})
    return knobs
