"""What a reader makes of one trace file: per phase, how long this rank was in it and how much
of that it spent in collectives, by collective."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from verl_rl_insight.commands.traces.intervals import Span, inside, length, union


class BadTrace(Exception):
    """A trace that cannot be read as one rank's trace of the step: the message names the file."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(path, why)  # both in args: it crosses from a reading process intact
        self.path = path
        self.why = why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}".replace("\n", " ")  # one line, whatever a parser said


class PhaseTime(NamedTuple):
    """One rank's time in one phase (seconds): in it at all, and waiting in collectives by op."""

    duration_s: float
    waiting_s: float
    waiting_by_op: dict[str, float]

    @property
    def busy_s(self) -> float:
        """Time in the phase not spent waiting in a collective: the rank's own work."""
        return max(self.duration_s - self.waiting_s, 0.0)


class FileSummary(NamedTuple):
    """One trace file's rank and its phases."""

    path: str
    source: str  # torch, nvtx or mstx
    rank: int
    replica: int | None  # a rollout replica's worker (its rank is its place in the replica)
    node: str | None
    step: int | None
    phases: dict[str, PhaseTime]

    @property
    def who(self) -> str:
        """How the rank is named: ``3``, or ``replica 0 rank 1`` for a rollout worker."""
        return str(self.rank) if self.replica is None else f"replica {self.replica} rank {self.rank}"


def phase_times(
    phases: dict[str, list[Span]], collectives: dict[str, list[Span]], scale: float
) -> dict[str, PhaseTime]:
    """Each phase's length and the collectives' time inside it, in seconds (``scale``: seconds per
    trace time unit)."""
    all_waits = union(span for spans in collectives.values() for span in spans)
    by_op = {op: union(spans) for op, spans in collectives.items()}
    found = {}
    for phase, spans in phases.items():
        within = union(spans)
        ops = {op: inside(waits, within) * scale for op, waits in by_op.items()}
        found[phase] = PhaseTime(
            length(within) * scale, inside(all_waits, within) * scale, {op: s for op, s in ops.items() if s > 0}
        )
    return found


def window(starts_ends: Iterable[Span]) -> Span | None:
    """The span from the first start to the last end, or None for no span."""
    first, last = float("inf"), float("-inf")
    for start, end in starts_ends:
        first, last = min(first, start), max(last, end)
    return (first, last) if first <= last else None
