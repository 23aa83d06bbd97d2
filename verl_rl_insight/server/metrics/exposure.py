"""What one scrape exposes: references taken under the hub lock (``scrapes.py``), formatted outside it.

Each stream's live values, and for a named scraper also the history it has not been sent, each
snapshot stamped (``stamp``); then the hub's own series, the collectors' lines and, for a
confirming scraper, its scrape number.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from verl_rl_insight.server.metrics import exposition
from verl_rl_insight.server.metrics.model import Line, Snapshot, Stream
from verl_rl_insight.server.metrics.positions import Identity, Mark, Scraper, Stamp, StreamKey
from verl_rl_insight.server.metrics.stats import HUB_PREFIX, Stat, stat_lines

SCRAPE_NUMBER = HUB_PREFIX + "scrape_number"  # in a confirming scraper's body: read back from its store


class Collector(Protocol):
    """Series of the server's own read at scrape time (the marks), client_python's habit: typed
    exposition lines, and a number that moves on whenever they change (the unnamed scrapes' shared
    rendering is made again then)."""

    @property
    def version(self) -> int: ...

    def lines(self) -> list[str]: ...


class Outgoing(NamedTuple):
    """A snapshot in a scrape's body, sent for the first time or again (the store lacks it), with
    its stamp. Not one record with ``Stamp``: a stamp outlives the snapshot (the positions keep no
    values, so the history can go), while a body needs the values."""

    snapshot: Snapshot
    stamp: Stamp


@dataclasses.dataclass(slots=True)
class Exposed:
    """One stream in one scrape."""

    stream: Stream
    latest: dict[str, float]  # its live values as taken
    version: int | None  # theirs; None: withheld from this scraper (read back at start), not cached
    sent: list[Outgoing]  # history it is sent for the first time, in order
    history: list[Snapshot] | None  # the whole history, where some of it waits for a later scrape


class Named(NamedTuple):
    """What a named scrape is, beside what it exposes: made whole by ``Scrapes`` under the hub lock."""

    scraper: Scraper
    arrival_ms: int
    serial: int  # its number in its scraper's scrapes of this process
    number: int  # a confirming scraper's scrape number, in the body (0: not confirming)
    resent: dict[StreamKey, list[Outgoing]]  # sent again: the store lacks them
    reserved: int  # bytes booked for its body until ``commit``


class Desk(Protocol):
    """What an exposure reports back to (``scrapes.Scrapes``)."""

    render_lock: threading.Lock
    collectors: Sequence[Collector]

    def save_promises(self) -> None: ...

    def settle(self, exposure: Exposure, written: bool) -> None: ...


class Exposure:
    """What one scrape exposes; a named one is ``commit``-ed once its response was written.

    Made whole under the hub lock (``Scrapes``), used outside it: ``body`` takes the render lock,
    then writes the promises (``Scrapes.save_promises``: its own lock, the hub lock while it
    copies); ``commit`` takes the hub lock (``Scrapes.settle``). It writes only its own attributes
    (what it rendered, whether it was committed)."""

    def __init__(self, desk: Desk, entries: list[Exposed], stats: tuple[Stat, ...], named: Named | None = None) -> None:
        """``named``: a named scrape's (None: an unnamed one, never committed)."""
        self.desk = desk
        self.entries = entries
        self.stats = stats
        self.named = named
        self.marks: dict[StreamKey, Mark] = {}
        self.first_sent: dict[StreamKey, list[Stamp]] = {}  # the stamps of ``Exposed.sent``, as rendered
        self.settled = False

    def body(self) -> bytes:
        """The body; a named scrape's timestamps are on disk before it returns (``promised``)."""
        with self.desk.render_lock:
            body = self.render()
        if self.named is not None and any(entry.sent for entry in self.entries):
            self.desk.save_promises()
        return body

    def render(self) -> bytes:
        """The body, under the desk's render lock (the caller holds it)."""
        families: collections.defaultdict[str, list[str]] = collections.defaultdict(list)
        resent = self.named.resent if self.named is not None else {}
        for entry in self.entries:
            stream = entry.stream
            for again in resent.get(stream.key, ()):
                _add(families, _stamped_lines(stream, again))
            for sent in entry.sent:
                _add(families, _stamped_lines(stream, sent))
            if entry.sent:
                last = entry.sent[-1].snapshot
                self.marks[stream.key] = Mark(last.seq, last.time)
                self.first_sent[stream.key] = [s.stamp for s in entry.sent]
            if entry.history is None:
                lines = stream.live_lines(entry.latest, entry.version)
            else:
                values = values_at(entry.latest, entry.history, entry.sent[-1].snapshot if entry.sent else None)
                lines = exposition.series_lines(stream.labels, values.keys(), values.values())
            _add(families, lines)
            exposition.pause()
        trailer = stat_lines(self.stats)
        for collector in self.desk.collectors:
            trailer += collector.lines()
        if self.named is not None and self.named.number:
            trailer += [
                f"# TYPE {SCRAPE_NUMBER} gauge",
                f'{SCRAPE_NUMBER}{{scraper="{self.named.scraper.name}"}} {self.named.number}',
            ]
        return exposition.body(families, trailer)

    def commit(self, written: bool = True) -> None:
        """The response was written (or, ``written=False``, could not be): move this scraper on."""
        if self.named is not None and not self.settled:
            self.settled = True
            self.desk.settle(self, written)

    def resent_stamps(self) -> dict[StreamKey, list[Stamp]]:
        """What it sent again, as the scraper keeps it until its store shows it."""
        resent = self.named.resent if self.named is not None else {}
        return {key: [r.stamp for r in items] for key, items in resent.items()}


