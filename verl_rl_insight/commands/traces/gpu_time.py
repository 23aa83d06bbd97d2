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
kernel-to-kernel latency), and *other* when it was queued long before (a dependency or a sync).

Computed in one sweep over the window's events (``sweep.py``), a chunk of numpy arrays at a time:
a 200 MB trace's 250,000 kernels take some 50 ms a window and a few MB."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from verl_rl_insight.commands.traces.intervals import Span, clip, length, union
from verl_rl_insight.commands.traces.kernels import (
    COMMUNICATION,
    COMPUTE,
    KINDS,
    MEMCPY,
    MEMSET,
    KernelTotal,
    short_name,
)
from verl_rl_insight.commands.traces.sweep import Chunk, Lane, Reach, chunks

if TYPE_CHECKING:
    from verl_rl_insight.commands.traces.gpu_events import Floats, Frozen, Ints

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


def covered(spans: list[Span], union_starts: Floats, union_ends: Floats) -> float:
    """How much of ``spans`` (disjoint) a union (its disjoint pieces, sorted) covers."""
    if not spans or not len(union_starts):
        return 0.0
    widths = union_ends - union_starts
    before = np.concatenate(([0.0], np.cumsum(widths)))

    def upto(t: Floats) -> Floats:  # the union's length before each t
        i = np.searchsorted(union_starts, t, side="right") - 1
        inside = np.clip(t - union_starts[i.clip(0)], 0.0, widths[i.clip(0)])
        return np.where(i >= 0, before[i.clip(0)] + inside, 0.0)

    bounds = np.asarray(spans, dtype=np.float64)
    return float((upto(bounds[:, 1]) - upto(bounds[:, 0])).sum())


class _Idle:
    """The GPU's gaps in a window: their time, by cause, and the host's collectives inside them."""

    def __init__(self, device: Frozen, scale: float) -> None:
        self.device = device
        self.launch_gap = LAUNCH_GAP_US * 1e-6 / scale
        self.host = self.launch = self.other = 0.0
        self.in_collectives = 0.0

    def gaps(self, opens: Floats, closes: Floats, following: Ints, waits: list[Span]) -> None:
        """Gaps (from, to), each with the index of the device event after it (past the last: none)."""
        if not len(opens):
            return
        n = len(self.device.starts)
        launched = self.device.launched_at(following.clip(0, max(n - 1, 0)))
        host = (following >= n) | (launched > opens)  # NaN (no launch in the trace) compares False
        size = closes - opens
        short = ~host & (size < self.launch_gap)
        self.host += float(size[host].sum())
        self.launch += float(size[short].sum())
        self.other += float(size[~host & ~short].sum())
        self.in_collectives += covered(waits, opens, closes)


class _Sums:
    """Time and launches by kind and by kernel name."""

    def __init__(self, names: int) -> None:
        self.by_kind = np.zeros(4)
        self.started = np.zeros(4, dtype=np.int64)
        self.by_name = np.zeros(names)
        self.launched = np.zeros(names, dtype=np.int64)
        self.kind_of = np.zeros(names, dtype=np.int64)

    def feed(self, device: Frozen, chunk: Chunk) -> None:
        took = chunk.ends - chunk.starts
        kinds = chunk.kinds.astype(np.int64)
        self.by_kind += np.bincount(kinds, weights=took, minlength=4)
        self.started += np.bincount(kinds[chunk.began], minlength=4)
        names = device.names[chunk.at].astype(np.int64)
        self.by_name += np.bincount(names, weights=took, minlength=len(self.by_name))
        self.launched += np.bincount(names[chunk.began], minlength=len(self.by_name))
        self.kind_of[names] = kinds

    def top(self, device: Frozen, scale: float) -> tuple[KernelTotal, ...]:
        grouped: dict[tuple[str, int], list[float]] = {}
        for name_id in np.flatnonzero((self.by_name > 0) | (self.launched > 0)).tolist():
            key = (short_name(device.name_list[name_id]), int(self.kind_of[name_id]))
            entry = grouped.setdefault(key, [0.0, 0.0])
            entry[0] += float(self.launched[name_id])
            entry[1] += float(self.by_name[name_id])
        ranked = sorted(grouped.items(), key=lambda item: (-item[1][1], item[0]))[:TOP_KERNELS]
        return tuple(KernelTotal(name, KINDS[kind], int(n), total * scale) for (name, kind), (n, total) in ranked)


def _memory_peak(device: Frozen, window: list[Span]) -> tuple[float, float] | None:
    best_allocated = best_reserved = -1.0
    for low, high in window:
        first, last = np.searchsorted(device.memory_ts, [low, high], side="left")
        if last > first:
            best_allocated = max(best_allocated, float(device.memory_allocated[first:last].max()))
            best_reserved = max(best_reserved, float(device.memory_reserved[first:last].max()))
    return (best_allocated, best_reserved) if best_allocated >= 0 else None


