"""Arrivals as ``vllm bench serve`` spaces its requests: ``--request-rate``, ``--burstiness``, ``--seed``.

vLLM 0.33.0's client (``get_request`` in ``vllm/benchmarks/serve.py``) draws one gap per request
before sending any: ``0`` when the rate is ``inf``; ``1 / rate`` when the burstiness is ``inf``;
otherwise a gamma variate with shape ``burstiness`` and scale ``1 / (rate × burstiness)`` (mean
``1 / rate``; burstiness 1 is a Poisson process, below 1 burstier, above 1 more even). The gaps are
summed into send times (the first request waits its own gap) and, when the last time is not 0,
scaled so that the last request is sent at exactly ``num_requests / rate`` seconds.

The gamma variates come from numpy's legacy global generator, which the client seeds with
``np.random.seed(--seed)`` (default 0). :class:`LegacyRandom` reproduces that generator with the
standard library: the same Mersenne Twister seeded the same way (``init_genrand``), the same 53-bit
doubles, and numpy's legacy gamma (Marsaglia and Tsang above shape 1, with the polar normal method
and its cached second value; an exponential at shape 1; Johnk-style rejection below 1). A real
``vllm bench serve`` run draws its dataset from the same generator first, so its own gaps differ
unless nothing else drew before; the distribution and the scaling are the same.

:func:`bench_send_times` gives the times in seconds; :func:`retime` applies them to a workload
(arrivals in ms on a step-model run), keeping every request's order, lengths and prefix.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from .rules import MAX_ARRIVAL

__all__ = ["LegacyRandom", "bench_send_times", "retime", "check_rate", "check_burstiness", "RETIMED_TICK_MS"]


class LegacyRandom:
    """numpy's ``RandomState(seed)`` draws used by ``vllm bench serve``: :meth:`random`, :meth:`gamma`.

    ``seed``: an integer in [0, 2**32 − 1] (numpy refuses others; so does this class, with ValueError).
    """

    def __init__(self, seed: int) -> None:
        if not 0 <= seed <= 0xFFFFFFFF:
            raise ValueError(f"seed must be in [0, 2**32 - 1], got {seed}")
        key = [seed]
        for index in range(1, 624):
            previous = key[-1]
            key.append((1812433253 * (previous ^ (previous >> 30)) + index) & 0xFFFFFFFF)
        self._mt = random.Random()
        self._mt.setstate((3, (*key, 624), None))   # numpy's mt19937_seed is init_genrand: same words
        self._gauss: float | None = None

    def random(self) -> float:
        """A double in [0, 1) from two 32-bit words (27 + 26 bits): numpy's ``legacy_double``."""
        return self._mt.random()

    def _exponential(self) -> float:
        return -math.log(1.0 - self.random())

    def _gauss_polar(self) -> float:
        if self._gauss is not None:
            value, self._gauss = self._gauss, None
            return value
        while True:
            x1 = 2.0 * self.random() - 1.0
            x2 = 2.0 * self.random() - 1.0
            r2 = x1 * x1 + x2 * x2
            if 0.0 < r2 < 1.0:
                break
        f = math.sqrt(-2.0 * math.log(r2) / r2)
        self._gauss = f * x1
        return f * x2

    def standard_gamma(self, shape: float) -> float:
        """numpy's ``legacy_standard_gamma(shape)``."""
        if shape == 1.0:
            return self._exponential()
        if shape == 0.0:
            return 0.0
        if shape < 1.0:
            while True:
                u = self.random()
                v = self._exponential()
                if u <= 1.0 - shape:
                    x = u ** (1.0 / shape)
                    if x <= v:
                        return x
                else:
                    y = -math.log((1.0 - u) / shape)
                    x = (1.0 - shape + shape * y) ** (1.0 / shape)
                    if x <= v + y:
                        return x
        b = shape - 1.0 / 3.0
        c = 1.0 / math.sqrt(9.0 * b)
        while True:
            while True:
                x = self._gauss_polar()
                v = 1.0 + c * x
                if v > 0.0:
                    break
            v = v * v * v
            u = self.random()
            if u < 1.0 - 0.0331 * (x * x) * (x * x):
                return b * v
            if math.log(u) < 0.5 * x * x + b * (1.0 - v + math.log(v)):
                return b * v

    def gamma(self, shape: float, scale: float) -> float:
        """``numpy.random.gamma(shape, scale)`` (legacy): ``scale × standard_gamma(shape)``."""
        return scale * self.standard_gamma(shape)


