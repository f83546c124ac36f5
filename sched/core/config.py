"""Engine knobs and the four configurations of one run (lab.md §3, §4)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["Batching", "Case", "ConfigError", "EngineConfig", "MAX_KNOB", "cases_for"]

#: Largest value of any knob: beyond it a value is a typo, not a configuration.
MAX_KNOB = 10**9


class ConfigError(ValueError):
    """A configuration under which the lab cannot run; the message names the knob. ``problems``
    lists every problem found, one line each (the message is the first)."""

    def __init__(self, message: str, *, problems: list[str] | None = None):
        self.problems = problems or [message]
        super().__init__(message)


class Batching(Enum):
    """How requests are admitted (lab.md §3 step 3)."""

    STATIC = "static"          # admit a whole new batch only when the previous batch ended
    CONTINUOUS = "continuous"  # admit whenever a slot is free


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The model's knobs (lab.md §3), shared by the four cases of one run.

    budget: budget units per tick; decode_cost: units per decode token (a prefill token costs 1);
    max_active: batch cap (requests in PREFILL or DECODE); chunk_tokens: per-request prefill cap
    per tick for the chunked case; timeout_ticks: deadline after arrival in ticks, or None.
    Raises :class:`ConfigError` for a knob outside ``1..MAX_KNOB`` and for a budget below the decode
    cost, the one combination under which a run could never finish.
    """

    ENGINE = "lab"   # the engine these knobs drive (sched.core.clock.RunClock.engine); not a field
    budget: int = 64
    decode_cost: int = 8
    max_active: int = 4
    chunk_tokens: int = 32
    timeout_ticks: int | None = None

    def __post_init__(self) -> None:
        for knob in ("budget", "decode_cost", "max_active", "chunk_tokens", "timeout_ticks"):
            value = getattr(self, knob)
            if value is None and knob == "timeout_ticks":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_KNOB:
                raise ConfigError(f"--{knob.replace('_', '-')} must be an integer from 1 to {MAX_KNOB}, "
                                  f"got {value!r}")
        # The only way this model can fail to finish (proof in the README, "输入校验与退出码"): with
        # budget >= decode_cost every walked tick admits, decodes or prefills, or times a request out.
        if self.budget < self.decode_cost:
            raise ConfigError(f"--budget ({self.budget}) is below --decode-cost ({self.decode_cost}): "
                              "no request could ever decode a token")


@dataclass(frozen=True, slots=True)
class Case:
    """One configuration of a run (lab.md §4).

    batching: static or continuous; apc: automatic prefix caching on/off; chunk_tokens: the
    per-request prefill cap in tokens per tick, or None for no cap.
    """

    name: str
    batching: Batching
    apc: bool
    chunk_tokens: int | None


def cases_for(config: EngineConfig) -> tuple[Case, ...]:
    """The four cases every run simulates, in table order (lab.md §4).

    The chunked case is named after its cap: ``continuous+APC+chunk32`` with the default 32.
    """
    return (
        Case("static", Batching.STATIC, apc=False, chunk_tokens=None),
        Case("continuous", Batching.CONTINUOUS, apc=False, chunk_tokens=None),
        Case("continuous+APC", Batching.CONTINUOUS, apc=True, chunk_tokens=None),
        Case(f"continuous+APC+chunk{config.chunk_tokens}", Batching.CONTINUOUS, apc=True,
             chunk_tokens=config.chunk_tokens),
    )
