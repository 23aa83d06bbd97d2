"""What every handler is given: the API's parts, and the means to read, work off the loop, answer."""

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from verl_rl_insight.server.api.auth import Authenticator
from verl_rl_insight.server.api.bodies import BodyBudget
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.api.request import Request
from verl_rl_insight.server.api.writer import InFlight, Writer
from verl_rl_insight.server.settings.memory import MemoryShares

logger = logging.getLogger("verl_rl_insight.server")

T = TypeVar("T")


class Context:
    def __init__(self, parts: ApiParts, openapi: bytes) -> None:
        self.parts = parts
        self.hub = parts.hub
        self.openapi = openapi  # the document, rendered once
        # the answers being written at once: their share of memory_limit_mb, booked beside the hub; a
        # hub built on its own (tests, benchmarks) has its limit taken as the whole bound
        memory = parts.memory if parts.memory is not None else MemoryShares(self.hub.memory_limit_bytes)
        limit = memory.answers_in_flight
        self.writer = Writer(InFlight(limit, lambda nbytes: self.hub.book_other("responses", nbytes)))
        self.auth = Authenticator(parts.token, parts.revocations)
        self.bodies = BodyBudget(max(parts.body_budget_bytes, 4 * parts.max_body_bytes), self.refused)
        self.parse = asyncio.Semaphore(1)  # bodies are parsed one at a time: one parse's memory beyond the budget
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=parts.workers, thread_name_prefix="api")
        self._last_save = 0.0

    def refused(self) -> None:
        """A push (or another body) refused: the hub's count of them."""
        self.hub.count_rejected()

    async def in_thread(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    @contextlib.asynccontextmanager
    async def body(self, request: Request) -> AsyncIterator[bytes]:
        """The request body, up to its route's limit, held against the budget until the block ends."""
        if request.body is not None:  # the router read it, and holds it against the budget
            yield request.body
            return
        if request.body_limit is None:
            raise RuntimeError(f"{request.method} {request.path} declares no body limit in the route table")
        async with self.bodies.read(request, request.body_limit) as body:
            yield body

    async def json_from(self, request: Request, produce: Callable[[], object]) -> None:
        await self.writer.json(request.send, 200, await self.in_thread(produce))

    async def json(self, request: Request, answer: object) -> None:
        await self.writer.json(request.send, 200, answer)

    def save_soon(self) -> None:
        """Save the hub's scraper state, at most every ``save_every_s``, off the event loop."""
        now = time.monotonic()
        if now - self._last_save >= self.parts.save_every_s:
            self._last_save = now
            self._executor.submit(self.save)

    def save(self) -> None:
        try:
            self.hub.save_state()
        except OSError as exc:
            logger.warning("metric hub: cannot save the scrapers' state: %s", exc)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self.save()
