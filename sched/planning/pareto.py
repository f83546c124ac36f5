"""``pareto.svg``: goodput per GPU against latency, one point per setting, the Pareto frontier drawn.

Two panels, each point a setting at its ``max_request_rate``:

- left: goodput per GPU (req/s, ``request_goodput`` / GPUs of one replica) against P95 TTFT (ms, log
  scale): up and to the left is better;
- right: goodput per GPU against tokens per second per user (``1000 / median TPOT ms``, the speed one
  user sees while streaming): up and to the right is better, the trade-off vLLM's ``plot_pareto`` draws.

Frontier points (no other setting at least as good on both axes and better on one) are filled and
joined by a line; the others are hollow. Labels name each setting briefly. Deterministic text.
"""

from __future__ import annotations

import math
from html import escape

__all__ = ["render_pareto_svg", "frontier"]

_W, _H, _PAD_L, _PAD_B, _PAD_T, _PAD_R = 620, 440, 70, 60, 40, 20


def frontier(points: list[tuple[float, float]], larger_x_better: bool) -> list[int]:
    """Indices of the Pareto-optimal points (maximise y; minimise x, or maximise it when ``larger_x_better``)."""
    best = []
    for i, (x, y) in enumerate(points):
        dominated = False
        for j, (x2, y2) in enumerate(points):
            if i == j:
                continue
            better_x = x2 >= x if larger_x_better else x2 <= x
            strictly = (x2 > x if larger_x_better else x2 < x) or y2 > y
            if better_x and y2 >= y and strictly:
                dominated = True
                break
        if not dominated:
            best.append(i)
    return best


def _scale(values, log: bool, lo_px: float, hi_px: float):
    data = [math.log10(v) if log else v for v in values]
    low, high = min(data), max(data)
    if high == low:
        low, high = (low - 0.1, high + 0.1) if log else (low - max(abs(low) * 0.1, 1e-9), high + max(abs(high) * 0.1, 1e-9))
    span = high - low
    low, high = low - 0.05 * span, high + 0.05 * span

    def to_px(v):
        d = math.log10(v) if log else v
        return lo_px + (d - low) / (high - low) * (hi_px - lo_px)
    return to_px, (low, high)


def _ticks(low: float, high: float, log: bool) -> list[float]:
    """Round tick values across [low, high] (log10 units when ``log``: powers of ten, or round values
    between them when the range spans less than two of them)."""
    if log:
        decades = [10 ** k for k in range(math.floor(low), math.ceil(high) + 1) if low <= k <= high]
        if len(decades) >= 2:
            return decades
        return [t for t in _ticks(10 ** low, 10 ** high, False) if t > 0]
    step = 10 ** math.floor(math.log10((high - low) / 4 or 1))
    for factor in (1, 2, 5, 10):
        if (high - low) / (step * factor) <= 6:
            step *= factor
            break
    start = math.ceil(low / step) * step
    return [start + k * step for k in range(int((high - start) / step) + 1)]


def _panel(items, x_of, x_title, log_x, larger_x_better, left) -> list[str]:
    usable = [(x_of(it), it["goodput_per_gpu"], it["number"]) for it in items
              if x_of(it) is not None and it["goodput_per_gpu"] is not None and (not log_x or x_of(it) > 0)]
    top, bottom = _PAD_T, _H - _PAD_B
    x0, x1 = left + _PAD_L, left + _W - _PAD_R
    parts = [f'<rect x="{left + _PAD_L}" y="{top}" width="{x1 - x0}" height="{bottom - top}" fill="none" stroke="#888"/>',
             f'<text x="{(x0 + x1) / 2}" y="{_H - 15}" text-anchor="middle">{escape(x_title)}</text>',
             f'<text x="{left + 16}" y="{(top + bottom) / 2}" text-anchor="middle" '
             f'transform="rotate(-90 {left + 16} {(top + bottom) / 2})">goodput per GPU (req/s)</text>']
    if not usable:
        parts.append(f'<text x="{(x0 + x1) / 2}" y="{(top + bottom) / 2}" text-anchor="middle">no setting met the SLO</text>')
        return parts
    to_x, (xl, xh) = _scale([u[0] for u in usable], log_x, x0, x1)
    to_y, (yl, yh) = _scale([u[1] for u in usable], False, bottom, top)
    for t in _ticks(xl, xh, log_x):
        px = to_x(t)
        parts.append(f'<line x1="{px:.1f}" y1="{bottom}" x2="{px:.1f}" y2="{bottom + 5}" stroke="#444"/>'
                     f'<text x="{px:.1f}" y="{bottom + 18}" text-anchor="middle" font-size="11">{t:.4g}</text>')
    for t in _ticks(yl, yh, False):
        py = to_y(t)
        parts.append(f'<line x1="{x0 - 5}" y1="{py:.1f}" x2="{x0}" y2="{py:.1f}" stroke="#444"/>'
                     f'<text x="{x0 - 8}" y="{py + 4:.1f}" text-anchor="end" font-size="11">{t:.4g}</text>')
    best = frontier([(u[0], u[1]) for u in usable], larger_x_better)
    line = sorted((usable[i][0], usable[i][1]) for i in best)
    if len(line) > 1:
        parts.append('<polyline fill="none" stroke="#d62728" stroke-width="2" points="'
                     + " ".join(f"{to_x(x):.1f},{to_y(y):.1f}" for x, y in line) + '"/>')
    labels: dict = {}   # settings at the same spot share one label: "1,2,3"
    for i, (x, y, number) in enumerate(usable):
        labels.setdefault((round(to_x(x), 1), round(to_y(y), 1)), []).append((number, i in best))
    for (px, py), members in labels.items():
        on = any(flag for _, flag in members)
        numbers = [str(n) for n, _ in sorted(members)]
        text = ",".join(numbers) if len(numbers) <= 4 else ",".join(numbers[:3]) + f"+{len(numbers) - 3}"
        parts.append(f'<circle cx="{px}" cy="{py}" r="5" fill="{"#d62728" if on else "white"}" '
                     f'stroke="{"#d62728" if on else "#1f77b4"}" stroke-width="2"><title>#{text}</title></circle>'
                     f'<text x="{px + 7}" y="{py - 7}" font-size="10">{text}</text>')
    return parts


def render_pareto_svg(configs: list[dict], title: str) -> str:
    """The two panels for ``configs`` (each: ``number`` (its row in the table), ``label``,
    ``goodput_per_gpu``, ``p95_ttft_ms``, ``tokens_per_s_per_user``; ``None`` where unknown), and
    below them the settings by number."""
    width = 2 * _W + 20
    legend = [f"{c['number']}: {c['label']}" for c in sorted(configs, key=lambda c: c["number"])]
    height = _H + 40 + 15 * ((len(legend) + 1) // 2)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>',
             '<g transform="translate(0,20)">']
    parts += _panel(configs, lambda c: c["p95_ttft_ms"], "P95 TTFT at the max rate (ms, log scale; left is better)",
                    True, False, 0)
    parts += _panel(configs, lambda c: c["tokens_per_s_per_user"],
                    "tokens/s per user at the max rate (1000 / median TPOT; right is better)", False, True, _W + 20)
    half = (len(legend) + 1) // 2
    for k, line in enumerate(legend):
        parts.append(f'<text x="{20 + (k // half) * (_W + 20)}" y="{_H + 15 + 15 * (k % half)}" '
                     f'font-size="11">{escape(line)}</text>')
    parts += ["</g>", "</svg>"]
    return "\n".join(parts) + "\n"
