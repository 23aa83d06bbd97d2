"""A trace's device side, kept compactly while the file streams by: every kernel, memcpy and memset
(start, end, kind, name, CUDA correlation id), the host's launch of each (the runtime call's start,
by correlation id), the allocator's ``[memory]`` points and the ``gpu_user_annotation`` windows.

Arrays of numbers, not events: about 30 bytes a device event, 16 a launch and 24 an allocator
point while reading, so a rank's 200 MB trace costs some 10 MB; once read, ``frozen()`` sorts them
into numpy arrays that every window's figures are computed from. The allocator points are bounded
(``MEMORY_POINTS``): past it, neighbouring pairs are merged into the larger, which keeps every peak."""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from verl_rl_insight.commands.traces.intervals import Span

if TYPE_CHECKING:  # numpy.typing costs a tenth of a second to import: only the checker reads it
    import numpy.typing as npt

    Floats = npt.NDArray[np.float64]
    Ints = npt.NDArray[np.signedinteger]  # int64 ids, int8 kinds, int32 name numbers
    Bools = npt.NDArray[np.bool_]

MAX_NAME = 1024  # characters of a kernel's name kept
MAX_NAMES = 1 << 14  # distinct kernel names kept; past them, "(other kernels)"
OTHER_KERNELS = "(other kernels)"
MEMORY_POINTS = 1 << 16  # allocator points kept per file (1.5 MB); past it, pairs merge into the larger


class Frozen(NamedTuple):
    """A file's device events sorted by start, its launches sorted by correlation id, its
    allocator points sorted by time: what the windows' figures read."""

    starts: Floats
    ends: Floats
    kinds: Ints
    names: Ints  # an index into ``name_list``
    correlations: Ints  # -1: the trace gave none
    name_list: list[str]
    launch_ids: Ints
    launch_starts: Floats
    memory_ts: Floats
    memory_allocated: Floats
    memory_reserved: Floats
    annotations: dict[str, list[Span]]
    longest: float  # the longest device event's duration

    def launched_at(self, indices: Ints) -> Floats:
        """When the host launched each device event of ``indices`` (its runtime call's start);
        NaN where the trace does not say."""
        wanted = self.correlations[indices]
        found = np.full(len(wanted), np.nan)
        if not len(self.launch_ids):
            return found
        at = np.searchsorted(self.launch_ids, wanted).clip(0, len(self.launch_ids) - 1)
        hit = (self.launch_ids[at] == wanted) & (wanted >= 0)
        found[hit] = self.launch_starts[at[hit]]
        return found


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

    def __len__(self) -> int:
        return len(self.starts)

    def add(self, start: float, end: float, kind: int, name: str, correlation: int) -> None:
        """A kernel, memcpy or memset on the device (``correlation``: -1 when the trace has none).
        Names are kept to ``MAX_NAME`` characters and ``MAX_NAMES`` distinct ones (the rest: "other")."""
        name = name[:MAX_NAME]
        found = self.name_ids.get(name)
        if found is None:
            if len(self.name_list) >= MAX_NAMES:
                name = OTHER_KERNELS
                found = self.name_ids.get(name)
            if found is None:
                found = self.name_ids[name] = len(self.name_list)
                self.name_list.append(name)
        self.starts.append(start)
        self.ends.append(end)
        self.kinds.append(kind)
        self.names.append(found)
        self.correlations.append(correlation)

    def launch(self, correlation: int, start: float) -> None:
        """The host's runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) that queued the
        device event of this correlation id."""
        self.launch_ids.append(correlation)
        self.launch_starts.append(start)

    def memory(self, ts: float, allocated: float, reserved: float) -> None:
        """An allocator point: the device's allocated and reserved bytes after an allocation or a free."""
        if len(self.memory_ts) >= MEMORY_POINTS:
            self._halve_memory()
        self.memory_ts.append(ts)
        self.memory_allocated.append(allocated)
        self.memory_reserved.append(reserved)

    def _halve_memory(self) -> None:
        ts, allocated, reserved = (np.frombuffer(a, dtype=np.float64) for a in self._memory())
        pairs = len(ts) // 2 * 2
        larger = np.where(allocated[0:pairs:2] >= allocated[1:pairs:2], 0, 1) + np.arange(0, pairs, 2)
        self.memory_ts = array("d", ts[larger].tobytes())
        self.memory_allocated = array("d", allocated[larger].tobytes())
        self.memory_reserved = array("d", np.maximum(reserved[0:pairs:2], reserved[1:pairs:2]).tobytes())

    def _memory(self) -> tuple[array[float], array[float], array[float]]:
        return self.memory_ts, self.memory_allocated, self.memory_reserved

    def annotate(self, phase: str, span: Span) -> None:
        """A phase's window on the device's own timeline (``gpu_user_annotation``)."""
        self.annotations.setdefault(phase, []).append(span)

    def frozen(self) -> Frozen:
        """The events sorted, as numpy arrays. The reading arrays are let go one by one as their
        sorted copies are made (a 200 MB trace's are 15 MB): call it once."""
        order = np.argsort(np.frombuffer(self.starts, dtype=np.float64), kind="stable")
        starts = self._floats("starts", order)
        ends = self._floats("ends", order)
        by_id = np.argsort(np.frombuffer(self.launch_ids, dtype=np.int64), kind="stable")
        by_time = np.argsort(np.frombuffer(self.memory_ts, dtype=np.float64), kind="stable")
        return Frozen(
            starts,
            ends,
            self._ints("kinds", np.int8, order),
            self._ints("names", np.int32, order),
            self._ints("correlations", np.int64, order),
            self.name_list,
            self._ints("launch_ids", np.int64, by_id),
            self._floats("launch_starts", by_id),
            self._floats("memory_ts", by_time),
            self._floats("memory_allocated", by_time),
            self._floats("memory_reserved", by_time),
            self.annotations,
            float((ends - starts).max()) if len(starts) else 0.0,
        )

    def _floats(self, field: str, order: Ints) -> Floats:
        """The reading array ``field`` in ``order``, the array itself let go."""
        found: Floats = np.frombuffer(getattr(self, field), dtype=np.float64)[order]
        setattr(self, field, array(getattr(self, field).typecode))
        return found

    def _ints(self, field: str, dtype: type[np.signedinteger], order: Ints) -> Ints:
        found: Ints = np.frombuffer(getattr(self, field), dtype=dtype)[order]
        setattr(self, field, array(getattr(self, field).typecode))
        return found
