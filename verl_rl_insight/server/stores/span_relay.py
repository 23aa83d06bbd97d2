"""OTLP bodies passed on to Tempo: trainers send their spans to the server, which reads the
timeline's figures from them and hands the very bytes on, from one thread, never blocking a request.

Bounded: bodies wait in a queue of at most ``max_bytes``; a body that does not fit is dropped and
counted, as is one Tempo still refuses after ``attempts`` tries (it may be restarting).
"""

from __future__ import annotations

import collections
import threading
import time

from verl_rl_insight.contract.http_client import HttpClient, Unreachable
from verl_rl_insight.server.stores.stats import RelayStats


class SpanRelay:
    def __init__(self, url: str, max_bytes: int = 64 * 2**20, attempts: int = 3, backoff_s: float = 1.0) -> None:
        self.url = url
        self.max_bytes = max_bytes
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.stats = RelayStats()
        self._queue: collections.deque[tuple[bytes, str | None]] = collections.deque()
        self._bytes = 0
        self._cv = threading.Condition()
        self._closed = False
        self._client = HttpClient(timeout_s=10.0)
        self._thread = threading.Thread(target=self._run, name="rl-insight-span-relay", daemon=True)
        self._thread.start()

    def send(self, body: bytes, encoding: str | None) -> bool:
        """Queue one body; False (and counted) when the queue is full."""
        with self._cv:
            if self._closed or self._bytes + len(body) > self.max_bytes:
                self.stats.dropped += 1
                return False
            self._queue.append((body, encoding))
            self._bytes += len(body)
            self._cv.notify()
        return True

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return
                body, encoding = self._queue.popleft()
                self._bytes -= len(body)
            self._deliver(body, encoding)

    def _deliver(self, body: bytes, encoding: str | None) -> None:
        headers = {"Content-Type": "application/x-protobuf"}
        if encoding:
            headers["Content-Encoding"] = encoding
        for attempt in range(self.attempts):
            try:
                reply = self._client.request("POST", self.url, data=body, headers=headers)
                if reply.ok:
                    self.stats.relayed += 1
                    return
                if 400 <= reply.status < 500 and reply.status != 429:
                    break  # Tempo will not take this body, however often it is sent
            except Unreachable:
                pass
            if attempt + 1 < self.attempts:
                time.sleep(self.backoff_s * 2**attempt)
        self.stats.failed += 1

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (up to ``timeout_s``), then stop."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout_s)
