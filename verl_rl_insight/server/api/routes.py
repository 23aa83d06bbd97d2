"""The server's HTTP API, an ASGI application (served by http_server.HttpServer; documented for
clients and fuzzers at ``GET /openapi.json``, see server/api/openapi.py).

GET  /metrics[?scraper=NAME]  the hub's exposition: live values; a named scraper also gets the
                              history it has not been sent (moved on once the response is written)
GET  /-/healthy, /-/ready     liveness / readiness
GET  /api/v1/streams          what the hub holds, per project / experiment
GET  /api/v1/hub              the hub's own figures: memory, series, history, scrapers
POST /api/v1/push             {"batches": [...]} from trainers
GET  /api/v1/targets          registered scrape targets
POST /api/v1/targets          {"address", "job", "labels", "ttl_s"}: register or heartbeat
DELETE /api/v1/targets?job=J&address=A
GET  /api/v1/sd               the targets in Prometheus http_sd format
GET  /api/v1/services         every service: pid, health, restarts, version, data size
GET  /api/v1/info             the endpoints the server announces (OTLP for traces, Grafana, ...)
POST /v1/traces               OTLP/HTTP spans: kept, or passed on to Tempo; the timeline figures are made
GET  /api/v1/timeline/last_step?project=P&experiment_name=E   the newest step made, as lanes
POST /api/v1/profiles         {"project", "experiment_name", "first_step", ...}: profile future steps
GET  /api/v1/profiles[?project=P&experiment_name=E]   requests and how they went
POST /api/v1/profiles/report  the trainer's word on its requests (and what its profiler can do)
DELETE /api/v1/runs?project=P&experiment_name=E        forget a run (hub, spans, Prometheus)
POST /api/v1/runs/revoke?project=P&experiment_name=E   refuse the run's credentials minted until now
PUT  /api/v1/runs/card        the run's card (config, versions, commit, command): the trainer's, once
GET  /api/v1/runs/card?project=P&experiment_name=E      the run's card (the token: it holds paths)
POST /api/v1/runs/marks       {"project", "experiment_name", "step", "text", "reset_baseline"?}: mark a step
GET  /api/v1/runs/marks?project=P&experiment_name=E    the run's marks
DELETE /api/v1/runs/marks?project=P&experiment_name=E&step=N   remove one

With a token set, every write (POST, DELETE) and every named scrape needs it, as
``Authorization: Bearer <token>`` or HTTP Basic with the token as password (else 401, before
any body is read). Every error is a JSON ``{"error": "..."}`` that names the field.

Bodies: the size is checked before a byte is read (413); the bytes of all bodies being received
count against one budget (``body_budget_bytes``: beyond it a request waits, then gets 503), and
bodies are parsed one at a time off the event loop, so a burst of large pushes costs at most
one parse's memory beyond the budget.
"""

import asyncio
import base64
import binascii
import collections
import concurrent.futures
import contextlib
import hmac
import json
import logging
import time
import urllib.parse
from typing import Any

from verl_rl_insight.contract import run_credential
from verl_rl_insight.contract.errors import Forbidden, RLInsightError
from verl_rl_insight.contract.run_card import MAX_CARD_BYTES
from verl_rl_insight.contract.wire import HUB_HEADER, PushError
from verl_rl_insight.server.api import openapi
from verl_rl_insight.server.api.errors import http_status, retry_headers
from verl_rl_insight.server.api.http_server import response_written
from verl_rl_insight.server.metrics import exposition
from verl_rl_insight.server.metrics.positions import check_scraper_name
from verl_rl_insight.server.stores.marks import MarkStore
from verl_rl_insight.server.stores.revocations import Revocations
from verl_rl_insight.server.stores.run_cards import RunCardStore
from verl_rl_insight.server.stores.spans import decode as decode_spans
from verl_rl_insight.server.stores.spans import records as span_records
from verl_rl_insight.server.stores.targets import TargetError, TargetRegistry

