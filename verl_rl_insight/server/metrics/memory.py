"""The hub's memory bound: every byte it holds is booked here, and a push makes room or is refused.

What is booked: each stream's objects, label text, latest values and line copies, its history
(``sizes.py``), the body of a named scrape while it is held (``reserve``), and what the server
holds beside the hub under the same bound (``book_other``: the timeline's waiting spans, the
marks, the detectors' queue and what they made). Each run holds at most its share (``budgets.py``).
``Memory`` also holds the streams table, what the bound counts: each change to it is a booking,
made only by its methods. Every public method of ``Memory`` runs under the hub lock, held by its
caller, and checks that it is held (``model.check_held``); ``Bound.book_other`` takes it.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from collections.abc import Callable, Mapping

from verl_rl_insight.contract.errors import Busy, OverCapacity
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.metrics import budgets
from verl_rl_insight.server.metrics.model import Snapshot, Stream, check_held
from verl_rl_insight.server.metrics.positions import StreamKey
from verl_rl_insight.server.metrics.sizes import (
    SNAPSHOT_BYTES,
    STREAM_BYTES,
    VALUE_BYTES,
    labels_chars,
    series_cost,
)
from verl_rl_insight.server.metrics.stats import HubStats
from verl_rl_insight.server.settings.memory import beside_hub

logger = logging.getLogger("verl_rl_insight.server")

Unsent = Callable[[StreamKey, Snapshot], bool]  # whether a named scraper lacks a snapshot (``Scrapes.unsent``)


class Bound:
    """The hub lock, the memory bound it guards and the hub's counters, made before the hub: the
    parts that hold memory beside it (the timeline's waiting spans, the marks) book under it from
    their construction on, and the hub is built with them (``compose.py``).

    ``lock`` is the one hub lock: a push changes the streams, the series count and the version at
    once under it, and each part's state is read and written under it. Each part is the only
    writer of its own state: ``memory`` (``Memory``) the streams table, the series count and the
    bytes booked; ``scrapes.Scrapes`` the named scrapers, their positions and whether those changed
    since saved; the hub (``MetricHub``) the snapshots' numbers (``seq``) and the version an
    unnamed scrape's rendering is of. ``stats`` (the hub's counters) each part increments for what
    it counts, under the lock."""

    def __init__(self, limit: int, max_series: int) -> None:
        self.lock = threading.Lock()
        self.stats = HubStats()
        self.memory = Memory(self.lock, self.stats, limit, max_series)

    def book_other(self, owner: str, nbytes: int) -> bool:
        """``Memory.book_other`` under the hub lock (takes it)."""
        with self.lock:
            return self.memory.book_other(owner, nbytes)


class Memory:
    """The streams the hub holds and the bytes and series they hold against ``limit`` and
    ``max_series``, overall and per run: the only writer of the streams table and of the counts."""

    def __init__(self, lock: threading.Lock, stats: HubStats, limit: int, max_series: int) -> None:
        self.lock = lock  # the hub lock: held by the caller of every public method
        self.stats = stats
        self.limit = int(limit)  # the hub's share of memory_limit_mb (settings/memory.py)
        self.beside_limit = beside_hub(self.limit)  # what others may book, at most (book_other)
        self.max_series = max_series
        self._streams: dict[StreamKey, Stream] = {}
        self.series = 0  # the latest values of every stream, counted
        self.used = 0
        self.others: dict[str, int] = {}  # bytes booked by others under the same bound (book_other)
        self.runs = budgets.RunBudgets()  # what each run holds: its share of the bound (budgets.py)
        self.held_named = 0  # named scrapes whose body is rendered or being sent
        self.warned_evicted = False

    # -- the streams table ------------------------------------------------------------------
    @property
    def streams(self) -> Mapping[StreamKey, Stream]:
        """The streams table, to read (under the hub lock): it changes through the methods below."""
        check_held(self.lock)
        return self._streams

    def add_stream(self, key: StreamKey) -> Stream:
        """A new stream, empty, in the table and booked (a push checked it fits: ``make_room``)."""
        check_held(self.lock)
        stream = self._streams[key] = Stream(key)
        self._charge(stream, stream.booked())
        return stream

    def restore_stream(self, stream: Stream) -> bool:
        """A stream read back at start, with its latest values and no history, in the table and
        booked; False, and nothing added, when it does not fit the bounds."""
        check_held(self.lock)
        cost = stream.booked()
        if self.used + cost > self.limit or self.series + len(stream.latest) > self.max_series:
            return False
        self._streams[stream.key] = stream
        self._charge(stream, cost)
        self._count_series(stream.run, len(stream.latest))
        return True

    def remove_stream(self, key: StreamKey) -> Stream:
        """Forget a stream: its series and every byte booked for it go."""
        check_held(self.lock)
        stream = self._streams.pop(key)
        self._count_series(stream.run, -len(stream.latest))
        self._charge(stream, -(stream.booked() + stream.history_bytes()))
        return stream

    def grew(self, stream: Stream, nbytes: int, series: int) -> None:
        """A push added ``nbytes`` to ``stream`` (a snapshot, its new series' values and lines) and
        ``series`` series: booked to the bound and to the stream's run."""
        check_held(self.lock)
        if series:
            self._count_series(stream.run, series)
        self._charge(stream, nbytes)

    def history_snapshots(self) -> int:
        check_held(self.lock)
        return sum(len(s.history) for s in self._streams.values())

    def _charge(self, stream: Stream, nbytes: int) -> None:
        """Book ``nbytes`` (negative: give back) to the bound and to the stream's run."""
        self.used += nbytes
        self.runs.charge(stream.run, nbytes)

    def _count_series(self, run: budgets.Run, n: int) -> None:
        """``n`` series more (negative: fewer), in all and for ``run``."""
        self.series += n
        self.runs.count_series(run, n)

    # -- what the server holds beside the hub ------------------------------------------------
    def book_other(self, owner: str, nbytes: int) -> bool:
        """Book ``nbytes`` (negative: give back) for what the server holds beside the hub: False, and
        nothing booked, when it does not fit, or when others would hold more than ``beside_limit``.
        It never drops history to make room: the trainer's steps come first."""
        check_held(self.lock)
        others = sum(self.others.values())
        if nbytes > 0 and (self.used + nbytes > self.limit or others + nbytes > self.beside_limit):
            self.stats.rejected_other_memory += 1
            return False
        self.used += nbytes
        self.others[owner] = self.others.get(owner, 0) + nbytes
        return True

    def run_share(self) -> int:
        """One run's fair part of the bound now (budgets.py)."""
        check_held(self.lock)
        return self.runs.share(self.limit)

    # -- a push ---------------------------------------------------------------------------
    def make_room(self, batches: list[Batch], unsent: Unsent) -> set[StreamKey]:
        """Refuse a push over the series limit; free history for it under the memory bound and
        each run's share of it (budgets.py; ``unsent``: for the count of history dropped before a
        named scraper was sent it). Returns the streams it adds series to (or adds)."""
        check_held(self.lock)
        streams = self._streams
        needed: collections.Counter[budgets.Run] = collections.Counter()  # per run
        grows: collections.Counter[budgets.Run] = collections.Counter()  # of it, new streams and series
        new_names: dict[StreamKey, set[str]] = {}
        for batch in batches:
            stream = streams.get(batch.labels)
            if stream is None:
                new_names.setdefault(batch.labels, set()).update(batch.metrics)
                run = budgets.run_of(batch.labels)
            else:
                if not batch.metrics.keys() <= stream.latest.keys():
                    new_names.setdefault(batch.labels, set()).update(batch.metrics.keys() - stream.latest.keys())
                run = stream.run
            needed[run] += SNAPSHOT_BYTES + VALUE_BYTES * len(batch.names)  # snapshot_bytes, inline: once a batch
        new_series = 0
        new_of: collections.Counter[budgets.Run] = collections.Counter()  # new series per run
        for key, names in new_names.items():
            chars = labels_chars(key)
            cost = sum(series_cost(chars, name) for name in names) + (STREAM_BYTES + chars if key not in streams else 0)
            run = budgets.run_of(key)
            needed[run] += cost
            grows[run] += cost
            new_series += len(names)
            new_of[run] += len(names)
        self._refuse_too_big(needed)
        if new_series:
            self._fit_series(new_of, new_series)
        share = self._fit_shares(needed, grows, unsent)
        total = sum(needed.values())
        if self.used + total > self.limit:  # the runs over their share give way first
            self._evict(self.used + total - self.limit, self.runs.over_share(share), unsent)
        if self.used + total > self.limit:  # then the pushing runs' own oldest history
            self._evict(self.used + total - self.limit, set(needed), unsent)
        if self.used + total > self.limit:
            self.stats.rejected_memory += 1
            raise budgets.BoundFull(  # the data is fine, the room is not: kept and sent again (429)
                f"memory bound reached ({self.limit / 2**20:.0f} MiB of latest values "
                "and history); retry later, or raise the hub's memory_limit_mb or finish old runs"
            )
        return set(new_names)

    def _refuse_too_big(self, needed: collections.Counter[budgets.Run]) -> None:
        """A push more than a run may ever hold (half the bound), or more than that in all: bad data (422)."""
        for run, amount in [*needed.items(), (("", "(all runs of the push)"), sum(needed.values()))]:
            if amount > budgets.MOST * self.limit:
                self.stats.rejected_memory += 1
                raise OverCapacity(
                    f"a push of {amount / 2**20:.1f} MiB for run {run[1][:80]!r} is more than a run may ever hold "
                    f"of the hub's memory (half its share of memory_limit_mb, {self.limit / 2**21:.1f} MiB): "
                    "send smaller batches or fewer label sets, or raise memory_limit_mb"
                )

    def _fit_series(self, new_of: collections.Counter[budgets.Run], new_series: int) -> None:
        """Hold each run of a push to its allowance of the series limit (budgets.py), and the push to
        the limit: new series cannot be dropped later to make room."""
        for run, n in new_of.items():
            if n > budgets.MOST * self.max_series:  # more than a run may ever hold: the push is too big (422)
                self.stats.rejected_series_limit += 1
                raise OverCapacity(
                    f"series limit: a push of {n} new series for run {run[1][:80]!r} is more than a run may "
                    f"ever hold of the hub's series limit (half of max_series {self.max_series}); send fewer "
                    "keys or label sets, or raise max_series"
                )
            allowed = self.runs.series_allowance(run, self.max_series, new_of)
            if self.runs.series[run] + n > allowed:
                self.stats.rejected_series_limit += 1
                raise budgets.series_refusal(run, self.runs.series[run], allowed, self.max_series)
        if self.series + new_series > self.max_series:
            self.stats.rejected_series_limit += 1
            raise budgets.BoundFull(  # every run within its share, the whole limit held: retry later (429)
                f"series limit reached ({self.max_series} series, every run within its share); retry later, or "
                "raise the hub's max_series or delete finished runs (rl-insight runs delete)"
            )

    def _fit_shares(
        self, needed: collections.Counter[budgets.Run], grows: collections.Counter[budgets.Run], unsent: Unsent
    ) -> int:
        """Hold each run of a push to its allowance (budgets.py): a run that would grow (new streams or
        series, which cannot be dropped later) past it first gives up its own oldest history for the
        room, or is refused (429: its sender retries). History alone is held to the fair part only
        when the bound is full (``make_room``: the runs over it give way first). Returns the fair part."""
        share = self.runs.share(self.limit, needed)
        for run, amount in needed.items():
            if not grows.get(run):
                continue
            allowed = self.runs.allowance(run, self.limit, needed)
            if self.runs.held[run] + amount > allowed:  # its own oldest history first
                self._evict(self.runs.held[run] + amount - allowed, {run}, unsent)
            allowed = self.runs.allowance(run, self.limit, needed)
            if self.runs.held[run] + amount > allowed:
                self.stats.rejected_run_share += 1
                raise budgets.refusal(run, allowed, self.limit)
        return share

    def _evict(self, amount: int, runs: set[budgets.Run], unsent: Unsent) -> None:
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
                self.stats.history_evicted += 1
                if unsent(oldest.key, snapshot):
                    self.stats.history_evicted_unsent += 1
            if not oldest.history:
                streams.remove(oldest)
        if freed and not self.warned_evicted:
            self.warned_evicted = True
            logger.warning(
                "metric hub: memory bound of %.0f MiB reached; dropping the oldest history "
                "(rl_insight_hub_history_evicted_total)",
                self.limit / 2**20,
            )

    def drop_oldest(self, stream: Stream) -> int:
        """Drop the oldest snapshot of ``stream``'s history (every named scraper has it): the bytes freed."""
        check_held(self.lock)
        return self._drop_oldest(stream)

    def _drop_oldest(self, stream: Stream) -> int:
        snapshot = stream.history.popleft()
        stream.seen.discard(snapshot.identity)
        self._charge(stream, -snapshot.nbytes)
        return snapshot.nbytes

    # -- a named scrape's body ---------------------------------------------------------------
    def reserve(self, history_chars: int, live_chars: int) -> int:
        """Book what a named scrape's body adds to the booked copies: its history's lines (held in
        pieces, joined, encoded) and, when another named body is held, its live lines. Returns
        the bytes booked; raises Busy when they do not fit now."""
        check_held(self.lock)
        reserve = 3 * history_chars + (live_chars if self.held_named else 0)
        if self.used + reserve > self.limit:
            self.stats.scrapes_refused_memory += 1
            raise Busy(
                f"memory bound: this scrape's body (~{reserve / 2**20:.0f} MiB of history) does not fit now "
                f"under memory_limit_mb ({self.limit / 2**20:.0f} MiB); retry, or raise it"
            )
        self.used += reserve
        self.held_named += 1
        return reserve

    def release(self, reserved: int) -> None:
        """A named scrape's body is no longer held."""
        check_held(self.lock)
        self.used -= reserved
        self.held_named -= 1
