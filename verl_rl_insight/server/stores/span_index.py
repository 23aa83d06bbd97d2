"""Where each step's spans lie in a run's span files (``spans.py``), kept as they are written, so a
step page (anyone may ask for one) reads and parses that step's spans and the spans beside it in
time, never the run's whole files.

Per run: for each step, the spans' time bounds and their places (segment, offset, length; the
adjacent ones merged); the spans without a step are placed by their start time, in buckets of
``LOOSE_NS``. Kept from the first write of a run on; a run the index does not hold (written before
the server started, or dropped for room) is indexed from its files at its first request, once.
When the store cuts a run's files (its oldest steps evicted) it tells the index what each cut
segment now holds. Bounded by bytes (``max_bytes``: a share of ``memory_limit_mb``): past it the
index of the run asked for or written to longest ago is dropped first (counted in
``stats.dropped_runs``), to be indexed again from its files when asked for.
"""

from __future__ import annotations

import json
import os
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from verl_rl_insight.server.settings.memory import DEFAULT_SHARES
from verl_rl_insight.server.stores.stats import SpanIndexStats

LOOSE_NS = 10 * 10**9  # the spans without a step, indexed by their start, in buckets this wide
ENTRY_BYTES = 240  # a step's entry: its dict slot, its object, its array's header
RANGE_BYTES = 24  # a place: segment, offset, length (int64 each)
RUN_BYTES = 1024  # a run's objects and dicts
MAX_BYTES = DEFAULT_SHARES.span_index  # the server gives its own share of memory_limit_mb (settings/memory.py)
Record = dict[str, object]
StepOf = Callable[[Mapping[str, object]], int | None]
Key = tuple[bool, int]  # (True, step) or (False, start bucket) of spans without a step


class Place(NamedTuple):
    """Where a span is kept: its segment file, and its bytes' offset and length there."""

    segment: int
    offset: int
    length: int


Places = list[Place]  # the places of spans in a run's files


class Entry:
    __slots__ = ("end", "places", "start")

    def __init__(self) -> None:
        self.start = 2**63
        self.end = -(2**63)
        self.places = array("q")

    def add(self, start: int, end: int, n: int, offset: int, length: int) -> None:
        self.start, self.end = min(self.start, start), max(self.end, end)
        p = self.places
        if p and p[-3] == n and p[-2] + p[-1] == offset:
            p[-1] += length
        else:
            p.extend((n, offset, length))


class RunIndex:
    def __init__(self) -> None:
        self.entries: dict[Key, Entry] = {}

    def nbytes(self) -> int:
        return RUN_BYTES + sum(ENTRY_BYTES + 8 * len(e.places) for e in self.entries.values())

    def add(self, record: Mapping[str, object], step: int | None, n: int, offset: int, length: int) -> None:
        start, end = record.get("start_ns"), record.get("end_ns")
        start = start if isinstance(start, int) else 0
        end = end if isinstance(end, int) else start
        key = (True, step) if step is not None else (False, start // LOOSE_NS)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = Entry()
        entry.add(start, end, n, offset, length)

    def forget_segment(self, n: int) -> None:
        """Every place in segment ``n`` goes (the segment was evicted, or is about to be re-placed)."""
        for key in list(self.entries):
            entry = self.entries[key]
            p = entry.places
            kept = array("q")
            for i in range(0, len(p), 3):
                if p[i] != n:
                    kept.extend(p[i : i + 3])
            entry.places = kept
            if not kept:
                del self.entries[key]

    def places_of(self, step: int) -> tuple[Places, tuple[int, int] | None]:
        """The places of the step's own spans, and its time bounds (None: no span of it here)."""
        entry = self.entries.get((True, step))
        if entry is None:
            return [], None
        return _triples(entry.places), (entry.start, entry.end)

    def places_during(self, start: int, end: int) -> Places:
        """The places of every span that may overlap [start, end] (a superset: each entry's bounds)."""
        found: Places = []
        for entry in self.entries.values():
            if entry.end > start and entry.start < end:
                found.extend(_triples(entry.places))
        return found


def _triples(places: array[int]) -> Places:
    return [Place(places[i], places[i + 1], places[i + 2]) for i in range(0, len(places), 3)]


class SpanIndex:
    """The runs' indexes, by run key; the store calls it under its own lock."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.stats = SpanIndexStats()
        self._runs: OrderedDict[str, RunIndex] = OrderedDict()
        self._bytes: dict[str, int] = {}

    def get(self, key: str) -> RunIndex | None:
        run = self._runs.get(key)
        if run is not None:
            self._runs.move_to_end(key)
        return run

    def start(self, key: str) -> RunIndex:
        """An empty index for ``key`` (a new run, or one about to be indexed from its files)."""
        run = self._runs[key] = RunIndex()
        self.stats.indexed_runs += 1
        return run

    def written(self, key: str, n: int, offset: int, lines: Iterable[tuple[Record, int | None, int]]) -> None:
        """``lines`` ((record, step, length) each) appended to segment ``n`` of run ``key`` at ``offset``."""
        run = self._runs.get(key)
        if run is None:
            return  # not indexed: indexed from its files when asked for
        for record, step, length in lines:
            run.add(record, step, n, offset, length)
            offset += length
        self.settle(key)

    def settle(self, key: str) -> None:
        """``key`` changed: its bytes counted again, the runs touched longest ago dropped for room."""
        run = self._runs.get(key)
        if run is None:
            return
        self._runs.move_to_end(key)
        self._bytes[key] = run.nbytes()
        total = sum(self._bytes.values())
        while len(self._runs) > 1 and total > self.max_bytes:
            gone, _ = self._runs.popitem(last=False)
            total -= self._bytes.pop(gone, 0)
            self.stats.dropped_runs += 1
        self.stats.bytes = total

    def drop(self, key: str) -> None:
        self._runs.pop(key, None)
        self.stats.bytes -= self._bytes.pop(key, 0)


def _parsed(line: bytes) -> dict[str, object] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def index_files(run: RunIndex, segments: Iterable[tuple[int, Path]], step_of: StepOf) -> int:
    """Index a run's files (a run the index did not hold); returns the bytes read."""
    read = 0
    for n, path in segments:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        read += len(data)
        offset = 0
        for line in data.splitlines(keepends=True):
            record = _parsed(line)
            if record is not None and line.endswith(b"\n"):
                run.add(record, step_of(record), n, offset, len(line))
            offset += len(line)
    return read


def read_places(paths: Mapping[int, Path], places: Iterable[Place]) -> tuple[list[Record], int]:
    """The spans at ``places`` (segment, offset, length) of the files ``paths`` (segment -> file), in
    the order of the places; and the bytes read."""
    found: list[Record] = []
    read = 0
    by_segment: dict[int, list[tuple[int, int]]] = {}
    for n, offset, length in places:
        by_segment.setdefault(n, []).append((offset, length))
    for n, ranges in sorted(by_segment.items()):
        path = paths.get(n)
        if path is None:
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            for offset, length in sorted(set(ranges)):
                data = os.pread(fd, length, offset)  # these bytes alone (a buffered read takes 8 KiB)
                read += len(data)
                found.extend(r for r in map(_parsed, data.splitlines()) if r is not None)
        finally:
            os.close(fd)
    return found, read
