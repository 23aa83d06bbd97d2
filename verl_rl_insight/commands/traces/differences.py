"""What differs on the slow rank: the kernels whose time there exceeds the other ranks' most."""

from __future__ import annotations

import statistics
from typing import NamedTuple

from verl_rl_insight.commands.traces.gpu_time import TOP_KERNELS, GpuTime

DIFFERENCES = 3  # kernels named per phase


class KernelDiff(NamedTuple):
    """A kernel on the slow rank against the other ranks' median of it (count, seconds)."""

    name: str
    kind: str
    launches: int
    total_s: float
    others_launches: float
    others_total_s: float
    others_at_most: bool  # some rank had it below its top list: the others' figure is an upper bound

    @property
    def excess_s(self) -> float:
        return self.total_s - self.others_total_s


def _theirs(gpu: GpuTime, name: str) -> tuple[float, float, bool]:
    """(count, seconds, only an upper bound) of kernel ``name`` on one other rank."""
    for kernel in gpu.top:
        if kernel.name == name:
            return float(kernel.launches), kernel.total_s, False
    if len(gpu.top) < TOP_KERNELS:  # its list is whole: the kernel did not run there
        return 0.0, 0.0, False
    return 0.0, gpu.top[-1].total_s, True  # below its list: at most its smallest listed one


def kernel_differences(mine: GpuTime | None, theirs: list[GpuTime], at_least_s: float) -> tuple[KernelDiff, ...]:
    """The slow rank's kernels with the most time past the others' median, largest first: those
    past it by ``at_least_s`` or more (a share of what the rank held the others by, so that
    kernels equal on every rank are not named)."""
    if mine is None or not theirs:
        return ()
    found = []
    for kernel in mine.top:
        seen = [_theirs(gpu, kernel.name) for gpu in theirs]
        diff = KernelDiff(
            kernel.name,
            kernel.kind,
            kernel.launches,
            kernel.total_s,
            statistics.median(count for count, _, _ in seen),
            statistics.median(total for _, total, _ in seen),
            any(bound for _, _, bound in seen),
        )
        if diff.excess_s > 0 and diff.excess_s >= at_least_s:
            found.append(diff)
    return tuple(sorted(found, key=lambda d: -d.excess_s)[:DIFFERENCES])
