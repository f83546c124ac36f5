"""The clock a run keeps and the engine that kept it: one small object everything downstream asks.

A run is built once (the plain run, a ``--step-model`` run) or read back once from its
``manifest.json`` (explain, diff, compare); there its :class:`RunClock` is made, and the renderers
and readers ask it how to write a time, a duration, which unit word to print and which units note to
carry, instead of each asking "which engine? which unit?" on its own (SimPy's ``Environment``: the
clock is one object). Three clocks exist:

==================  ========  =====  ==============================================================
clock               engine    unit   one engine tick is
==================  ========  =====  ==============================================================
:data:`LAB_TICKS`   ``lab``   ticks  one tick of the lab's model (lab.md §3)
:data:`VLLM_STEPS`  ``vllm``  ticks  one vLLM engine step (vllm-engine.md §2)
:data:`VLLM_MS`     ``vllm``  ms     one microsecond of a step model's clock (vllm-engine.md §6);
                                     times are written in ms, 1 ms = 1000 ticks
==================  ========  =====  ==============================================================

Examples (hand-computed)::

    LAB_TICKS.at(9) == "tick 9"           VLLM_MS.at(1500) == "1.5 ms"
    LAB_TICKS.span(9, 18) == "ticks 9–17" VLLM_MS.span(9, 18) == "0.009–0.018 ms"
    LAB_TICKS.length(9, 18) == "9 ticks"  VLLM_MS.length(0, 2500) == "2.5 ms"
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

__all__ = ["RunClock", "LAB_TICKS", "VLLM_STEPS", "VLLM_MS", "ENGINES", "UNITS", "UNITS_NOTE",
           "UNITS_NOTE_VLLM", "UNITS_NOTE_MS", "PICTURE_NOTE_MS"]

#: The engine kinds a run names (``manifest.json`` ``engine``; a lab run's manifest leaves it out).
ENGINES = ("lab", "vllm")
#: The units a run's times are written in (``manifest.json`` ``time_unit``; a tick run leaves it out).
UNITS = ("ticks", "ms")

#: The units note of a lab run (lab.md §7: table, summary, manifest and picture carry it).
UNITS_NOTE = ("Times are abstract ticks and work abstract budget units (a teaching model: no KV-cache "
              "capacity, no eviction, no preemption); nothing here is milliseconds or GPU tokens/s.")
#: The units note of a vLLM-engine run on unit steps (vllm-engine.md §5).
UNITS_NOTE_VLLM = ("Times are ticks, one vLLM engine step each; work is tokens. vLLM 0.33.0's scheduler rules: "
                   "KV blocks, recompute preemption, block-level prefix cache. Not milliseconds.")
#: The units note of a ``--step-model`` run (vllm-engine.md §6).
UNITS_NOTE_MS = ("Times are milliseconds from a step model fitted to a real run (vLLM 0.33.0's scheduler rules, "
                 "step_ms = a + b*prompt + c*decode + d*kv_tokens); the engine's own clock (the tick fields) is in microseconds. "
                 "A prediction, not a measurement.")

#: The shorter note under the title of a ``--step-model`` run's ``timeline.svg`` (vllm-engine.md §6);
#: the other runs' pictures carry their units note.
PICTURE_NOTE_MS = ("Times in ms from a step model fitted to a real run (vLLM 0.33.0's rules): a prediction, "
                   "not a measurement.")


def _ms(ticks) -> str:
    """Microsecond ticks as ms, at most 3 decimals, no trailing zeros: ``1500`` -> ``"1.5"``."""
    return f"{ticks / 1000:.3f}".rstrip("0").rstrip(".")


@dataclass(frozen=True, slots=True)
class RunClock:
    """A run's engine kind and clock.

    ``engine``: ``"lab"`` or ``"vllm"`` (:data:`ENGINES`); ``unit``: ``"ticks"`` (the engine's own
    ticks, printed as they are) or ``"ms"`` (ticks are microseconds of a step model's clock, printed
    in milliseconds; vllm-engine.md §6). Every time handed to the methods below is in the engine's
    ticks, as ``requests.jsonl`` and ``timeline.jsonl`` write them. Raises :class:`ValueError` for an
    engine or unit outside those.
    """

    engine: str = "lab"
    unit: str = "ticks"

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {self.unit!r}")

    @classmethod
    def from_manifest(cls, manifest: dict) -> RunClock:
        """The clock of a run read back from its ``manifest.json`` object: ``engine: "vllm"`` names the
        vLLM engine (anything else, or no field, is the lab's), ``time_unit: "ms"`` a step-model clock
        (anything else, or no field, ticks). Never raises: the readers check the fields they need."""
        return cls("vllm" if manifest.get("engine") == "vllm" else "lab",
                   "ms" if manifest.get("time_unit") == "ms" else "ticks")

    @property
    def is_vllm(self) -> bool:
        """Whether the vLLM engine's rules made the run (preemptions, KV blocks, steps)."""
        return self.engine == "vllm"

    @property
    def in_ms(self) -> bool:
        """Whether times are written in ms (a step-model run: ticks are µs)."""
        return self.unit == "ms"

    @property
    def ticks_per_unit(self) -> int:
        """Engine ticks per unit written: 1 (ticks), or 1000 (µs ticks per ms)."""
        return 1000 if self.in_ms else 1

    @property
    def units_note(self) -> str:
        """The run's units note: :data:`UNITS_NOTE`, :data:`UNITS_NOTE_VLLM` or :data:`UNITS_NOTE_MS`."""
        return UNITS_NOTE_MS if self.in_ms else UNITS_NOTE_VLLM if self.is_vllm else UNITS_NOTE

    @property
    def picture_note(self) -> str:
        """The note under the title of the run's ``timeline.svg``: :data:`PICTURE_NOTE_MS` on a ms clock,
        else the units note (lab.md §7)."""
        return PICTURE_NOTE_MS if self.in_ms else self.units_note

    def in_unit(self, ticks: int) -> int | Fraction:
        """``ticks`` in the unit written, exactly: the ticks themselves, or ``Fraction(ticks, 1000)`` ms."""
        return Fraction(ticks, 1000) if self.in_ms else ticks

    def at(self, tick: int) -> str:
        """A point in time: ``"tick 9"``, or ``"1.5 ms"`` for tick 1500 on a ms clock."""
        return f"{_ms(tick)} ms" if self.in_ms else f"tick {tick}"

    def span(self, start: int, end: int) -> str:
        """The time from ``start`` up to ``end`` (excluded): ``"ticks 9–17"`` (``"tick 9"`` when one
        tick), or on a ms clock ``"0.009–0.018 ms"`` (from its start to its end)."""
        if self.in_ms:
            return f"{_ms(start)}–{_ms(end)} ms"
        return f"tick {start}" if start == end - 1 else f"ticks {start}–{end - 1}"

    def length(self, start: int, end: int) -> str:
        """How long from ``start`` to ``end``, with the unit: ``"9 ticks"``, ``"2.5 ms"``."""
        return self.duration(end - start, unit_word=True)

    def duration(self, ticks: int, unit_word: bool = False) -> str:
        """A duration of ``ticks``: the bare number of ticks (``"9"``; ``"9 ticks"`` with
        ``unit_word``), or always with its unit on a ms clock (``"2.5 ms"``)."""
        if self.in_ms:
            return f"{_ms(ticks)} ms"
        return f"{ticks} ticks" if unit_word else str(ticks)

    def step(self, tick: int) -> str:
        """The engine step starting at ``tick``: ``"tick 5"``, or ``"step at 0.005 ms"`` on a ms clock."""
        return f"step at {_ms(tick)} ms" if self.in_ms else f"tick {tick}"

    def steps(self, ticks: list[int]) -> str:
        """The steps starting at ``ticks`` (in order, at least one): ``"ticks 4–6"`` (first to last),
        or how many on a ms clock (``"3 steps"``), where steps have no fixed length."""
        if self.in_ms:
            return f"{len(ticks)} step{'s' if len(ticks) > 1 else ''}"
        return self.span(ticks[0], ticks[-1] + 1)

    def step_end(self, tick: int, record: dict) -> int:
        """When the step starting at ``tick`` stamps its tokens (tick + 1; on a ms clock tick + its
        ``timeline.jsonl`` record's ``duration``, 0 when absent)."""
        return tick + record.get("duration", 0) if self.in_ms else tick + 1


#: A lab-engine run: abstract ticks (lab.md §3).
LAB_TICKS = RunClock("lab", "ticks")
#: A vLLM-engine run on unit steps (vllm-engine.md §2).
VLLM_STEPS = RunClock("vllm", "ticks")
#: A vLLM-engine run with a step model: µs ticks written in ms (vllm-engine.md §6).
VLLM_MS = RunClock("vllm", "ms")
