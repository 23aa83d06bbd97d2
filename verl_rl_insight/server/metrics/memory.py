"""The hub's memory bound: every byte it holds is booked here, and a push makes room or is refused.

What is booked: each stream's objects, label text, latest values and line copies, its history
(``sizes.py``), the body of a named scrape while it is held (``reserve``), and what the server
holds beside the hub under the same bound (``book_other``: the timeline's waiting spans, the
marks, the detectors' queue and what they made). Each run holds at most its share (``budgets.py``).
Every method of ``Memory`` runs under the hub lock, held by its caller; ``Bound.book_other`` takes it.
"""

from __future__ import annotations

import collections
import logging
import math

from verl_rl_insight.contract.errors import Busy, OverCapacity
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.metrics import budgets
from verl_rl_insight.server.metrics.model import HubData, Snapshot, Stream
from verl_rl_insight.server.metrics.positions import StreamKey
from verl_rl_insight.server.metrics.sizes import (
    SNAPSHOT_BYTES,
    STREAM_BYTES,
    VALUE_BYTES,
    labels_chars,
    series_cost,
)
from verl_rl_insight.server.metrics.stats import HubStats

logger = logging.getLogger("verl_rl_insight.server")

OTHERS_SHARE = 0.25  # what the server may hold beside the hub under memory_limit_mb (book_other), at most


class Bound:
    """The hub's memory bound with what it guards (the hub's data and counters), made before the
    hub: the parts that hold memory beside it (the timeline's waiting spans, the marks) book under
    it from their construction on, and the hub is built with them (``app.py``)."""

    def __init__(self, limit: int, max_series: int) -> None:
        self.data = HubData()
        self.stats = HubStats()
        self.memory = Memory(self.data, self.stats, limit, max_series)

    def book_other(self, owner: str, nbytes: int) -> bool:
        """``Memory.book_other`` under the hub lock."""
        with self.data.lock:
            return self.memory.book_other(owner, nbytes)


class Memory:
    """The bytes the hub holds against ``limit``, overall and per run."""

    def __init__(self, data: HubData, stats: HubStats, limit: int, max_series: int) -> None:
        self.data = data
        self.stats = stats
        self.limit = int(limit)
        self.max_series = max_series
        self.used = 0
        self.others: dict[str, int] = {}  # bytes booked by others under the same bound (book_other)
        self.runs = budgets.RunBudgets()  # what each run holds: its share of the bound (budgets.py)
        self.held_named = 0  # named scrapes whose body is rendered or being sent
        self.warned_evicted = False

    def charge(self, stream: Stream, nbytes: int) -> None:
        """Book ``nbytes`` (negative: give back) to the bound and to the stream's run."""
        self.used += nbytes
        self.runs.charge(stream.run, nbytes)

    def count_series(self, run: budgets.Run, n: int) -> None:
        """``n`` series more (negative: fewer), in all and for ``run``."""
        self.data.series += n
        self.runs.count_series(run, n)

    def fits(self, nbytes: int, series: int = 0) -> bool:
        return self.used + nbytes <= self.limit and self.data.series + series <= self.max_series

    def book_other(self, owner: str, nbytes: int) -> bool:
        """Book ``nbytes`` (negative: give back) for what the server holds beside the hub: False, and
        nothing booked, when it does not fit, or when others would hold more than ``OTHERS_SHARE``.
        It never drops history to make room: the trainer's steps come first."""
        others = sum(self.others.values())
        if nbytes > 0 and (self.used + nbytes > self.limit or others + nbytes > OTHERS_SHARE * self.limit):
            self.stats.rejected_other_memory += 1
            return False
        self.used += nbytes
        self.others[owner] = self.others.get(owner, 0) + nbytes
        return True

    def run_share(self) -> int:
        """One run's fair part of the bound now (budgets.py)."""
        return self.runs.share(self.limit)

    # -- a push ---------------------------------------------------------------------------
    def make_room(self, batches: list[Batch]) -> set[StreamKey]:
        """Refuse a push over the series limit; free history for it under the memory bound and
        each run's share of it (budgets.py). Returns the streams it adds series to (or adds)."""
        streams = self.data.streams
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
        share = self._fit_shares(needed, grows)
        total = sum(needed.values())
        if self.used + total > self.limit:  # the runs over their share give way first
            self.evict(self.used + total - self.limit, self.runs.over_share(share))
        if self.used + total > self.limit:  # then the pushing runs' own oldest history
            self.evict(self.used + total - self.limit, set(needed))
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
                    f"of the hub's memory (half of memory_limit_mb, {self.limit / 2**21:.1f} MiB): send smaller "
                    "batches or fewer label sets, or raise memory_limit_mb"
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
        if self.data.series + new_series > self.max_series:
            self.stats.rejected_series_limit += 1
            raise budgets.BoundFull(  # every run within its share, the whole limit held: retry later (429)
                f"series limit reached ({self.max_series} series, every run within its share); retry later, or "
                "raise the hub's max_series or delete finished runs (rl-insight runs delete)"
            )

    def _fit_shares(self, needed: collections.Counter[budgets.Run], grows: collections.Counter[budgets.Run]) -> int:
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
                self.evict(self.runs.held[run] + amount - allowed, {run})
            allowed = self.runs.allowance(run, self.limit, needed)
            if self.runs.held[run] + amount > allowed:
                self.stats.rejected_run_share += 1
                raise budgets.refusal(run, allowed, self.limit)
        return share

    def evict(self, amount: int, runs: set[budgets.Run]) -> None:
        """Drop the oldest history of ``runs``' streams, across them, until ``amount`` bytes are
        free (or none is left)."""
        freed = 0
        streams = [s for s in self.data.streams.values() if s.history and s.run in runs]
        while freed < amount and streams:
            oldest = min(streams, key=lambda s: s.history[0].seq)
            # evict a run of the oldest stream's snapshots at once: one scan of the streams per run
            limit = min((s.history[0].seq for s in streams if s is not oldest), default=math.inf)
            while oldest.history and freed < amount and oldest.history[0].seq <= limit:
                snapshot = oldest.history[0]
                freed += self.drop_oldest(oldest)
                self.stats.history_evicted += 1
                if self._unsent(oldest.key, snapshot):
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

    def _unsent(self, key: StreamKey, snapshot: Snapshot) -> bool:
        """Whether a named scraper had not been sent ``snapshot`` (or its store lacks it)."""
        return any(
            not scraper.sent(key, snapshot) or snapshot.identity in scraper.resend.get(key, {})
            for scraper in self.data.scrapers.values()
        )

    def drop_oldest(self, stream: Stream) -> int:
        snapshot = stream.history.popleft()
        stream.seen.discard(snapshot.identity)
        self.charge(stream, -snapshot.nbytes)
        return snapshot.nbytes

    # -- a named scrape's body ---------------------------------------------------------------
    def reserve(self, history_chars: int, live_chars: int) -> int:
        """Book what a named scrape's body adds to the booked copies: its history's lines (held in
        pieces, joined, encoded) and, when another named body is held, its live lines. Returns
        the bytes booked; raises Busy when they do not fit now."""
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
        self.used -= reserved
        self.held_named -= 1
