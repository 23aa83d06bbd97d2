"""One pass over a window's device events, in order of start and in chunks of ``CHUNK``: the unions
of each kind of event, the GPU's idle gaps (and the event after each), the kernels' totals and the
lanes to draw, with a few numpy arrays of a chunk's size alive at a time, whatever the trace's size.

A union of intervals sorted by start is measured by the reach so far (the latest end seen): event
i adds what of it lies past the reach before it, and leaves a gap when it starts past that reach.
The reach is carried from chunk to chunk, and from the window's start, so the gap before the
window's first event is a gap too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from verl_rl_insight.commands.traces.intervals import Span

if TYPE_CHECKING:
    from verl_rl_insight.commands.traces.gpu_events import Bools, Floats, Frozen, Ints

CHUNK = 1 << 16  # device events a step of the sweep reads (a few MB of temporaries)


class Chunk(NamedTuple):
    """Some of a window's device events, clipped to it, in order of (clipped) start."""

    starts: Floats
    ends: Floats
    kinds: Ints
    at: Ints  # their places in the frozen arrays
    began: Bools  # started inside the window (not before it)


def chunks(device: Frozen, low: float, high: float) -> Iterator[Chunk]:
    """The device events overlapping [low, high), clipped to it, ``CHUNK`` at a time."""
    if not len(device.starts):
        return
    first = int(np.searchsorted(device.starts, low - device.longest, side="left"))
    last = int(np.searchsorted(device.starts, high, side="left"))
    for at in range(first, last, CHUNK):
        to = min(at + CHUNK, last)
        starts, ends = device.starts[at:to], device.ends[at:to]
        keep = (ends > low) | ((starts == ends) & (starts >= low))
        if not keep.any():
            continue
        index = np.flatnonzero(keep) + at
        kept = starts[keep]
        yield Chunk(np.maximum(kept, low), np.minimum(ends[keep], high), device.kinds[index], index, kept >= low)


class Reach:
    """A union measured as its events come in order of start: its length, and its gaps."""

    def __init__(self) -> None:
        self.length = 0.0
        self.reach = float("-inf")

    def begin(self, low: float) -> None:
        """A window span begins: nothing of the union before ``low`` counts, and a gap may open at it."""
        self.reach = low

    def feed(self, starts: Floats, ends: Floats) -> tuple[Floats, Floats, Bools]:
        """Adds events (in order of start); the gaps they close (from, to) and where (a mask)."""
        if not len(starts):
            empty = np.zeros(0)
            return empty, empty, np.zeros(0, dtype=bool)
        reach = np.maximum.accumulate(np.maximum(ends, self.reach))
        before = np.empty_like(reach)
        before[0] = self.reach
        before[1:] = reach[:-1]
        self.length += float(np.clip(reach - np.maximum(starts, before), 0.0, None).sum())
        self.reach = float(reach[-1])
        opened = starts > before
        return before[opened], starts[opened], opened


class Lane:
    """A union's pieces for drawing, gaps under ``gap`` closed (so at most width / gap pieces)."""

    def __init__(self, gap: float) -> None:
        self.gap = gap
        self.pieces: list[Span] = []
        self.open: float | None = None
        self.reach = float("-inf")

    def feed(self, starts: Floats, ends: Floats) -> None:
        if not len(starts):
            return
        reach = np.maximum.accumulate(np.maximum(ends, self.reach))
        before = np.empty_like(reach)
        before[0] = self.reach
        before[1:] = reach[:-1]
        breaks = starts - before >= self.gap
        if self.open is None:
            breaks[0] = True
        at = np.flatnonzero(breaks)
        if not len(at):  # all of it joins the open piece
            self.reach = float(reach[-1])
            return
        new: list[float] = starts[at].tolist()
        closes: list[float] = before[at].tolist()  # a break closes the piece before it
        if self.open is None:
            self.pieces.extend(zip(new[:-1], closes[1:]))
        else:
            self.pieces.extend(zip([self.open, *new[:-1]], closes))
        self.open, self.reach = new[-1], float(reach[-1])

    def end(self) -> list[Span]:
        """The pieces, the last one closed (a lane is fed one window span after another)."""
        if self.open is not None:
            self.pieces.append((self.open, self.reach))
            self.open, self.reach = None, float("-inf")
        return self.pieces


def union_within(device: Frozen, window: list[Span], kinds: tuple[int, ...]) -> float:
    """The length of the union of ``kinds`` of device events within ``window`` (disjoint, sorted)."""
    union = Reach()
    for low, high in window:
        union.begin(low)
        for chunk in chunks(device, low, high):
            keep = np.isin(chunk.kinds, kinds)
            union.feed(chunk.starts[keep], chunk.ends[keep])
    return union.length
