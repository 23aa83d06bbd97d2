"""MetricHub: holds what trainers push and exposes it to Prometheus, each step exactly once.

What a user can rely on:
- every stream (project, experiment_name, extra labels) exposes the latest value of each of its
  series without a timestamp, so it stays queryable however long a step takes;
- a push is applied whole under one lock and numbered there (``seq``): a scrape never sees the
  global-step gauge of one step beside the values of another, and order is the order applied;
- a *named* scraper (``GET /metrics?scraper=NAME``; the server's own Prometheus names itself in
  the config the server renders) also gets every snapshot it has not seen yet, in order, each
  stamped with the trainer's own time (moved later only where Prometheus would refuse it: not
  before this scraper's previous visit). What it has seen moves on only once its response was
  written (``commit``) and is kept on disk, so a restarted hub sends no step twice;
- a *confirming* scraper (the server's own Prometheus, and any in ``confirm_scrapers``) has its
  history let go only once its store shows the scrape: each of its scrapes carries a number
  (``rl_insight_hub_scrape_number``), the server reads the numbers back from the store
  (``delivery.py``), and a scrape the store does not have (cut off after the kernel took the bytes,
  refused) is sent again, with the same timestamps: a copy the store has already is one sample;
- an unnamed client gets the live values only, from one shared rendering: it cannot make the
  hub do more work than one scrape;
- memory (latest values, history, caches) is accounted and kept under ``memory_limit_bytes``:
  history every named scraper has seen is dropped after ``history_s``; under pressure the oldest
  history goes first and is counted; a push that needs more room than history can free is refused;
  each run holds at most its share of the bound (``budgets.py``): at its share it loses its own
  oldest history, or is told to retry later (429), and never takes another run's;
- rendering formats outside the push lock: a push waits for a render only while references are
  taken (O(streams)), never for the formatting of every series.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from verl_rl_insight.contract.errors import Busy, OverCapacity
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC
from verl_rl_insight.contract.run_credential import check_run
from verl_rl_insight.contract.wire import MAX_DROPPED_NAMED, MAX_FUTURE_S, Batch, decode_push, validate_push
from verl_rl_insight.server.metrics import budgets, exposition
from verl_rl_insight.server.metrics.positions import (
    Identity,
    Mark,
    Scraper,
    StreamKey,
    stream_key,
)
from verl_rl_insight.server.stores.files import write_atomically

logger = logging.getLogger("verl_rl_insight.server")

# Estimated bytes, checked against tracemalloc by tests/test_hub_memory.py.
SERIES_BYTES = 400  # a latest value and its dict slot
# A series' exposition line is held in five copies at the most: cached in its stream, in the
# shared /metrics body, twice while a body is rendered (its pieces, then the whole; renders go one
# at a time, ``_render_lock``) and in one named scrape's body while it is sent. They are booked
# with the series; a named scrape books its history's lines, and its live lines too when another
# named scrape's body is held.
LINE_COPIES = 5
LINE_EXTRA = 40  # a line's braces, space, value and newline
SNAPSHOT_BYTES = 420  # a snapshot, its values tuple, its identity in the stream's set of seen ones
VALUE_BYTES = 40  # a value in a snapshot (a tuple slot and its float), and its share of a names tuple
STREAM_BYTES = 4096  # a stream's own objects
LIVE_MARGIN_MS = 50  # history is stamped this far before the scrape's own time, at the latest
MAX_SCRAPERS = 16
OTHERS_SHARE = 0.25  # what the server may hold beside the hub under memory_limit_mb (book_other), at most


Line = tuple[str, str]  # (metric name, exposition line)
Stat = tuple[str, str, float]


class ScrapeBusy(Busy):
    """A scrape by the same named scraper is still being served."""


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
        return SNAPSHOT_BYTES + VALUE_BYTES * len(self.values)


class Stream:
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
    )

    def __init__(self, key: StreamKey) -> None:
        self.key = key
        self.labels = exposition.label_text(key)
        self.latest: dict[str, float] = {}  # replaced, never changed in place, once a render may hold it
        self.version = 0
        self.step: int | None = None
        self.newest_time = -math.inf
        self.updated = 0.0
        self.history: collections.deque[Snapshot] = collections.deque()
        # (step, time) of the timed snapshots held: resent copies are dropped
        self.seen: set[tuple[int | None, float]] = set()
        self.names: tuple[str, ...] = ()  # the names tuple of the newest snapshot: the next one shares it when equal
        self.cache: tuple[int, list[Line]] = (-1, [])  # (version, [(name, line)]): the live lines of that version
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

    def live_lines(self, latest: dict[str, float], version: int) -> list[Line]:
        cached_version, lines = self.cache
        if cached_version != version:
            lines = exposition.series_lines(self.labels, latest.keys(), latest.values())
            if version >= self.cache[0]:
                self.cache = (version, lines)
        return lines


def line_length(labels_chars: int, name: str) -> int:
    return labels_chars + len(name) + LINE_EXTRA


def series_cost(labels_chars: int, name: str) -> int:
    """Bytes one series holds: its value and every copy of its exposition line."""
    return SERIES_BYTES + LINE_COPIES * line_length(labels_chars, name)


def labels_chars(key: StreamKey) -> int:
    """About the length of ``key``'s label text (escaping aside), without building it."""
    return sum(len(name) + len(value) + 4 for name, value in key)