UNIONS = {  # the unions measured, by the kinds of device event in each
    "compute": (COMPUTE,),
    "communication": (COMMUNICATION,),
    "busy": (COMPUTE, MEMCPY, MEMSET),
    "compute_communication": (COMPUTE, COMMUNICATION),
    "memory": (MEMCPY, MEMSET),
}


class _Swept(NamedTuple):
    unions: dict[str, float]  # the length of each of UNIONS
    running: float  # the length of the union of every device event
    lanes: dict[str, Lane]
    sums: _Sums
    idle: _Idle


def _sweep(device: Frozen, window: list[Span], host_waiting: list[Span], gap: float, scale: float) -> _Swept:
    """One pass over the window's device events, span by span, chunk by chunk."""
    unions = {name: Reach() for name in UNIONS}
    running = Reach()
    lanes = {name: Lane(gap) for name in ("compute", "memory", "communication")}
    sums, idle = _Sums(len(device.name_list)), _Idle(device, scale)
    for low, high in window:
        for measured in (*unions.values(), running):
            measured.begin(low)
        waits_here = clip(host_waiting, [(low, high)])
        for chunk in chunks(device, low, high):
            sums.feed(device, chunk)
            for name, kinds in UNIONS.items():
                keep = np.isin(chunk.kinds, kinds)
                starts, ends = chunk.starts[keep], chunk.ends[keep]
                unions[name].feed(starts, ends)
                if name in lanes:
                    lanes[name].feed(starts, ends)
            opens, closes, where = running.feed(chunk.starts, chunk.ends)
            idle.gaps(opens, closes, chunk.at[where], waits_here)
        if running.reach < high:  # the gap from the window's last device event to its end
            after = np.searchsorted(device.starts, high, side="left")
            idle.gaps(np.asarray([running.reach]), np.asarray([high]), np.asarray([after]), waits_here)
    return _Swept({n: u.length for n, u in unions.items()}, running.length, lanes, sums, idle)


def gpu_time(device: Frozen, window: list[Span], waits: list[Span], scale: float, phase: str = "") -> GpuTime:
    """The GPU's figures over ``window`` (disjoint, sorted, in trace units; ``scale`` seconds a
    unit); ``waits``: the host's collectives and the NCCL kernels (disjoint, sorted)."""
    origin = window[0][0] if window else 0.0
    gap = ((window[-1][1] - origin) if window else 0.0) / LANE_PIECES
    host_waiting = clip(waits, window)
    swept = _sweep(device, window, host_waiting, gap, scale)
    length_of, sums, idle = swept.unions, swept.sums, swept.idle
    # communication not hidden by GPU work: NCCL kernels (all device time less GPU work), and the host
    # inside a collective while the GPU sat idle
    waiting = swept.running - length_of["busy"] + idle.in_collectives
    peak = _memory_peak(device, window)
    annotated = device.annotations.get(phase)

    def drawn(spans: list[Span]) -> list[Span]:
        return [((s - origin) * scale, (e - origin) * scale) for s, e in spans]

    return GpuTime(
        window_s=length(window) * scale,
        events=int(sums.started.sum()),
        kernels=int(sums.started[COMPUTE]),
        compute_s=float(sums.by_kind[COMPUTE]) * scale,
        communication_s=float(sums.by_kind[COMMUNICATION]) * scale,
        memcpy_s=float(sums.by_kind[MEMCPY]) * scale,
        memset_s=float(sums.by_kind[MEMSET]) * scale,
        busy_s=length_of["busy"] * scale,
        compute_busy_s=length_of["compute"] * scale,
        communication_busy_s=length_of["communication"] * scale,
        overlap_s=(length_of["compute"] + length_of["communication"] - length_of["compute_communication"]) * scale,
        waiting_s=max(waiting, 0.0) * scale,
        idle_s=(idle.host + idle.launch + idle.other) * scale,
        idle_causes=IdleCauses(idle.host * scale, idle.launch * scale, idle.other * scale),
        top=sums.top(device, scale),
        peak_allocated_bytes=peak[0] if peak else None,
        peak_reserved_bytes=peak[1] if peak else None,
        device_window_s=length(union(annotated)) * scale if annotated else None,
        lanes=Lanes(
            drawn(swept.lanes["compute"].end()),
            drawn(swept.lanes["memory"].end()),
            drawn(swept.lanes["communication"].end()),
            _thin(drawn(host_waiting), gap * scale),
        ),
    )


def _thin(spans: list[Span], gap: float) -> list[Span]:
    """Spans for drawing: those closer than ``gap`` merged."""
    thinned: list[Span] = []
    for start, end in spans:
        if thinned and start - thinned[-1][1] < gap:
            thinned[-1] = (thinned[-1][0], end)
        else:
            thinned.append((start, end))
    return thinned


def whole_trace(device: Frozen, waits: list[Span], scale: float) -> GpuTime | None:
    """The GPU over its own busy window, from its first device event's start to its last one's
    end (the window Holistic Trace Analysis' temporal breakdown reads), or None without any."""
    if not len(device.starts):
        return None
    return gpu_time(device, [(float(device.starts[0]), float(device.ends.max()))], waits, scale)
