"""The statistics the health tests share: robust levels and spreads of a run's own steps.

Every test compares the newest few steps (``recent``: their median, so one wild step is not a
trend) with the run's own earlier steps (``before``), never with a fixed number alone. Real verl
runs are heavy-tailed (single grad-norm steps of 3-10x), drift (entropy falls 8-17x in a run that
ends well, KL to the reference grows from 0) and are printed with about 3 decimals, so spreads
come from the median absolute step-to-step change (the noise), with floors.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

Series = Sequence[tuple[int, float]]  # (step, value), steps increasing, finite values
MAD_SCALE = 1.4826  # MAD to a standard deviation for normal noise


def robust(values: Sequence[float]) -> tuple[float, float]:
    """(median, spread): the spread is the MAD scaled to a standard deviation, never zero."""
    med = median(values)
    mad = median(abs(v - med) for v in values) * MAD_SCALE
    return med, max(mad, 1e-3 * abs(med), 1e-12)


def median(values: Iterable[float]) -> float:
    """``statistics.median``, without its checks and copies (the walk takes a few every step)."""
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def noise(values: Sequence[float]) -> float:
    """One step's noise (a standard deviation) from the median step-to-step change: a trend does
    not count as noise the way it does in the MAD of the values."""
    if len(values) < 3:
        return 0.0
    diffs = [abs(b - a) for a, b in zip(values, values[1:])]
    return median(diffs) * MAD_SCALE / math.sqrt(2)


def curvature_noise(values: Sequence[float]) -> float:
    """One value's noise from the median second difference: neither a trend nor a level shift
    counts (for short series that trend, such as a validation score every few steps)."""
    if len(values) < 4:
        return noise(values)
    second = [abs(c - 2 * b + a) for a, b, c in zip(values, values[1:], values[2:])]
    return statistics.median(second) * MAD_SCALE / math.sqrt(6)


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(math.floor(at))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def split(series: Series, recent: int, window: int, min_history: int) -> tuple[list[float], list[float]] | None:
    """(the newest ``recent`` values, the up to ``window`` values before them); None while fewer
    than ``min_history`` values come before them."""
    if len(series) < recent + min_history:
        return None
    values = [v for _, v in series[-recent - window :]]
    return values[-recent:], values[:-recent]


def theil_sen(points: Series) -> float:
    """The median of the slopes between each point and the one half the points later (Theil-Sen
    on those pairs: a trend that a few wild steps do not move, in linear time)."""
    half = len(points) // 2
    slopes = [(v2 - v1) / (s2 - s1) for (s1, v1), (s2, v2) in zip(points, points[half:]) if s2 != s1]
    return statistics.median(slopes) if slopes else 0.0


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def mann_kendall(values: Sequence[float]) -> float:
    """Mann-Kendall's z of a monotone trend in ``values`` (positive: up), ties counted as no
    change; 0 for fewer than 4 values. |z| > 2.6 is a trend at 1 % for independent noise."""
    n = len(values)
    if n < 4:
        return 0.0
    s = sum((b > a) - (b < a) for i, a in enumerate(values) for b in values[i + 1 :])
    var = n * (n - 1) * (2 * n + 5) / 18
    return 0.0 if s == 0 else (s - (1 if s > 0 else -1)) / math.sqrt(var)


def steps(points: Series) -> str:
    """The steps ``points`` cover, as a reader names them: "step 7", "steps 7-12"."""
    first, last = points[0][0], points[-1][0]
    return f"step {first}" if first == last else f"steps {first}-{last}"


def trim(series: list[tuple[int, float]], keep: int, since: int | None) -> None:
    """Keep a detector's series from ``since`` (a reset step) on, and its newest ``keep`` steps."""
    if since is not None and series and series[0][0] < since:
        series[:] = [(s, v) for s, v in series if s >= since]
    if len(series) > keep:
        del series[: len(series) - keep]
