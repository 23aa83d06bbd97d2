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
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from verl_rl_insight.contract.errors import Busy
from verl_rl_insight.contract.run_card import Json
from verl_rl_insight.server.metrics.exposure import Collector, Exposed, Exposure, Named, Outgoing, stamp
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
    """What each scrape of the hub is sent: the named scrapers, their positions (``positions.py``)
    and whether those changed since written, the unnamed scrapes' shared rendering. It is the only
    writer of all of them, and the one that saves the positions and promises (``HubFiles`` writes
    the files); the streams it reads from ``Memory``, the version of what an unnamed scrape sees
    the hub hands it (``live_body``).

    Its locks: ``render_lock``, its own (one body rendered at a time: its copies are booked), taken
    before the hub lock (``Bound.lock``) where both are held; ``save_state`` and ``save_promises``
    each take their own (one writer of each file), then the hub lock only while they copy, never
    while they write. ``live_body``, ``expose``, ``settle``, ``awaiting`` and ``confirm`` take the
    hub lock themselves (their private helpers run inside it); ``scrapers``, ``hub_series``,
    ``unsent``, ``sent_by_all``, ``sent_whole``, ``positions_changed``, ``forget_idle``,
    ``give_up`` and ``forget_stream`` run under it, held by their caller (a push and the hub's
    sweep in it, ``delete_run``, ``summary``, ``HubFiles.save_latest``), and check that it is held.
    """

    def __init__(
        self,
        bound: Bound,
        files: HubFiles,
        clock: Callable[[], float],
        history_s: float,
        new_scraper_history_s: float,
        confirming: frozenset[str],
        collectors: Sequence[Collector],
    ) -> None:
        """The positions and promises last written are read back here (``HubFiles.read_positions``)."""
        self.lock, self.memory, self.stats = bound.lock, bound.memory, bound.stats
        self.files = files  # the positions and promises are written there
        self.clock = clock
        self.history_s = history_s  # promises older than this go once their positions are written
        self.new_scraper_history_s = new_scraper_history_s
        self.confirming = confirming  # scraper names whose store is read back (delivery.py)
        self.collectors = collectors
        self.render_lock = threading.Lock()
        self._scrapers = files.read_positions(confirming)  # named scraper -> what it was sent
        self._unsaved = False  # what the named scrapers were sent changed since it was written
        self._state_lock = threading.Lock()
        self._promises_lock = threading.Lock()
        self._live_version: tuple[int, ...] = ()  # the versions the shared rendering of the live values is of
        self._live_body = b""

    @property
    def scrapers(self) -> Mapping[str, Scraper]:
        """The named scrapers, to read (under the hub lock, held by the caller)."""
        check_held(self.lock)
        return self._scrapers

    def hub_series(self) -> tuple[Stat, ...]:
        """The hub's own series, as of now (under the hub lock, held by the caller)."""
        memory = self.memory
        check_held(self.lock)
        gauges = Gauges(
            streams=len(memory.streams),
            series=memory.series,
            memory_bytes=memory.used,
            memory_limit_bytes=memory.limit,
            history_snapshots=memory.history_snapshots(),
            scrapers=len(self._scrapers),
        )
        return hub_series(gauges, self.stats)

    def live_body(self, version: Callable[[], int]) -> bytes:
        """The live values of every stream (what an unnamed scrape gets), rendered once per change
        (``version``: of the streams', read under the hub lock; or of what a collector exposes).
        Takes the render lock, then the hub lock while it takes references."""
        with self.render_lock:
            with self.lock:
                now = (version(), *(c.version for c in self.collectors))
                if self._live_version == now:
                    return self._live_body
                entries = [Exposed(s, s.take_latest(), s.version, [], None) for s in self.memory.streams.values()]
                exposure = Exposure(self, entries, self.hub_series())
            self._live_body = exposure.render()  # under the render lock already
            self._live_version = now
            return self._live_body

    def expose(self, name: str, arrival_ms: int) -> Exposure:
        """A named scrape: the live values and the history ``name`` has not been sent (takes the hub lock)."""
        with self.lock:
            state = self._scraper(name)
            if not state.busy.acquire(blocking=False):
                raise ScrapeBusy(f"a scrape by {name} is still being served")
            try:
                exposure = self._exposure(state, arrival_ms)
            except BaseException:
                state.busy.release()
                raise
        return exposure

    def _scraper(self, name: str) -> Scraper:
        state = self._scrapers.get(name)
        if state is None:
            if len(self._scrapers) >= MAX_SCRAPERS:
                raise Busy(f"at most {MAX_SCRAPERS} named scrapers; unnamed scrapes get live values")
            state = self._scrapers[name] = Scraper(name)
            state.confirm = name in self.confirming
        return state

    def _exposure(self, state: Scraper, arrival_ms: int) -> Exposure:
        """``state``'s scrape, its body's copies booked (raises Busy when they do not fit now)."""
        state.seen_at = self.clock()
        floor_ms = arrival_ms - int(self.new_scraper_history_s * 1000)
        prev_start = state.last_ms if state.last_ms is not None else floor_ms
        limit_ms = arrival_ms - LIVE_MARGIN_MS
        entries: list[Exposed] = []
        for stream in self.memory.streams.values():
            pending = _pending(state, stream, floor_ms)
            sent = stamp(pending, prev_start, limit_ms, state.promised.get(stream.key, {}), state.serial + 1)
            if sent:
                state.promise(stream.key, [s.stamp for s in sent])
            history = list(stream.history) if len(sent) < len(pending) else None
            if stream.restored_for is None or state.name in stream.restored_for:
                entries.append(Exposed(stream, stream.take_latest(), stream.version, sent, history))
            else:  # values read back at start, newer than the history this scraper lacks
                entries.append(Exposed(stream, {}, None, sent, history))
        stats = self.hub_series()
        state.serial += 1
        number, resent = 0, {}
        if state.confirm:
            number = state.number = max(arrival_ms, state.number + 1)
            resent = self._resends(state)
        named = Named(state, arrival_ms, state.serial, number, resent, self._reserve(entries, resent))
        return Exposure(self, entries, stats, named)

    def _resends(self, state: Scraper) -> dict[StreamKey, list[Outgoing]]:
        """The batches ``state``'s store did not get that the hub still holds, with their stamps."""
        resent: dict[StreamKey, list[Outgoing]] = {}
        streams = self.memory.streams
        for key, wanted in state.resend.items():
            stream = streams.get(key)
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

    def _reserve(self, entries: list[Exposed], resent: dict[StreamKey, list[Outgoing]]) -> int:
        """Book what a named scrape's body adds to the booked copies (``Memory.reserve``): the bytes booked."""
        history = live = 0
        for entry in entries:
            stream = entry.stream
            chars = len(stream.labels) + LINE_EXTRA + TIMESTAMP_CHARS
            snapshots: list[Snapshot] = [s.snapshot for s in entry.sent]
            snapshots += [r.snapshot for r in resent.get(stream.key, ())]
            for snapshot in snapshots:
                history += len(snapshot.values) * chars + sum(map(len, snapshot.names))
            live += stream.line_chars
        return self.memory.reserve(history, live)

    def settle(self, exposure: Exposure, written: bool) -> None:
        """A named scrape's response was written (or could not be): its scraper moves on (takes the hub lock)."""
        named = exposure.named
        if named is None:
            return
        state = named.scraper
        with self.lock:
            streams = self.memory.streams
            self.memory.release(named.reserved)
            state.last_ms = max(state.last_ms or 0, named.arrival_ms)
            state.settled_serial = max(state.settled_serial, named.serial)
            if written:
                for key, mark in exposure.marks.items():
                    if key in streams:
                        state.marks[key] = mark
                        state.record(key, [stamp.identity for stamp in exposure.first_sent[key]])
                if state.confirm:
                    first = {k: v for k, v in exposure.first_sent.items() if k in streams}
                    state.await_store(named.number, self.clock(), exposure.resent_stamps(), first)
            self._unsaved = True
        state.busy.release()

    # -- what the store confirms -------------------------------------------------------------
    def awaiting(self, written_before: float) -> dict[str, Awaiting]:
        """Per confirming scraper: its scrapes written before ``written_before`` that its store has
        not been asked about yet, and when the oldest of them was written (takes the hub lock)."""
        with self.lock:
            waiting: dict[str, Awaiting] = {}
            for name, state in self._scrapers.items():
                written = {n: s.written_at for n, s in state.inflight.items() if s.written_at <= written_before}
                if written:
                    waiting[name] = Awaiting(list(written), min(written.values()))
            return waiting

    def confirm(self, name: str, numbers: Sequence[int], stored: set[int]) -> int:
        """Settle scrapes ``numbers`` of scraper ``name``: those in ``stored`` its store has, and
        their history may go; the batches of the others are sent again at the next scrape, with
        the timestamps they were sent with. Returns how many batches will be sent again (takes the hub lock)."""
        with self.lock:
            state = self._scrapers.get(name)
            if state is None:
                return 0
            missing, again = state.settle(numbers, stored, self.memory.streams.keys())
            self.stats.scrapes_not_stored += missing
            self.stats.batches_resent += again
            self._unsaved = True
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
        check_held(self.lock)
        held: set[StreamKey] = set()
        for scraper in self._scrapers.values():
            unconfirmed, lost = scraper.give_up(horizon)
            self.stats.scrapes_unconfirmed += unconfirmed
            self.stats.batches_lost += lost
            held |= scraper.held_keys()
        return held

    def forget_idle(self, seen_before: float) -> None:
        """Forget the named scrapers last seen before ``seen_before`` (under the hub lock, held by the caller)."""
        check_held(self.lock)
        for name in [n for n, s in self._scrapers.items() if s.seen_at < seen_before]:
            del self._scrapers[name]
            self._unsaved = True

    def forget_stream(self, key: StreamKey) -> None:
        """Every position of a stream the hub forgets (under the hub lock, held by the caller)."""
        check_held(self.lock)
        for scraper in self._scrapers.values():
            scraper.marks.pop(key, None)
            scraper.recent.pop(key, None)
            scraper.resend.pop(key, None)
            scraper.promised.pop(key, None)
            for scrape in scraper.inflight.values():
                scrape.streams.pop(key, None)

    # -- what other parts ask of the positions ------------------------------------------------
    def unsent(self, key: StreamKey, snapshot: Snapshot) -> bool:
        """Whether a named scraper was not sent ``snapshot`` of stream ``key``, or its store lacks it
        (``Memory.make_room`` counts history it drops so; under the hub lock, held by the caller)."""
        check_held(self.lock)
        return any(
            not scraper.sent(key, snapshot) or snapshot.identity in scraper.resend.get(key, {})
            for scraper in self._scrapers.values()
        )

    def sent_by_all(self, key: StreamKey, snapshot: Snapshot) -> bool:
        """Whether every named scraper was sent ``snapshot`` of stream ``key`` (the hub's sweep: it
        may go once old; under the hub lock, held by the caller)."""
        check_held(self.lock)
        return all(scraper.sent(key, snapshot) for scraper in self._scrapers.values())

    def sent_whole(self, stream: Stream) -> list[Json]:
        """The named scrapers that have been sent every batch of ``stream`` the hub holds
        (``HubFiles.save_latest``; under the hub lock, held by the caller)."""
        check_held(self.lock)
        return [
            name
            for name, scraper in self._scrapers.items()
            if stream.key in scraper.marks and all(scraper.sent(stream.key, s) for s in stream.history)
        ]

    def positions_changed(self) -> None:
        """The positions are written again at the next ``save_state`` (the hub forgot a run's streams;
        under the hub lock, held by the caller)."""
        check_held(self.lock)
        self._unsaved = True

    # -- what survives a restart (HubFiles writes the files) ----------------------------------
    def save_state(self) -> None:
        """Write what each named scraper was sent (``hub-state.json``), a no-op when nothing
        changed; then the promises of the scrapes it covers may go (their positions are on disk).
        Takes its state lock, then the hub lock only while it copies, never while it writes."""
        if not self.files.keeps_positions:
            return
        with self._state_lock:
            with self.lock:
                if not self._unsaved:
                    return
                self._unsaved = False
                state: Json = {"scrapers": {name: s.to_saved() for name, s in self._scrapers.items()}}
                settled = {name: s.settled_serial for name, s in self._scrapers.items()}
            self.files.write_state(state)
            horizon_ms = int((self.clock() - self.history_s) * 1000)
            with self.lock:  # the positions of those scrapes are on disk: their promises may go
                for name, through in settled.items():
                    scraper = self._scrapers.get(name)
                    if scraper is not None:
                        scraper.keep_promises(through, horizon_ms)

    def save_promises(self) -> None:
        """Write the timestamps the named scrapes gave since the positions were last written
        (``hub-promises.json``), before a body that gave them is sent (``Exposure.body``). Takes its
        promises lock, then the hub lock only while it copies, never while it writes."""
        if not self.files.keeps_positions:
            return
        with self._promises_lock:
            with self.lock:
                promised: Json = {name: s.promises_saved() for name, s in self._scrapers.items() if s.promised}
            self.files.write_promises(promised)


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
