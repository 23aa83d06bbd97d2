"""Chrome-trace files (torch profiler ``*.json.gz`` / ``*.pt.trace.json``, Ascend MSTX
``trace_view.json``), read as a stream (``json_stream.py``): one event in memory at a time, so a trace of
hundreds of megabytes costs what its phase ranges and collectives take, not its size."""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from collections.abc import Iterator
from math import isfinite
from pathlib import Path
from typing import NamedTuple

from verl_rl_insight.commands.traces import phases as names
from verl_rl_insight.commands.traces.gpu_events import DeviceEvents
from verl_rl_insight.commands.traces.gpu_time import whole_trace
from verl_rl_insight.commands.traces.intervals import Span, union
from verl_rl_insight.commands.traces.json_stream import Truncated, read_events
from verl_rl_insight.commands.traces.kernels import COMMUNICATION, DEVICE_CATEGORIES, collective_of_kernel, kind_of
from verl_rl_insight.commands.traces.summary import BadTrace, FileSummary, TraceOrigin, phase_times, window

US = 1e-6  # chrome traces count microseconds
ANNOTATION_CATS = (None, "user_annotation", "python_function")
MAX_NAME = 1024  # characters of a name the reader keeps (a kernel's template soup is shorter)
SEEN_NAMES = 1 << 14  # names whose meaning the reader remembers: past them it works each out again
MAX_RANKS = 2**31
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")  # the host's launches: cudaLaunchKernel, cuLaunchKernelEx, ...
# MSTX's overlap analysis: the device's communication that no computation hid, i.e. waiting
ASCEND_WAIT = "Communication(Not Overlapped)"
READ_ERRORS = (OSError, EOFError, zlib.error, ValueError, UnicodeDecodeError)


def _open(path: Path) -> io.BufferedIOBase:
    if path.name.endswith(".gz"):
        return gzip.GzipFile(path, "rb")
    return path.open("rb")


def _origin(header: dict[str, object], first: float, last: float) -> TraceOrigin:
    info = header.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    world, backend = _whole(info.get("world_size"), MAX_RANKS), info.get("backend")
    devices = header.get("deviceProperties")
    device = devices[0].get("name") if isinstance(devices, list) and devices and isinstance(devices[0], dict) else None
    base = _number(header.get("baseTimeNanoseconds"))
    if base is not None and 0 <= base < 1e20 and first <= last:
        wall: tuple[float, float] | None = (base / 1e9 + first * US, base / 1e9 + last * US)
    elif first > 1e15 and first <= last:  # microseconds since 1970 already (older kineto, MSTX)
        wall = (first * US, last * US)
    else:
        wall = None
    return TraceOrigin(
        world,
        backend[:64] if isinstance(backend, str) else None,
        device if isinstance(device, str) else None,
        wall[0] if wall else None,
        wall[1] if wall else None,
    )


def _events(path: Path, header: dict[str, object]) -> Iterator[object]:
    with _open(path) as stream:
        yield from read_events(stream, header)


