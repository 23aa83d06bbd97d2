"""Answers, written in pieces with backpressure: a slow reader holds one chunk of a response in the
server's buffers, never the whole body, and every answer larger than ``SMALL_BYTES`` is booked,
while it is being written, in a budget of bytes in flight (``InFlight``, under the hub's
``memory_limit_mb``): past it the answer is 503 with Retry-After, not one more copy held. A reader
too slow for its answer is cut off by the HTTP server (``send_timeout_s`` after its request).
Every 5xx it writes is also said in the server's log with its reason (at most one line a second,
the others counted in the next), so that the 5xx an operator sees counted in ``/api/v1/hub`` are
explained there, even when the client had gone before the answer reached it."""

import collections
import json
import logging
import time
from collections.abc import Callable

from verl_rl_insight.server.api.asgi_types import Header, Send

CHUNK_BYTES = 64 * 1024  # what one write hands the transport; uvicorn waits for it to drain past 64 KiB
SMALL_BYTES = 64 * 1024  # answers up to this size are not booked (their headers cost as much)
RETRY_AFTER_S = 1
LOG_5XX_S = 1.0  # at most one log line a second for the 5xx answered

logger = logging.getLogger(__name__)


class InFlight:
    """The bytes of the answers being written, at most ``limit``, each booked also through ``book``
    (the hub's ``book_other``: the memory bound) until it is written or its reader is gone."""

    def __init__(self, limit: int, book: Callable[[int], bool] | None = None) -> None:
        self.limit = limit
        self.book = book
        self.held = 0
        self.refused = 0

    def take(self, nbytes: int) -> int | None:
        """Book ``nbytes``: the bytes booked under the memory bound (to give back), or None when it
        does not fit now. One answer always goes, however big and however full the bound (a hub
        full of history is a normal hub)."""
        alone = self.held == 0
        if not alone and self.held + nbytes > self.limit:
            self.refused += 1
            return None
        booked = nbytes if self.book is None or self.book(nbytes) else 0
        if not booked and not alone:
            self.refused += 1
            return None
        self.held += nbytes
        return booked

    def give_back(self, nbytes: int, booked: int) -> None:
        self.held -= nbytes
        if self.book is not None and booked:
            self.book(-booked)


class Writer:
    """Writes responses and counts them by status class (``"2xx"``, ``"4xx"``, ...)."""

    def __init__(self, in_flight: InFlight | None = None) -> None:
        self.responses: collections.Counter[str] = collections.Counter()
        self.in_flight = in_flight
        self._said_5xx = -LOG_5XX_S  # when a 5xx was last logged (monotonic), and those not logged since
        self._unsaid_5xx = 0

    async def body(
        self,
        send: Send,
        status: int,
        content_type: str,
        body: bytes,
        headers: list[Header] | tuple[()] = (),
        booked: bool = False,
    ) -> None:
        """``body`` in pieces; ``booked``: its memory is already booked elsewhere (a named scrape's)."""
        budget = None if booked or len(body) <= SMALL_BYTES else self.in_flight
        held = budget.take(len(body)) if budget is not None else 0
        if held is None:
            await self._busy(send, len(body))
            return
        try:
            await self._write(send, status, content_type, body, headers)
        finally:
            if budget is not None:
                budget.give_back(len(body), held)

    async def _write(
        self, send: Send, status: int, content_type: str, body: bytes, headers: list[Header] | tuple[()]
    ) -> None:
        self.responses[f"{status // 100}xx"] += 1
        if status >= 500:
            self._log_5xx(status, body)
        start = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()), *headers]
        await send({"type": "http.response.start", "status": status, "headers": start})
        view = memoryview(body)
        for offset in range(0, max(len(body), 1), CHUNK_BYTES):
            piece = bytes(view[offset : offset + CHUNK_BYTES])
            await send({"type": "http.response.body", "body": piece, "more_body": offset + CHUNK_BYTES < len(body)})

    def _log_5xx(self, status: int, body: bytes) -> None:
        now = time.monotonic()
        if now - self._said_5xx < LOG_5XX_S:
            self._unsaid_5xx += 1
            return
        more = f" ({self._unsaid_5xx} more 5xx answered since the last such line)" if self._unsaid_5xx else ""
        self._said_5xx, self._unsaid_5xx = now, 0
        logger.warning("answered %d: %s%s", status, body[:300].decode(errors="replace"), more)

    async def _busy(self, send: Send, nbytes: int) -> None:
        assert self.in_flight is not None
        error = (
            f"busy: answers of {self.in_flight.held / 2**20:.1f} MiB are being sent (at most "
            f"{self.in_flight.limit / 2**20:.1f} MiB at once under memory_limit_mb); this one "
            f"({nbytes / 2**20:.1f} MiB) waits: retry in {RETRY_AFTER_S} s"
        )
        body = json.dumps({"error": error}).encode()
        await self._write(send, 503, "application/json", body, [(b"retry-after", str(RETRY_AFTER_S).encode())])

    async def json(self, send: Send, status: int, answer: object, headers: list[Header] | tuple[()] = ()) -> None:
        """``answer`` as JSON (whatever ``json.dumps`` takes: the stores' dicts and lists)."""
        await self.body(send, status, "application/json", json.dumps(answer).encode(), headers)

    async def text(self, send: Send, body: bytes) -> None:
        await self.body(send, 200, "text/plain; charset=utf-8", body)
