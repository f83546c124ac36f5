"""Drawing primitives of the time-line pictures (:mod:`sched.output.picture`,
:mod:`sched.output.vllm_picture`): XML escaping, the colour palette, coordinates with at most 2
decimals, the 1-2-5 gridline step and an SVG line collector; the colours come from
:mod:`sched.output.colours`. Pure text, stdlib only, deterministic.
"""

from __future__ import annotations

# Okabe–Ito colours (colour-blind safe): the vocabulary every time line shares, re-exported here.
from .colours import BLACK, BLUE, GREEN, GREY, ORANGE, P95_FILL, P95_STROKE, SKY, VERMILLION

__all__ = ["escape", "quoteattr", "short_number", "axis_step", "Svg", "GREY", "SKY", "BLUE", "ORANGE", "GREEN",
           "VERMILLION", "BLACK", "P95_FILL", "P95_STROKE"]


def escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as XML entities (what ``xml.sax.saxutils.escape`` gives; that module
    is not imported because it loads the whole URL library, a visible share of a run's start-up)."""
    return text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")


def quoteattr(text: str) -> str:
    """An XML attribute value with its quotes (what ``xml.sax.saxutils.quoteattr`` gives)."""
    text = escape(text).replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")
    if '"' not in text:
        return f'"{text}"'
    return f"'{text}'" if "'" not in text else '"' + text.replace('"', "&quot;") + '"'




def short_number(value: float) -> str:
    """A coordinate with at most 2 decimals and no trailing zeros (deterministic)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def axis_step(span: float, most_lines: int = 12) -> int:
    """A 1-2-5 step (1, 2, 5, 10, 20, ...) giving at most ``most_lines`` labelled gridlines over
    ``span`` (ticks here, ms in :mod:`sched.output.ms_picture`)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if span / (step * factor) <= most_lines:
                return step * factor
        step *= 10


class Svg:
    """Collects SVG lines; attributes are escaped and written in the given order."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def element(self, tag: str, title: str | None = None, text: str | None = None, **attrs) -> None:
        rendered = "".join(f" {key.rstrip('_').replace('_', '-')}={quoteattr(str(value))}"
                           for key, value in attrs.items())
        if title is None and text is None:
            self.lines.append(f"<{tag}{rendered}/>")
            return
        inner = (f"<title>{escape(title)}</title>" if title is not None else "") + escape(text or "")
        self.lines.append(f"<{tag}{rendered}>{inner}</{tag}>")
