"""BatchSender: gets metric batches from the training thread to the server without ever making it wait.

The training thread only calls ``submit`` (a non-blocking put into a bounded queue). A daemon
thread moves batches into a bounded spool and POSTs them in order. While the server cannot be
reached, batches stay in the spool (oldest dropped first when it is full, and counted) and
are replayed, in order, once it answers again. One warning per outage, one info on recovery.

Delivery is at-least-once: a server that dies loses what it had not yet exposed to a scrape,
so on an outage the batches delivered in the last ``resend_window_s`` go back to the front of
the spool; the hub drops the copies it already holds.
"""

import collections
import json
import logging
import threading
import time

from .server_client import ServerClient

logger = logging.getLogger("verl_rl_insight")

_STOP = object()


class BatchSender:
    def __init__(self, url, token=None, queue_batches=1024, spool_batches=20000, max_batches_per_request=200,
                 timeout_s=5.0, retry_max_s=30.0, resend_window_s=30.0, linger_s=0.25):
        self.url = url
        self.timeout_s = timeout_s
        self.retry_max_s = retry_max_s
        self.max_batches_per_request = max(1, int(max_batches_per_request))
        self.spool_batches = max(1, int(spool_batches))
        self.stats = collections.Counter()
        # deque.append/popleft are atomic in CPython: no lock on the training thread's path
        self._queue = collections.deque()
        self.queue_batches = max(1, int(queue_batches))
        self._spool = collections.deque()
        self.linger_s = linger_s
        self._wake = threading.Event()
        self.resend_window_s = resend_window_s
        self._delivered = collections.deque()  # (monotonic time, batch) of the last resend_window_s
        self._idle = threading.Condition()
        self._down_since = None
        self._failures = 0
        self._next_attempt = 0.0
        self._warned = set()
        self._outstanding = 0          # submitted, not yet delivered, dropped or refused
        self._count_lock = threading.Lock()
        self._client = ServerClient(token)
        self._thread = None
        self._start_lock = threading.Lock()

    # -- training thread -------------------------------------------------------------------
    def submit(self, batch):
        """Hand a batch over; never blocks. Counts (and warns once) when the hand-off queue is full."""
        if self._thread is None:
            self._start()
        if len(self._queue) >= self.queue_batches:
            self.stats["dropped_batches"] += 1
            self._warn_once("queue_full", "rl-insight: sender queue full (%d batches); dropping metrics. "
                            "Raise plugins.metric_push.queue_batches?", self.queue_batches)
            return
        with self._count_lock:
            self._outstanding += 1
        self._queue.append(batch)

    def flush(self, timeout_s):
        """Wait up to ``timeout_s`` until everything submitted so far was delivered.

        Returns True when nothing is pending. While the server is down this returns after one
        more immediate attempt instead of waiting out the timeout.
        """
        if self._thread is None:
            return True
        deadline = time.monotonic() + timeout_s
        with self._idle:
            self._next_attempt = 0.0
            failures_at_start = self.stats["failed_requests"]
            self._wake.set()
            while self.pending():
                if self.stats["failed_requests"] > failures_at_start:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._idle.wait(min(remaining, 0.05))
        return not self.pending()

    def pending(self):
        """Batches submitted and not yet accepted by the server (nor dropped or refused)."""
        return self._outstanding

    def _settled(self, count):
        with self._count_lock:
            self._outstanding -= count

    def close(self, timeout_s):
        """Flush for at most ``timeout_s``, then stop the thread; logs what could not be delivered."""
        delivered = self.flush(timeout_s)
        if not delivered:
            logger.warning("rl-insight: %d metric batches could not be delivered to %s before exit",
                           self.pending(), self.url)
        if self._thread is not None:
            self._queue.append(_STOP)
            self._wake.set()
        return delivered

    # -- sender thread ---------------------------------------------------------------------
    def _start(self):
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rl-insight-sender", daemon=True)
                self._thread.start()

    def _run(self):
        # Polls every linger_s instead of waking on each submit: a wake-up on put would take
        # the GIL from the training thread inside its log call.
        while True:
            if self._spool:
                wait = min(self.linger_s, max(0.0, self._next_attempt - time.monotonic()))
            else:
                wait = self.linger_s
            self._wake.wait(wait)
            self._wake.clear()
            stop = False
            while self._queue:
                item = self._queue.popleft()
                if item is _STOP:
                    stop = True
                else:
                    skipped = item.samples()[1]  # converts here, off the training thread
                    if skipped:
                        self.stats["skipped_values"] += skipped
                        self._warn_once("skipped", "rl-insight: non-numeric metric values are skipped and "
                                        "counted (first seen at step %s)", item.step)
                    self._spool.append(item)
            while len(self._spool) > self.spool_batches:
                self._spool.popleft()
                self._settled(1)
                self.stats["dropped_batches"] += 1
                self._warn_once("spool_full", "rl-insight: spool full (%d batches) while the server is "
                                "unreachable; dropping the oldest", self.spool_batches)
            while self._spool and time.monotonic() >= self._next_attempt:
                if not self._send_some():
                    break
            with self._idle:
                self._idle.notify_all()
            if stop:
                return

    def _send_some(self):
        chunk = [self._spool[i] for i in range(min(len(self._spool), self.max_batches_per_request))]
        status, message = self._post({"batches": [batch.to_json() for batch in chunk]})
        if status is not None and status < 300:
            now = time.monotonic()
            for _ in chunk:
                self._delivered.append((now, self._spool.popleft()))
            self._settled(len(chunk))
            while self._delivered and now - self._delivered[0][0] > self.resend_window_s:
                self._delivered.popleft()
            self.stats["sent_batches"] += len(chunk)
            self.stats["requests"] += 1
            if self._down_since is not None:
                logger.warning("rl-insight: server %s reachable again after %.0f s; replaying the spooled "
                               "batches (%d left)", self.url, time.monotonic() - self._down_since, len(self._spool))
                self._down_since = None
            self._failures = 0
            return True
        if status is not None and 400 <= status < 500 and status not in (401, 403, 408, 429):
            # The server refused the data itself: retrying cannot help, keep the rest flowing.
            for _ in chunk:
                self._spool.popleft()
            self._settled(len(chunk))
            self.stats["rejected_batches"] += len(chunk)
            self._warn_once(("rejected", status), "rl-insight: server %s rejected %d batches (HTTP %s): %s",
                            self.url, len(chunk), status, message)
            return True
        self.stats["failed_requests"] += 1
        self._failures += 1
        self._next_attempt = time.monotonic() + min(self.retry_max_s, 0.25 * 2 ** min(self._failures, 10))
        if self._down_since is None:
            self._down_since = time.monotonic()
            # The server may have died with recent batches not yet scraped: send them again.
            self.stats["resent_batches"] += len(self._delivered)
            with self._count_lock:
                self._outstanding += len(self._delivered)
            self._spool.extendleft(batch for _, batch in reversed(self._delivered))
            self._delivered.clear()
            logger.warning("rl-insight: cannot reach the monitoring server at %s (%s); training continues, "
                           "metrics are kept (up to %d batches) and replayed when it is back",
                           self.url, message, self.spool_batches)
        return False

    def _post(self, body):
        try:
            response = self._client.request("POST", self.url, json.dumps(body, separators=(",", ":")),
                                            timeout=(min(2.0, self.timeout_s), self.timeout_s))
        except Exception as exc:  # connection refused, DNS, timeout: all mean "not reachable now"
            return None, f"{type(exc).__name__}: {exc}"
        return response.status_code, response.text[:300]

    def _warn_once(self, key, message, *args):
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)
