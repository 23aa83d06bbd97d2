"""The step's view, as the analysis makes it and the answer, the table, the page and ``--json``
read it: per phase each rank's time, the slowest rank judged against the others."""

from __future__ import annotations

from typing import NamedTuple

from verl_rl_insight.commands.traces.differences import KernelDiff
from verl_rl_insight.commands.traces.gpu_time import GpuTime
from verl_rl_insight.commands.traces.snapshot import Snapshot
from verl_rl_insight.commands.traces.summary import PhaseTime

GPU_WORK, HOST_TIME, WORK = "GPU work", "host time", "work"  # what a slow rank is judged by
BALANCED = 1.1  # a phase whose slowest rank works under 1.1x the other ranks' median is not one rank's doing


class RankTime(NamedTuple):
    who: str
    rank: int
    node: str | None
    time: PhaseTime
    path: str


class Judged(NamedTuple):
    """The slowest rank against the others' median, in the quantity that held the phase."""

    quantity: str  # GPU_WORK, HOST_TIME (the GPU idle, the host not in a collective) or WORK (not in collectives)
    slowest_s: float
    others_s: float | None  # the median of the other ranks; None for a phase of one rank
    ratio: float | None  # slowest_s / others_s; None without others, inf when the others had none


class PhaseView(NamedTuple):
    phase: str
    ranks: list[RankTime]
    slowest: RankTime
    median_busy_s: float  # the other ranks' median work (time not in collectives)
    spread: float  # the slowest rank's work / the other ranks' median work
    others_waiting_share: float  # of the other ranks' time in the phase, the part spent waiting
    others_waiting_op: str | None  # the collective they waited in most
    judged: Judged
    differs: tuple[KernelDiff, ...]  # the kernels whose time on the slowest rank differs most from the others'

    @property
    def held_s(self) -> float:
        """What the slowest rank's extra work cost the phase: its work past the others' median."""
        return self.slowest.time.busy_s - self.median_busy_s

    @property
    def held(self) -> bool:
        """Whether one rank held the others (not merely the largest of equals)."""
        return len(self.ranks) > 1 and self.spread >= BALANCED


class StepView(NamedTuple):
    step: int | None
    files: int
    sources: list[str]
    phases: list[PhaseView]
    answer: str
    files_gpu: list[tuple[str, str, GpuTime | None]]  # (rank, file, the whole trace's GPU) per file
    snapshots: list[Snapshot]  # verl's torch_memory snapshots of the step, by rank
