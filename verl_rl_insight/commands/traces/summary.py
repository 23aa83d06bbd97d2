"""What a reader makes of one trace file: per phase, how long this rank was in it and how much
of that it spent in collectives, by collective."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from verl_rl_insight.commands.traces.gpu_time import UNIONS, GpuTime, gpu_time
from verl_rl_insight.commands.traces.intervals import Span, clip, length, union
from verl_rl_insight.commands.traces.sweep import union_within

if TYPE_CHECKING:
    from verl_rl_insight.commands.traces.gpu_events import Frozen

WORK = UNIONS["busy"]  # GPU work: what a host's wait in a collective is not waiting under


class BadTrace(Exception):
    """A trace that cannot be read as one rank's trace of the step: the message names the file."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(path, why)  # both in args: it crosses from a reading process intact
        self.path = path
        self.why = why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}".replace("\n", " ")  # one line, whatever a parser said


class PhaseTime(NamedTuple):
    """One rank's time in one phase (seconds): in it at all, and waiting in collectives by op
    (while no GPU work of the rank ran: a host that waits in a collective while its GPU still
    computes is not waiting); with the GPU's figures when the trace has device events."""

    duration_s: float
    waiting_s: float
    waiting_by_op: dict[str, float]
    gpu: GpuTime | None = None

    @property
    def busy_s(self) -> float:
        """Time in the phase not spent waiting in a collective: the rank's own work."""
        return max(self.duration_s - self.waiting_s, 0.0)


class TraceOrigin(NamedTuple):
    """What a trace says of the job that wrote it, to tell two jobs' traces apart."""

    world_size: int | None = None
    backend: str | None = None
    device: str | None = None  # the first of ``deviceProperties``: NVIDIA H200
    wall_start_s: float | None = None  # seconds since 1970 (``baseTimeNanoseconds`` + the first event)
    wall_end_s: float | None = None


class FileSummary(NamedTuple):
    """One trace file's rank and its phases."""

    path: str
    source: str  # torch, nvtx or mstx
    rank: int
    replica: int | None  # a rollout replica's worker (its rank is its place in the replica)
    node: str | None
    step: int | None
    phases: dict[str, PhaseTime]
    gpu: GpuTime | None = None  # the whole trace's GPU, first device event to last
    origin: TraceOrigin = TraceOrigin()

    @property
    def who(self) -> str:
        """How the rank is named: ``3``, or ``replica 0 rank 1`` for a rollout worker."""
        return str(self.rank) if self.replica is None else f"replica {self.replica} rank {self.rank}"


def phase_times(
    phases: dict[str, list[Span]],
    collectives: dict[str, list[Span]],
    scale: float,
    device: Frozen | None = None,
) -> dict[str, PhaseTime]:
    """Each phase's length and the collectives' time inside it, in seconds (``scale``: seconds per
    trace time unit); with ``device`` events, each phase's GPU figures, and the collectives' time
    only where no GPU work ran."""
    if device is not None and not len(device.starts):
        device = None
    host_waits = union(span for spans in collectives.values() for span in spans)
    by_op = {op: union(spans) for op, spans in collectives.items()}

    def waited(waits: list[Span], within: list[Span]) -> float:
        """The waits' time inside the phase that no GPU work covered."""
        inside_phase = clip(waits, within)
        hidden = union_within(device, inside_phase, WORK) if device is not None else 0.0
        return (length(inside_phase) - hidden) * scale

    found = {}
    for phase, spans in phases.items():
        within = union(spans)
        ops = {op: waited(waits, within) for op, waits in by_op.items()}
        gpu = gpu_time(device, within, host_waits, scale, phase) if device is not None else None
        found[phase] = PhaseTime(
            length(within) * scale, waited(host_waits, within), {op: s for op, s in ops.items() if s > 0}, gpu
        )
    return found


def window(starts_ends: Iterable[Span]) -> Span | None:
    """The span from the first start to the last end, or None for no span."""
    first, last = float("inf"), float("-inf")
    for start, end in starts_ends:
        first, last = min(first, start), max(last, end)
    return (first, last) if first <= last else None
