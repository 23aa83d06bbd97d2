"""What one rank's GPU did in one window of time (a phase's time on the host, or the whole trace):
kernel, memcpy and memset time, busy and idle, communication hidden or exposed, why the GPU sat
idle, the kernels it ran most, the allocator's peak, and a verdict.

Every window is cut into three parts that add up to it:

- **GPU work**: compute kernels, memcpy or memset running (their union);
- **communication**: an NCCL kernel running, or the host inside a collective (``gloo:``, ``nccl:``,
  ``c10d::``), while no GPU work ran: waiting for the other ranks;
- **host**: neither: the GPU waits on the CPU (launches, syncs, Python).

The verdict is the largest part: GPU-bound, communication-bound or host-bound.

Why the GPU sat idle is told gap by gap, as Holistic Trace Analysis tells it per stream: a gap is
*host wait* when the device event after it was launched by the host after the gap began (the
host had not queued it yet), a *launch gap* when it was queued and the gap is under 30 us (the
kernel-to-kernel latency), and *other* when it was queued long before (a dependency or a sync)."""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple

from verl_rl_insight.commands.traces.gpu_events import DeviceEvents
from verl_rl_insight.commands.traces.intervals import Span, clip, inside, length, subtract, union
from verl_rl_insight.commands.traces.kernels import (
    COMMUNICATION,
    COMPUTE,
    MEMCPY,
    MEMSET,
    KernelTotal,
    short_name,
    top_kernels,
)

LAUNCH_GAP_US = 30.0  # Holistic Trace Analysis' consecutive_kernel_delay: a gap under it is launch latency
TOP_KERNELS = 30  # kernels kept per window (by time), for the top list and the slow rank's differences
LANE_PIECES = 600  # spans a lane of the HTML keeps per window
GPU_BOUND, COMMUNICATION_BOUND, HOST_BOUND, NO_GPU = "GPU-bound", "communication-bound", "host-bound", "no GPU events"


class IdleCauses(NamedTuple):
    """The GPU's idle time (seconds) by why: the host had not launched the next event yet, the
    launch latency between queued kernels, or a queued event that waited (a dependency or a sync)."""

    host_wait_s: float
    launch_gap_s: float
    other_s: float


class Lanes(NamedTuple):
    """A window's device timeline for drawing, in seconds from the window's start (a lane's short
    gaps merged so that it keeps at most ``LANE_PIECES`` spans): GPU work, memcpy / memset, NCCL
    kernels, and the host inside a collective."""

    compute: list[Span]
    memory: list[Span]
    communication: list[Span]
    host_waiting: list[Span]


class GpuTime(NamedTuple):
    """One rank's GPU in one window (seconds; shares of ``window_s``)."""

    window_s: float
    events: int  # device events (kernels, memcpy, memset) that started in the window
    kernels: int  # compute kernels that started in it
    compute_s: float  # the compute kernels' time in the window, summed (streams in parallel add up)
    communication_s: float  # the NCCL kernels' time, summed
    memcpy_s: float
    memset_s: float
    busy_s: float  # GPU work: compute kernels, memcpy or memset running (the union)
    compute_busy_s: float  # compute kernels running (the union): Holistic Trace Analysis' compute time
    communication_busy_s: float  # NCCL kernels running (the union)
    overlap_s: float  # NCCL kernels running while compute kernels ran: communication hidden
    waiting_s: float  # communication while no GPU work ran: NCCL kernels, the host in a collective
    idle_s: float  # no device event running (Holistic Trace Analysis' idle time)
    idle_causes: IdleCauses
    top: tuple[KernelTotal, ...]
    peak_allocated_bytes: float | None  # the allocator's ``[memory]`` points in the window
    peak_reserved_bytes: float | None
    device_window_s: float | None  # the phase's ``gpu_user_annotation`` on the device's timeline
    lanes: Lanes

    @property
    def host_s(self) -> float:
        """The window's time with neither GPU work nor communication: the GPU waiting on the host."""
        return max(self.window_s - self.busy_s - self.waiting_s, 0.0)

    def share(self, seconds: float) -> float:
        return seconds / self.window_s if self.window_s > 0 else 0.0

    @property
    def verdict(self) -> str:
        if self.events == 0:
            return NO_GPU
        parts = {GPU_BOUND: self.busy_s, COMMUNICATION_BOUND: self.waiting_s, HOST_BOUND: self.host_s}
        return max(parts, key=lambda name: parts[name])

    @property
    def mean_kernel_s(self) -> float | None:
        return self.compute_s / self.kernels if self.kernels else None


def _lane(spans: list[Span], origin: float, width: float, scale: float) -> list[Span]:
    """``spans`` for drawing: gaps under ``width / LANE_PIECES`` closed, doubled until they fit."""
    gap = width / LANE_PIECES
    while True:
        merged: list[Span] = []
        for start, end in spans:
            if merged and start - merged[-1][1] < gap:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((start, end))
        if len(merged) <= LANE_PIECES or gap <= 0:
            return [((s - origin) * scale, (e - origin) * scale) for s, e in merged]
        gap *= 2


