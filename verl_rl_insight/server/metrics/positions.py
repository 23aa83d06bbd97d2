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
from typing import NamedTuple, Protocol

from verl_rl_insight.contract.naming import is_scraper_name
from verl_rl_insight.contract.run_card import Json
from verl_rl_insight.contract.wire import PushError

StreamKey = tuple[tuple[str, str], ...]  # the stream's label pairs, sorted


class Mark(NamedTuple):
    """How far a scraper was sent of one stream."""

    seq: int | None  # the last push sequence number sent; None after a restart (identities say it then)
    time: float  # the trainer time of the last batch sent


class Identity(NamedTuple):
    """A batch, and every resent copy of it (equal to the plain ``(step, time)`` pair)."""

    step: int | None
    time: float


class Stamp(NamedTuple):
    """The timestamp a scrape gave a batch: the one record of it, wherever the hub keeps it.

    A store keeps one sample per series and timestamp, so a batch once given ``ts_ms`` is only ever
    sent with it again. The same record is the promise (``Scraper.promised``: on disk before the
    body that gives it is sent), the batch in flight (``Inflight``: written, not yet seen in the
    store) and the batch to send again (``Scraper.resend``: the store lacks it). The snapshot's
    values are not in it: what a scraper was sent outlives the history (``exposure.Outgoing`` pairs
    the two while a body is made)."""

    identity: Identity
    ts_ms: int
    serial: int  # the scrape of this process that gave it; RESTORED: read back at start
    since: float = 0.0  # when the response that first sent it was written; 0.0 until then


class Inflight(NamedTuple):
    """A confirming scraper's scrape, written, not yet seen in its store."""

    written_at: float
    streams: dict[StreamKey, list[Stamp]]  # what it sent, per stream


class AppliedBatch(Protocol):
    """A batch as the hub holds it (``model.Snapshot``, which imports this module): its push
    sequence number and identity."""

    seq: int
    step: int | None
    time: float


def check_scraper_name(name: object) -> str:
    """A scraper name as ``?scraper=`` gives it; raises PushError when it is not one."""
    if not is_scraper_name(name):
        raise PushError("scraper must be 1 to 64 characters of [a-zA-Z0-9_.:-]")
    return name


RECENT_SENT = 64  # per scraper and stream, the identities last sent: kept across a restart
RESTORED = -1  # the serial of a stamp read back at start (a promise of it is kept until its batch is sent again)
MAX_PROMISED = 4096  # per scraper and stream, the promises kept at the most (the oldest go first)