logger = logging.getLogger("verl_rl_insight.server")

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_TARGET_BODY_BYTES = 64 * 1024
MAX_RUN_CARD_BODY_BYTES = 2 * MAX_CARD_BYTES  # up to here the store answers, naming the card's size
# what a run credential may do (the writes of its own run, checked in each handler)
RUN_CREDENTIAL_ROUTES = frozenset(
    {
        ("POST", "/api/v1/push"),
        ("POST", "/api/v1/targets"),
        ("DELETE", "/api/v1/targets"),
        ("POST", "/v1/traces"),
        ("GET", "/api/v1/profiles"),
        ("POST", "/api/v1/profiles/report"),
        ("PUT", "/api/v1/runs/card"),
        ("POST", "/api/v1/runs/marks"),
        ("DELETE", "/api/v1/runs/marks"),
    }
)
MAX_MARK_BODY_BYTES = 128 * 1024  # an oversized text is read, and refused naming the field (400)
CHUNK_BYTES = 256 * 1024  # responses go out in pieces: a slow reader holds one, not the body


# What the server that owns this API attaches after its port opens (the span store, Tempo's relay,
# the timeline's figures) and what reads them: until it is ``ready`` these answer 503 with
# Retry-After, which OTLP exporters and the trainer retry, never a 404 that says "no spans here".
NEEDS_START = frozenset(
    {
        ("POST", "/v1/traces"),
        ("GET", "/api/v1/spans"),
        ("GET", "/api/v1/spans/runs"),
        ("GET", "/api/v1/timeline/last_step"),
        ("GET", "/api/v1/info"),
        ("DELETE", "/api/v1/runs"),
    }
)
RETRY_AFTER_S = 1