def check_rate(rate: float) -> float:
    """``--request-rate``: a number of requests per second > 0, or ``inf``. Raises ValueError."""
    if math.isnan(rate) or rate <= 0:
        raise ValueError(f"must be > 0 requests/s or inf, got {rate!r}")
    return rate


def check_burstiness(burstiness: float) -> float:
    """``--burstiness``: a number > 0 (vLLM's gamma shape) or ``inf`` (evenly spaced). Raises ValueError."""
    if math.isnan(burstiness) or burstiness <= 0:
        raise ValueError(f"must be > 0 (1 = Poisson) or inf, got {burstiness!r}")
    return burstiness


def bench_send_times(num_requests: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Send times in seconds from the start of dispatch, as ``vllm bench serve`` computes them
    (module docstring): ``num_requests`` values, non-decreasing, the last ``num_requests / rate``
    (all 0 at ``rate`` inf). Example: 4 requests at 2/s with burstiness inf -> [0.5, 1.0, 1.5, 2.0]."""
    if num_requests <= 0:
        return []
    rng = LegacyRandom(seed)
    gaps = []
    for _ in range(num_requests):
        if math.isinf(rate):
            gaps.append(0.0)
        elif math.isinf(burstiness):
            gaps.append(1.0 / rate)
        else:
            gaps.append(rng.gamma(burstiness, 1.0 / (rate * burstiness)))
    times = list(gaps)
    for i in range(1, len(times)):
        times[i] += times[i - 1]
    if times[-1] != 0:
        factor = (num_requests / rate) / times[-1]
        times = [t * factor for t in times]
    return times


#: ``tick_ms`` of a re-timed workload: its arrivals are whole microseconds.
RETIMED_TICK_MS = 0.001


def lowest_rate(num_requests: int) -> float:
    """The lowest ``--request-rate`` (requests/s) whose re-timed arrivals a workload file can hold:
    the last request is sent at ``num_requests / rate`` s, and an arrival is at most
    :data:`sched.workload.rules.MAX_ARRIVAL` whole µs (1,000 s). Example: 1,000 requests -> 1.0 req/s."""
    return num_requests * 1_000_000 / MAX_ARRIVAL


def check_span(num_requests: int, rate: float) -> None:
    """Refuse a ``--request-rate`` too low for the workload file's arrival limit (:func:`lowest_rate`):
    its ``workload.json`` could not be read back. Raises ValueError with one line naming the flag."""
    floor = lowest_rate(num_requests)
    if rate < floor:
        raise ValueError(f"--request-rate {rate:g}: {num_requests} requests would be sent over "
                         f"{num_requests / rate:g} s, past the {MAX_ARRIVAL // 1_000_000:,} s a workload's "
                         f"arrivals may span (whole µs up to {MAX_ARRIVAL}); use at least {floor:g} req/s")


def retime(workload: list, rate: float, burstiness: float = 1.0, seed: int = 0) -> list:
    """``workload`` (request specs, in workload order: request ``i`` is sent ``i``-th, as the client
    sends its dataset in order) with arrivals replaced by :func:`bench_send_times`, in whole
    microseconds (``tick_ms`` :data:`RETIMED_TICK_MS`). Returns new specs; every other field (name,
    lengths, prefix, priority) is kept."""
    times = bench_send_times(len(workload), rate, burstiness, seed)
    return [replace(spec, arrival=round(t * 1_000_000), tick_ms=RETIMED_TICK_MS) for spec, t in zip(workload, times)]
