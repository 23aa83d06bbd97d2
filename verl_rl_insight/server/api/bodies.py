"""Request bodies under one budget.

The size is checked before a byte is read (413); the bytes of all bodies being received count
against ``budget_bytes`` (beyond it a request waits, then gets 503) until the handler is done with
them, so a burst of large pushes costs at most the budget.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from verl_rl_insight.contract.errors import TooLarge, Unavailable
from verl_rl_insight.server.api.request import ClientGone, Request

WAIT_S = 5.0  # how long a body waits for room in the budget before its 503


class BodyBudget:
    """Reads bodies; ``on_refused`` is told of each body refused for its size (the hub counts them)."""

    def __init__(self, budget_bytes: int, on_refused: Callable[[], None]) -> None:
        self.budget_bytes = budget_bytes
        self._on_refused = on_refused
        self._room = asyncio.Condition()
        self._in_flight = 0  # bytes of request bodies received and not yet done with

    @contextlib.asynccontextmanager
    async def read(self, request: Request, limit: int) -> AsyncIterator[bytes]:
        """The request body; its bytes count against the budget until the block ends."""
        length = request.headers.get("content-length")
        if length is not None and int(length) > limit:  # h11 has checked it is a number
            self._on_refused()
            raise TooLarge(f"body of {length} bytes is over the limit of {limit} bytes; send smaller batches")
        held = [0]
        try:
            yield await self._receive(request, limit, held)
        finally:
            if held[0]:
                async with self._room:
                    self._in_flight -= held[0]
                    self._room.notify_all()

    async def _receive(self, request: Request, limit: int, held: list[int]) -> bytes:
        deadline = asyncio.get_running_loop().time() + WAIT_S
        body = bytearray()
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            if chunk:
                await self._reserve(len(chunk), deadline)
                held[0] += len(chunk)
                body += chunk
            if len(body) > limit:
                self._on_refused()
                raise TooLarge(f"body is over the limit of {limit} bytes; send smaller batches")
            if not message.get("more_body", False):
                return bytes(body)

    async def _reserve(self, size: int, deadline: float) -> None:
        """Wait until ``size`` more bytes of bodies fit in the budget; 503 after the deadline."""
        loop = asyncio.get_running_loop()
        async with self._room:
            while self._in_flight and self._in_flight + size > self.budget_bytes:
                remaining = deadline - loop.time()
                try:
                    await asyncio.wait_for(self._room.wait(), max(remaining, 0.001))
                except asyncio.TimeoutError:
                    raise Unavailable(
                        "the server is receiving too many request bodies at once; retry shortly"
                    ) from None
            self._in_flight += size