def _number(value: object) -> float | None:
    """A finite number, or None (a string of one: MSTX writes ts as a string; "nan" and "inf" are none)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            found = float(value)
        except OverflowError:  # an integer past a float
            return None
        return found if math.isfinite(found) else None
    return None


def _whole(value: object, high: float) -> int | None:
    """A whole number in [0, high), or None."""
    found = _number(value)
    return int(found) if found is not None and found.is_integer() and 0 <= found < high else None


DEVICE, LAUNCH, ON_DEVICE, PHASE, STEP, COLLECTIVE, OTHER = range(7)


class _Seen(NamedTuple):
    """What an event of a category and name is to the analysis, worked out once a name."""

    action: int  # DEVICE, LAUNCH, ON_DEVICE (a phase's window on the device), PHASE, STEP, COLLECTIVE or OTHER
    kind: int = 0  # a device event's kind (kernels.COMPUTE, ...)
    label: str = ""  # the phase or the collective


def _what(category: object, name: str) -> _Seen:
    if len(name) > MAX_NAME and category not in DEVICE_CATEGORIES:  # no phase or collective is named so
        return _Seen(OTHER)
    if isinstance(category, str) and category in DEVICE_CATEGORIES:
        kind = kind_of(category, name)
        return _Seen(DEVICE, kind) if kind is not None else _Seen(OTHER)
    if category in RUNTIME_CATEGORIES:
        return _Seen(LAUNCH)
    phase = names.PHASE_OF.get(name)
    if phase is not None and category == "gpu_user_annotation":
        return _Seen(ON_DEVICE, label=phase)
    if phase is not None and category in ANNOTATION_CATS:
        return _Seen(PHASE, label=phase)
    if name.startswith("ProfilerStep#") and category in ANNOTATION_CATS:
        return _Seen(STEP)
    op = "HCCL" if name == ASCEND_WAIT else names.collective(name)
    if op is not None and category != "gpu_user_annotation":
        return _Seen(COLLECTIVE, label=op)
    return _Seen(OTHER)


class _Collected:
    """The spans a trace's events leave: phases, collectives, the device's events, and the whole window."""

    def __init__(self) -> None:
        self.phases: dict[str, list[Span]] = {}
        self.steps: list[Span] = []  # torch's own ProfilerStep#N ranges: the phase when verl marked none
        self.collectives: dict[str, list[Span]] = {}
        self.device = DeviceEvents()
        self.first = float("inf")
        self.last = float("-inf")
        self.events = 0
        self.origin: float | None = None  # the first stamp: every time is kept relative to it
        self._seen: dict[tuple[object, str], _Seen] = {}

    def _since(self, stamp: float) -> float:
        """``stamp`` from the trace's first one: kineto's stamps (5.5e12 us) hold a duration of a
        0.7 us memset to 1 ns at best, added to them; from the origin it keeps its digits."""
        if self.origin is None:
            self.origin = stamp
        return stamp - self.origin

    def add(self, event: dict[str, object]) -> None:
        """One event of the trace (the hot loop: a 200 MB trace has a million)."""
        self.events += 1
        phase_type = event.get("ph")
        if phase_type != "X":
            if phase_type == "i":
                self._instant(event)
            return
        raw_ts, raw_dur = event.get("ts"), event.get("dur")
        stamp = raw_ts if isinstance(raw_ts, float) and isfinite(raw_ts) else _number(raw_ts)
        dur = raw_dur if isinstance(raw_dur, float) and isfinite(raw_dur) else _number(raw_dur)
        if stamp is None or dur is None or dur < 0:
            return
        start = self._since(stamp)
        end = start + dur
        if start < self.first:
            self.first = start
        if end > self.last:
            self.last = end
        name, category = event.get("name"), event.get("cat")
        if not isinstance(name, str) or not (category is None or isinstance(category, str)):
            return
        seen = self._seen.get((category, name))
        if seen is None:
            seen = _what(category, name)
            if len(self._seen) < SEEN_NAMES and len(name) <= MAX_NAME:  # a trace of distinct names costs no memory
                self._seen[(category, name)] = seen
        action = seen.action
        if action == OTHER:
            return
        if action == DEVICE:
            self.device.add(start, end, seen.kind, name, _correlation(event) or -1)
            if seen.kind == COMMUNICATION:  # the rank waits in it for its peers, unless GPU work hides it
                self.collectives.setdefault(collective_of_kernel(name), []).append((start, end))
        elif action == LAUNCH:
            correlation = _correlation(event)
            if correlation is not None:
                self.device.launch(correlation, start)
        elif action == ON_DEVICE:
            self.device.annotate(seen.label, (start, end))
        elif action == PHASE:
            self.phases.setdefault(seen.label, []).append((start, end))
        elif action == STEP:
            self.steps.append((start, end))
        else:
            self.collectives.setdefault(seen.label, []).append((start, end))

    def _instant(self, event: dict[str, object]) -> None:
        if event.get("name") != "[memory]":
            return
        args = event.get("args")
        if not isinstance(args, dict) or args.get("Device Type") in (0, None):  # 0: the host's memory
            return
        ts, allocated, reserved = event.get("ts"), args.get("Total Allocated"), args.get("Total Reserved")
        if not (isinstance(ts, float) and isfinite(ts)):  # the fast path: kineto writes a float stamp, integer bytes
            ts = _number(ts)
        if not isinstance(allocated, int) or isinstance(allocated, bool) or abs(allocated) > 2**62:
            allocated = _number(allocated)
        if not isinstance(reserved, int) or isinstance(reserved, bool) or abs(reserved) > 2**62:
            reserved = _number(reserved)
        if ts is not None and allocated is not None:
            self.device.memory(self._since(ts), allocated, reserved if reserved is not None else 0.0)


def _correlation(event: dict[str, object]) -> int | None:
    args = event.get("args")
    return _whole(args.get("correlation"), 2**62) if isinstance(args, dict) else None


def _rank(path: Path, header: dict[str, object], mstx: bool) -> int | None:
    info = header.get("distributedInfo")
    if isinstance(info, dict) and _whole(info.get("rank"), MAX_RANKS) is not None:
        return _whole(info.get("rank"), MAX_RANKS)
    if mstx:  # MSTX: profiler_info_<rank>.json beside ASCEND_PROFILER_OUTPUT/
        for found in sorted(path.parent.parent.glob("profiler_info*.json")):
            try:
                rank = _whole(json.loads(found.read_text(errors="replace"))["rank_id"], MAX_RANKS)
            except (OSError, ValueError, KeyError, TypeError, RecursionError):
                continue
            if rank is not None:
                return rank
    return names.rank_in(path)


def read_chrome(path: Path) -> FileSummary:
    """One torch or MSTX trace: its rank, and each verl phase's time, collectives and GPU in it.

    A file without a phase range of its own (the official samples: one stage per folder) stands
    for the phase its folder or name says, from its first event to its last; a trace of neither
    (a plain torch job) has torch's own ``ProfilerStep#N`` ranges as its phase."""
    source = "mstx" if path.name == "trace_view.json" else "torch"
    header: dict[str, object] = {}
    try:
        collected = _Collected()
        for event in _events(path, header):
            if isinstance(event, dict):
                collected.add(event)
    except Truncated:
        raise BadTrace(str(path), "not a whole trace (the file ends inside its JSON)") from None
    except READ_ERRORS as exc:
        said = (str(exc).strip().splitlines() or [""])[0][:120]  # yajl's message draws a caret below
        raise BadTrace(str(path), f"not a whole trace ({type(exc).__name__}: {said})") from None
    if collected.events == 0:
        raise BadTrace(str(path), "no trace events in it")
    rank = _rank(path, header, source == "mstx")
    if rank is None or rank < 0:
        raise BadTrace(str(path), "no rank in it (distributedInfo.rank) nor in its name")
    spans = collected.phases
    whole = window([(collected.first, collected.last)])
    as_whole = names.phase_of_path(path)
    if not spans and as_whole is not None and whole is not None:
        spans = {as_whole: [whole]}
    if not spans and collected.steps:
        spans = {names.TORCH_STEP: collected.steps}
    device = collected.device.frozen() if len(collected.device) else None
    return FileSummary(
        str(path),
        source,
        rank,
        names.replica_in(path),
        names.node_in(path),
        names.step_in(path),
        phase_times(spans, collected.collectives, US, device),
        whole_trace(device, union(s for v in collected.collectives.values() for s in v), US) if device else None,
        _origin(header, collected.first + (collected.origin or 0.0), collected.last + (collected.origin or 0.0)),
    )
