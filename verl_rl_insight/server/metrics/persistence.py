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
from collections.abc import Callable
from pathlib import Path

from verl_rl_insight.contract.run_card import Json
from verl_rl_insight.server.metrics.memory import Bound
from verl_rl_insight.server.metrics.model import Stream, check_held
from verl_rl_insight.server.metrics.positions import Scraper, stream_key
from verl_rl_insight.server.stores.files import write_atomically

logger = logging.getLogger("verl_rl_insight.server")

PROMISES_FILE = "hub-promises.json"


class HubFiles:
    """Writes and reads back the hub's files. It owns no state of the hub's: the positions and
    promises are ``scrapes.Scrapes``' (it says when they are written and hands them over), the
    streams ``memory.Memory``'s (``load_latest`` adds them through ``Memory.restore_stream``).

    Its locks: ``write_state``, ``write_promises`` and ``read_positions`` take none and touch
    nothing of the hub's (``Scrapes`` calls the writers under a lock of its own, never under the
    hub lock); ``save_latest`` takes the hub lock while it copies (at a clean stop);
    ``load_latest`` runs under it, held by its caller (at start, before the hub takes a push).
    """

    def __init__(
        self,
        bound: Bound,
        clock: Callable[[], float],
        state_path: Path | None,
        latest_path: Path | None,
        stream_ttl_s: float,
    ) -> None:
        self.lock, self.memory = bound.lock, bound.memory
        self.clock = clock
        self.state_path = state_path
        self.latest_path = latest_path  # the latest values, written at a clean stop, read back at start
        self.promises_path = state_path.with_name(PROMISES_FILE) if state_path is not None else None
        self.stream_ttl_s = stream_ttl_s
        self._warned_promises = False

    @property
    def keeps_positions(self) -> bool:
        """Whether the positions and promises are written (the hub has a state file)."""
        return self.state_path is not None

    def write_state(self, state: Json) -> None:
        """Write what each named scraper was sent (``positions.Scraper.to_saved``), atomically."""
        if self.state_path is None:
            return
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.state_path, json.dumps(state))

    def write_promises(self, promised: Json) -> None:
        """Write the timestamps the named scrapes gave since the positions were last written
        (``positions.Scraper.promises_saved``). A failure to write is logged once, the scrape goes on."""
        if self.state_path is None or self.promises_path is None:
            return
        try:
            self.state_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.promises_path, json.dumps(promised))
        except OSError as exc:
            if not self._warned_promises:
                self._warned_promises = True
                logger.warning("metric hub: cannot write %s (%s)", self.promises_path, exc)

    def save_latest(self, sent_whole: Callable[[Stream], list[Json]]) -> int:
        """At a clean stop: write every stream's latest values. Only the named scrapers that had
        been sent all of a stream (``sent_whole``: ``Scrapes.sent_whole``) get its values back (and
        unnamed scrapes); another named scraper gets them with the stream's next push, after the
        history its trainer's sender sends again (a newer value before the history leading to it
        would put a step out of order). Returns the streams written."""
        if self.latest_path is None:
            return 0
        with self.lock:
            streams: list[Json] = [
                [
                    [[label, value] for label, value in s.key],
                    s.step,
                    s.newest_time,
                    s.updated,
                    list(s.latest),
                    list(s.latest.values()),
                    sent_whole(s),
                ]
                for s in self.memory.streams.values()
            ]
        write_atomically(self.latest_path, json.dumps({"saved_at": self.clock(), "streams": streams}))
        return len(streams)

    def load_latest(self) -> int:
        """The latest values a clean stop wrote, once (the file goes: an older copy must never come
        back after a later crash), within the series and memory bounds: the streams read back."""
        check_held(self.lock)
        path = self.latest_path
        if path is None or not path.exists():
            return 0
        restored = 0
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
                stream.step = None if step is None else int(step)
                stream.newest_time = float(newest)
                stream.updated = float(updated)
                stream.version = 1
                stream.restored_for = frozenset(map(str, whole))
                if not self.memory.restore_stream(stream):
                    logger.warning(
                        "metric hub: the latest values saved at stop do not all fit; the rest come with the next steps"
                    )
                    break
                restored += 1
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning(
                "metric hub: cannot read the latest values saved at stop (%s); they come with the next steps", exc
            )
        return restored

    def read_positions(self, confirming: frozenset[str]) -> dict[str, Scraper]:
        """What each named scraper was sent, and the timestamps it was promised since, as last
        written (at start; none when there is no file or it cannot be read)."""
        if self.state_path is None or not self.state_path.exists():
            return {}
        scrapers: dict[str, Scraper] = {}
        try:
            state = json.loads(self.state_path.read_text())
            for name, saved in state["scrapers"].items():
                scrapers[name] = Scraper.from_saved(name, saved, self.clock(), name in confirming)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("metric hub: cannot read %s (%s); named scrapers start afresh", self.state_path, exc)
            return {}
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
        return scrapers
