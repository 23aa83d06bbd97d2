"""Time on a line: the union of intervals, and how much of one union lies inside another.

A phase can be marked more than once in a step (nested or repeated ranges) and collectives
overlap one another (a CPU-side ``gloo:`` range around the same wait as its ``c10d::`` op, NCCL
kernels on several streams), so every length here is the length of a union: nothing is counted
twice."""

from __future__ import annotations

from collections.abc import Iterable

Span = tuple[float, float]


def union(spans: Iterable[Span]) -> list[Span]:
    """The disjoint, sorted spans covering exactly what ``spans`` cover (empty spans dropped)."""
    merged: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def length(spans: list[Span]) -> float:
    """The total length of disjoint spans."""
    return sum(end - start for start, end in spans)


def clip(spans: list[Span], within: list[Span]) -> list[Span]:
    """The parts of ``spans`` that lie within ``within`` (both disjoint and sorted), disjoint and sorted."""
    pieces: list[Span] = []
    j = 0
    for start, end in spans:
        while j < len(within) and within[j][1] <= start:
            j += 1
        k = j
        while k < len(within) and within[k][0] < end:
            low, high = max(start, within[k][0]), min(end, within[k][1])
            if high > low:
                pieces.append((low, high))
            k += 1
    return pieces


def inside(spans: list[Span], within: list[Span]) -> float:
    """The length of the part of ``spans`` that lies within ``within`` (both disjoint and sorted)."""
    return length(clip(spans, within))


def subtract(spans: list[Span], taken: list[Span]) -> list[Span]:
    """The parts of ``spans`` outside ``taken`` (both disjoint and sorted), disjoint and sorted."""
    left: list[Span] = []
    j = 0
    for start, end in spans:
        while j < len(taken) and taken[j][1] <= start:
            j += 1
        k, low = j, start
        while k < len(taken) and taken[k][0] < end:
            if taken[k][0] > low:
                left.append((low, taken[k][0]))
            low = max(low, taken[k][1])
            k += 1
        if low < end:
            left.append((low, end))
    return left
