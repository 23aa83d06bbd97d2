"""The server's HTTP API, an ASGI application (served by http_server.HttpServer) made of the route
table (``routes.ROUTES``), documented for clients and fuzzers at ``GET /openapi.json``.

A request is routed, its caller authorized for the route's access, given its run gate where a run
credential may call the route (run_gate.py: consulted here where the request names its run outside
a large body, by the handler's parser inside one; an answer of success without it is refused), held
off with 503 while the server starts when the route needs that, and handed to its handler; whatever
the package refuses (an ``RLInsightError``) is answered with its status, headers and
``{"error": ...}`` (errors.py).
"""

import collections
import json
import logging
from collections.abc import Sequence

from verl_rl_insight.contract.errors import RLInsightError, Starting
from verl_rl_insight.server.api import errors, openapi
from verl_rl_insight.server.api.asgi_types import Header, Receive, Scope, Send, Sent
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.named_runs import BEFORE_BODY, IN_BODY, check_body_runs
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.api.request import ClientGone, Request
from verl_rl_insight.server.api.route import Route
from verl_rl_insight.server.api.router import Router
from verl_rl_insight.server.api.routes import ROUTES
from verl_rl_insight.server.api.run_gate import RunGate

logger = logging.getLogger("verl_rl_insight.server")

# every answer: a browser never reads a JSON answer (which may hold text a run logged) as HTML or script
NOSNIFF: Header = (b"x-content-type-options", b"nosniff")
STARTING = f"the server is starting (its span store is not open yet); retry in {Starting.retry_after_s} s"


class Api:
    def __init__(self, parts: ApiParts, routes: Sequence[Route] = ROUTES) -> None:
        self.parts = parts
        self.router = Router(routes)
        self.context = Context(parts, json.dumps(openapi.document(routes)).encode())

    @property
    def responses(self) -> collections.Counter[str]:
        """Responses written, by status class: ``"2xx"``, ``"4xx"``, ..."""
        return self.context.writer.responses

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive, _nosniff(send))
        try:
            route = self.router.find(request.method, request.path)
            self.context.auth.authorize(request, route.access)
            gate = request.gate = None if route.run_in is None else RunGate(request.run, route.run_in)
            if gate is not None and gate.run_in in BEFORE_BODY:  # a run credential: its own run only
                gate(BEFORE_BODY[gate.run_in](request, self.parts))
            if route.needs_start and not self.parts.startup.ready:
                raise Starting(STARTING)
            limit = route.body_limit
            request.body_limit = self.parts.max_body_bytes if isinstance(limit, str) else limit  # CONFIGURED
            if gate is not None and gate.run_in in IN_BODY:
                await self._body_first(route, request, gate)
            else:  # any other run the request names, its handler's parser hands the gate (IN_PARSE)
                await route.handler(self.context, request)
        except ClientGone:
            return
        except Exception as exc:
            await self._refused(request, exc)

    async def _body_first(self, route: Route, request: Request, gate: RunGate) -> None:
        """The handler of a route whose small JSON body names its run, after the router has read the
        body and checked every run it names (a run credential's; the token's: nothing to check)."""
        if gate.run is None:
            gate(())
            await route.handler(self.context, request)
            return
        async with self.context.body(request) as body:
            await self.context.in_thread(check_body_runs, gate, body)  # off the loop
            request.body = body  # read once: the handler's
            await route.handler(self.context, request)

    async def _refused(self, request: Request, exc: Exception) -> None:
        """The answer to a request its handler did not answer (or a log line when it had begun to)."""
        writer = self.context.writer
        if request.answered:  # its answer (a 200, ...) went out: a second one is not an answer to count
            logger.exception("error after answering %s %s", request.method, request.path)
        elif isinstance(exc, RLInsightError):  # what the API, the hub and the stores refuse, each to its status
            await writer.json(request.raw_send, errors.http_status(exc), errors.body(exc), errors.headers(exc))
        else:
            logger.exception("error while serving %s %s", request.method, request.path)
            await writer.json(request.raw_send, 500, {"error": "internal error, see the server log"})

    def close(self) -> None:
        self.context.close()


def _nosniff(send: Send) -> Send:
    """``send`` that adds ``X-Content-Type-Options: nosniff`` to an answer that does not carry it."""

    async def sending(message: Sent) -> None:
        if message["type"] == "http.response.start" and not any(
            name.lower() == NOSNIFF[0] for name, _ in message["headers"]
        ):
            message = {**message, "headers": [*message["headers"], NOSNIFF]}
        await send(message)

    return sending