class Scraper:
    """One named scraper: what it was sent, the timestamps it was promised and, confirming, what
    awaits its store. Owned by ``scrapes.Scrapes``, its only writer (``HubFiles.read_positions``
    makes it at start, before any scrape), under the hub lock, held by the caller; the others read
    it through ``Scrapes``' methods. ``busy`` is its own: one scrape by it at a time."""

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
        self.marks = marks or {}  # stream key -> how far it was sent
        self.seen_at = seen_at
        self.busy = threading.Lock()
        # stream key -> the identities of the batches last sent (saved; after a restart they, not
        # the time, say what a resent copy is: a batch stamped before the last one sent, by a
        # pusher with a slower clock, was not sent because of its time)
        self.recent: dict[StreamKey, collections.deque[Identity]] = {}
        self.confirm = False  # whether its store is read back before its history is let go
        self.number = 0  # its last scrape's number (milliseconds, unique across restarts)
        self.inflight: dict[int, Inflight] = {}  # scrape number -> what it sent, not yet seen in the store
        # stream key -> {identity: its stamp}: not in the store, sent again as it was
        self.resend: dict[StreamKey, dict[Identity, Stamp]] = {}
        # stream key -> {identity: its stamp}: the timestamps given to batches whose positions may
        # not be on disk yet (a stamp's serial: the scrape that gave it; RESTORED: read back at start)
        self.promised: dict[StreamKey, dict[Identity, Stamp]] = {}
        self.serial = 0  # its scrapes in this process, numbered
        self.settled_serial = 0  # the last of them whose response was written, or could not be

    def promise(self, key: StreamKey, stamps: Iterable[Stamp]) -> None:
        """A scrape (each stamp's ``serial``) gives these batches of ``key`` these timestamps: kept until saved."""
        promised = self.promised.setdefault(key, {})
        for stamp in stamps:
            promised.pop(stamp.identity, None)  # a batch sent again (its body cut off): newest last
            promised[stamp.identity] = stamp
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
                for i, p in promised.items()
                if RESTORED < p.serial <= settled_through or (p.serial == RESTORED and p.ts_ms < horizon_ms)
            ]:
                del promised[identity]
            if not promised:
                del self.promised[key]

    def promises_saved(self) -> list[Json]:
        """JSON-ready: [[key, [[[step, time], ts], ...]], ...]."""
        return [[_pairs(key), [[list(i), p.ts_ms] for i, p in ps.items()]] for key, ps in self.promised.items()]

    def restore_promises(self, saved: Json) -> None:
        """What ``promises_saved`` wrote (here, or in hub-promises.json); raises ValueError,
        KeyError or TypeError on a damaged entry."""
        for key, items in _rows(saved):
            promised = self.promised.setdefault(stream_key(key), {})
            for i, ts in _rows(items):
                batch = identity(i)
                promised[batch] = Stamp(batch, _int(ts), RESTORED)

    def held_keys(self) -> set[StreamKey]:
        """The streams of which this scraper holds batches not yet confirmed by its store."""
        keys = set(self.resend)
        for scrape in self.inflight.values():
            keys.update(scrape.streams)
        return keys

    def sent(self, key: StreamKey, snapshot: AppliedBatch) -> bool:
        mark = self.marks.get(key)
        if mark is None:
            return False
        if mark.seq is not None:
            return snapshot.seq <= mark.seq
        recent = self.recent.get(key)
        if not recent:  # a state file from before identities were kept
            return snapshot.time <= mark.time
        # older than every identity kept: sent before them
        return (snapshot.step, snapshot.time) in recent or snapshot.time < min(i.time for i in recent)

    def restored(self, key: StreamKey) -> bool:
        """Whether what was sent of ``key`` is known by identities only (since a restart)."""
        mark = self.marks.get(key)
        return mark is not None and mark.seq is None

    def record(self, key: StreamKey, identities: list[Identity]) -> None:
        self.recent.setdefault(key, collections.deque(maxlen=RECENT_SENT)).extend(identities)

    # -- what its store confirms ---------------------------------------------------------------
    def await_store(
        self,
        number: int,
        now: float,
        resent: Mapping[StreamKey, Sequence[Stamp]],
        first: Mapping[StreamKey, Sequence[Stamp]],
    ) -> None:
        """Scrape ``number`` was written at ``now`` with ``resent`` (sent again, as they were first
        sent) and ``first`` (sent for the first time): it waits for the store to show it."""
        streams: dict[StreamKey, list[Stamp]] = {}
        for key, items in resent.items():
            wanted = self.resend.get(key, {})
            for item in items:
                wanted.pop(item.identity, None)
                streams.setdefault(key, []).append(item)
            if not wanted:
                self.resend.pop(key, None)
        for key, stamps in first.items():
            streams.setdefault(key, []).extend(stamp._replace(since=now) for stamp in stamps)
        if streams:
            self.inflight[number] = Inflight(now, streams)

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
            for key, items in entry.streams.items():
                if key in live:
                    wanted = self.resend.setdefault(key, {})
                    for item in items:
                        wanted.setdefault(item.identity, item)
                        again += 1
        return missing, again

    def give_up(self, horizon: float) -> tuple[int, int]:
        """Forget what waited for the store since before ``horizon`` (it cannot be asked, or keeps
        refusing): (scrapes unconfirmed, batches lost)."""
        unconfirmed = lost = 0
        for number in [n for n, scrape in self.inflight.items() if scrape.written_at < horizon]:
            del self.inflight[number]
            unconfirmed += 1
        for key in list(self.resend):
            wanted = self.resend[key]
            for i in [i for i, r in wanted.items() if r.since < horizon]:
                del wanted[i]
                lost += 1
            if not wanted:
                del self.resend[key]
        return unconfirmed, lost

    # -- what survives a restart (hub-state.json) ----------------------------------------------
    def to_saved(self) -> dict[str, Json]:
        """JSON-ready (tuples encode as arrays)."""
        return {
            "last_ms": self.last_ms,
            "seen_at": self.seen_at,
            # [key, time, [[step, time], ...]]
            "marks": [
                [_pairs(key), mark.time, [list(i) for i in self.recent.get(key, ())]]
                for key, mark in self.marks.items()
            ],
            # [number, written at, [[key, [[[step, time], ts, since], ...]], ...]]
            "inflight": [
                [
                    n,
                    scrape.written_at,
                    [
                        [_pairs(key), [[list(s.identity), s.ts_ms, s.since] for s in items]]
                        for key, items in scrape.streams.items()
                    ],
                ]
                for n, scrape in self.inflight.items()
            ],
            "resend": [
                [_pairs(key), [[list(i), r.ts_ms, r.since] for i, r in w.items()]] for key, w in self.resend.items()
            ],
            "number": self.number,
            "promised": self.promises_saved(),
        }

    @classmethod
    def from_saved(cls, name: str, saved: Json, now: float, confirm: bool) -> Scraper:
        """What ``to_saved`` wrote; raises ValueError, KeyError or TypeError on a damaged entry."""
        if not isinstance(saved, dict):
            raise TypeError("a scraper's saved state is not an object")
        last_ms = saved["last_ms"]
        scraper = cls(check_scraper_name(name), None if last_ms is None else _int(last_ms), seen_at=now)
        for key, t, *ids in _rows(saved["marks"]):
            restored = stream_key(key)
            scraper.marks[restored] = Mark(None, _float(t))
            scraper.record(restored, [identity(i) for i in (_items(ids[0]) if ids else ())])
        scraper.confirm = confirm
        scraper.number = _int(saved.get("number", 0))
        for number, at, streams in _rows(saved.get("inflight", [])):
            scraper.inflight[_int(number)] = Inflight(
                _float(at),
                {
                    stream_key(key): [_stamp(i, ts, since) for i, ts, since in _rows(items)]
                    for key, items in _rows(streams)
                },
            )
        for key, items in _rows(saved.get("resend", [])):
            scraper.resend[stream_key(key)] = {identity(i): _stamp(i, ts, since) for i, ts, since in _rows(items)}
        scraper.restore_promises(saved.get("promised", []))
        return scraper


