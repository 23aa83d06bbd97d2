"""A trace's device side, kept compactly while the file streams by: every kernel, memcpy and memset
(start, end, kind, name, CUDA correlation id), the host's launch of each (the runtime call's start,
by correlation id), the allocator's ``[memory]`` points and the ``gpu_user_annotation`` windows.

Arrays of numbers, not events: about 40 bytes a device event and 16 a launch, so a rank's 200 MB
trace (about 130,000 kernels) costs some 8 MB. The memory points are bounded (``MEMORY_POINTS``):
past it, neighbouring pairs are merged into the larger, which keeps every peak."""

from __future__ import annotations

from array import array
from bisect import bisect_left

from verl_rl_insight.commands.traces.intervals import Span, union
from verl_rl_insight.commands.traces.kernels import COMMUNICATION

MEMORY_POINTS = 1 << 18  # allocator points kept per file (6 MB); pairs merge past it


class DeviceEvents:
    """One file's device events, in the order they came, and what is needed to read them."""

    def __init__(self) -> None:
        self.starts = array("d")
        self.ends = array("d")
        self.kinds = array("b")
        self.names = array("i")
        self.correlations = array("q")
        self.name_ids: dict[str, int] = {}
        self.name_list: list[str] = []
        self.launch_ids = array("q")
        self.launch_starts = array("d")
        self.memory_ts = array("d")
        self.memory_allocated = array("d")
        self.memory_reserved = array("d")
        self.annotations: dict[str, list[Span]] = {}
        self._order: list[int] | None = None
        self._sorted_starts: list[float] = []
        self._longest = 0.0
        self._launched: dict[int, float] | None = None
        self._memory_sorted: tuple[list[int], list[float]] | None = None

    def __len__(self) -> int:
        return len(self.starts)

    def add(self, start: float, end: float, kind: int, name: str, correlation: int) -> None:
        """A kernel, memcpy or memset on the device (``correlation``: -1 when the trace has none)."""
        found = self.name_ids.get(name)
        if found is None:
            found = self.name_ids[name] = len(self.name_list)
            self.name_list.append(name)
        self.starts.append(start)
        self.ends.append(end)
        self.kinds.append(kind)
        self.names.append(found)
        self.correlations.append(correlation)
        self._order = None

    def launch(self, correlation: int, start: float) -> None:
        """The host's runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) that queued the
        device event of this correlation id."""
        self.launch_ids.append(correlation)
        self.launch_starts.append(start)
        self._launched = None

    def memory(self, ts: float, allocated: float, reserved: float) -> None:
        """An allocator point: the device's allocated and reserved bytes after an allocation or a free."""
        if len(self.memory_ts) >= MEMORY_POINTS:
            self._halve_memory()
        self.memory_ts.append(ts)
        self.memory_allocated.append(allocated)
        self.memory_reserved.append(reserved)
        self._memory_sorted = None

    def _halve_memory(self) -> None:
        ts, allocated, reserved = array("d"), array("d"), array("d")
        for i in range(0, len(self.memory_ts) - 1, 2):
            keep = i if self.memory_allocated[i] >= self.memory_allocated[i + 1] else i + 1
            ts.append(self.memory_ts[keep])
            allocated.append(self.memory_allocated[keep])
            reserved.append(max(self.memory_reserved[i], self.memory_reserved[i + 1]))
        self.memory_ts, self.memory_allocated, self.memory_reserved = ts, allocated, reserved

    def annotate(self, phase: str, span: Span) -> None:
        """A phase's window on the device's own timeline (``gpu_user_annotation``)."""
        self.annotations.setdefault(phase, []).append(span)

    def order(self) -> list[int]:
        """The device events' indices by start."""
        if self._order is None:
            starts = self.starts
            self._order = sorted(range(len(starts)), key=starts.__getitem__)
            self._sorted_starts = [starts[i] for i in self._order]
            self._longest = max((e - s for s, e in zip(self.starts, self.ends)), default=0.0)
        return self._order

    def work(self) -> list[Span]:
        """When the device ran GPU work (compute kernels, memcpy, memset; not NCCL): the union."""
        return union((s, e) for s, e, k in zip(self.starts, self.ends, self.kinds) if k != COMMUNICATION)

    def sorted_starts(self) -> list[float]:
        """The device events' starts, in the order of ``order()``."""
        self.order()
        return self._sorted_starts

    def longest(self) -> float:
        """The longest device event's duration."""
        self.order()
        return self._longest

    def launched_at(self, index: int) -> float | None:
        """When the host launched device event ``index`` (its runtime call's start), if the trace says."""
        correlation = self.correlations[index]
        if correlation < 0:
            return None
        if self._launched is None:
            self._launched = dict(zip(self.launch_ids, self.launch_starts))
        return self._launched.get(correlation)

    def memory_peak(self, window: list[Span]) -> tuple[float, float] | None:
        """The largest allocated and reserved bytes of the allocator points inside ``window``."""
        if not self.memory_ts:
            return None
        if self._memory_sorted is None:
            by_time = sorted(range(len(self.memory_ts)), key=self.memory_ts.__getitem__)
            self._memory_sorted = (by_time, [self.memory_ts[i] for i in by_time])
        order, stamps = self._memory_sorted
        best_allocated = best_reserved = -1.0
        for start, end in window:
            for i in order[bisect_left(stamps, start) : bisect_left(stamps, end)]:
                best_allocated = max(best_allocated, self.memory_allocated[i])
                best_reserved = max(best_reserved, self.memory_reserved[i])
        return (best_allocated, best_reserved) if best_allocated >= 0 else None