class _Window:
    """The device events overlapping a window, clipped to it, by kind."""

    def __init__(self, device: DeviceEvents, window: list[Span]) -> None:
        self.pieces: tuple[list[Span], ...] = ([], [], [], [])
        self.sums = [0.0, 0.0, 0.0, 0.0]
        self.started = [0, 0, 0, 0]
        self.totals: dict[tuple[str, int], list[float]] = {}
        self.short: dict[int, str] = {}
        order, starts = device.order(), device.sorted_starts()
        longest = device.longest()
        for low, high in window:
            first = bisect_left(starts, low - longest)
            for i in order[first : bisect_left(starts, high)]:
                self._add(device, i, low, high)

    def _add(self, device: DeviceEvents, i: int, low: float, high: float) -> None:
        start, end = device.starts[i], device.ends[i]
        cut_start, cut_end = max(start, low), min(end, high)
        if cut_end <= cut_start and not (start == end and low <= start < high):
            return
        kind = device.kinds[i]
        self.pieces[kind].append((cut_start, cut_end))
        self.sums[kind] += cut_end - cut_start
        name_id = device.names[i]
        name = self.short.get(name_id)
        if name is None:
            name = self.short[name_id] = short_name(device.name_list[name_id])
        total = self.totals.setdefault((name, kind), [0, 0.0])
        total[1] += cut_end - cut_start
        if low <= start < high:
            self.started[kind] += 1
            total[0] += 1


def _idle_causes(device: DeviceEvents, gaps: list[Span], scale: float) -> IdleCauses:
    host = launch = other = 0.0
    order, starts = device.order(), device.sorted_starts()
    for low, high in gaps:
        following = bisect_left(starts, high)
        size = high - low
        launched = device.launched_at(order[following]) if following < len(order) else None
        if following >= len(order) or (launched is not None and launched > low):
            host += size  # nothing queued: the host had not launched the next event when the GPU ran dry
        elif size < LAUNCH_GAP_US * 1e-6 / scale:
            launch += size
        else:
            other += size
    return IdleCauses(host * scale, launch * scale, other * scale)


def gpu_time(device: DeviceEvents, window: list[Span], waits: list[Span], scale: float, phase: str = "") -> GpuTime:
    """The GPU's figures over ``window`` (disjoint, sorted, in trace units; ``scale`` seconds a
    unit); ``waits``: the host's collectives (disjoint, sorted)."""
    seen = _Window(device, window)
    compute, communication = union(seen.pieces[COMPUTE]), union(seen.pieces[COMMUNICATION])
    memory = union(seen.pieces[MEMCPY] + seen.pieces[MEMSET])
    busy = union(compute + memory)
    running = union(busy + communication)
    host_waiting = clip(waits, window)
    waiting = subtract(union(communication + host_waiting), busy)
    gaps = subtract(window, running)
    peak = device.memory_peak(window)
    annotated = device.annotations.get(phase)
    origin = window[0][0] if window else 0.0
    width = (window[-1][1] - origin) if window else 0.0
    return GpuTime(
        window_s=length(window) * scale,
        events=sum(seen.started),
        kernels=seen.started[COMPUTE],
        compute_s=seen.sums[COMPUTE] * scale,
        communication_s=seen.sums[COMMUNICATION] * scale,
        memcpy_s=seen.sums[MEMCPY] * scale,
        memset_s=seen.sums[MEMSET] * scale,
        busy_s=length(busy) * scale,
        compute_busy_s=length(compute) * scale,
        communication_busy_s=length(communication) * scale,
        overlap_s=inside(communication, compute) * scale,
        waiting_s=length(waiting) * scale,
        idle_s=length(gaps) * scale,
        idle_causes=_idle_causes(device, gaps, scale),
        top=top_kernels(seen.totals, scale, TOP_KERNELS),
        peak_allocated_bytes=peak[0] if peak else None,
        peak_reserved_bytes=peak[1] if peak else None,
        device_window_s=length(union(annotated)) * scale if annotated else None,
        lanes=Lanes(
            _lane(compute, origin, width, scale),
            _lane(memory, origin, width, scale),
            _lane(communication, origin, width, scale),
            _lane(host_waiting, origin, width, scale),
        ),
    )


def whole_trace(device: DeviceEvents, waits: list[Span], scale: float) -> GpuTime | None:
    """The GPU over its own busy window, from its first device event's start to its last one's
    end (the window Holistic Trace Analysis' temporal breakdown reads), or None without any."""
    if not len(device):
        return None
    order = device.order()
    start = device.starts[order[0]]
    end = max(device.ends)
    return gpu_time(device, [(start, end)], waits, scale)