def _pairs(key: StreamKey) -> list[Json]:
    return [[label, value] for label, value in key]


def _items(saved: Json) -> list[Json]:
    """A JSON array, else TypeError (a damaged file)."""
    if not isinstance(saved, list):
        raise TypeError(f"expected an array, found {type(saved).__name__}")
    return saved


def _rows(saved: Json) -> list[list[Json]]:
    """A JSON array of arrays, else TypeError (a damaged file)."""
    return [_items(row) for row in _items(saved)]


def _int(saved: Json) -> int:
    if not isinstance(saved, int | float | str) or isinstance(saved, bool):
        raise TypeError(f"expected a number, found {type(saved).__name__}")
    return int(saved)


def _float(saved: Json) -> float:
    if not isinstance(saved, int | float | str) or isinstance(saved, bool):
        raise TypeError(f"expected a number, found {type(saved).__name__}")
    return float(saved)


def stream_key(saved: Json) -> StreamKey:
    return tuple((str(label), str(value)) for label, value in _rows(saved))


def identity(saved: Json) -> Identity:
    step, when = _items(saved)
    return Identity(None if step is None else _int(step), _float(when))


def _stamp(saved_identity: Json, ts_ms: Json, since: Json) -> Stamp:
    """A stamp in flight or to send again, as ``Scraper.to_saved`` wrote it: ``[[step, time], ts, since]``."""
    return Stamp(identity(saved_identity), _int(ts_ms), RESTORED, _float(since))