SCRAPE_NUMBER = "rl_insight_hub_scrape_number"  # in a confirming scraper's body: read back from its store
KEYS_DROPPED = "rl_insight_hub_keys_dropped_total"


# (stream, its latest values, their version, [(snapshot, ts_ms)] to send, history or None)
Entry = tuple[Stream, dict[str, float], int, list[tuple[Snapshot, int]], list[Snapshot] | None]


class Exposure:
    """What one scrape exposes: references taken under the hub lock, formatted outside it."""

    def __init__(
        self,
        hub: MetricHub,
        scraper: Scraper | None,
        arrival_ms: int | None,
        entries: list[Entry],
        stats: Sequence[Stat],
    ) -> None:
        self.hub = hub
        self.scraper = scraper
        self.arrival_ms = arrival_ms
        self.entries = entries  # [(stream, latest, version, [(snapshot, ts_ms)], history or None)]
        self.stats = stats
        self.marks: dict[StreamKey, Mark] = {}
        self.stamped: dict[StreamKey, list[tuple[Identity, int]]] = {}
        self.number = 0  # a confirming scraper's scrape number, in the body
        self.resent: dict[StreamKey, list[tuple[Snapshot, int, float]]] = {}  # sent again: (snapshot, ts, since)
        self.settled = False
        self.reserved = 0  # bytes booked for this body until ``commit``
        self.serial = 0  # a named scrape's number in its scraper's scrapes of this process

    def body(self) -> bytes:
        """The body; a named scrape's timestamps are on disk before it returns (``promised``)."""
        with self.hub._render_lock:
            body = self._render()
        if self.scraper is not None and any(sent for _, _, _, sent, _ in self.entries):
            self.hub.save_promises()
        return body

    def _render(self) -> bytes:
        families: collections.defaultdict[str, list[str]] = collections.defaultdict(list)
        for stream, latest, version, sent, history in self.entries:
            for snapshot, ts_ms, _ in self.resent.get(stream.key, ()):
                for name, line in exposition.series_lines(stream.labels, snapshot.names, snapshot.values, ts_ms):
                    families[name].append(line)
            for snapshot, ts_ms in sent:
                for name, line in exposition.series_lines(stream.labels, snapshot.names, snapshot.values, ts_ms):
                    families[name].append(line)
            if sent:
                self.marks[stream.key] = (sent[-1][0].seq, sent[-1][0].time)
                self.stamped[stream.key] = [((snapshot.step, snapshot.time), ts) for snapshot, ts in sent]
            if history is None:
                lines = stream.live_lines(latest, version)
            else:
                values = _values_at(latest, history, sent[-1][0] if sent else None)
                lines = exposition.series_lines(stream.labels, values.keys(), values.values())
            for name, line in lines:
                families[name].append(line)
            exposition.pause()
        trailer = _stats_lines(self.stats)
        for collect in self.hub.collectors:
            trailer += collect()
        if self.number and self.scraper is not None:
            trailer += [
                f"# TYPE {SCRAPE_NUMBER} gauge",
                f'{SCRAPE_NUMBER}{{scraper="{self.scraper.name}"}} {self.number}',
            ]
        return exposition.body(families, trailer)

    def commit(self, written: bool = True) -> None:
        """The response was written (or, ``written=False``, could not be): move this scraper on."""
        if self.scraper is not None and not self.settled:
            self.settled = True
            self.hub._settle(self, written)


def _values_at(latest: dict[str, float], history: list[Snapshot], last_sent: Snapshot | None) -> dict[str, float]:
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


def _stats_lines(stats: Sequence[Stat]) -> list[str]:
    lines: list[str] = []
    family = ""
    for name, kind, value in stats:
        if name.partition("{")[0] != family:  # one TYPE line for the labelled lines of one family
            family = name.partition("{")[0]
            lines.append(f"# TYPE {family} {kind}")
        lines.append(f"{name} {value}")
    return lines


