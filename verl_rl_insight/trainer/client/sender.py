"""BatchSender: gets metric batches from the training thread to the server without ever making it wait.

The training thread only calls ``submit`` (an append to a bounded queue). A daemon thread
encodes each batch to JSON on its own (a batch that cannot be encoded is dropped and counted,
never blocking the others), keeps the encoded batches in a bounded spool, and POSTs them in
order, at most ``max_batches_per_request`` and ``max_request_bytes`` per request.

- Unreachable server (no answer, 5xx, 401/403, 408) or one that asks to retry later (429: a full
  share of the hub's memory, a scrape being served): batches stay in the spool (oldest dropped
  first when it is full, and counted), replayed in order when it takes them again, retried at most
  every ``retry_max_s``. One warning per outage, one on recovery.
- 4xx for the data itself (400, 413, 422; 403 for a batch of a run the credential does not write):
  the request is halved until the refused batches are found; those are dropped and counted.
- At-least-once: a dying server loses what it had not exposed yet, so after an outage and on a
  409 (a restarted hub: each push names the hub instance it expects) the batches delivered in the
  last ``resend_window_s`` are sent again first; the hub drops the copies it holds.
- A key the server keeps for itself (its own series' names) is dropped by the server from its
  batch, the rest applied; the 2xx answer names it, logged once per name (a run logs the same key
  every step) and counted (``stats["dropped_keys"]``).
- After ``os.fork`` the child starts with an empty sender of its own (the parent's batches are
  the parent's to send).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import weakref
from typing import Any

from verl_rl_insight.contract.http_client import HttpClient, TimedOut
from verl_rl_insight.contract.run_credential import OTHER_RUN
from verl_rl_insight.contract.wire import HUB_HEADER
from verl_rl_insight.trainer.client import push_answer
from verl_rl_insight.trainer.client.metric_batch import MetricBatch, encode, without_keys

ANSWER_BYTES = 2**20  # what is read of the server's answer to a push ({"hub": ...}): any server can be at the URL
logger = logging.getLogger("verl_rl_insight")

_STOP = object()
MAX_NAMES_WARNED = 100  # names of dropped keys logged at most (each once)
RETRY_STATUSES = frozenset({401, 403, 408, 409, 429})
FLUSH_RETRY_S = 1.0  # a flush (at exit: no later try comes) tries a busy server again this often
CLOCK_WARN_S = 60.0  # a host clock this far from the server's is worth a warning (HTTP Date has 1 s steps)
_senders: weakref.WeakSet[BatchSender] = weakref.WeakSet()


class BatchSender:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        queue_batches: int = 16384,
        queue_values: int = 500_000,
        spool_batches: int = 20000,
        max_batches_per_request: int = 200,
        max_request_bytes: int = 4 * 1024 * 1024,
        timeout_s: float = 5.0,
        retry_max_s: float = 5.0,
        resend_window_s: float = 30.0,
        linger_s: float = 0.25,
    ) -> None:
        self.url = url
        self.token = token
        self.timeout_s = timeout_s
        self.retry_max_s = retry_max_s
        self.max_batches_per_request = max(1, int(max_batches_per_request))
        self.max_request_bytes = max(1024, int(max_request_bytes))
        self.spool_batches = max(1, int(spool_batches))
        self.queue_batches = max(1, int(queue_batches))
        self.queue_values = max(1, int(queue_values))
        self.resend_window_s = resend_window_s
        self.linger_s = linger_s
        self._reset()
        _senders.add(self)

    def _reset(self) -> None:
        """Fresh state (at construction, and in the child after a fork)."""
        self.stats: collections.Counter[str] = collections.Counter()
        self.clock = time.time  # this host's clock, which stamps the batches
        # deque.append/popleft are atomic in CPython: no lock on the training thread's path
        self._queue: collections.deque[Any] = collections.deque()  # (MetricBatch, its values) or _STOP
        self._spool: collections.deque[bytes] = collections.deque()  # encoded batches, oldest first
        # (monotonic time, encoded batch) of the last resend_window_s
        self._delivered: collections.deque[tuple[float, bytes]] = collections.deque()
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._count_lock = threading.Lock()  # _outstanding, _queued_values and stats, written by both threads
        self._start_lock = threading.Lock()
        self._down_since: float | None = None
        self._failures = 0
        self._next_attempt = 0.0
        self._hopeless = 0  # failed requests a flush does not wait out: nothing there, credential refused
        self._warned: set[object] = set()
        self._outstanding = 0  # submitted, not yet delivered, dropped or refused
        self._queued_values = 0  # values of the batches in the hand-off queue (the memory it holds)
        self._limit: int | None = None  # while searching for refused batches: the request size to try
        self._suspect = 0  # how many batches at the head of the spool that search covers
        self._old_server = False  # the server refused a batch's ``keys`` (it predates them): sent without
        self._hub: str | None = None  # the hub instance that accepted our last push
        self._client = HttpClient(self.token)
        self._thread: threading.Thread | None = None

    # -- training thread -------------------------------------------------------------------
    def submit(self, batch: MetricBatch) -> None:
        """Hand a batch over; never blocks. Counts (and warns once) when the hand-off queue is full."""
        if self._thread is None:
            self._start()
        values = len(batch.raw or ())
        if len(self._queue) >= self.queue_batches or self._queued_values + values > self.queue_values:
            self._count("dropped_batches")
            self._warn_once(
                "queue_full",
                "rl-insight: sender queue full (%d batches or %d values); dropping metrics. "
                "Raise plugins.metric_push.queue_batches / queue_values?",
                self.queue_batches,
                self.queue_values,
            )
            return
        with self._count_lock:
            self._outstanding += 1
            self._queued_values += values
        self._queue.append((batch, values))

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until everything submitted so far was delivered.

        True when nothing is pending. Ends after one more try when nothing listens or the credential
        is refused (401, 403); a busy (429, 5xx) or slow server is tried again, each second at least.
        """
        if self._thread is None:
            return True
        deadline = time.monotonic() + timeout_s
        with self._idle:
            self._next_attempt = 0.0
            hopeless_at_start = self._hopeless
            self._wake.set()
            while self.pending():
                if self._hopeless > hopeless_at_start:
                    break
                now = time.monotonic()
                if now >= deadline:
                    break
                if self._next_attempt > now + FLUSH_RETRY_S:  # an outage's back-off: too long here
                    self._next_attempt = now + FLUSH_RETRY_S
                    self._wake.set()
                self._idle.wait(min(deadline - now, 0.05))
        return not self.pending()

    def pending(self) -> int:
        """Batches submitted and not yet accepted by the server (nor dropped or refused)."""
        return self._outstanding

    def close(self, timeout_s: float) -> bool:
        """Flush for at most ``timeout_s``, then stop the thread; logs what could not be delivered."""
        delivered = self.flush(timeout_s)
        if not delivered:
            logger.warning(
                "rl-insight: %d metric batches could not be delivered to %s before exit", self.pending(), self.url
            )
        if self._thread is not None:
            self._queue.append(_STOP)
            self._wake.set()
        return delivered

    # -- sender thread ---------------------------------------------------------------------
    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rl-insight-sender", daemon=True)
                self._thread.start()

    def _count(self, what: str, n: int = 1) -> None:
        """Add to ``stats``: the training thread (a full queue) and the sender thread both count."""
        with self._count_lock:
            self.stats[what] += n

    def _settled(self, count: int) -> None:
        with self._count_lock:
            self._outstanding -= count

    def _run(self) -> None:
        # Polls every linger_s instead of waking on each submit: a wake-up on put would take
        # the GIL from the training thread inside its log call.
        while True:
            if self._spool:
                wait = min(self.linger_s, max(0.0, self._next_attempt - time.monotonic()))
            else:
                wait = self.linger_s
            self._wake.wait(wait)
            self._wake.clear()
            stop = self._take_queue()
            while len(self._spool) > self.spool_batches:
                self._spool.popleft()
                self._settled(1)
                self._count("dropped_batches")
                self._warn_once(
                    "spool_full",
                    "rl-insight: spool full (%d batches) while the server is unreachable or refuses the token; "
                    "dropping the oldest",
                    self.spool_batches,
                )
            while self._spool and time.monotonic() >= self._next_attempt:
                if not self._send_some():
                    break
            with self._idle:
                self._idle.notify_all()
            if stop:
                return

    def _take_queue(self) -> bool:
        stop = False
        while self._queue:
            entry = self._queue.popleft()
            if entry is _STOP:
                stop = True
                continue
            item, values = entry
            with self._count_lock:
                self._queued_values -= values
            try:
                skipped = item.samples()[1]  # converts here, off the training thread
                encoded = encode(item)
            except Exception as exc:  # one bad batch never blocks the others
                self._settled(1)
                self._count("invalid_batches")
                self._warn_once(
                    "invalid",
                    "rl-insight: a metric batch (step %r) cannot be sent and is dropped: %s: %s",
                    getattr(item, "step", None),
                    type(exc).__name__,
                    exc,
                )
                continue
            if skipped:
                self._count("skipped_values", skipped)
                self._warn_once(
                    "skipped",
                    "rl-insight: non-numeric metric values are skipped and counted (first seen at step %s)",
                    item.step,
                )
            self._spool.append(encoded)
        return stop

    def _chunk(self) -> list[bytes]:
        limit = min(self.max_batches_per_request, self._limit or self.max_batches_per_request, len(self._spool))
        chunk: list[bytes] = []
        size = 16
        for i in range(limit):
            encoded = self._spool[i]
            if chunk and size + len(encoded) + 1 > self.max_request_bytes:
                break
            chunk.append(encoded)
            size += len(encoded) + 1
        return chunk

    def _send_some(self) -> bool:
        chunk = self._chunk()
        if self._old_server:  # a server that predates a batch's ``keys``: sent without them
            chunk = [without_keys(encoded) for encoded in chunk]
        status, message, answer = self._post(b'{"batches":[' + b",".join(chunk) + b"]}")
        if status is not None and status < 300:
            self._delivered_now(chunk, answer)
            return True
        if status == 409:  # a restarted hub: what it had not exposed yet is gone, send it again first
            self._hub = None
            self._resend_recent()
            return True
        if status == 400 and not self._old_server and "unknown field 'keys'" in message:
            self._old_server = True  # an older server: the keys (names as logged) go, the values do not
            return True
        if status is not None and 400 <= status < 500 and (status not in RETRY_STATUSES or OTHER_RUN in message):
            return self._refused(chunk, status, message)
        self._count("failed_requests")
        self._hopeless += status in (401, 403)
        self._failures += 1
        self._next_attempt = time.monotonic() + min(self.retry_max_s, 0.25 * 2 ** min(self._failures, 10))
        if self._down_since is None:
            self._down_since = time.monotonic()
            self._hub = None
            self._resend_recent()
            logger.warning(*push_answer.outage_warning(self.url, status, message, self.spool_batches))
        return False

    def _delivered_now(self, chunk: list[bytes], answer: dict[str, object]) -> None:
        hub = answer.get("hub")
        self._hub = hub if isinstance(hub, str) else self._hub
        self._left_out(answer)
        now = time.monotonic()
        for _ in chunk:
            self._delivered.append((now, self._spool.popleft()))
        self._settled(len(chunk))
        self._narrowing_passed(len(chunk))
        while self._delivered and now - self._delivered[0][0] > self.resend_window_s:
            self._delivered.popleft()
        self._count("sent_batches", len(chunk))
        self._count("requests")
        if self._down_since is not None:
            logger.warning(
                "rl-insight: server %s reachable again after %.0f s; replaying the spooled batches (%d left)",
                self.url,
                time.monotonic() - self._down_since,
                len(self._spool),
            )
            self._down_since = None
        self._failures = 0

    def _left_out(self, answer: dict[str, object]) -> None:
        """What the server left out of delivered batches: named in the log once per name, counted."""
        dropped, disagreements = push_answer.left_out(answer)
        self._count("dropped_keys", len(dropped))
        for name, why in dropped.items():
            if len(self._warned) < MAX_NAMES_WARNED:
                self._warn_once(("dropped_key", name), push_answer.DROPPED_KEY, name, why)
        if disagreements:
            self._count("step_disagreements", disagreements)
            self._warn_once("step_disagreement", push_answer.STEP_DISAGREEMENT)

    def _refused(self, chunk: list[bytes], status: int, message: str) -> bool:
        """The server refused the data (or a batch of another run): halve the request until found."""
        if len(chunk) > 1:
            self._limit = (len(chunk) + 1) // 2
            self._suspect = max(self._suspect, len(chunk))
            return True
        self._spool.popleft()
        self._settled(1)
        self._narrowing_passed(1)
        self._count("rejected_batches")
        self._warn_once(
            ("rejected", status),
            "rl-insight: server %s refused a metric batch (HTTP %s): %s; it is dropped, the others are delivered",
            self.url,
            status,
            message,
        )
        return True

    def _narrowing_passed(self, count: int) -> None:
        if self._suspect:
            self._suspect -= count
            if self._suspect <= 0:
                self._suspect, self._limit = 0, None

    def _resend_recent(self) -> None:
        """Put the batches delivered in the last resend_window_s back at the front of the spool."""
        self._count("resent_batches", len(self._delivered))
        with self._count_lock:
            self._outstanding += len(self._delivered)
        self._spool.extendleft(encoded for _, encoded in reversed(self._delivered))
        self._delivered.clear()

    def _post(self, body: bytes) -> tuple[int | None, str, dict[str, object]]:
        """(status, the answer's first 300 characters, the 2xx answer's JSON object or {})."""
        headers = {HUB_HEADER: self._hub} if self._hub else None
        try:
            reply = self._client.request(
                "POST",
                self.url,
                data=body,
                headers=headers,
                timeout_s=(min(2.0, self.timeout_s), self.timeout_s),
                max_bytes=ANSWER_BYTES,
            )
        except Exception as exc:  # refused, DNS: nothing there now; timed out: a server, slow now
            self._hopeless += not isinstance(exc, TimedOut)
            return None, f"{type(exc).__name__}: {exc}", {}
        answer: dict[str, object] = {}
        if reply.ok:
            self._check_clock(reply.headers.get("date"))
            try:
                parsed = reply.json()
                answer = parsed if isinstance(parsed, dict) else {}
            except ValueError:
                pass
        return reply.status, reply.text[:300], answer

    def _check_clock(self, date: str | None) -> None:
        """Batches carry this host's time: say once when it is far from the server's (HTTP Date)."""
        offset = push_answer.clock_offset(date, self.clock())
        if offset is not None and abs(offset) > CLOCK_WARN_S:
            with self._count_lock:
                self.stats["clock_offset_s"] = round(offset)
            self._warn_once("clock", push_answer.CLOCK_WARNING, offset)

    def _warn_once(self, key: object, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)


def _after_fork_in_child() -> None:
    for sender in list(_senders):
        sender._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
