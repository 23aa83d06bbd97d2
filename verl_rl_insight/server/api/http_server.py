"""The HTTP server under the API: uvicorn (asyncio, h11) in a thread of the server process.

uvicorn gives the connection handling (a 2048 backlog, no thread per connection, keep-alive
timeouts, a header size limit, a concurrency cap answered with 503). What it leaves open, and
this module closes, is time and descriptors: uvicorn waits forever for a request that never
finishes arriving and for a client that never reads its response. ``GuardedH11Protocol``
closes a connection whose request has not fully arrived ``receive_timeout_s`` after it began
(408), aborts one whose response is not written ``send_timeout_s`` after the request arrived,
closes connections beyond what the descriptors allow at once, and lingers before closing on a
client still sending a body it was already answered for (so the client reads the answer).
"""

import asyncio
import collections
import contextvars
import ipaddress
import json
import logging
import resource
import socket
import threading
import time

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from verl_rl_insight.server.api.asgi_types import App

logger = logging.getLogger("verl_rl_insight.server")
PER_CLIENT_SHARE = 1 / 8  # of the connection cap, what one source address may hold at once

_connection: contextvars.ContextVar["GuardedH11Protocol | None"] = contextvars.ContextVar(
    "rl_insight_connection", default=None
)


class _LingeringTransport:
    """The connection's transport, except that ``close()`` while the client is still sending its
    body (an answer given before reading it: 401, 413, ...) first reads and drops what it sends,
    for up to ``linger_s``: closing with unread data would reset the connection, and the client
    would see "connection reset" instead of the answer."""

    linger_s = 5.0

    def __init__(self, transport: asyncio.Transport, protocol: "GuardedH11Protocol") -> None:
        self._transport = transport
        self._protocol = protocol

    def __getattr__(self, name: str) -> object:  # the rest of the transport, as it is
        return getattr(self._transport, name)

    def close(self) -> None:
        protocol = self._protocol
        if protocol.lingering:
            return
        if protocol.conn.their_state is h11.SEND_BODY and not self._transport.is_closing():
            protocol.lingering = True
            self._transport.resume_reading()
            protocol.loop.call_later(self.linger_s, self._transport.close)
            return
        self._transport.close()


class GuardedH11Protocol(H11Protocol):
    receive_timeout_s = 10.0
    send_timeout_s = 30.0
    max_connections = 2048
    max_per_client = 256  # connections one source address (an IPv6 /64) holds at once: a share of max_connections
    per_client: collections.Counter[str]  # open connections by source address, shared by the server's connections

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.lingering = False
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]  # duck-typed
        self.broken = False
        self._receive_timer: asyncio.TimerHandle | None = None
        self.source: str | None = None
        if len(self.connections) > self.max_connections:
            # Never let descriptors run out: accept() would fail in a loop (CPython 3.11 retries it
            # up to the backlog at once, logging each) and nobody would be served.
            self.broken = True
            transport.abort()
            return
        source = client_address(transport.get_extra_info("peername"))
        if self.per_client[source] >= self.max_per_client:
            self._refuse_client(transport, source)
            return
        self.source = source
        self.per_client[source] += 1
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # headers and body go out in two writes: without this, Nagle and the client's delayed
            # ACK hold every kept-alive response for 40 ms
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._arm_receive()

    def _refuse_client(self, transport: asyncio.Transport, source: str) -> None:
        """503 to a connection past its address's share of the connections, closed at once."""
        self.broken = True
        body = json.dumps(
            {"error": f"too many connections from {source} ({self.max_per_client} at once); close some and retry"}
        ).encode()
        transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        transport.close()
        self.loop.call_later(1.0, transport.abort)  # a client that does not read its 503 holds nothing

    def connection_lost(self, exc: Exception | None) -> None:
        if self.source is not None:
            self.per_client[self.source] -= 1
            if self.per_client[self.source] <= 0:
                del self.per_client[self.source]
            self.source = None
        if exc is not None:
            self.broken = True
        if self._receive_timer is not None:
            self._receive_timer.cancel()
            self._receive_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.lingering or (self.broken and self.source is None):
            return  # the rest of a body already answered, or a connection refused: dropped
        token = _connection.set(self)  # the request's task inherits it: see response_written()
        try:
            if self._receive_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._arm_receive()  # the next request begins on a kept-alive connection
            super().data_received(data)
            cycle = self.cycle
            if cycle is not None and not cycle.more_body and self._receive_timer is not None:
                self._receive_timer.cancel()
                self._receive_timer = None
                self.loop.call_later(self.send_timeout_s, self._send_deadline, cycle)
        finally:
            _connection.reset(token)

    def _arm_receive(self) -> None:
        self._receive_timer = self.loop.call_later(self.receive_timeout_s, self._receive_deadline)

    def _receive_deadline(self) -> None:
        self._receive_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is None or not self.cycle.response_started:  # (an answered request's body: just close)
            body = json.dumps({"error": f"the request did not arrive within {self.receive_timeout_s:.0f} s"}).encode()
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
            )
        self.transport.close()
        self.loop.call_later(1.0, self._abort_if_open)

    def _send_deadline(self, cycle: RequestResponseCycle) -> None:
        if self.transport.is_closing() and self.transport.get_write_buffer_size() == 0:
            return
        if cycle.response_complete and self.transport.get_write_buffer_size() == 0:
            return
        self.broken = True
        self.transport.abort()

    def _abort_if_open(self) -> None:
        if self.transport.get_write_buffer_size():
            self.broken = True
            self.transport.abort()


