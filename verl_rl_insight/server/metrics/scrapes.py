"""The scraper delivery protocol: what each scrape is sent, and when a scraper moves on.

- an unnamed scrape gets the live values (``live_body``, one shared rendering);
- a *named* scraper (``GET /metrics?scraper=NAME``) also gets every snapshot it has not been sent,
  in order, each stamped with the trainer's own time (moved later only where Prometheus would
  refuse it: not before this scraper's previous visit). What it has been sent moves on only once
  its response was written (``Exposure.commit`` -> ``settle``);
- a *confirming* scraper has its history let go only once its store shows the scrape: each of its
  scrapes carries a number, the server reads the numbers back from the store (``delivery.py``:
  ``awaiting``, ``confirm``), and a scrape the store does not have is sent again with the same
  timestamps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from verl_rl_insight.contract.errors import Busy
from verl_rl_insight.server.metrics.exposure import Collector, Exposed, Exposure, Outgoing, stamp
from verl_rl_insight.server.metrics.memory import Bound
from verl_rl_insight.server.metrics.model import Snapshot, Stream, check_held
from verl_rl_insight.server.metrics.persistence import HubFiles
from verl_rl_insight.server.metrics.positions import Scraper, StreamKey
from verl_rl_insight.server.metrics.sizes import LINE_EXTRA, TIMESTAMP_CHARS
from verl_rl_insight.server.metrics.stats import Gauges, Stat, hub_series

logger = logging.getLogger("verl_rl_insight.server")

LIVE_MARGIN_MS = 50  # history is stamped this far before the scrape's own time, at the latest
MAX_SCRAPERS = 16


class ScrapeBusy(Busy):
    """A scrape by the same named scraper is still being served."""


class Awaiting(NamedTuple):
    """A confirming scraper's scrapes its store has not been asked about yet."""

    numbers: list[int]
    oldest: float  # when the oldest of them was written


