"""verl's ``torch_memory`` tool's allocator snapshots (``torch.cuda.memory._dump_snapshot``:
``<save_path>/step<N>/torch_memory_rank<R>_pid<P>.pickle``, ``torch_memory_oom_...`` at an OOM):
the peak of the allocated memory the snapshot's history shows, and the largest allocations alive
at that peak, by the Python frame that made them.

A pickle is code, so it is read as data only: an unpickler that refuses every global (a real
snapshot holds dicts, lists, strings and numbers, nothing else), a file over ``MAX_BYTES`` is
refused, and every field is checked before it is used."""

from __future__ import annotations

import math
import pickle
import re
import resource
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import msgspec

from verl_rl_insight.commands.traces.phases import rank_in, step_in
from verl_rl_insight.commands.traces.summary import BadTrace

MAX_BYTES = 1 << 30  # larger snapshots are refused: unpickled they take several times their size
MAX_EVENTS = 2_000_000  # history entries read (torch keeps 100,000 by default, verl asks for 200,000)
MAX_BLOCKS = 5_000_000  # allocator blocks walked, counted through shared references
MAX_DEVICES = 64
CHILD_MEMORY = 1 << 30  # the reading child's address space: this ...
MEMORY_PER_BYTE = 16  # ... and this many bytes a byte of the file (a real snapshot takes about 8)
MAX_CHILD_MEMORY = 24 << 30
CHILD_CPU_S = 300
TOP_SITES = 10
NAME = re.compile(r"^torch_memory(?:_oom)?_rank\d+_pid\d+\.pickle$")
ALLOC, FREES = "alloc", ("free_completed", "free_requested")


class Site(NamedTuple):
    """Where live memory was allocated: the innermost Python frame of the allocations, their bytes and count."""

    where: str
    bytes: float
    allocations: int


class Snapshot(NamedTuple):
    """One rank's allocator snapshot: its peak and what was alive at it."""

    path: str
    rank: int
    step: int | None
    peak_bytes: float
    peak_unix_s: float | None  # when the peak was reached (the history's clock: seconds since 1970)
    events: int  # allocator events in its history (0: no history was recorded; the peak is the dump's state)
    sites: tuple[Site, ...]  # the largest sites of what the history saw allocated, largest first
    before: Site  # what was alive at the peak but allocated before the history began
    during: tuple[str, ...] = ()  # the record_function ranges open at the peak, outermost first

    @property
    def who(self) -> str:
        return str(self.rank)


def _open_at(data: dict[object, object], time_us: float | None) -> tuple[str, ...]:
    """The ``record_function`` ranges (verl's phases among them) open at ``time_us``, outermost
    first: the snapshot's ``external_annotations`` (START / END marks, newer torch)."""
    marks = data.get("external_annotations")
    if time_us is None or not isinstance(marks, list):
        return ()
    opened: dict[str, float] = {}
    spans: list[tuple[float, float, str]] = []
    for mark in marks[:MAX_EVENTS]:
        if not isinstance(mark, dict):
            continue
        name, stage, stamp = mark.get("name"), mark.get("stage"), _number(mark.get("time_us"))
        if not isinstance(name, str) or stamp is None:
            continue
        if stage == "START":
            opened[name] = stamp
        elif stage == "END" and name in opened:
            spans.append((opened.pop(name), stamp, name))
    spans += [(start, float("inf"), name) for name, start in opened.items()]
    return tuple(name[:120] for start, end, name in sorted(spans) if start <= time_us <= end)


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        raise pickle.UnpicklingError(f"it names {module}.{name}: a snapshot holds data only")


BEFORE = "(allocated before the history began)"


def _where(frames: object) -> str:
    """The innermost Python frame of a stack (``file.py:102 forward``); without one, the ATen op
    the stack shows (the frames below it are the allocator's and the stack capture's own)."""
    if isinstance(frames, str):
        return frames
    if not isinstance(frames, list) or not frames:
        return "(no stack recorded)"
    op = None
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        filename, line, name = frame.get("filename"), frame.get("line"), frame.get("name")
        if isinstance(filename, str) and filename.endswith(".py"):
            return f"{filename}:{line} {name}"[:300]
        if op is None and isinstance(name, str) and name.startswith("at::_ops::"):
            op = name.split("(")[0]
    return f"(no Python frame: {op})"[:300] if op else "(no Python frame recorded)"


