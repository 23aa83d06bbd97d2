"""One HTTP request as the handlers see it: headers, query, the run its credential may write (its
run gate: an answer of success to a request whose gate was never consulted is refused)."""

import urllib.parse

from verl_rl_insight.contract.runs import Run as Run  # re-exported for the handlers
from verl_rl_insight.contract.runs import run_in_query
from verl_rl_insight.server.api.asgi_types import Receive, Scope, Send, Sent
from verl_rl_insight.server.api.run_gate import RunGate


class ClientGone(Exception):
    """The client disconnected before its request was read."""


class Request:
    __slots__ = (
        *("scope", "method", "path", "receive", "raw_send", "answered"),
        *("headers", "query", "run", "gate", "body_limit", "body"),
    )

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self.method = scope["method"]
        self.path = scope["path"]
        self.receive = receive
        self.raw_send = send  # the server's own send, for an answer its handler did not give
        self.answered = False  # its response has begun: an error after that cannot become an answer
        self.headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            self.headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        self.query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        self.run: Run | None = None  # the run a run credential may write (None: the token, or no token set)
        self.gate: RunGate | None = None  # a RUN_CREDENTIAL route's (set by the router): every run written passes it
        self.body_limit: int | None = None  # the most its route reads (set by the router)
        self.body: bytes | None = None  # read by the router (to check the runs it names), else by the handler

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    async def send(self, message: Sent) -> None:
        if message["type"] == "http.response.start":
            if self.gate is not None:
                self.gate.answering(message["status"])  # fails closed: no success the gate was not asked about
            self.answered = True
        await self.raw_send(message)


def run_of(request: Request) -> Run:
    """The run a request names in ``?project=P&experiment_name=E``; 400 naming the field when one is
    missing or not a label value (``contract.runs.run_in_query``, as the explorer reads it)."""
    return run_in_query(request.query)
