"""What each named scraper of the hub was sent, and what its store has confirmed.

Per scraper and stream: the position it was sent up to (``marks``: a push's sequence number, or
after a restart the trainer time, with the identities (step, trainer time) of the last batches sent,
``recent``); for a *confirming* scraper also the scrapes written and not yet seen in its store
(``inflight``) and the batches its store lacks, to be sent again with their timestamps
(``resend``). All of it is saved in ``hub-state.json`` and read back at start.

And the timestamps a scrape gave its batches (``promised``), on disk before its body is sent (the
API writes them ahead, ``hub-promises.json``): hub-state.json is written at most once a second, so
after a crash (SIGKILL) the batches of the last scrapes are sent again, and each gets the timestamp
it was sent with, never a new one (a store keeps a sample per timestamp: a new one would be a
second copy of the step). A promise goes once the positions that cover it are on disk.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

from verl_rl_insight.contract.naming import is_scraper_name
from verl_rl_insight.contract.wire import PushError

StreamKey = tuple[tuple[str, str], ...]  # the stream's label pairs, sorted
Mark = tuple[int | None, float]  # (seq or None after a restart, trainer time) last sent


class Sent(Protocol):
    """A batch as the hub holds it (hub.Snapshot): its push sequence number and identity."""

    seq: int
    step: int | None
    time: float


def check_scraper_name(name: object) -> str:
    """A scraper name as ``?scraper=`` gives it; raises PushError when it is not one."""
    if not is_scraper_name(name):
        raise PushError("scraper must be 1 to 64 characters of [a-zA-Z0-9_.:-]")
    return name


Identity = tuple[int | None, float]  # (step, trainer time): a batch, and every resent copy of it
RECENT_SENT = 64  # per scraper and stream, the identities last sent: kept across a restart
# a batch sent and not confirmed: (its identity, the timestamp it was sent with, when first sent)
Stamped = tuple[Identity, int, float]
Inflight = tuple[float, dict[StreamKey, list[Stamped]]]  # (written at, what a scrape sent, per stream)
RESTORED = -1  # the serial of a promise read back at start: kept until its batch is sent again
MAX_PROMISED = 4096  # per scraper and stream, the promises kept at the most (the oldest go first)


class Scraper:
    __slots__ = (
        "name",
        "last_ms",
        "marks",
        "seen_at",
        "busy",
        "recent",
        "confirm",
        "number",
        "inflight",
        "resend",
        "promised",
        "serial",
        "settled_serial",
    )

    def __init__(
        self, name: str, last_ms: int | None = None, marks: dict[StreamKey, Mark] | None = None, seen_at: float = 0.0
    ) -> None:
        self.name = name
        self.last_ms = last_ms  # the arrival time (ms) of its last scrape: history goes after it
        self.marks = marks or {}  # stream key -> (seq or None after a restart, trainer time) last sent
        self.seen_at = seen_at
        self.busy = threading.Lock()
        # stream key -> the identities of the batches last sent (saved; after a restart they, not
        # the time, say what a resent copy is: a batch stamped before the last one sent, by a
        # pusher with a slower clock, was not sent because of its time)
        self.recent: dict[StreamKey, collections.deque[Identity]] = {}
        self.confirm = False  # whether its store is read back before its history is let go
        self.number = 0  # its last scrape's number (milliseconds, unique across restarts)
        self.inflight: dict[int, Inflight] = {}  # scrape number -> what it sent, not yet seen in the store
        # stream key -> {identity: (timestamp ms, first sent at)}: not in the store, sent again as it was
        self.resend: dict[StreamKey, dict[Identity, tuple[int, float]]] = {}
        # stream key -> {identity: (timestamp ms, serial of the scrape that gave it)}: the timestamps
        # given to batches whose positions may not be on disk yet (RESTORED: read back at start)
        self.promised: dict[StreamKey, dict[Identity, tuple[int, int]]] = {}
        self.serial = 0  # its scrapes in this process, numbered
        self.settled_serial = 0  # the last of them whose response was written, or could not be

    def promise(self, key: StreamKey, stamped: Sequence[tuple[Identity, int]], serial: int) -> None:
        """Scrape ``serial`` gives these batches of ``key`` these timestamps: kept until saved."""
        promised = self.promised.setdefault(key, {})
        for identity, ts in stamped:
            promised.pop(identity, None)  # a batch sent again (its body cut off): newest last
            promised[identity] = (ts, serial)
        while len(promised) > MAX_PROMISED:
            del promised[next(iter(promised))]

    def keep_promises(self, settled_through: int, horizon_ms: int) -> None:
        """Positions as of scrape ``settled_through`` are on disk: its promises and those before go;
        those read back at start stay until their batch is sent again, or is older than ``horizon_ms``
        (the hub holds no history that old: it cannot be sent again)."""
        for key in list(self.promised):
            promised = self.promised[key]
            for identity in [
                i
                for i, (ts, serial) in promised.items()
                if RESTORED < serial <= settled_through or (serial == RESTORED and ts < horizon_ms)
            ]:
                del promised[identity]
            if not promised:
                del self.promised[key]

    def promises_saved(self) -> list[Any]:
        """JSON-ready: [[key, [[[step, time], ts], ...]], ...]."""
        return [[key, [[i, ts] for i, (ts, _) in p.items()]] for key, p in self.promised.items()]

    def restore_promises(self, saved: Iterable[Any]) -> None:
        """What ``promises_saved`` wrote (here, or in hub-promises.json); raises ValueError,
        KeyError or TypeError on a damaged entry."""
        for key, items in saved:
            promised = self.promised.setdefault(stream_key(key), {})
            for i, ts in items:
                promised[identity(i)] = (int(ts), RESTORED)

    def held_keys(self) -> set[StreamKey]:
        """The streams of which this scraper holds batches not yet confirmed by its store."""
        keys = set(self.resend)
        for _, streams in self.inflight.values():
            keys.update(streams)
        return keys

    def sent(self, key: StreamKey, snapshot: Sent) -> bool:
        mark = self.marks.get(key)
        if mark is None:
            return False
        if mark[0] is not None:
            return snapshot.seq <= mark[0]
        recent = self.recent.get(key)
        if not recent:  # a state file from before identities were kept
            return snapshot.time <= mark[1]
        # older than every identity kept: sent before them
        return (snapshot.step, snapshot.time) in recent or snapshot.time < min(t for _, t in recent)

    def restored(self, key: StreamKey) -> bool:
        """Whether what was sent of ``key`` is known by identities only (since a restart)."""
        mark = self.marks.get(key)
        return mark is not None and mark[0] is None

    def record(self, key: StreamKey, identities: list[Identity]) -> None:
        self.recent.setdefault(key, collections.deque(maxlen=RECENT_SENT)).extend(identities)

    # -- what its store confirms ---------------------------------------------------------------
    def await_store(
        self,
        number: int,
        now: float,
        resent: Mapping[StreamKey, Sequence[tuple[Sent, int, float]]],
        stamped: Mapping[StreamKey, Sequence[tuple[Identity, int]]],
    ) -> None:
        """Scrape ``number`` was written with ``resent`` (sent again: (batch, ts, first sent at)) and
        ``stamped`` (sent for the first time: (identity, ts)): it waits for the store to show it."""
        streams: dict[StreamKey, list[Stamped]] = {}
        for key, items in resent.items():
            wanted = self.resend.get(key, {})
            for batch, ts, since in items:
                wanted.pop((batch.step, batch.time), None)
                streams.setdefault(key, []).append(((batch.step, batch.time), ts, since))
            if not wanted:
                self.resend.pop(key, None)
        for key, first in stamped.items():
            streams.setdefault(key, []).extend((i, ts, now) for i, ts in first)
        if streams:
            self.inflight[number] = (now, streams)

    def settle(self, numbers: Iterable[int], stored: set[int], live: Collection[StreamKey]) -> tuple[int, int]:
        """The store answered about scrapes ``numbers``: it holds those in ``stored``; the batches
        of the others (of streams still ``live``) are to be sent again with their timestamps.
        Returns (scrapes not stored, batches to send again)."""
        missing = again = 0
        for number in numbers:
            entry = self.inflight.pop(number, None)
            if entry is None or number in stored:
                continue
            missing += 1
            for key, items in entry[1].items():
                if key in live:
                    wanted = self.resend.setdefault(key, {})
                    for i, ts, since in items:
                        wanted.setdefault(i, (ts, since))
                        again += 1
        return missing, again

    def give_up(self, horizon: float) -> tuple[int, int]:
        """Forget what waited for the store since before ``horizon`` (it cannot be asked, or keeps
        refusing): (scrapes unconfirmed, batches lost)."""
        unconfirmed = lost = 0
        for number in [n for n, (at, _) in self.inflight.items() if at < horizon]:
            del self.inflight[number]
            unconfirmed += 1
        for key in list(self.resend):
            wanted = self.resend[key]
            for i in [i for i, (_, since) in wanted.items() if since < horizon]:
                del wanted[i]
                lost += 1
            if not wanted:
                del self.resend[key]
        return unconfirmed, lost

    # -- what survives a restart (hub-state.json) ----------------------------------------------
    def to_saved(self) -> dict[str, Any]:
        """JSON-ready (tuples encode as arrays)."""
        return {
            "last_ms": self.last_ms,
            "seen_at": self.seen_at,
            # [key, time, [[step, time], ...]]
            "marks": [[key, mark[1], list(self.recent.get(key, ()))] for key, mark in self.marks.items()],
            # [number, written at, [[key, [[[step, time], ts, since], ...]], ...]]
            "inflight": [[n, at, list(streams.items())] for n, (at, streams) in self.inflight.items()],
            "resend": [[key, [[i, ts, since] for i, (ts, since) in w.items()]] for key, w in self.resend.items()],
            "number": self.number,
            "promised": self.promises_saved(),
        }

    @classmethod
    def from_saved(cls, name: str, saved: dict[str, Any], now: float, confirm: bool) -> Scraper:
        """What ``to_saved`` wrote; raises ValueError, KeyError or TypeError on a damaged entry."""
        scraper = cls(
            check_scraper_name(name), int(saved["last_ms"]) if saved["last_ms"] is not None else None, seen_at=now
        )
        for key, t, *ids in saved["marks"]:
            restored = stream_key(key)
            scraper.marks[restored] = (None, float(t))
            scraper.record(restored, [identity(i) for i in (ids[0] if ids else ())])
        scraper.confirm = confirm
        scraper.number = int(saved.get("number", 0))
        for number, at, streams in saved.get("inflight", ()):
            scraper.inflight[int(number)] = (
                float(at),
                {
                    stream_key(key): [(identity(i), int(ts), float(since)) for i, ts, since in items]
                    for key, items in streams
                },
            )
        for key, items in saved.get("resend", ()):
            scraper.resend[stream_key(key)] = {identity(i): (int(ts), float(since)) for i, ts, since in items}
        scraper.restore_promises(saved.get("promised", ()))
        return scraper


def stream_key(saved: Any) -> StreamKey:
    return tuple((str(label), str(value)) for label, value in saved)


def identity(saved: Any) -> Identity:
    step, when = saved
    return (None if step is None else int(step), float(when))