def _stamped_lines(stream: Stream, outgoing: Outgoing) -> list[Line]:
    snapshot = outgoing.snapshot
    return exposition.series_lines(stream.labels, snapshot.names, snapshot.values, outgoing.stamp.ts_ms)


def _add(families: collections.defaultdict[str, list[str]], lines: list[Line]) -> None:
    for name, line in lines:
        families[name].append(line)


def values_at(latest: dict[str, float], history: list[Snapshot], last_sent: Snapshot | None) -> dict[str, float]:
    """The live values as of ``last_sent`` (None: before the first of ``history`` that is pending):
    the series that later snapshots change take their value from the newest snapshot up to it."""
    index = history.index(last_sent) + 1 if last_sent is not None else 0
    later: set[str] = set()
    for snapshot in history[index:]:
        later.update(snapshot.names)
    values = {name: value for name, value in latest.items() if name not in later}
    missing = set(later)
    for snapshot in reversed(history[:index]):
        for name, value in zip(snapshot.names, snapshot.values):
            if name in missing:
                values[name] = value
                missing.discard(name)
        if not missing:
            break
    return values  # a series whose value at that point is no longer held is left out of this scrape


def stamp(
    pending: list[Snapshot], prev_ms: int, limit_ms: int, promised: Mapping[Identity, Stamp], serial: int
) -> list[Outgoing]:
    """The snapshots that fit between ``prev_ms`` and ``limit_ms``, in order, stamped by scrape ``serial``:
    the trainer's own time where it fits, strictly increasing; what does not fit waits. A batch a
    scrape was given before (``promised``: a crash lost its position) gets that timestamp again,
    never a new one, even behind this scraper's previous visit: a store that has it keeps one
    sample, one that lacks it takes it in its out-of-order window, as a resent scrape."""
    room = limit_ms - prev_ms
    if room <= 0:
        return []
    pending = pending[:room]
    n = len(pending)
    stamped: list[Outgoing] = []
    for i, snapshot in enumerate(pending):
        given = promised.get(snapshot.identity)
        if given is not None and given.ts_ms <= limit_ms - (n - i - 1):
            stamped.append(Outgoing(snapshot, Stamp(snapshot.identity, given.ts_ms, serial)))
            prev_ms = max(prev_ms, given.ts_ms)
            continue
        ts = min(max(int(snapshot.time * 1000), prev_ms + 1), limit_ms - (n - i - 1))
        stamped.append(Outgoing(snapshot, Stamp(snapshot.identity, ts, serial)))
        prev_ms = ts
    return stamped
