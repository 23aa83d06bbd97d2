"""What of the hub survives a restart, in the server's data folder (each file written atomically, 0600):

- ``hub-state.json``: what each named scraper was sent (``positions.Scraper.to_saved``), at most
  once a second and at a stop: a restarted hub sends no step twice;
- ``hub-promises.json``: the timestamps named scrapes gave since that was last written, before the
  body that gave them is sent: after a crash a batch sent again gets the same timestamp;
- ``hub-latest.json``: every stream's latest values, at a clean stop, read back once at start: a
  run's series do not break off until its next step.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from verl_rl_insight.contract.run_card import Json
from verl_rl_insight.server.metrics.memory import Memory
from verl_rl_insight.server.metrics.model import HubData, Stream
from verl_rl_insight.server.metrics.positions import Scraper, stream_key
from verl_rl_insight.server.stores.files import write_atomically

logger = logging.getLogger("verl_rl_insight.server")

PROMISES_FILE = "hub-promises.json"


class HubFiles:
    """Saves and reads back the hub's scraper positions, promises and latest values.

    Its locks: ``save_state`` and ``save_promises`` each take their own (one writer of each file),
    then the hub lock (``HubData.lock``) only while they copy, never while they write;
    ``save_latest`` takes the hub lock while it copies (at a clean stop); ``load`` holds it
    throughout (at start, before the hub takes a push).
    """

    def __init__(
        self,
        data: HubData,
        memory: Memory,
        clock: Callable[[], float],
        state_path: Path | None,
        latest_path: Path | None,
        history_s: float,
        stream_ttl_s: float,
    ) -> None:
        self.data = data
        self.memory = memory
        self.clock = clock
        self.state_path = state_path
        self.latest_path = latest_path  # the latest values, written at a clean stop, read back at start
        self.promises_path = state_path.with_name(PROMISES_FILE) if state_path is not None else None
        self.history_s = history_s
        self.stream_ttl_s = stream_ttl_s
        self._state_lock = threading.Lock()
        self._promises_lock = threading.Lock()
        self._warned_promises = False

    def save_state(self) -> None:
        """Write what each named scraper was sent (atomically); a no-op when nothing changed."""
        if self.state_path is None:
            return
        data = self.data
        with self._state_lock:
            with data.lock:
                if not data.state_dirty:
                    return
                data.state_dirty = False
                state = {"scrapers": {name: s.to_saved() for name, s in data.scrapers.items()}}
                settled = {name: s.settled_serial for name, s in data.scrapers.items()}
            self.state_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.state_path, json.dumps(state))
            horizon_ms = int((self.clock() - self.history_s) * 1000)
            with data.lock:  # the positions of those scrapes are on disk: their promises may go
                for name, through in settled.items():
                    scraper = data.scrapers.get(name)
                    if scraper is not None:
                        scraper.keep_promises(through, horizon_ms)

    def save_promises(self) -> None:
        """Write the timestamps the named scrapes gave since the positions were last saved
        (``positions.Scraper.promised``), before a body that gave them is sent. A failure to write
        is logged once, the scrape goes on."""
        if self.state_path is None or self.promises_path is None:
            return
        with self._promises_lock:
            with self.data.lock:
                promised = {name: s.promises_saved() for name, s in self.data.scrapers.items() if s.promised}
            try:
                self.state_path.parent.mkdir(parents=True, exist_ok=True)
                write_atomically(self.promises_path, json.dumps(promised))
            except OSError as exc:
                if not self._warned_promises:
                    self._warned_promises = True
                    logger.warning("metric hub: cannot write %s (%s)", self.promises_path, exc)

    def save_latest(self) -> int:
        """At a clean stop: write every stream's latest values. Only the named scrapers that had
        been sent all of a stream get its values back (and unnamed scrapes); another named scraper
        gets them with the stream's next push, after the history its trainer's sender sends again
        (a newer value before the history leading to it would put a step out of order). Returns
        the streams written."""
        if self.latest_path is None:
            return 0
        with self.data.lock:
            streams: list[Json] = [
                [
                    [[label, value] for label, value in s.key],
                    s.step,
                    s.newest_time,
                    s.updated,
                    list(s.latest),
                    list(s.latest.values()),
                    self._sent_whole(s),
                ]
                for s in self.data.streams.values()
            ]
        write_atomically(self.latest_path, json.dumps({"saved_at": self.clock(), "streams": streams}))
        return len(streams)

    def _sent_whole(self, stream: Stream) -> list[Json]:
        """The named scrapers that have been sent every batch of ``stream`` the hub holds."""
        return [
            name
            for name, scraper in self.data.scrapers.items()
            if stream.key in scraper.marks and all(scraper.sent(stream.key, s) for s in stream.history)
        ]

    def load(self, confirming: frozenset[str]) -> None:
        """At start, before the hub takes a push: the positions, then the latest values (under the hub lock)."""
        with self.data.lock:
            self._load_state(confirming)
            self._load_latest()

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
                if not self.memory.fits(cost, len(stream.latest)):
                    logger.warning(
                        "metric hub: the latest values saved at stop do not all fit; the rest come with the next steps"
                    )
                    break
                stream.step = None if step is None else int(step)
                stream.newest_time = float(newest)
                stream.updated = float(updated)
                stream.version = 1
                stream.restored_for = frozenset(map(str, whole))
                self.data.streams[stream.key] = stream
                self.memory.charge(stream, cost)
                self.memory.count_series(stream.run, len(stream.latest))
            self.data.version += 1
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning(
                "metric hub: cannot read the latest values saved at stop (%s); they come with the next steps", exc
            )

    def _load_state(self, confirming: frozenset[str]) -> None:
        if self.state_path is None or not self.state_path.exists():
            return
        scrapers = self.data.scrapers
        try:
            state = json.loads(self.state_path.read_text())
            for name, saved in state["scrapers"].items():
                scrapers[name] = Scraper.from_saved(name, saved, self.clock(), name in confirming)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("metric hub: cannot read %s (%s); named scrapers start afresh", self.state_path, exc)
            scrapers.clear()
            return
        try:  # what the scrapes since that save promised (a crash: they were not saved there)
            path = self.promises_path
            promised = json.loads(path.read_text()) if path is not None and path.exists() else {}
            for name, saved in promised.items():
                if name in scrapers:
                    scrapers[name].restore_promises(saved)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning(
                "metric hub: cannot read %s (%s); steps sent again may be stamped anew", self.promises_path, exc
            )