class _Event(NamedTuple):
    """One allocator event of a snapshot's history, checked."""

    action: str
    addr: int
    size: float
    time_us: float | None
    frames: object


def _number(value: object) -> float | None:
    """A finite number of at most 1e18 (bytes, microseconds since 1970), or None."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if isinstance(value, int) and abs(value) > 10**18:
        return None
    found = float(value)
    return found if math.isfinite(found) and abs(found) <= 1e18 else None


def _entries(data: dict[object, object]) -> list[_Event]:
    """The history of the device with the most events, every entry checked."""
    traces = data.get("device_traces")
    if not isinstance(traces, list):
        return []
    busiest = max((t for t in traces[:MAX_DEVICES] if isinstance(t, list)), key=len, default=[])
    if len(busiest) > MAX_EVENTS:
        raise ValueError(f"a history of over {MAX_EVENTS:,} events")
    events = []
    for e in busiest:
        if not isinstance(e, dict):
            continue
        action, addr, size = e.get("action"), e.get("addr"), _number(e.get("size"))
        if isinstance(action, str) and isinstance(addr, int) and size is not None and size >= 0:
            events.append(_Event(action, addr, size, _number(e.get("time_us")), e.get("frames")))
    return events


Alive = dict[int, tuple[float, object]]  # address -> (bytes, the stack that allocated it)


def _alive_at_dump(data: dict[object, object]) -> Alive:
    alive: Alive = {}
    segments = data.get("segments")
    read = 0
    for segment in segments if isinstance(segments, list) else []:
        blocks = segment.get("blocks") if isinstance(segment, dict) else None
        read += len(blocks) if isinstance(blocks, list) else 1
        if read > MAX_BLOCKS:  # shared references make a small pickle a long walk
            raise ValueError(f"over {MAX_BLOCKS:,} blocks")
        for block in blocks if isinstance(blocks, list) else []:
            if isinstance(block, dict) and block.get("state") == "active_allocated":
                # the bytes asked for, as the history records an allocation (the block's own size is rounded up)
                addr, size = block.get("address"), _number(block.get("requested_size", block.get("size")))
                if isinstance(addr, int) and size is not None and size >= 0:
                    alive[addr] = (size, block.get("frames") or BEFORE)
    return alive


class _Peak(NamedTuple):
    bytes: float
    time_us: float | None
    events: int  # the history's events
    alive: Alive  # the allocations alive at the peak


def _replay(start: Alive, events: list[_Event], frees: str) -> Alive:
    live = dict(start)
    for e in events:
        if e.action == ALLOC:
            live[e.addr] = (e.size, e.frames)
        elif e.action == frees:
            live.pop(e.addr, None)
    return live


def _peak(data: dict[object, object]) -> _Peak:
    """The history replayed from what was alive before it began: its highest allocated bytes and
    the allocations alive then (without a history: the state at the dump)."""
    events = _entries(data)
    at_dump = _alive_at_dump(data)
    frees = FREES[0] if any(e.action == FREES[0] for e in events) else FREES[1]
    allocated_in_history = {e.addr for e in events if e.action == ALLOC}
    # alive before the history began: alive at the dump, or freed in it without being allocated in it
    start = {a: v for a, v in at_dump.items() if a not in allocated_in_history}
    seen: set[int] = set()
    for e in events:
        if e.action == ALLOC:
            seen.add(e.addr)
        elif e.action == frees and e.addr not in seen:
            start.setdefault(e.addr, (e.size, BEFORE))
    live = dict(start)
    now = peak = sum(size for size, _ in live.values())
    peak_at, peak_index = None, -1
    for i, e in enumerate(events):
        if e.action == ALLOC:
            now += e.size - (
                live[e.addr][0] if e.addr in live else 0.0
            )  # an address allocated again: its old block is gone
            live[e.addr] = (e.size, e.frames)
        elif e.action == frees and e.addr in live:
            now -= live.pop(e.addr)[0]
        if now > peak:
            peak, peak_index, peak_at = now, i, e.time_us
    if peak_index < 0:
        return _Peak(peak, None, len(events), at_dump if not events else start)
    # replayed again to the peak: a copy of the live set at every new peak would cost a square
    return _Peak(peak, peak_at, len(events), _replay(start, events[: peak_index + 1], frees))


def summarize(path: Path) -> Snapshot:
    """A snapshot's peak and its largest allocation sites, read in this process (``read_snapshot``
    reads it in a child process of bounded memory and time)."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise BadTrace(str(path), f"is {size / 1e9:.1f} GB: snapshots over {MAX_BYTES / 1e9:.1f} GB are not read")
        with path.open("rb") as f:
            data = _DataOnly(f).load()
        if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
            raise BadTrace(str(path), "not a memory snapshot (no 'segments' in it)")
        rank = rank_in(path)
        if rank is None:
            raise BadTrace(str(path), "no rank in its name (torch_memory_rank<R>_pid<P>.pickle)")
        peak = _peak(data)
    except BadTrace:
        raise
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, RecursionError, struct.error) as exc:  # fmt: skip
        said = (str(exc).strip().splitlines() or [""])[0][:160]
        raise BadTrace(str(path), f"not a memory snapshot ({type(exc).__name__}: {said})") from None
    sites: dict[str, Site] = {BEFORE: Site(BEFORE, 0.0, 0)}
    for allocated, frames in peak.alive.values():
        where = _where(frames)
        found = sites.get(where, Site(where, 0.0, 0))
        sites[where] = Site(where, found.bytes + allocated, found.allocations + 1)
    return Snapshot(
        str(path),
        rank,
        step_in(path),
        peak.bytes,
        peak.time_us / 1e6 if peak.time_us is not None else None,
        peak.events,
        tuple(sorted((v for k, v in sites.items() if k != BEFORE), key=lambda site: -site.bytes)[:TOP_SITES]),
        sites[BEFORE],
        _open_at(data, peak.time_us),
    )


