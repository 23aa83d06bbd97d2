"""The hub's data model: streams (a label set's latest values and history) and the snapshots a push
adds to them. Who holds them: the streams table is ``memory.Memory``'s (its only writer); the one hub
lock, and which part owns what under it, ``memory.Bound``."""

from __future__ import annotations

import collections
import dataclasses
import math
import threading
from typing import NamedTuple, Protocol, TypedDict

from verl_rl_insight.contract.naming import label_text
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.metrics import budgets, exposition
from verl_rl_insight.server.metrics.positions import Identity, StreamKey
from verl_rl_insight.server.metrics.sizes import LINE_COPIES, SERIES_BYTES, STREAM_BYTES, line_length, snapshot_bytes

Line = tuple[str, str]  # (metric name, exposition line), as exposition.series_lines makes them


class Attempts(Protocol):
    """Numbers each trainer step's attempt among its values, under the hub's lock, in the order
    applied (``server/stores/run_attempts.py``: given to the hub at construction)."""

    def mark(self, batches: list[Batch]) -> list[Batch]: ...

    def forget(self, run: Run) -> None: ...


@dataclasses.dataclass(slots=True)
class Snapshot:
    """One applied batch: what a step logged, as it arrived."""

    seq: int
    step: int | None
    time: float
    received: float
    names: tuple[str, ...]
    values: tuple[float, ...]

    @property
    def nbytes(self) -> int:
        return snapshot_bytes(len(self.values))

    @property
    def identity(self) -> Identity:
        return Identity(self.step, self.time)


@dataclasses.dataclass(slots=True)
class LiveLines:
    """A stream's live exposition lines, for the version of its latest values they were made of."""

    version: int
    lines: list[Line]


class Stream:
    """One label set (project, experiment_name, extra labels): its latest values and history.

    Made by ``Memory.add_stream`` (a push) or read back at start (``HubFiles.load_latest``); then,
    under the hub lock, its values and history written by the push that applies a batch to it
    (``MetricHub``), its oldest history dropped by ``Memory.drop_oldest``, ``shared`` set by a
    scrape that takes ``latest`` (``take_latest``); ``cache`` by a render, under the render lock
    (``live_lines``)."""

    __slots__ = (
        "key",
        "labels",
        "latest",
        "version",
        "step",
        "newest_time",
        "updated",
        "history",
        "seen",
        "names",
        "cache",
        "line_chars",
        "restored_for",
        "run",
        "shared",
    )

    def __init__(self, key: StreamKey) -> None:
        self.key = key
        self.labels = label_text(key)
        # changed in place by a push only while no scrape holds it (``shared``), else replaced
        self.latest: dict[str, float] = {}
        self.shared = False  # ``latest`` was handed to a scrape: the next push copies it first
        self.version = 0
        self.step: int | None = None
        self.newest_time = -math.inf
        self.updated = 0.0
        self.history: collections.deque[Snapshot] = collections.deque()
        # (step, time) of the timed snapshots held: resent copies are dropped
        self.seen: set[tuple[int | None, float]] = set()
        self.names: tuple[str, ...] = ()  # the names tuple of the newest snapshot: the next one shares it when equal
        self.cache = LiveLines(-1, [])
        self.line_chars = 0  # the characters of its live exposition lines, all series together
        # read back from a clean stop: the named scrapers that had been sent all of it then; the
        # others do not get these values (newer than the history they lack) until the next push
        self.restored_for: frozenset[str] | None = None
        self.run = budgets.run_of(key)  # whose share of the memory bound it is booked to

    def line_length(self, name: str) -> int:
        return line_length(len(self.labels), name)

    def booked(self) -> int:
        """What the hub counts for it, history aside: its objects, label text, values and line copies."""
        return STREAM_BYTES + len(self.labels) + SERIES_BYTES * len(self.latest) + LINE_COPIES * self.line_chars

    def take_latest(self) -> dict[str, float]:
        """``latest`` for a scrape to read outside the lock: a push no longer changes it in place."""
        self.shared = True
        return self.latest

    def history_bytes(self) -> int:
        return sum(s.nbytes for s in self.history)

    def live_lines(self, latest: dict[str, float], version: int | None) -> list[Line]:
        """The lines of ``latest`` (its values as of ``version``; None: not the stream's own, never cached)."""
        if version is not None and self.cache.version == version:
            return self.cache.lines
        lines = exposition.series_lines(self.labels, latest.keys(), latest.values())
        if version is not None and version >= self.cache.version:
            self.cache = LiveLines(version, lines)
        return lines


def check_held(lock: threading.Lock) -> None:
    """A method that runs under its caller's hub lock checks that it is held (by someone: a lock
    does not say by whom); raises RuntimeError when it is not."""
    if not lock.locked():
        raise RuntimeError("called without the hub lock held")


class _Applied(TypedDict):
    accepted: int
    duplicates: int
    hub: str


class PushResult(_Applied, total=False):
    """A push's answer (``wire.PushAnswer``): what it left out only where it left something out."""

    dropped_keys: dict[str, str]
    step_disagreements: int


class Removed(NamedTuple):
    """What ``delete_run`` forgot."""

    streams: int
    series: int
