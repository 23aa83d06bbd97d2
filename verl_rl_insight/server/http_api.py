"""The server's HTTP API (stdlib only, threaded).

GET  /metrics               the hub's exposition, for Prometheus
GET  /-/healthy, /-/ready   liveness / readiness
GET  /api/v1/streams        what the hub holds, per project / experiment
POST /api/v1/push           {"batches": [...]} from trainers
GET  /api/v1/targets        registered scrape targets
POST /api/v1/targets        {"address", "job", "labels", "ttl_s"}: register or heartbeat
DELETE /api/v1/targets?job=J&address=A
GET  /api/v1/sd             the targets in Prometheus http_sd format
GET  /api/v1/services       every service: pid, health, restarts, version, data size
GET  /api/v1/info           the endpoints the server announces (OTLP for traces, Grafana, ...)

With a token set, every POST / DELETE needs ``Authorization: Bearer <token>`` (else 401).
"""

import hmac
import json
import logging
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .hub import PushError
from .targets import TargetError, TargetRegistry

logger = logging.getLogger("verl_rl_insight.server")

MAX_BODY_BYTES = 32 * 1024 * 1024
DRAIN_LIMIT_BYTES = 256 * 1024 * 1024


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, hub, token=None, max_body_bytes=MAX_BODY_BYTES, targets=None, services=None,
                 info=None):
        self.hub = hub
        self.targets = targets if targets is not None else TargetRegistry()
        self.token = token or None
        self.max_body_bytes = max_body_bytes
        self.routes_get = {
            "/metrics": self._get_metrics,
            "/-/healthy": lambda handler: (200, "text/plain", b"ok\n"),
            "/-/ready": lambda handler: (200, "text/plain", b"ready\n"),
            "/api/v1/streams": lambda handler: _json(200, {"streams": hub.streams()}),
            "/api/v1/targets": lambda handler: _json(200, {"targets": self.targets.list()}),
            "/api/v1/sd": lambda handler: _json(200, self.targets.http_sd()),
            "/api/v1/services": lambda handler: _json(200, {"services": services() if services else {}}),
            "/api/v1/info": lambda handler: _json(200, info() if info else {}),
        }
        self.routes_post = {"/api/v1/push": self._post_push, "/api/v1/targets": self._post_target}
        self.routes_delete = {"/api/v1/targets": self._delete_target}
        super().__init__(address, ApiHandler)

    def _post_target(self, handler):
        body = handler.read_body()
        if body is None:
            return None
        try:
            item = json.loads(body)
            if not isinstance(item, dict):
                raise TargetError('body must be an object {"address", "job", "labels", "ttl_s"}')
            record = self.targets.register(item.get("address"), item.get("job"), item.get("labels") or {},
                                           item.get("ttl_s", 90.0))
        except (ValueError, UnicodeDecodeError) as exc:  # TargetError is a ValueError
            return _json(400, {"error": str(exc)})
        return _json(200, record)

    def _delete_target(self, handler):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query)
        job, address = query.get("job", [None])[0], query.get("address", [None])[0]
        if not job or not address:
            return _json(400, {"error": "give ?job=JOB&address=HOST:PORT"})
        if not self.targets.remove(address, job):
            return _json(404, {"error": f"no target {job} {address}"})
        return _json(200, {"removed": {"job": job, "address": address}})

    def _get_metrics(self, handler):
        scraper = (handler.client_address[0], handler.headers.get("User-Agent", ""))
        body = self.hub.render(scraper).encode()
        return 200, "text/plain; version=0.0.4; charset=utf-8", body

    def _post_push(self, handler):
        body = handler.read_body()
        if body is None:
            return None
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            self.hub.stats["rejected"] += 1
            return _json(400, {"error": f"body is not valid JSON: {exc}"})
        try:
            accepted = self.hub.push(payload)
        except PushError as exc:
            self.hub.stats["rejected"] += 1
            return _json(exc.status, {"error": str(exc)})
        return _json(200, {"accepted": accepted})


def _json(status, obj):
    return status, "application/json", json.dumps(obj).encode()


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "rl-insight"

    def do_GET(self):
        self._dispatch(self.server.routes_get, write=False)

    def do_POST(self):
        self._dispatch(self.server.routes_post, write=True)

    def do_DELETE(self):
        self._dispatch(self.server.routes_delete, write=True)

    def _dispatch(self, routes, write):
        path = self.path.split("?", 1)[0]
        route = routes.get(path)
        if route is None:
            every = (self.server.routes_get, self.server.routes_post, self.server.routes_delete)
            if any(path in table for table in every):
                return self.respond(*_json(405, {"error": f"method {self.command} not allowed on {path}"}))
            known = sorted(set().union(*every))
            return self.respond(*_json(404, {"error": f"no such endpoint {path}", "endpoints": known}))
        if write and self.server.token and not self._authorized():
            self.close_connection = True
            message = "missing or wrong token (Authorization: Bearer <RL_INSIGHT_TOKEN>)"
            return self.respond(*_json(401, {"error": message}))
        try:
            result = route(self)
        except Exception:
            logger.exception("error while serving %s", path)
            result = _json(500, {"error": "internal error, see the server log"})
        if result is not None:
            self.respond(*result)

    def _authorized(self):
        header = self.headers.get("Authorization", "")
        return header.startswith("Bearer ") and hmac.compare_digest(header[7:].encode(), self.server.token.encode())

    def read_body(self):
        """The request body, or None after answering 411/413 (the connection is then closed)."""
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self.respond(*_json(411, {"error": "Content-Length required"}))
            return None
        length = int(length)
        if length > self.server.max_body_bytes:
            self.close_connection = True
            self.server.hub.stats["rejected"] += 1
            # Read (and drop) a moderately oversized body so the client gets to see the answer.
            remaining = length if length <= DRAIN_LIMIT_BYTES else 0
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                remaining -= len(chunk)
            self.respond(*_json(413, {"error": f"body of {length} bytes is over the limit of "
                                               f"{self.server.max_body_bytes} bytes; send smaller batches"}))
            return None
        return self.rfile.read(length)

    def respond(self, status, content_type, body):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        logger.debug("%s " + fmt, self.client_address[0], *args)
