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
  taken (O(streams)), never for the formatting of every series;
- the server's own series are never pushed through the front door: ``collectors`` give lines at
  scrape time (the marks), ``derived`` parts the batches they made since asked last (``derived.py``:
  the findings, the timeline's figures; the server asks every second), never handed to listeners.

The parts, each the only writer of its own state, all under one hub lock (``memory.Bound``: a
push changes the streams, the series count and the version at once): ``model.py`` (streams,
snapshots), ``memory.py`` (``Memory``: the streams table and the bound; ``budgets.py``: each run's
share), ``scrapes.py`` (``Scrapes``: the named scrapers and their positions, saving them) and
``exposure.py`` (what each scrape is sent), ``positions.py`` (what a scraper was sent),
``persistence.py`` (``HubFiles``: the files that survive a restart), ``stats.py`` (the hub's
counters). The hub itself numbers the snapshots (``seq``) and moves the version an unnamed
scrape's rendering is of; none of its public methods runs under its caller's lock: each takes
the hub lock itself, or calls the part that does.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC
from verl_rl_insight.contract.run_card import Json
from verl_rl_insight.contract.run_credential import NamedRun, RunCheck
from verl_rl_insight.contract.wire import MAX_DROPPED_NAMED, MAX_FUTURE_S, Batch, decode_push, validate_push
from verl_rl_insight.contract.wire_limits import MAX_NAME
from verl_rl_insight.server.metrics import reports
from verl_rl_insight.server.metrics.budgets import run_of
from verl_rl_insight.server.metrics.derived import Derived
from verl_rl_insight.server.metrics.exposure import SCRAPE_NUMBER, Collector, Exposure
from verl_rl_insight.server.metrics.memory import Bound
from verl_rl_insight.server.metrics.model import Attempts, PushResult, Removed, Snapshot, Stream, check_held
from verl_rl_insight.server.metrics.persistence import HubFiles
from verl_rl_insight.server.metrics.positions import StreamKey
from verl_rl_insight.server.metrics.scrapes import Awaiting, ScrapeBusy, Scrapes
from verl_rl_insight.server.metrics.sizes import LINE_COPIES, SERIES_BYTES
from verl_rl_insight.server.metrics.stats import HubStats

__all__ = ["SCRAPE_NUMBER", "Bound", "Derived", "Exposure", "MetricHub", "PushResult", "ScrapeBusy"]

Listener = Callable[[list[Batch]], None]
MAX_DERIVED_BACKLOG = 256  # derived batches made, not taken yet, with no room booked: all parts together


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
        bound: Bound | None = None,
        listeners: Sequence[Listener] = (),
        collectors: Sequence[Collector] = (),
        derived: Sequence[Derived] = (),
        attempts: Attempts | None = None,
    ) -> None:
        """``bound``: made of ``memory_limit_bytes`` and ``max_series`` when not given; ``listeners``:
        called with the batches each push added (not its duplicates), outside the hub lock;
        ``attempts``: numbers each trainer step's attempt as it is applied, in order."""
        self.attempts, self.max_future_s = attempts, max_future_s
        self.max_series, self.history_s = max_series, history_s
        self.stream_ttl_s, self.scraper_ttl_s, self.clock = stream_ttl_s, scraper_ttl_s, clock
        self.instance = uuid.uuid4().hex[:16]  # a new one per start: senders resend when it changes
        self.listeners, self.collectors, self.derived = tuple(listeners), tuple(collectors), tuple(derived)
        self._derived_lock = threading.Lock()  # what one part made is applied in the order made
        bound = bound if bound is not None else Bound(memory_limit_bytes, max_series)
        self._lock, self._stats, self._memory = bound.lock, bound.stats, bound.memory
        self._seq = 0  # the number of the last snapshot applied
        self._version = 0  # moves on whenever what an unnamed scrape sees changes
        self._files = HubFiles(bound, clock, state_path, latest_path, stream_ttl_s)
        # the positions written last are read back as the scrapes are made, then the latest values
        self._scrapes = Scrapes(
            bound, self._files, clock, history_s, new_scraper_history_s, confirming, self.collectors
        )
        with self._lock:
            self._version += bool(self._files.load_latest())
        self._next_sweep = 0.0

    @property
    def memory_limit_bytes(self) -> int:
        return self._memory.limit

    @property
    def stats(self) -> HubStats:
        """A copy of the hub's counters, as of now."""
        with self._lock:
            return dataclasses.replace(self._stats)

    def count_rejected(self) -> None:
        """A push was refused (bad input, over a bound): counted in rl_insight_hub_rejected_pushes_total."""
        with self._lock:
            self._stats.rejected += 1

    # -- pushes ----------------------------------------------------------------------------
    def push(self, payload: object) -> PushResult:
        """Validate a whole push (already parsed) and apply it atomically: {"accepted", "duplicates", "hub"},
        and ``dropped_keys`` / ``step_disagreements`` where there were any (``wire.PushAnswer``).

        Raises PushError (nothing applied) when any part of it is invalid or does not fit. A key the
        server keeps for itself is dropped from its batch, the rest applied.
        """
        now = self.clock()
        return self._tell(*self._apply(validate_push(payload, now, self.max_future_s), now))

    def push_body(self, body: bytes, check_runs: RunCheck | None = None) -> PushResult:
        """``push`` for the bytes of a push body: decoded and validated in one pass (msgspec builds
        the schema's types as it reads: nested brackets are refused at their first level).
        ``check_runs``: the API's run gate, handed every batch's run before anything is applied
        (Forbidden for a run credential's push naming another run: nothing applied)."""
        now = self.clock()
        batches = decode_push(body, now, self.max_future_s)
        if check_runs is not None:  # every batch has both labels (decode_push)
            check_runs(NamedRun(*run_of(b.labels), f"batches[{i}]") for i, b in enumerate(batches))
        return self._tell(*self._apply(batches, now))

    def book_other(self, owner: str, nbytes: int) -> bool:
        """Book ``nbytes`` (negative: give back) for what the server holds beside the hub, under the
        same bound (the timeline's waiting spans): False, and nothing booked, when it does not fit,
        or when others would hold more than a quarter of it (``Memory.book_other``)."""
        with self._lock:
            return self._memory.book_other(owner, nbytes)

    def take_derived(self) -> int:
        """Apply what the derived parts made since asked last (the server every second, an unnamed
        scrape; never a named one: it stays as quick as before): the batches applied. What does not
        fit, or fails, is counted (``listener_errors``)."""
        applied = 0
        with self._derived_lock:
            for part in self.derived:
                try:
                    made = part.collect()
                    if made:
                        applied += self._apply(made, self.clock())[0]["accepted"]
                except Exception:  # one part's failure never stops a scrape or the others
                    with self._lock:
                        self._stats.listener_errors += 1
        return applied

    def _tell(self, result: PushResult, added: list[Batch]) -> PushResult:
        for listener in self.listeners:
            try:
                listener(added)
            except Exception:  # a listener's failure never fails a push that the hub has taken
                with self._lock:
                    self._stats.listener_errors += 1
        if sum(part.backlog() for part in self.derived) > MAX_DERIVED_BACKLOG:  # made with no room booked: taken
            self.take_derived()  # now, not held in memory until the server's next second (the hub books it)
        return result

    def _apply(self, batches: list[Batch], now: float) -> tuple[PushResult, list[Batch]]:
        added: list[Batch] = []
        memory, stats = self._memory, self._stats
        with self._lock:
            batches = self.attempts.mark(batches) if self.attempts is not None else batches
            growing = memory.make_room(batches, self._scrapes.unsent)  # the streams that get new series
            duplicates = disagreements = 0
            dropped: dict[str, str] = {}
            touched: dict[StreamKey, dict[str, float]] = {}
            streams = memory.streams
            for batch in batches:
                stream = streams.get(batch.labels)
                if stream is None:
                    stream = memory.add_stream(batch.labels)
                if batch.timed and (batch.step, batch.time) in stream.seen:
                    duplicates += 1
                    continue
                if batch.dropped is not None or batch.step_disagrees:  # counted once a step, not per copy
                    disagreements += self._count_left_out(batch, dropped)
                latest = touched.get(stream.key)
                if latest is None:  # copy on write where a scrape holds it: renders keep the old one
                    latest = touched[stream.key] = dict(stream.latest) if stream.shared else stream.latest
                self._add(stream, latest, batch, now, stream.key in growing)
                added.append(batch)
            for key, latest in touched.items():
                stream = streams[key]
                stream.latest = latest
                stream.shared = False
                stream.restored_for = None
                stream.version += 1
            if touched:
                self._version += 1
            stats.batches += len(added)
            stats.duplicates += duplicates
            stats.pushes += 1
            self._sweep(now)
        answer = PushResult(accepted=len(added), duplicates=duplicates, hub=self.instance)
        if dropped:
            answer["dropped_keys"] = dropped
        if disagreements:
            answer["step_disagreements"] = disagreements
        return answer, added

    def _add(self, stream: Stream, latest: dict[str, float], batch: Batch, now: float, growing: bool) -> None:
        """Apply one batch (not a duplicate) to ``stream``, its new latest values in ``latest``;
        ``growing``: the push may add series to it (``Memory.make_room``)."""
        names = batch.names
        if names == stream.names:
            names = batch.names = stream.names  # one names tuple for a stream's snapshots (and listeners)
        self._seq += 1
        snapshot = Snapshot(self._seq, batch.step, batch.time, now, names, batch.values)
        stream.history.append(snapshot)
        if batch.timed:
            stream.seen.add((batch.step, batch.time))
        fresh = [n for n in batch.names if n not in latest] if growing else ()
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
        charge = snapshot.nbytes
        if fresh:
            chars = sum(stream.line_length(name) for name in fresh)
            stream.line_chars += chars
            charge += SERIES_BYTES * len(fresh) + LINE_COPIES * chars
        self._memory.grew(stream, charge, len(fresh))
        stream.updated = now

    def _count_left_out(self, batch: Batch, named: dict[str, str]) -> int:
        """Count what ``batch`` left out (its keys the hub dropped, its step key's disagreement);
        name the keys in ``named`` (bounded). Returns 1 when its step key disagreed."""
        for name, why in (batch.dropped or {}).items():
            if name == GLOBAL_STEP_METRIC:
                self._stats.keys_dropped_not_a_step += 1
            elif len(name) > MAX_NAME:  # a reserved name is a valid one: never too long
                self._stats.keys_dropped_too_long += 1
            else:
                self._stats.keys_dropped_reserved += 1
            if len(named) < MAX_DROPPED_NAMED:
                named[name] = why
        self._stats.step_disagreements += batch.step_disagrees
        return int(batch.step_disagrees)

    def _sweep(self, now: float) -> None:
        """At most once a second: forget idle streams and scrapers, drop history everyone has seen."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + 1.0
        memory, scrapes = self._memory, self._scrapes
        scrapes.forget_idle(now - self.scraper_ttl_s)
        for key in [k for k, s in memory.streams.items() if now - s.updated > self.stream_ttl_s]:
            self._forget(key)
        horizon = now - self.history_s
        held = scrapes.give_up(horizon)
        for stream in memory.streams.values():
            history = stream.history
            while (
                stream.key not in held
                and history
                and history[0].received < horizon
                and scrapes.sent_by_all(stream.key, history[0])
            ):
                memory.drop_oldest(stream)

    def _forget(self, key: StreamKey) -> int:
        """Forget a stream, and every position of it (under the hub lock)."""
        stream = self._memory.remove_stream(key)
        self._scrapes.forget_stream(key)
        self._version += 1
        return len(stream.latest)

    def delete_run(self, project: str, experiment: str) -> Removed:
        """Forget every stream of a run (its values and history)."""
        with self._lock:
            keys = [k for k, s in self._memory.streams.items() if s.run == (project, experiment)]
            series = sum(self._forget(key) for key in keys)
            if keys:
                self._scrapes.positions_changed()
        return Removed(len(keys), series)

    # -- scrapes (scrapes.py) --------------------------------------------------------------
    def expose(self, scraper: str | None = None, arrival: float | None = None) -> Exposure | None:
        """What one scrape gets. Unnamed: the live values (no ``commit`` needed). Named: also the
        history it has not been sent; call ``commit()`` on the result once the body was written."""
        if scraper is None:
            return None
        return self._scrapes.expose(scraper, int((arrival if arrival is not None else self.clock()) * 1000))

    def awaiting(self, written_before: float) -> dict[str, Awaiting]:
        """Per confirming scraper: its scrapes written before ``written_before`` that its store has
        not been asked about yet, and when the oldest of them was written."""
        return self._scrapes.awaiting(written_before)

    def confirm(self, name: str, numbers: Sequence[int], stored: set[int]) -> int:
        """The store of scraper ``name`` holds scrapes ``stored`` of ``numbers`` (``Scrapes.confirm``)."""
        return self._scrapes.confirm(name, numbers, stored)

    def changed(self) -> None:
        """The next unnamed scrape renders again (a collector's version does so by itself)."""
        with self._lock:
            self._version += 1

    def live_body(self) -> bytes:
        """The live values of every stream (what an unnamed scrape gets), rendered once per change
        (of the streams', or of what a collector exposes); what the derived parts made is taken first."""
        self.take_derived()
        return self._scrapes.live_body(self._live_version)

    def _live_version(self) -> int:
        """The version of what an unnamed scrape sees (under the hub lock, held by the caller)."""
        check_held(self._lock)
        return self._version

    # -- reports ---------------------------------------------------------------------------
    def summary(self) -> dict[str, Json]:
        """The hub's own figures: memory, series, streams, history, scrapers (``GET /api/v1/hub``)."""
        self.take_derived()
        now = self.clock()
        with self._lock:
            scrapes, memory = self._scrapes, self._memory
            return reports.summary(scrapes.scrapers, memory, self._stats, scrapes.hub_series(), self.instance, now)

    def streams(self) -> list[reports.StreamSummary]:
        """A summary per stream: labels, last step, series count, seconds since the last push and
        since its newest step's own time."""
        self.take_derived()
        now = self.clock()
        with self._lock:
            return [reports.stream_summary(s, now) for s in self._memory.streams.values()]

    # -- what survives a restart (persistence.py) ---------------------------------------------
    def save_state(self) -> None:
        """Write what each named scraper was sent (atomically); a no-op when nothing changed."""
        self._scrapes.save_state()

    def save_promises(self) -> None:
        """Write the timestamps the named scrapes gave, before a body that gave them is sent."""
        self._scrapes.save_promises()

    def save_latest(self) -> int:
        """At a clean stop: write every stream's latest values (``HubFiles.save_latest``)."""
        self.take_derived()
        return self._files.save_latest(self._scrapes.sent_whole)