class ApiError(Exception):
    """An answer before, or instead of, reading the body: the connection stays open and the server
    reads what the client still sends and drops it, so that the client gets to read the answer
    (closing with unread data would reset the connection under it)."""

    def __init__(self, status: Any, message: str, headers: Any = (), **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.headers = list(headers)
        self.extra = extra


class ClientGone(Exception):
    """The client disconnected before its request was read."""


class Request:
    __slots__ = ("scope", "receive", "_send", "answered", "headers", "query", "run")

    def __init__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scope = scope
        self.receive = receive
        self._send = send
        self.answered = False  # its response has begun: an error after that cannot become an answer
        self.headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            self.headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        self.query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        self.run: tuple[str, str] | None = None  # the run a run credential may write (None: the token)

    def param(self, name: str) -> Any:
        values = self.query.get(name)
        return values[-1] if values else None

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.answered = True
        await self._send(message)


class Api:
    def __init__(
        self,
        hub: Any,
        targets: Any = None,
        token: str | None = None,
        max_body_bytes: Any = MAX_BODY_BYTES,
        services: Any = None,
        info: Any = None,
        alerting: Any = None,
        spans: Any = None,
        span_relay: Any = None,
        figures: Any = None,
        profiles: Any = None,
        delete_series: Any = None,
        revocations: Any = None,
        run_cards: RunCardStore | None = None,
        marks: MarkStore | None = None,
        workers: int = 4,
        body_budget_bytes: Any = 64 * 1024 * 1024,
        save_every_s: float = 1.0,
    ) -> None:
        self.hub = hub
        self.targets = targets if targets is not None else TargetRegistry()
        self.token = token or None
        self.max_body_bytes = max_body_bytes
        self.services = services
        self.info = info
        self.alerting = alerting
        self.spans = spans
        self.span_relay = span_relay  # Tempo's OTLP receiver, when one runs: spans pass through to it
        self.figures = figures  # the timeline's per-step figures, made from every span that arrives
        self.profiles = profiles  # profile requests (rl-insight profile) and what trainers say of them
        self.delete_series = delete_series  # (project, experiment) -> what Prometheus said
        self.revocations = revocations if revocations is not None else Revocations()  # run credentials refused
        self.run_cards = run_cards if run_cards is not None else RunCardStore()  # in memory without a folder
        self.marks = marks if marks is not None else MarkStore()  # people's marks on steps (rl-insight runs mark)
        self.save_every_s = save_every_s
        self.body_budget_bytes = max(body_budget_bytes, 4 * max_body_bytes)
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="api")
        self._budget = asyncio.Condition()
        self._in_flight = 0  # bytes of request bodies received and not yet done with
        self._parse = asyncio.Semaphore(1)
        self._last_save = 0.0
        self._openapi = json.dumps(openapi.document()).encode()
        self.ready = True  # a server that builds more after listening sets it False until it is done
        self.responses: collections.Counter[str] = collections.Counter()  # by status class: "2xx", "4xx", ...
        self.routes = {
            ("GET", "/metrics"): (self.get_metrics, False),
            ("GET", "/-/healthy"): (lambda r: self._text(r, b"ok\n"), False),
            ("GET", "/-/ready"): (self.get_ready, False),
            ("GET", "/openapi.json"): (self.get_openapi, False),
            ("GET", "/api/v1/streams"): (lambda r: self._json_from(r, lambda: {"streams": hub.streams()}), False),
            ("GET", "/api/v1/hub"): (
                lambda r: self._json_from(r, lambda: {**hub.summary(), "http_responses": dict(self.responses)}),
                False,
            ),
            ("POST", "/api/v1/push"): (self.post_push, True),
            ("GET", "/api/v1/targets"): (lambda r: self._json_from(r, lambda: {"targets": self.targets.list()}), False),
            ("POST", "/api/v1/targets"): (self.post_target, True),
            ("DELETE", "/api/v1/targets"): (self.delete_target, True),
            ("GET", "/api/v1/sd"): (lambda r: self._json_from(r, self.targets.http_sd), False),
            ("GET", "/api/v1/services"): (
                lambda r: self._json_from(r, lambda: {"services": services() if services else {}}),
                False,
            ),
            ("GET", "/api/v1/info"): (lambda r: self._json_from(r, lambda: info() if info else {}), False),
            ("DELETE", "/api/v1/runs"): (self.delete_run, True),
            ("POST", "/api/v1/runs/revoke"): (self.revoke_run, True),
            ("PUT", "/api/v1/runs/card"): (self.put_run_card, True),
            ("GET", "/api/v1/runs/card"): (self.get_run_card, True),  # paths, the command line: token rules
            ("POST", "/api/v1/runs/marks"): (self.post_mark, True),
            ("GET", "/api/v1/runs/marks"): (self.get_marks, False),
            ("DELETE", "/api/v1/runs/marks"): (self.delete_mark, True),
            ("POST", "/v1/traces"): (self.post_traces, True),
            ("GET", "/api/v1/spans"): (self.get_spans, True),  # token2text spans carry prompts: token rules
            ("GET", "/api/v1/timeline/last_step"): (self.get_last_step, True),
            ("POST", "/api/v1/profiles"): (self.post_profile, True),
            ("GET", "/api/v1/profiles"): (self.get_profiles, True),
            ("POST", "/api/v1/profiles/report"): (self.post_profile_report, True),
            ("GET", "/api/v1/spans/runs"): (self.get_span_runs, False),
            ("GET", "/api/v1/alerts"): (lambda r: self._alerting(r, "firing"), False),
            ("GET", "/api/v1/silences"): (lambda r: self._alerting(r, "silences"), False),
            ("POST", "/api/v1/silences"): (self.post_silence, True),
            ("DELETE", "/api/v1/silences"): (lambda r: self._alerting(r, "unsilence", r.param("id") or ""), True),
        }

    # -- ASGI ------------------------------------------------------------------------------
    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if scope["type"] != "http":
            return
        request = Request(scope, receive, send)
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        try:
            entry = self.routes.get((method, scope["path"]))
            if entry is None:
                raise self._no_route(scope["method"], scope["path"])
            handler, write = entry
            if write:
                self._authorize(request, (method, scope["path"]) in RUN_CREDENTIAL_ROUTES)
            if not self.ready and (method, scope["path"]) in NEEDS_START:
                raise ApiError(
                    503,
                    f"the server is starting (its span store is not open yet); retry in {RETRY_AFTER_S} s",
                    headers=[(b"retry-after", str(RETRY_AFTER_S).encode())],
                )
            await handler(request)
        except ClientGone:
            return
        except Exception as exc:
            if request.answered:  # its answer (a 200, ...) went out: a second one is not an answer to count
                logger.exception("error after answering %s %s", scope["method"], scope["path"])
            elif isinstance(exc, ApiError):
                await self._send_json(send, exc.status, {"error": str(exc), **exc.extra}, headers=exc.headers)
            elif isinstance(exc, RLInsightError):  # what the hub and the stores refuse, each to its status
                await self._send_json(send, http_status(exc), {"error": str(exc)}, headers=retry_headers(exc))
            else:
                logger.exception("error while serving %s %s", scope["method"], scope["path"])
                await self._send_json(send, 500, {"error": "internal error, see the server log"})

    def _no_route(self, method: str, path: str) -> ApiError:
        known = sorted({p for _, p in self.routes})
        if path in known:
            allowed = sorted(m for m, p in self.routes if p == path)
            return ApiError(
                405,
                f"method {method} not allowed on {path} (allowed: {', '.join(allowed)})",
                headers=[(b"allow", ", ".join(allowed).encode())],
            )
        return ApiError(404, f"no such endpoint {path[:100]!r}", endpoints=known)

    def _authorize(self, request: Any, run_may: bool = False) -> Any:
        """The token lets everything through; a run credential (what Ray workers carry) only the
        writes of its run on ``RUN_CREDENTIAL_ROUTES``, which then check the run; else 401 / 403."""
        if self.token is None:
            return
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        given = None
        if scheme.lower() == "bearer":
            given = credentials.strip()
        elif scheme.lower() == "basic":
            try:
                given = base64.b64decode(credentials.strip(), validate=True).decode("utf-8").partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                given = None
        if run_credential.is_run_credential(given):
            run = run_credential.verify(self.token, str(given), refusal=self.revocations.refusal)
            if not run_may:
                method, path = request.scope["method"], request.scope["path"]
                raise ApiError(
                    403, f"a run credential (what trainers carry) may not {method} {path}: it writes its run only"
                )
            request.run = run
            return
        if given is None or not hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode()):
            raise ApiError(
                401,
                "missing or wrong token (Authorization: Bearer <token>; the URL that "
                "`rl-insight server start` prints carries it)",
                headers=[(b"www-authenticate", b'Bearer realm="rl-insight"')],
            )

    async def _in_thread(self, fn: Any, *args: object) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- handlers --------------------------------------------------------------------------
    async def get_metrics(self, request: Any) -> Any:
        arrival = time.time()
        name = request.param("scraper")
        if name is None:
            body = await self._in_thread(self.hub.live_body)
            await self._send_body(request.send, 200, exposition.CONTENT_TYPE, body)
            return
        try:
            check_scraper_name(name)
        except PushError as exc:
            raise PushError(f"scraper: {exc}") from None
        self._authorize(request)
        exposure = await self._in_thread(self.hub.expose, name, arrival)
        written = False
        try:
            body = await self._in_thread(exposure.body)
            await self._send_body(request.send, 200, exposition.CONTENT_TYPE, body)
            written = await response_written()
        finally:
            exposure.commit(written)
            self._save_soon()

    async def get_ready(self, request: Any) -> None:
        """200 once the server that owns this API has finished starting (its span store attached)."""
        if not self.ready:
            raise ApiError(503, "starting")
        await self._text(request, b"ready\n")

    async def get_openapi(self, request: Any) -> None:
        await self._send_body(request.send, 200, "application/json", self._openapi)

    async def post_push(self, request: Any) -> Any:
        expected = request.headers.get(HUB_HEADER.lower())
        if expected is not None and expected != self.hub.instance:
            # the sender's batches before this one went to a hub that is gone: it resends them first
            raise ApiError(
                409,
                f"this hub restarted (instance {self.hub.instance}, the push expects "
                f"{expected[:40]!r}); send the recent batches again",
            )
        async with self._body(request, self.max_body_bytes) as body, self._parse:
            try:
                result = await self._in_thread(self.hub.push_body, body, request.run)
            except RLInsightError:
                self.hub.stats["rejected"] += 1
                raise
        await self._send_json(request.send, 200, result)

    async def post_target(self, request: Any) -> Any:
        async with self._body(request, MAX_TARGET_BODY_BYTES) as body:
            item = body
        item = _parse_json(item)
        if not isinstance(item, dict):
            raise TargetError('body must be an object {"address", "job", "labels", "ttl_s"}')
        unknown = sorted(set(item) - {"address", "job", "labels", "ttl_s"})
        if unknown:
            raise TargetError(f"unknown field {unknown[0][:40]!r} (known: address, job, labels, ttl_s)")
        given = item.get("labels")
        labels: dict[str, Any] = given if isinstance(given, dict) else {}
        run_credential.check_run(request.run, labels.get("project"), labels.get("experiment_name"), "labels")
        record = self.targets.register(
            item.get("address"), item.get("job"), item.get("labels") or {}, item.get("ttl_s", 90.0)
        )
        await self._send_json(request.send, 200, record)

    async def delete_target(self, request: Any) -> Any:
        job, address = request.param("job"), request.param("address")
        if not job or not address:
            raise ApiError(400, "give ?job=JOB&address=HOST:PORT")
        if request.run is not None:
            known = [t["labels"] for t in self.targets.list() if (t["job"], t["address"]) == (job, address)]
            labels = known[0] if known else {}
            run_credential.check_run(request.run, labels.get("project"), labels.get("experiment_name"), "target")
        if not self.targets.remove(address, job):
            raise ApiError(404, f"no target {job[:80]!r} {address[:80]!r}")
        await self._send_json(request.send, 200, {"removed": {"job": job, "address": address}})

    async def delete_run(self, request: Any) -> Any:
        project, experiment = _run_of(request)

        def delete() -> Any:
            streams, series = self.hub.delete_run(project, experiment)
            spans = self.spans.delete(project, experiment) if self.spans is not None else False
            prometheus = self.delete_series(project, experiment) if self.delete_series else "no Prometheus here"
            marks = self.marks.forget(project, experiment)
            return {
                "project": project,
                "experiment_name": experiment,
                "hub_streams": streams,
                "hub_series": series,
                "spans": spans,
                "prometheus": prometheus,
                "marks": marks,
            }

        result = await self._in_thread(delete)
        self._save_soon()
        await self._send_json(request.send, 200, result)

    async def revoke_run(self, request: Any) -> Any:
        """Refuse the run credentials of a run minted until now (the token only: ``_authorize``)."""
        project, experiment = _run_of(request)
        at = await self._in_thread(self.revocations.revoke, project, experiment)
        await self._send_json(request.send, 200, {"project": project, "experiment_name": experiment, "revoked_at": at})

    async def put_run_card(self, request: Request) -> None:
        """The trainer's card of its run (a run credential writes its own run's only)."""
        secrets = (self.token,) if self.token else ()
        async with self._body(request, MAX_RUN_CARD_BODY_BYTES) as body:
            result = await self._in_thread(self.run_cards.put, bytes(body), request.run, secrets)
        await self._send_json(request.send, 200, result)

    async def get_run_card(self, request: Request) -> None:
        project, experiment = _run_of(request)
        await self._json_from(request, lambda: self.run_cards.get(project, experiment))

    async def post_mark(self, request: Request) -> None:
        """Mark a step (the token, or a run credential of that run: the store checks which run)."""
        async with self._body(request, MAX_MARK_BODY_BYTES) as body:
            record = await self._in_thread(self.marks.add, bytes(body), request.run)
        await self._send_json(request.send, 200, record)

    async def get_marks(self, request: Request) -> None:
        project, experiment = _run_of(request)
        await self._json_from(request, lambda: self.marks.of_run(project, experiment))

    async def delete_mark(self, request: Request) -> None:
        project, experiment = _run_of(request)
        step = request.param("step")
        if not isinstance(step, str) or not step.isascii() or not step.isdigit() or len(step) > 16:
            raise ApiError(400, "step must be given as a whole number: ?step=N")
        result = await self._in_thread(self.marks.remove, project, experiment, int(step), request.run)
        await self._send_json(request.send, 200, result)

    def _span_store(self) -> Any:
        if self.spans is None:
            raise ApiError(404, "this server keeps no spans: they go to its Tempo (or the otlp_endpoint set)")
        return self.spans

    async def post_traces(self, request: Any) -> Any:
        """OTLP/HTTP (protobuf), what Tempo's receiver takes: kept per run when Tempo is not running,
        passed on to it when it is; either way the timeline's per-step figures are made from it."""
        if self.spans is None and self.span_relay is None:
            self._span_store()  # the 404 that says where spans go instead
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-protobuf":
            raise ApiError(415, f"Content-Type {kind[:60]!r}: OTLP/HTTP here is application/x-protobuf")
        encoding = request.headers.get("content-encoding")
        async with self._body(request, self.max_body_bytes) as body:
            otlp = await self._in_thread(decode_spans, body, encoding, self.max_body_bytes)
            found = await self._in_thread(lambda: list(span_records(otlp)))  # read once, for the store and the figures
            if request.run is not None:
                _spans_of_run(otlp, found, request.run)
            if self.span_relay is not None:
                self.span_relay.send(bytes(body), encoding)
            if self.spans is not None:
                await self._in_thread(self.spans.add, otlp, found)
            if self.figures is not None:
                await self._in_thread(self.figures.observe, found)
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )

        await self._send_body(
            request.send, 200, "application/x-protobuf", ExportTraceServiceResponse().SerializeToString()
        )

    def _profile_store(self) -> Any:
        if self.profiles is None:
            raise ApiError(404, "this server takes no profile requests")
        return self.profiles

    async def post_profile(self, request: Any) -> Any:
        store = self._profile_store()
        async with self._body(request, MAX_TARGET_BODY_BYTES) as body:
            record = await self._in_thread(store.request, bytes(body))
        await self._send_json(request.send, 200, record)

    async def get_profiles(self, request: Any) -> Any:
        store = self._profile_store()
        project, experiment = request.param("project") or None, request.param("experiment_name") or None
        if request.run is not None:
            run_credential.check_run(request.run, project, experiment, "project, experiment_name")
        await self._json_from(request, lambda: store.list(project, experiment))

    async def post_profile_report(self, request: Any) -> Any:
        store = self._profile_store()
        async with self._body(request, MAX_TARGET_BODY_BYTES) as body:
            result = await self._in_thread(store.report, bytes(body), request.run)
        await self._send_json(request.send, 200, result)

    async def get_span_runs(self, request: Any) -> Any:
        """The runs with spans here, newest first, a page at a time (``limit`` 100, at most 1000)."""
        store = self._span_store()
        try:
            limit = int(request.param("limit") or 100)
            offset = int(request.param("offset") or 0)
        except ValueError:
            raise ApiError(400, "limit and offset must be whole numbers") from None
        if not 1 <= limit <= 1000 or not 0 <= offset <= 10**9:
            raise ApiError(400, "limit must be 1 to 1000, offset 0 or more")

        def page() -> dict[str, Any]:
            runs, total = store.page(limit, offset)
            following = offset + len(runs)
            return {"runs": runs, "total": total, "next_offset": following if following < total else None}

        await self._json_from(request, page)

    async def get_last_step(self, request: Any) -> Any:
        """The newest step the server made figures of, as lanes (what ``rl-insight watch`` draws)."""
        project, experiment = _run_of(request)
        last = self.figures.last_step(project, experiment) if self.figures is not None else None
        if last is None:
            raise ApiError(404, f"no step of {project[:100]!r} / {experiment[:100]!r} has come with its spans yet")
        await self._send_json(request.send, 200, last)

    async def get_spans(self, request: Any) -> Any:
        store = self._span_store()
        project, experiment = _run_of(request)
        body = await self._in_thread(store.read, project, experiment)
        if body is None:
            raise ApiError(
                404,
                f"no spans of {project[:100]!r} / {experiment[:100]!r} here "
                "(GET /api/v1/spans/runs lists the runs that have some)",
            )
        await self._send_body(request.send, 200, "application/x-ndjson", body)

    async def post_silence(self, request: Any) -> None:
        async with self._body(request, MAX_TARGET_BODY_BYTES) as body:
            item = body
        await self._alerting(request, "silence", _parse_json(item))

    async def _alerting(self, request: Any, action: Any, *args: object) -> Any:
        if self.alerting is None:
            raise ApiError(
                404,
                "alerting is off on this server: it runs no Alertmanager (installed? services.alertmanager.enabled?)",
            )
        result = await self._in_thread(getattr(self.alerting, action), *args)
        await self._send_json(request.send, 200, result)

    async def _json_from(self, request: Any, produce: Any) -> None:
        await self._send_json(request.send, 200, await self._in_thread(produce))

    async def _text(self, request: Any, body: Any) -> None:
        await self._send_body(request.send, 200, "text/plain; charset=utf-8", body)

    # -- bodies ----------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _body(self, request: Any, limit: Any) -> Any:
        """The request body; its bytes count against ``body_budget_bytes`` until the block ends."""
        length = request.headers.get("content-length")
        if length is not None and int(length) > limit:  # h11 has checked it is a number
            self.hub.stats["rejected"] += 1
            raise ApiError(413, f"body of {length} bytes is over the limit of {limit} bytes; send smaller batches")
        held = [0]
        try:
            yield await self._read_body(request, limit, held)
        finally:
            if held[0]:
                async with self._budget:
                    self._in_flight -= held[0]
                    self._budget.notify_all()

    async def _read_body(self, request: Any, limit: Any, held: Any) -> Any:
        deadline = asyncio.get_running_loop().time() + 5.0
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
                self.hub.stats["rejected"] += 1
                raise ApiError(413, f"body is over the limit of {limit} bytes; send smaller batches")
            if not message.get("more_body", False):
                return bytes(body)

    async def _reserve(self, size: Any, deadline: Any) -> Any:
        """Wait until ``size`` more bytes of bodies fit in the budget; 503 after the deadline."""
        loop = asyncio.get_running_loop()
        async with self._budget:
            while self._in_flight and self._in_flight + size > self.body_budget_bytes:
                remaining = deadline - loop.time()
                try:
                    await asyncio.wait_for(self._budget.wait(), max(remaining, 0.001))
                except asyncio.TimeoutError:
                    raise ApiError(
                        503, "the server is receiving too many request bodies at once; retry shortly"
                    ) from None
            self._in_flight += size

    def _save_soon(self) -> None:
        now = time.monotonic()
        if now - self._last_save >= self.save_every_s:
            self._last_save = now
            self._executor.submit(self._save)

    def _save(self) -> None:
        try:
            self.hub.save_state()
        except OSError as exc:
            logger.warning("metric hub: cannot save the scrapers' state: %s", exc)

    async def _send_body(self, send: Any, status: Any, content_type: Any, body: Any, headers: Any = ()) -> None:
        self.responses[f"{status // 100}xx"] += 1
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", content_type.encode()),
                    (b"content-length", str(len(body)).encode()),
                    *headers,
                ],
            }
        )
        view = memoryview(body)
        for start in range(0, max(len(body), 1), CHUNK_BYTES):
            await send(
                {
                    "type": "http.response.body",
                    "body": bytes(view[start : start + CHUNK_BYTES]),
                    "more_body": start + CHUNK_BYTES < len(body),
                }
            )

    async def _send_json(self, send: Any, status: Any, obj: Any, headers: Any = ()) -> None:
        await self._send_body(send, status, "application/json", json.dumps(obj).encode(), headers)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._save()


def _run_of(request: Any) -> tuple[str, str]:
    """The run a request names in ``?project=P&experiment_name=E``; 400 when either is missing."""
    project, experiment = request.param("project"), request.param("experiment_name")
    if not project or not experiment:
        raise ApiError(400, "give ?project=P&experiment_name=E")
    return project, experiment


def _spans_of_run(otlp: Any, found: list[Any], run: tuple[str, str]) -> None:
    """Forbidden unless every span of the request carries ``run``'s project and experiment."""
    total = sum(len(ss.spans) for rs in otlp.resource_spans for ss in rs.scope_spans)
    if len(found) != total:
        raise Forbidden(
            f"spans: {total - len(found)} without project and experiment_name; a run credential sends its run's"
        )
    for project, experiment, _ in found:
        run_credential.check_run(run, project, experiment, "spans")


def _parse_json(body: Any) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise PushError(f"body is not valid JSON: {str(exc)[:200]}") from None