class Scrapes:
    """What each scrape of the hub is sent: the named scrapers' positions (``HubData.scrapers``)
    and the unnamed scrapes' shared rendering.

    Its locks: ``render_lock``, its own (one body rendered at a time: its copies are booked), taken
    before the hub lock (``HubData.lock``) where both are held. ``live_body``, ``expose``,
    ``settle``, ``awaiting`` and ``confirm`` take the hub lock themselves (their private helpers
    run inside it); ``forget_idle``, ``give_up``, ``forget_stream`` and ``hub_series`` run under it,
    held by their caller (the hub's sweep in a push, ``delete_run``, ``summary``), and check that it
    is held.
    """

    def __init__(
        self,
        bound: Bound,
        files: HubFiles,
        clock: Callable[[], float],
        new_scraper_history_s: float,
        confirming: frozenset[str],
        collectors: Sequence[Collector],
    ) -> None:
        self.data, self.memory, self.stats = bound.data, bound.memory, bound.stats
        self.files = files  # the promises go to disk before a body that gives them is sent
        self.clock = clock
        self.new_scraper_history_s = new_scraper_history_s
        self.confirming = confirming  # scraper names whose store is read back (delivery.py)
        self.collectors = collectors
        self.render_lock = threading.Lock()
        self._live_version: tuple[int, ...] = ()  # the versions the shared rendering of the live values is of
        self._live_body = b""

    def save_promises(self) -> None:
        """``HubFiles.save_promises``: its own lock, then the hub lock while it copies."""
        self.files.save_promises()

    def hub_series(self) -> tuple[Stat, ...]:
        """The hub's own series, as of now (under the hub lock, held by the caller)."""
        data, memory = self.data, self.memory
        check_held(data.lock)
        gauges = Gauges(
            streams=len(data.streams),
            series=data.series,
            memory_bytes=memory.used,
            memory_limit_bytes=memory.limit,
            history_snapshots=data.history_snapshots(),
            scrapers=len(data.scrapers),
        )
        return hub_series(gauges, self.stats)

    def live_body(self) -> bytes:
        """The live values of every stream (what an unnamed scrape gets), rendered once per change
        (of the streams', or of what a collector exposes). Takes the render lock, then the hub lock
        while it takes references."""
        with self.render_lock:
            with self.data.lock:
                version = (self.data.version, *(c.version for c in self.collectors))
                if self._live_version == version:
                    return self._live_body
                entries = [Exposed(s, s.take_latest(), s.version, [], None) for s in self.data.streams.values()]
                exposure = Exposure(self, None, None, entries, self.hub_series())
            self._live_body = exposure.render()  # under the render lock already
            self._live_version = version
            return self._live_body

    def expose(self, name: str, arrival_ms: int) -> Exposure:
        """A named scrape: the live values and the history ``name`` has not been sent (takes the hub lock)."""
        with self.data.lock:
            state = self._scraper(name)
            if not state.busy.acquire(blocking=False):
                raise ScrapeBusy(f"a scrape by {name} is still being served")
            try:
                exposure = self._exposure(state, arrival_ms)
                self._reserve(exposure)
            except BaseException:
                state.busy.release()
                raise
        return exposure

    def _scraper(self, name: str) -> Scraper:
        state = self.data.scrapers.get(name)
        if state is None:
            if len(self.data.scrapers) >= MAX_SCRAPERS:
                raise Busy(f"at most {MAX_SCRAPERS} named scrapers; unnamed scrapes get live values")
            state = self.data.scrapers[name] = Scraper(name)
            state.confirm = name in self.confirming
        return state

    def _exposure(self, state: Scraper, arrival_ms: int) -> Exposure:
        state.seen_at = self.clock()
        floor_ms = arrival_ms - int(self.new_scraper_history_s * 1000)
        prev_start = state.last_ms if state.last_ms is not None else floor_ms
        limit_ms = arrival_ms - LIVE_MARGIN_MS
        entries: list[Exposed] = []
        for stream in self.data.streams.values():
            pending = _pending(state, stream, floor_ms)
            sent = stamp(pending, prev_start, limit_ms, state.promised.get(stream.key, {}), state.serial + 1)
            if sent:
                state.promise(stream.key, [s.stamp for s in sent])
            history = list(stream.history) if len(sent) < len(pending) else None
            if stream.restored_for is None or state.name in stream.restored_for:
                entries.append(Exposed(stream, stream.take_latest(), stream.version, sent, history))
            else:  # values read back at start, newer than the history this scraper lacks
                entries.append(Exposed(stream, {}, None, sent, history))
        exposure = Exposure(self, state, arrival_ms, entries, self.hub_series())
        state.serial += 1
        exposure.serial = state.serial
        if state.confirm:
            exposure.number = state.number = max(arrival_ms, state.number + 1)
            exposure.resent = self._resends(state)
        return exposure

    def _resends(self, state: Scraper) -> dict[StreamKey, list[Outgoing]]:
        """The batches ``state``'s store did not get that the hub still holds, with their stamps."""
        resent: dict[StreamKey, list[Outgoing]] = {}
        for key, wanted in state.resend.items():
            stream = self.data.streams.get(key)
            if stream is None:
                continue
            found = []
            for snapshot in stream.history:
                again = wanted.get(snapshot.identity)
                if again is not None:
                    found.append(Outgoing(snapshot, again))
            if found:
                resent[key] = found
        return resent

    def _reserve(self, exposure: Exposure) -> None:
        """Book what this named scrape's body adds to the booked copies (``Memory.reserve``)."""
        history = live = 0
        for entry in exposure.entries:
            stream = entry.stream
            chars = len(stream.labels) + LINE_EXTRA + TIMESTAMP_CHARS
            snapshots: list[Snapshot] = [s.snapshot for s in entry.sent]
            snapshots += [r.snapshot for r in exposure.resent.get(stream.key, ())]
            for snapshot in snapshots:
                history += len(snapshot.values) * chars + sum(map(len, snapshot.names))
            live += stream.line_chars
        exposure.reserved = self.memory.reserve(history, live)

    def settle(self, exposure: Exposure, written: bool) -> None:
        """A named scrape's response was written (or could not be): its scraper moves on (takes the hub lock)."""
        state = exposure.scraper
        if state is None:
            return
        streams = self.data.streams
        with self.data.lock:
            self.memory.release(exposure.reserved)
            state.last_ms = max(state.last_ms or 0, exposure.arrival_ms or 0)
            state.settled_serial = max(state.settled_serial, exposure.serial)
            if written:
                for key, mark in exposure.marks.items():
                    if key in streams:
                        state.marks[key] = mark
                        state.record(key, [stamp.identity for stamp in exposure.first_sent[key]])
                if state.confirm:
                    first = {k: v for k, v in exposure.first_sent.items() if k in streams}
                    state.await_store(exposure.number, self.clock(), exposure.resent_stamps(), first)
            self.data.state_dirty = True
        state.busy.release()

    # -- what the store confirms -------------------------------------------------------------
    def awaiting(self, written_before: float) -> dict[str, Awaiting]:
        """Per confirming scraper: its scrapes written before ``written_before`` that its store has
        not been asked about yet, and when the oldest of them was written (takes the hub lock)."""
        with self.data.lock:
            waiting: dict[str, Awaiting] = {}
            for name, state in self.data.scrapers.items():
                written = {n: s.written_at for n, s in state.inflight.items() if s.written_at <= written_before}
                if written:
                    waiting[name] = Awaiting(list(written), min(written.values()))
            return waiting

    def confirm(self, name: str, numbers: Sequence[int], stored: set[int]) -> int:
        """Settle scrapes ``numbers`` of scraper ``name``: those in ``stored`` its store has, and
        their history may go; the batches of the others are sent again at the next scrape, with
        the timestamps they were sent with. Returns how many batches will be sent again (takes the hub lock)."""
        with self.data.lock:
            state = self.data.scrapers.get(name)
            if state is None:
                return 0
            missing, again = state.settle(numbers, stored, self.data.streams.keys())
            self.stats.scrapes_not_stored += missing
            self.stats.batches_resent += again
            self.data.state_dirty = True
        if again:
            logger.warning(
                "metric hub: %d scrape(s) by %s are not in its store (cut off or refused); "
                "sending their %d batches again, with the same timestamps",
                len(set(numbers) - stored),
                name,
                again,
            )
        return again

    def give_up(self, horizon: float) -> set[StreamKey]:
        """Forget what waited for a store since before ``horizon`` (counted); returns the streams
        whose history a confirming scraper still holds on to (under the hub lock, held by the caller)."""
        check_held(self.data.lock)
        held: set[StreamKey] = set()
        for scraper in self.data.scrapers.values():
            unconfirmed, lost = scraper.give_up(horizon)
            self.stats.scrapes_unconfirmed += unconfirmed
            self.stats.batches_lost += lost
            held |= scraper.held_keys()
        return held

    def forget_idle(self, seen_before: float) -> None:
        """Forget the named scrapers last seen before ``seen_before`` (under the hub lock, held by the caller)."""
        check_held(self.data.lock)
        for name in [n for n, s in self.data.scrapers.items() if s.seen_at < seen_before]:
            del self.data.scrapers[name]
            self.data.state_dirty = True

    def forget_stream(self, key: StreamKey) -> None:
        """Every position of a stream the hub forgets (under the hub lock, held by the caller)."""
        check_held(self.data.lock)
        for scraper in self.data.scrapers.values():
            scraper.marks.pop(key, None)
            scraper.recent.pop(key, None)
            scraper.resend.pop(key, None)
            scraper.promised.pop(key, None)
            for scrape in scraper.inflight.values():
                scrape.streams.pop(key, None)


def _pending(state: Scraper, stream: Stream, floor_ms: int) -> list[Snapshot]:
    """The snapshots of ``stream`` ``state`` has not been sent, oldest first (a new scraper: only
    those received after ``floor_ms``)."""
    pending: list[Snapshot] = []
    restored = state.restored(stream.key)  # resent copies and new batches in any order
    for snapshot in reversed(stream.history):
        if state.sent(stream.key, snapshot):
            if restored:
                continue
            break
        if stream.key not in state.marks and snapshot.received * 1000 <= floor_ms:
            break
        pending.append(snapshot)
    pending.reverse()
    return pending