def _limits(size: int) -> Callable[[], None]:
    def limit() -> None:  # in the child, before it runs
        memory = min(CHILD_MEMORY + MEMORY_PER_BYTE * size, MAX_CHILD_MEMORY)
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (CHILD_CPU_S, CHILD_CPU_S + 1))

    return limit


def read_snapshot(path: Path) -> Snapshot:
    """``summarize`` in a child process whose memory (``CHILD_MEMORY`` and ``MEMORY_PER_BYTE`` a byte of
    the file) and CPU time (``CHILD_CPU_S``) are bounded: a pickle of a few bytes can ask the
    unpickler for gigabytes (a memo index of 2**31), shared references can make a small one a long
    walk. Refused (one line naming the file): too large, not a pickle of data, not a snapshot, or
    past those bounds."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise BadTrace(str(path), f"cannot be read ({exc.strerror})") from None
    if size > MAX_BYTES:
        raise BadTrace(str(path), f"is {size / 1e9:.1f} GB: snapshots over {MAX_BYTES / 1e9:.1f} GB are not read")
    command = [sys.executable, "-m", "verl_rl_insight.commands.traces.snapshot", str(path)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=CHILD_CPU_S * 2, preexec_fn=_limits(size), check=False
        )
    except subprocess.TimeoutExpired:
        raise BadTrace(str(path), f"took over {CHILD_CPU_S * 2} s to read: not a snapshot torch writes") from None
    if done.returncode == 2:
        raise BadTrace(str(path), done.stderr.strip().splitlines()[-1].split(": ", 1)[-1][:300])
    if done.returncode != 0:
        why = "memory" if "MemoryError" in done.stderr else "time" if done.returncode < 0 else "a failure"
        raise BadTrace(str(path), f"not a memory snapshot: reading it ran out of its bounds ({why})")
    try:
        return msgspec.json.decode(done.stdout, type=Snapshot)
    except msgspec.DecodeError as exc:
        raise BadTrace(str(path), f"not a memory snapshot: its reader said something else ({exc})") from None


def main(argv: list[str]) -> int:
    """``python -m verl_rl_insight.commands.traces.snapshot PATH``: the summary as JSON (exit 0), or
    the one line that refuses it (exit 2)."""
    try:
        found = summarize(Path(argv[0]))
    except BadTrace as exc:
        print(exc, file=sys.stderr)
        return 2
    except MemoryError:
        print("MemoryError", file=sys.stderr)
        return 3
    print(msgspec.json.encode(found).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