def client_address(peer: object) -> str:
    """Whose connection it is: its source address, an IPv6 one by its /64 (what one host is given)."""
    if not isinstance(peer, tuple) or not peer or not isinstance(peer[0], str):
        return "?"
    try:
        address = ipaddress.ip_address(peer[0])
    except ValueError:
        return peer[0]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


async def response_written(timeout_s: float = 30.0) -> bool:
    """After the last body chunk was sent: True once every byte of the response reached the kernel,
    False when the connection broke or the client stopped reading. (True outside this server.)"""
    connection = _connection.get()
    if connection is None:
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not connection.broken:
        if connection.transport.get_write_buffer_size() == 0:
            return not connection.broken
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.005)
    return False


def open_files_limit() -> int:
    """Many connections need many descriptors: take the soft limit up to the hard one; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1 << 20), hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(_loop_errors)
        await super().startup(sockets=sockets)


_last_resource_error = [0.0]


def _loop_errors(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """asyncio's handler, but one line a minute for 'out of descriptors' instead of a traceback per try."""
    if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
        if loop.time() - _last_resource_error[0] > 60:
            _last_resource_error[0] = loop.time()
            logger.error(
                "the API cannot accept connections: %s (open files limit %s)",
                context.get("exception"),
                resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            )
        return
    loop.default_exception_handler(context)


class HttpServer:
    """``app`` served on ``host:port`` from a thread; ``start`` returns once it listens (or raises
    OSError, e.g. the port is taken), ``stop`` ends it within a few seconds."""

    def __init__(
        self,
        app: App,
        host: str,
        port: int,
        max_connections: int = 4096,
        backlog: int = 2048,
        keep_alive_s: int = 20,
        max_header_bytes: int = 16384,
        receive_timeout_s: float = 10.0,
        send_timeout_s: float = 30.0,
    ) -> None:
        # connections beyond what the descriptors allow (keeping some for files and services) are closed at once
        max_connections = max(8, min(max_connections, open_files_limit() - 32))
        protocol = type(
            "RLInsightH11Protocol",
            (GuardedH11Protocol,),
            {
                "receive_timeout_s": receive_timeout_s,
                "send_timeout_s": send_timeout_s,
                "max_connections": max_connections,
                # one address holds a share: a flood from one leaves the trainer and Prometheus their connections
                "max_per_client": max(4, int(max_connections * PER_CLIENT_SHARE)),
                "per_client": collections.Counter(),
            },
        )
        self.config = uvicorn.Config(
            app,
            http=protocol,
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            limit_concurrency=max_connections,
            backlog=backlog,
            timeout_keep_alive=keep_alive_s,
            h11_max_incomplete_event_size=max_header_bytes,
            server_header=False,
            timeout_graceful_shutdown=2,
        )
        self.host, self.port = host, port
        self.server = _Server(self.config)
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    def start(self) -> "HttpServer":
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
            sock.listen(self.config.backlog)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._socket = sock
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, name="http-api", daemon=True
        )
        self._thread.start()
        while not self.server.started and self._thread.is_alive():
            time.sleep(0.01)
        if not self.server.started:
            raise RuntimeError("the HTTP server did not start; see the server log")
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._thread is None:
            return
        self.server.should_exit = True
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.server.force_exit = True
            self._thread.join(timeout_s)
        self._thread = None