class MetricHub:
    def __init__(
        self,
        max_series: int = 500_000,
        memory_limit_bytes: int = 1 << 30,
        history_s: float = 600.0,
        new_scraper_history_s: float = 600.0,
        stream_ttl_s: float = 86_400.0,
        scraper_ttl_s: float = 3600.0,
        state_path: Path | None = None,
        clock: Callable[[], float] = time.time,
        max_future_s: float = MAX_FUTURE_S,
        confirming: frozenset[str] = frozenset(),
        latest_path: Path | None = None,
    ) -> None:
        self.latest_path = latest_path  # the latest values, written at a clean stop, read back at start
        self.max_future_s = max_future_s
        self.confirming = confirming  # scraper names whose store is read back (delivery.py)
        self.max_series = max_series
        self.memory_limit_bytes = int(memory_limit_bytes)
        self.history_s = history_s
        self.new_scraper_history_s = new_scraper_history_s
        self.stream_ttl_s = stream_ttl_s
        self.scraper_ttl_s = scraper_ttl_s
        self.state_path = state_path
        self.clock = clock
        self.instance = uuid.uuid4().hex[:16]  # a new one per start: senders resend when it changes
        self.stats: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._streams: dict[StreamKey, Stream] = {}
        self._series = 0
        self._bytes = 0
        self._seq = 0
        self._version = 0
        self._scrapers: dict[str, Scraper] = {}
        self._others: dict[str, int] = {}  # bytes booked by others under the same bound (book_other)
        self._runs = budgets.RunBudgets()  # what each run holds: its share of the bound (budgets.py)
        self._next_sweep = 0.0
        self._render_lock = threading.Lock()  # one body rendered at a time: its copies are booked
        self._held_named = 0  # named scrapes whose body is rendered or being sent
        self._live_body = (-1, b"")
        self._state_lock = threading.Lock()
        self._state_dirty = False
        self._promises_lock = threading.Lock()
        # the timestamps named scrapes gave, written ahead of their bodies (save_promises)
        self._promises_path = state_path.with_name("hub-promises.json") if state_path is not None else Path()
        # called with the batches each push added (not its duplicates), after the hub has them,
        # outside its lock: the server's health detectors read the trainers' steps here
        self.listeners: list[Callable[[list[Batch]], None]] = []
        # typed exposition lines of the server's own that every scrape ends with (the marks); their
        # owner calls ``changed`` when they change
        self.collectors: list[Callable[[], list[str]]] = []
        self._load_state()
        self._load_latest()

    # -- pushes ----------------------------------------------------------------------------
    def push(self, payload: Any) -> dict[str, Any]:
        """Validate a whole push (already parsed) and apply it atomically: {"accepted", "duplicates", "hub"},
        and ``dropped_keys`` / ``step_disagreements`` where there were any (``wire.PushAnswer``).

        Raises PushError (nothing applied) when any part of it is invalid or does not fit. A key the
        server keeps for itself is dropped from its batch, the rest applied (see ``push_own``).
        """
        now = self.clock()
        return self._tell(*self._apply(validate_push(payload, now, self.max_future_s), now))

    def push_own(self, payload: Any) -> dict[str, Any]:
        """``push`` for the server's own series (the detectors', the timeline's): their names are
        the ones a client's push may not write."""
        now = self.clock()
        return self._tell(*self._apply(validate_push(payload, now, self.max_future_s, own=True), now))

    def push_body(self, body: bytes, run: tuple[str, str] | None = None) -> dict[str, Any]:
        """``push`` for the bytes of a push body: decoded and validated in one pass (msgspec builds
        the schema's types as it reads: nested brackets are refused at their first level). ``run``:
        the only run the sender may write (a run credential's), else Forbidden and nothing applied."""
        now = self.clock()
        batches = decode_push(body, now, self.max_future_s)
        if run is not None:
            for i, batch in enumerate(batches):
                labels = dict(batch.labels)
                check_run(run, labels.get("project"), labels.get("experiment_name"), f"batches[{i}]")
        return self._tell(*self._apply(batches, now))

    def book_other(self, owner: str, nbytes: int) -> bool:
        """Book ``nbytes`` (negative: give back) for what the server holds beside the hub, under the
        same bound (the timeline's waiting spans): False, and nothing booked, when it does not fit,
        or when others would hold more than ``OTHERS_SHARE`` of it. It never drops history to make
        room: the trainer's steps come first, and always have the rest of the bound."""
        with self._lock:
            others = sum(self._others.values())
            if nbytes > 0 and (
                self._bytes + nbytes > self.memory_limit_bytes
                or others + nbytes > OTHERS_SHARE * self.memory_limit_bytes
            ):
                self.stats["rejected_other_memory"] += 1
                return False
            self._bytes += nbytes
            self._others[owner] = self._others.get(owner, 0) + nbytes
            return True

    def _tell(self, result: dict[str, Any], added: list[Batch]) -> dict[str, Any]:
        for listener in self.listeners:
            try:
                listener(added)
            except Exception:  # a listener's failure never fails a push that the hub has taken
                self.stats["listener_errors"] += 1
        return result

    def _apply(self, batches: list[Batch], now: float) -> tuple[dict[str, Any], list[Batch]]:
        added: list[Batch] = []
        with self._lock:
            self._make_room(batches, now)
            accepted = duplicates = disagreements = 0
            dropped: dict[str, str] = {}
            touched: dict[StreamKey, dict[str, float]] = {}
            for batch in batches:
                stream = self._streams.get(batch.labels)
                if stream is None:
                    stream = self._streams[batch.labels] = Stream(batch.labels)
                    self._charge(stream, stream.booked())
                identity = (batch.step, batch.time)
                if batch.timed and identity in stream.seen:
                    duplicates += 1
                    continue
                if batch.dropped is not None or batch.step_disagrees:  # counted once a step, not per copy
                    disagreements += self._count_left_out(batch, dropped)
                if stream.key not in touched:
                    touched[stream.key] = dict(stream.latest)  # copy on write: renders keep the old one
                latest = touched[stream.key]
                names = batch.names
                if names == stream.names:
                    names = stream.names
                self._seq += 1
                snapshot = Snapshot(self._seq, batch.step, batch.time, now, names, batch.values)
                stream.history.append(snapshot)
                self._charge(stream, snapshot.nbytes)
                if batch.timed:
                    stream.seen.add(identity)
                fresh = [name for name in batch.names if name not in latest]
                # a late copy never turns values back; a batch stamped ahead of this clock (within
                # max_future_s) counts as of its arrival: it cannot hold the live values while newer steps arrive
                arrived = min(batch.time, now)
                if arrived >= stream.newest_time:
                    latest.update(batch.metrics)
                    stream.newest_time = arrived
                    stream.names = names
                    if batch.step is not None:
                        stream.step = batch.step
                else:
                    for name, value in batch.metrics.items():
                        latest.setdefault(name, value)
                self._series += len(fresh)
                chars = sum(stream.line_length(name) for name in fresh)
                stream.line_chars += chars
                self._charge(stream, SERIES_BYTES * len(fresh) + LINE_COPIES * chars)
                stream.updated = now
                accepted += 1
                added.append(batch)
            for key, latest in touched.items():
                stream = self._streams[key]
                stream.latest = latest
                stream.restored_for = None
                stream.version += 1
            if touched:
                self._version += 1
            self.stats["batches"] += accepted
            self.stats["duplicates"] += duplicates
            self.stats["pushes"] += 1
            self._sweep(now)
        answer: dict[str, Any] = {"accepted": accepted, "duplicates": duplicates, "hub": self.instance}
        if dropped:
            answer["dropped_keys"] = dropped
        if disagreements:
            answer["step_disagreements"] = disagreements
        return answer, added

    def _count_left_out(self, batch: Batch, named: dict[str, str]) -> int:
        """Count what ``batch`` left out (its keys the hub dropped, its step key's disagreement);
        name the keys in ``named`` (bounded). Returns 1 when its step key disagreed."""
        for name, why in (batch.dropped or {}).items():
            self.stats["keys_dropped_not_a_step" if name == GLOBAL_STEP_METRIC else "keys_dropped_reserved"] += 1
            if len(named) < MAX_DROPPED_NAMED:
                named[name] = why
        self.stats["step_disagreements"] += batch.step_disagrees
        return int(batch.step_disagrees)

    def _make_room(self, batches: list[Batch], now: float) -> None:
        """Refuse a push over the series limit; free history for it under the memory bound and
        each run's share of it (budgets.py)."""
        new_names: dict[StreamKey, set[str]] = {}
        needed: collections.Counter[budgets.Run] = collections.Counter()  # per run
        grows: collections.Counter[budgets.Run] = collections.Counter()  # of it, new streams and series
        for batch in batches:
            stream = self._streams.get(batch.labels)
            fresh = new_names.setdefault(batch.labels, set())
            if stream is None:
                fresh.update(batch.metrics)
            elif not batch.metrics.keys() <= stream.latest.keys():
                fresh.update(batch.metrics.keys() - stream.latest.keys())
            run = stream.run if stream is not None else budgets.run_of(batch.labels)
            needed[run] += SNAPSHOT_BYTES + VALUE_BYTES * len(batch.names)
        new_series = sum(len(names) for names in new_names.values())
        for key, names in new_names.items():
            chars = labels_chars(key)
            cost = sum(series_cost(chars, name) for name in names) + (
                STREAM_BYTES + chars if key not in self._streams else 0
            )
            needed[budgets.run_of(key)] += cost
            grows[budgets.run_of(key)] += cost
        if self._series + new_series > self.max_series:
            self.stats["rejected_series_limit"] += 1
            raise OverCapacity(f"series limit reached ({self.max_series}); raise the hub's max_series")
        share = self._fit_shares(needed, grows)
        total = sum(needed.values())
        if self._bytes + total > self.memory_limit_bytes:  # the runs over their share give way first
            self._evict(self._bytes + total - self.memory_limit_bytes, self._runs.over_share(share))
        if self._bytes + total > self.memory_limit_bytes:  # then the pushing runs' own oldest history
            self._evict(self._bytes + total - self.memory_limit_bytes, set(needed))
        if self._bytes + total > self.memory_limit_bytes:
            self.stats["rejected_memory"] += 1
            raise budgets.BoundFull(  # the data is fine, the room is not: kept and sent again (429)
                f"memory bound reached ({self.memory_limit_bytes / 2**20:.0f} MiB of latest values "
                "and history); retry later, or raise the hub's memory_limit_mb or finish old runs"
            )

    def _fit_shares(self, needed: collections.Counter[budgets.Run], grows: collections.Counter[budgets.Run]) -> int:
        """Hold each run of a push to its share: a run that would grow (new streams or series, which
        cannot be dropped later) past it gives up its own oldest history for the room, or is refused
        (429: its sender retries). History alone is held to the share only when the bound is full
        (``_make_room``: the runs over their share give way first). Returns the share."""
        limit = self.memory_limit_bytes
        share = self._runs.share(limit, needed)
        for run, amount in needed.items():
            if amount > share:  # not even alone in its share: the data itself is too big (422)
                self.stats["rejected_memory"] += 1
                raise OverCapacity(
                    f"a push of {amount / 2**20:.1f} MiB for run {run[1][:80]!r} is more than a run's share of "
                    f"the hub's memory ({share / 2**20:.1f} MiB of memory_limit_mb): send smaller batches "
                    "or fewer label sets, or raise memory_limit_mb"
                )
            if not grows[run] or self._runs.held[run] + amount <= share:
                continue
            self._evict(self._runs.held[run] + amount - share, {run})
            if self._runs.held[run] + amount > share:
                self.stats["rejected_run_share"] += 1
                raise budgets.refusal(run, share, limit)
        return share

    def _evict(self, amount: int, runs: set[budgets.Run]) -> None:
        """Drop the oldest history of ``runs``' streams, across them, until ``amount`` bytes are
        free (or none is left)."""
        freed = 0
        streams = [s for s in self._streams.values() if s.history and s.run in runs]
        while freed < amount and streams:
            oldest = min(streams, key=lambda s: s.history[0].seq)
            # evict a run of the oldest stream's snapshots at once: one scan of the streams per run
            limit = min((s.history[0].seq for s in streams if s is not oldest), default=math.inf)
            while oldest.history and freed < amount and oldest.history[0].seq <= limit:
                snapshot = oldest.history[0]
                freed += self._drop_oldest(oldest)
                self.stats["history_evicted"] += 1
                if any(
                    not scraper.sent(oldest.key, snapshot)
                    or (snapshot.step, snapshot.time) in scraper.resend.get(oldest.key, {})
                    for scraper in self._scrapers.values()
                ):
                    self.stats["history_evicted_unsent"] += 1
            if not oldest.history:
                streams.remove(oldest)
        if freed and not self.stats["warned_evicted"]:
            self.stats["warned_evicted"] = 1
            logger.warning(
                "metric hub: memory bound of %.0f MiB reached; dropping the oldest history "
                "(rl_insight_hub_history_evicted_total)",
                self.memory_limit_bytes / 2**20,
            )

    def _drop_oldest(self, stream: Stream) -> int:
        snapshot = stream.history.popleft()
        stream.seen.discard((snapshot.step, snapshot.time))
        self._charge(stream, -snapshot.nbytes)
        return snapshot.nbytes

    def _charge(self, stream: Stream, nbytes: int) -> None:
        """Book ``nbytes`` (negative: give back) to the bound and to the stream's run."""
        self._bytes += nbytes
        self._runs.charge(stream.run, nbytes)

    def _sweep(self, now: float) -> None:
        """At most once a second: forget idle streams and scrapers, drop history everyone has seen."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + 1.0
        for name in [n for n, s in self._scrapers.items() if now - s.seen_at > self.scraper_ttl_s]:
            del self._scrapers[name]
            self._state_dirty = True
        for key in [k for k, s in self._streams.items() if now - s.updated > self.stream_ttl_s]:
            self._forget(key)
        horizon = now - self.history_s
        held: set[StreamKey] = set()
        for scraper in self._scrapers.values():
            unconfirmed, lost = scraper.give_up(horizon)
            self.stats["scrapes_unconfirmed"] += unconfirmed
            self.stats["batches_lost"] += lost
            held |= scraper.held_keys()
        for stream in self._streams.values():
            history = stream.history
            while (
                stream.key not in held
                and history
                and history[0].received < horizon
                and all(scraper.sent(stream.key, history[0]) for scraper in self._scrapers.values())
            ):
                self._drop_oldest(stream)

    def _forget(self, key: StreamKey) -> int:
        stream = self._streams.pop(key)
        self._series -= len(stream.latest)
        self._charge(stream, -(stream.booked() + sum(s.nbytes for s in stream.history)))
        for scraper in self._scrapers.values():
            scraper.marks.pop(key, None)
            scraper.recent.pop(key, None)
            scraper.resend.pop(key, None)
            scraper.promised.pop(key, None)
            for _, streams in scraper.inflight.values():
                streams.pop(key, None)
        self._version += 1
        return len(stream.latest)

    def delete_run(self, project: str, experiment: str) -> tuple[int, int]:
        """Forget every stream of a run (its values and history); returns (streams, series) removed."""
        with self._lock:
            keys = [
                k
                for k in self._streams
                if dict(k).get("project") == project and dict(k).get("experiment_name") == experiment
            ]
            series = sum(self._forget(key) for key in keys)
            self._state_dirty = self._state_dirty or bool(keys)
        return len(keys), series

    # -- scrapes ---------------------------------------------------------------------------
    def expose(self, scraper: str | None = None, arrival: float | None = None) -> Exposure | None:
        """What one scrape gets. Unnamed: the live values (no ``commit`` needed). Named: also the
        history it has not been sent; call ``commit()`` on the result once the body was written."""
        if scraper is None:
            return None
        arrival_ms = int((arrival if arrival is not None else self.clock()) * 1000)
        with self._lock:
            state = self._scrapers.get(scraper)
            if state is None:
                if len(self._scrapers) >= MAX_SCRAPERS:
                    raise Busy(f"at most {MAX_SCRAPERS} named scrapers; unnamed scrapes get live values")
                state = self._scrapers[scraper] = Scraper(scraper)
                state.confirm = scraper in self.confirming
            if not state.busy.acquire(blocking=False):
                raise ScrapeBusy(f"a scrape by {scraper} is still being served")
            state.seen_at = self.clock()
            floor_ms = arrival_ms - int(self.new_scraper_history_s * 1000)
            prev_start = state.last_ms if state.last_ms is not None else floor_ms
            limit_ms = arrival_ms - LIVE_MARGIN_MS
            entries: list[Entry] = []
            for stream in self._streams.values():
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
                promised = state.promised.get(stream.key, {})
                sent = _stamp(pending, prev_start, limit_ms, promised)
                if sent:
                    state.promise(stream.key, [((s.step, s.time), ts) for s, ts in sent], state.serial + 1)
                history = list(stream.history) if len(sent) < len(pending) else None
                if stream.restored_for is None or scraper in stream.restored_for:
                    entries.append((stream, stream.latest, stream.version, sent, history))
                else:  # values read back at start, newer than the history this scraper lacks
                    entries.append((stream, {}, -2, sent, history))
            stats = self._stats_locked()
            exposure = Exposure(self, state, arrival_ms, entries, stats)
            state.serial += 1
            exposure.serial = state.serial
            if state.confirm:
                exposure.number = state.number = max(arrival_ms, state.number + 1)
                exposure.resent = self._resends(state)
            try:
                self._reserve(exposure)
            except Busy:
                state.busy.release()
                raise
        return exposure

    def _resends(self, state: Scraper) -> dict[StreamKey, list[tuple[Snapshot, int, float]]]:
        """The batches ``state``'s store did not get that the hub still holds, with their timestamps."""
        resent: dict[StreamKey, list[tuple[Snapshot, int, float]]] = {}
        for key, wanted in state.resend.items():
            stream = self._streams.get(key)
            if stream is None:
                continue
            found = []
            for snapshot in stream.history:
                again = wanted.get((snapshot.step, snapshot.time))
                if again is not None:
                    found.append((snapshot, *again))
            if found:
                resent[key] = found
        return resent

    def _reserve(self, exposure: Exposure) -> None:
        """Book what this named scrape's body adds to the booked copies: its history's lines (held
        in pieces, joined, encoded) and, when another named body is held, its live lines."""
        history = live = 0
        for stream, _, _, sent, _ in exposure.entries:
            chars = len(stream.labels) + LINE_EXTRA + 14  # + the timestamp
            for snapshot, *_ in [*sent, *exposure.resent.get(stream.key, ())]:
                history += len(snapshot.values) * chars + sum(map(len, snapshot.names))
            live += stream.line_chars
        reserve = 3 * history + (live if self._held_named else 0)
        if self._bytes + reserve > self.memory_limit_bytes:
            self.stats["scrapes_refused_memory"] += 1
            raise Busy(
                f"memory bound: this scrape's body (~{reserve / 2**20:.0f} MiB of history) does not fit now "
                f"under memory_limit_mb ({self.memory_limit_bytes / 2**20:.0f} MiB); retry, or raise it"
            )
        self._bytes += reserve
        self._held_named += 1
        exposure.reserved = reserve

    def _settle(self, exposure: Exposure, written: bool) -> None:
        state = exposure.scraper
        assert state is not None
        with self._lock:
            self._bytes -= exposure.reserved
            self._held_named -= 1
            state.last_ms = max(state.last_ms or 0, exposure.arrival_ms or 0)
            state.settled_serial = max(state.settled_serial, exposure.serial)
            if written:
                for key, mark in exposure.marks.items():
                    if key in self._streams:
                        state.marks[key] = mark
                        state.record(key, [identity for identity, _ in exposure.stamped[key]])
                if state.confirm:
                    stamped = {k: v for k, v in exposure.stamped.items() if k in self._streams}
                    state.await_store(exposure.number, self.clock(), exposure.resent, stamped)
            self._state_dirty = True
        state.busy.release()

    # -- what the store confirms -------------------------------------------------------------
    def awaiting(self, written_before: float) -> dict[str, tuple[list[int], float]]:
        """Per confirming scraper: its scrapes written before ``written_before`` that its store has
        not been asked about yet, and when the oldest of them was written."""
        with self._lock:
            waiting: dict[str, tuple[list[int], float]] = {}
            for name, state in self._scrapers.items():
                numbers = [n for n, (at, _) in state.inflight.items() if at <= written_before]
                if numbers:
                    waiting[name] = (numbers, min(state.inflight[n][0] for n in numbers))
            return waiting

    def confirm(self, name: str, numbers: Sequence[int], stored: set[int]) -> int:
        """Settle scrapes ``numbers`` of scraper ``name``: those in ``stored`` its store has, and
        their history may go; the batches of the others are sent again at the next scrape, with
        the timestamps they were sent with. Returns how many batches will be sent again."""
        again = 0
        with self._lock:
            state = self._scrapers.get(name)
            if state is None:
                return 0
            missing, again = state.settle(numbers, stored, self._streams.keys())
            self.stats["scrapes_not_stored"] += missing
            self.stats["batches_resent"] += again
            self._state_dirty = True
        if again:
            logger.warning(
                "metric hub: %d scrape(s) by %s are not in its store (cut off or refused); "
                "sending their %d batches again, with the same timestamps",
                len(set(numbers) - stored),
                name,
                again,
            )
        return again

    def changed(self) -> None:
        """What a collector exposes has changed: the next unnamed scrape renders again."""
        with self._lock:
            self._version += 1

    def live_body(self) -> bytes:
        """The live values of every stream (what an unnamed scrape gets), rendered once per change."""
        with self._render_lock:
            with self._lock:
                version = self._version
                if self._live_body[0] == version:
                    return self._live_body[1]
                entries: list[Entry] = [(s, s.latest, s.version, [], None) for s in self._streams.values()]
                stats = self._stats_locked()
            body = Exposure(self, None, None, entries, stats)._render()  # under _render_lock already
            self._live_body = (version, body)
            return body

    # -- reports ---------------------------------------------------------------------------
    def _stats_locked(self) -> tuple[Stat, ...]:
        return (
            ("rl_insight_hub_streams", "gauge", len(self._streams)),
            ("rl_insight_hub_series", "gauge", self._series),
            ("rl_insight_hub_memory_bytes", "gauge", self._bytes),
            ("rl_insight_hub_memory_limit_bytes", "gauge", self.memory_limit_bytes),
            ("rl_insight_hub_history_snapshots", "gauge", sum(len(s.history) for s in self._streams.values())),
            ("rl_insight_hub_scrapers", "gauge", len(self._scrapers)),
            ("rl_insight_hub_batches_total", "counter", self.stats["batches"]),
            ("rl_insight_hub_duplicate_batches_total", "counter", self.stats["duplicates"]),
            ("rl_insight_hub_rejected_pushes_total", "counter", self.stats["rejected"]),
            ("rl_insight_hub_history_evicted_total", "counter", self.stats["history_evicted"]),
            ("rl_insight_hub_history_evicted_unsent_total", "counter", self.stats["history_evicted_unsent"]),
            ("rl_insight_hub_scrapes_not_stored_total", "counter", self.stats["scrapes_not_stored"]),
            ("rl_insight_hub_batches_resent_total", "counter", self.stats["batches_resent"]),
            ("rl_insight_hub_scrapes_unconfirmed_total", "counter", self.stats["scrapes_unconfirmed"]),
            ("rl_insight_hub_batches_lost_total", "counter", self.stats["batches_lost"]),
            # a pushed key left out of its batch (the rest applied), by why; a step key unlike the step field
            (KEYS_DROPPED + '{reason="reserved"}', "counter", self.stats["keys_dropped_reserved"]),
            (KEYS_DROPPED + '{reason="not_a_step"}', "counter", self.stats["keys_dropped_not_a_step"]),
            ("rl_insight_hub_step_disagreements_total", "counter", self.stats["step_disagreements"]),
        )

    def summary(self) -> dict[str, Any]:
        """The hub's own figures: memory, series, streams, history, scrapers (``GET /api/v1/hub``)."""
        now = self.clock()
        with self._lock:
            figures: dict[str, Any] = {}
            for name, _, value in self._stats_locked():
                family, _, label = name[len("rl_insight_hub_") :].partition("{")
                if label:  # keys_dropped_total{reason="reserved"} -> keys_dropped_total: {"reserved": n}
                    figures.setdefault(family, {})[label.split('"')[1]] = value
                else:
                    figures[family] = value
            figures["scraper_names"] = {
                name: {
                    "last_scrape_s_ago": round(now - s.seen_at, 1),
                    "streams": len(s.marks),
                    **({"scrapes_awaiting_store": len(s.inflight)} if s.confirm else {}),
                    **({"batches_to_resend": sum(map(len, s.resend.values()))} if s.confirm else {}),
                }
                for name, s in self._scrapers.items()
            }
            figures["instance"] = self.instance
            figures["memory_booked_by_others"] = dict(self._others)
            figures["memory_run_share_bytes"] = self._runs.share(self.memory_limit_bytes)  # what one run may hold
            figures["pushes_refused_run_share"] = self.stats["rejected_run_share"]
        return figures

    def streams(self) -> list[dict[str, Any]]:
        """A summary per stream: labels, last step, series count, seconds since the last push and
        since its newest step's own time."""
        now = self.clock()
        with self._lock:
            return [
                {
                    "labels": dict(s.key),
                    "step": s.step,
                    "series": len(s.latest),
                    "batches_kept": len(s.history),
                    "idle_s": round(now - s.updated, 3),
                    # the age of its newest step by the trainer's own time (what `runs list` shows)
                    "last_step_s_ago": round(now - s.newest_time, 3) if math.isfinite(s.newest_time) else None,
                }
                for s in self._streams.values()
            ]

    # -- what survives a restart -------------------------------------------------------------
    def save_state(self) -> None:
        """Write what each named scraper was sent (atomically); a no-op when nothing changed."""
        if self.state_path is None:
            return
        with self._state_lock:
            with self._lock:
                if not self._state_dirty:
                    return
                self._state_dirty = False
                state = {"scrapers": {name: s.to_saved() for name, s in self._scrapers.items()}}
                settled = {name: s.settled_serial for name, s in self._scrapers.items()}
            self.state_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.state_path, json.dumps(state))
            horizon_ms = int((self.clock() - self.history_s) * 1000)
            with self._lock:  # the positions of those scrapes are on disk: their promises may go
                for name, through in settled.items():
                    scraper = self._scrapers.get(name)
                    if scraper is not None:
                        scraper.keep_promises(through, horizon_ms)

    def save_promises(self) -> None:
        """Write the timestamps the named scrapes gave since the positions were last saved
        (``positions.Scraper.promised``), before a body that gave them is sent: after a crash a
        batch sent again gets the same timestamp. A failure to write is logged, the scrape goes on."""
        if self.state_path is None:
            return
        with self._promises_lock:
            with self._lock:
                promised = {name: s.promises_saved() for name, s in self._scrapers.items() if s.promised}
            try:
                self.state_path.parent.mkdir(parents=True, exist_ok=True)
                write_atomically(self._promises_path, json.dumps(promised))
            except OSError as exc:
                if not self.stats["warned_promises"]:
                    self.stats["warned_promises"] = 1
                    logger.warning("metric hub: cannot write %s (%s)", self._promises_path, exc)

    def save_latest(self) -> int:
        """At a clean stop: write every stream's latest values, so that a restarted hub exposes them
        at once and a run's series do not break off until its next step (a step longer than
        Prometheus' 5-minute lookback would leave a gap). Only the named scrapers that had been sent
        all of a stream get its values back (and unnamed scrapes); another named scraper gets them
        with the stream's next push, after the history its trainer's sender sends again. Returns the
        streams written."""
        if self.latest_path is None:
            return 0
        with self._lock:
            # with the named scrapers that had been sent all of each stream: only they get the values
            # back (a newer value before the history leading to it would put a step out of order)
            taken = [
                (s.key, s.step, s.newest_time, s.updated, s.latest, self._sent_whole(s)) for s in self._streams.values()
            ]
        streams = [
            [key, step, newest, updated, list(latest), list(latest.values()), whole]
            for key, step, newest, updated, latest, whole in taken
        ]
        write_atomically(self.latest_path, json.dumps({"saved_at": self.clock(), "streams": streams}))
        return len(streams)

    def _sent_whole(self, stream: Stream) -> list[str]:
        """The named scrapers that have been sent every batch of ``stream`` the hub holds."""
        return [
            name
            for name, scraper in self._scrapers.items()
            if stream.key in scraper.marks and all(scraper.sent(stream.key, s) for s in stream.history)
        ]

    def _load_latest(self) -> None:
        """The latest values a clean stop wrote, once (the file goes: an older copy must never come
        back after a later crash), within the series and memory bounds."""
        path = self.latest_path
        if path is None or not path.exists():
            return
        try:
            saved = json.loads(path.read_text())
            path.unlink()
            now = self.clock()
            for key, step, newest, updated, names, values, whole in saved["streams"]:
                if now - float(updated) > self.stream_ttl_s:
                    continue
                stream = Stream(stream_key(key))
                stream.latest = {str(n): float(v) for n, v in zip(names, values, strict=True)}
                stream.line_chars = sum(stream.line_length(n) for n in stream.latest)
                cost = stream.booked()
                if self._bytes + cost > self.memory_limit_bytes or self._series + len(stream.latest) > self.max_series:
                    logger.warning(
                        "metric hub: the latest values saved at stop do not all fit; the rest come with the next steps"
                    )
                    break
                stream.step = None if step is None else int(step)
                stream.newest_time = float(newest)
                stream.updated = float(updated)
                stream.version = 1
                stream.restored_for = frozenset(map(str, whole))
                self._streams[stream.key] = stream
                self._charge(stream, cost)
                self._series += len(stream.latest)
            self._version += 1
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning(
                "metric hub: cannot read the latest values saved at stop (%s); they come with the next steps", exc
            )

    def _load_state(self) -> None:
        if self.state_path is None or not self.state_path.exists():
            return
        try:
            state = json.loads(self.state_path.read_text())
            for name, saved in state["scrapers"].items():
                self._scrapers[name] = Scraper.from_saved(name, saved, self.clock(), name in self.confirming)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("metric hub: cannot read %s (%s); named scrapers start afresh", self.state_path, exc)
            self._scrapers.clear()
            return
        try:  # what the scrapes since that save promised (a crash: they were not saved there)
            promised = json.loads(self._promises_path.read_text()) if self._promises_path.exists() else {}
            for name, saved in promised.items():
                if name in self._scrapers:
                    self._scrapers[name].restore_promises(saved)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning(
                "metric hub: cannot read %s (%s); steps sent again may be stamped anew", self._promises_path, exc
            )


def _stamp(
    pending: list[Snapshot], prev_ms: int, limit_ms: int, promised: Mapping[Identity, tuple[int, int]]
) -> list[tuple[Snapshot, int]]:
    """(snapshot, timestamp ms) for the snapshots that fit between ``prev_ms`` and ``limit_ms``, in
    order: the trainer's own time where it fits, strictly increasing; what does not fit waits. A
    batch a scrape was given before (``promised``: a crash lost its position) gets that timestamp
    again, never a new one, even behind this scraper's previous visit: a store that has it keeps
    one sample, one that lacks it takes it in its out-of-order window, as a resent scrape."""
    room = limit_ms - prev_ms
    if room <= 0:
        return []
    pending = pending[:room]
    n = len(pending)
    stamped: list[tuple[Snapshot, int]] = []
    for i, snapshot in enumerate(pending):
        given = promised.get((snapshot.step, snapshot.time))
        if given is not None and given[0] <= limit_ms - (n - i - 1):
            stamped.append((snapshot, given[0]))
            prev_ms = max(prev_ms, given[0])
            continue
        ts = min(max(int(snapshot.time * 1000), prev_ms + 1), limit_ms - (n - i - 1))
        stamped.append((snapshot, ts))
        prev_ms = ts
    return stamped
