"""The scraper delivery protocol: what each scrape is sent, and when a scraper moves on.

- an unnamed scrape gets the live values (``MetricHub.live_body``, one shared rendering);
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
from verl_rl_insight.server.metrics.exposure import Collector, Exposed, Exposure, Resent, stamp
from verl_rl_insight.server.metrics.memory import Memory
from verl_rl_insight.server.metrics.model import HubData, Snapshot, Stream
from verl_rl_insight.server.metrics.positions import Given, Scraper, StreamKey
from verl_rl_insight.server.metrics.sizes import LINE_EXTRA, TIMESTAMP_CHARS
from verl_rl_insight.server.metrics.stats import HubStats, Stat

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
    """The named scrapers' side of the hub; every method takes the hub lock itself."""

    def __init__(
        self,
        data: HubData,
        memory: Memory,
        stats: HubStats,
        clock: Callable[[], float],
        new_scraper_history_s: float,
        confirming: frozenset[str],
        collectors: Sequence[Collector],
        save_promises: Callable[[], None],
        hub_series: Callable[[], tuple[Stat, ...]],
    ) -> None:
        self.data = data
        self.memory = memory
        self.stats = stats
        self.clock = clock
        self.new_scraper_history_s = new_scraper_history_s
        self.confirming = confirming  # scraper names whose store is read back (delivery.py)
        self.collectors = collectors
        self._save_promises = save_promises
        self._hub_series = hub_series  # under the lock: the hub's own series as of this scrape
        self.render_lock = threading.Lock()  # one body rendered at a time: its copies are booked

    def save_promises(self) -> None:
        self._save_promises()

    def live(self) -> Exposure:
        """An unnamed scrape: every stream's live values (taken under the lock by the caller)."""
        entries = [Exposed(s, s.take_latest(), s.version, [], None) for s in self.data.streams.values()]
        return Exposure(self, None, None, entries, self._hub_series())

    def expose(self, name: str, arrival_ms: int) -> Exposure:
        """A named scrape: the live values and the history ``name`` has not been sent."""
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
            sent = stamp(pending, prev_start, limit_ms, state.promised.get(stream.key, {}))
            if sent:
                state.promise(stream.key, [Given(s.snapshot.identity, s.ts_ms) for s in sent], state.serial + 1)
            history = list(stream.history) if len(sent) < len(pending) else None
            if stream.restored_for is None or state.name in stream.restored_for:
                entries.append(Exposed(stream, stream.take_latest(), stream.version, sent, history))
            else:  # values read back at start, newer than the history this scraper lacks
                entries.append(Exposed(stream, {}, None, sent, history))
        exposure = Exposure(self, state, arrival_ms, entries, self._hub_series())
        state.serial += 1
        exposure.serial = state.serial
        if state.confirm:
            exposure.number = state.number = max(arrival_ms, state.number + 1)
            exposure.resent = self._resends(state)
        return exposure

    def _resends(self, state: Scraper) -> dict[StreamKey, list[Resent]]:
        """The batches ``state``'s store did not get that the hub still holds, with their timestamps."""
        resent: dict[StreamKey, list[Resent]] = {}
        for key, wanted in state.resend.items():
            stream = self.data.streams.get(key)
            if stream is None:
                continue
            found = []
            for snapshot in stream.history:
                again = wanted.get(snapshot.identity)
                if again is not None:
                    found.append(Resent(snapshot, again.ts_ms, again.since))
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
        """A named scrape's response was written (or could not be): its scraper moves on."""
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
                        state.record(key, [given.identity for given in exposure.stamped[key]])
                if state.confirm:
                    stamped = {k: v for k, v in exposure.stamped.items() if k in streams}
                    state.await_store(exposure.number, self.clock(), exposure.resent_stamps(), stamped)
            self.data.state_dirty = True
        state.busy.release()

    # -- what the store confirms -------------------------------------------------------------
    def awaiting(self, written_before: float) -> dict[str, Awaiting]:
        """Per confirming scraper: its scrapes written before ``written_before`` that its store has
        not been asked about yet, and when the oldest of them was written."""
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
        the timestamps they were sent with. Returns how many batches will be sent again."""
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
        whose history a confirming scraper still holds on to."""
        held: set[StreamKey] = set()
        for scraper in self.data.scrapers.values():
            unconfirmed, lost = scraper.give_up(horizon)
            self.stats.scrapes_unconfirmed += unconfirmed
            self.stats.batches_lost += lost
            held |= scraper.held_keys()
        return held

    def forget_stream(self, key: StreamKey) -> None:
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
