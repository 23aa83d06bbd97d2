"""A run's curves for an agent: within a point budget (each bucket of steps keeps its first, its
lowest, its highest and its last value, so a spike and a fall survive), smoothed where asked (the
explorer's EMA, debiased), and two runs' curves compared: where they part."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import NamedTuple

Point = tuple[int, float]  # (step, value)


def downsample(steps: Sequence[int], values: Sequence[float | None], budget: int) -> list[Point]:
    """At most ``budget`` points (4 a bucket: first, min, max, last, in step order); every point
    when they fit. A None (a step that did not log the key) is left out."""
    points: list[Point] = [(s, v) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
    if len(points) <= budget:
        return points
    buckets = max(1, budget // 4)
    size = len(points) / buckets
    kept: list[Point] = []
    for b in range(buckets):
        part = points[int(b * size) : int((b + 1) * size)]
        if not part:
            continue
        chosen = {0, len(part) - 1}
        chosen.add(min(range(len(part)), key=lambda i: part[i][1]))
        chosen.add(max(range(len(part)), key=lambda i: part[i][1]))
        kept.extend(part[i] for i in sorted(chosen))
    return kept[:budget]


def smooth(values: Sequence[float | None], alpha: float) -> list[float | None]:
    """The explorer's EMA of weight ``alpha`` (0: none), debiased as TensorBoard's; a None stays None."""
    state = weight = 0.0
    out: list[float | None] = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(None)
            continue
        state = alpha * state + (1 - alpha) * v
        weight = alpha * weight + (1 - alpha)
        out.append(state / weight)
    return out


class Parting(NamedTuple):
    """Where two runs' curves of one key part: the first step from which their difference stays
    beyond 3x its own noise, and how far apart they end (in those noises)."""

    key: str
    parts_at: int | None
    distance: float  # the newest shared steps' median difference, in noises
    a_last: float | None
    b_last: float | None
    level: float = 0.0  # their difference where they were alike, if ever (the first fifth's median)
    spread: float = 0.0  # the yardstick: the difference's step-to-step noise (at least 1% of their size)


def parting(key: str, a: dict[int, float], b: dict[int, float]) -> Parting | None:
    """``a`` and ``b`` by step (the steps both logged), or None with fewer than 10 shared steps."""
    shared = sorted(set(a) & set(b))
    if len(shared) < 10:
        return None
    diffs = [a[s] - b[s] for s in shared]
    head = diffs[: max(5, len(diffs) // 5)]  # the first fifth: where they were alike, if ever
    level = statistics.median(head)
    noise = statistics.median(abs(d - e) for d, e in zip(diffs, diffs[1:])) * 1.4826 / math.sqrt(2)
    typical = statistics.median(abs(v) for v in (*a.values(), *b.values()))
    spread = max(noise, 0.01 * typical, 1e-12)  # a step-to-step noise of 0 (a count, a flag) is no yardstick
    apart = [abs(d - level) > 3 * spread for d in diffs]
    parts_at = None
    for i in range(len(shared)):
        if all(apart[i:]) and len(apart) - i >= 3:
            parts_at = shared[i]
            break
    newest = statistics.median(diffs[-5:])
    return Parting(key, parts_at, abs(newest - level) / spread, a[shared[-1]], b[shared[-1]], level, spread)


def parted(
    keys: Sequence[str],
    a_steps: Sequence[int],
    a_series: Mapping[str, Sequence[float | None]],
    b_steps: Sequence[int],
    b_series: Mapping[str, Sequence[float | None]],
) -> list[Parting]:
    """The keys whose two curves part (``parting``), the farthest apart first."""
    found = []
    for key in keys:
        by_a = {s: v for s, v in zip(a_steps, a_series.get(key, ())) if v is not None}
        by_b = {s: v for s, v in zip(b_steps, b_series.get(key, ())) if v is not None}
        one = parting(key, by_a, by_b)
        if one is not None and one.parts_at is not None:
            found.append(one)
    return sorted(found, key=lambda p: -p.distance)
