"""The explorer's HTTP handlers, each ``(api, request)``: the checks of what the request names, the
answer made off the event loop, sent as JSON. The routes table (server/api/routes.py) names them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec

from verl_rl_insight.contract import run_credential
from verl_rl_insight.contract.errors import RLInsightError
from verl_rl_insight.server.explorer import params
from verl_rl_insight.server.explorer.curves import curves_body
from verl_rl_insight.server.explorer.runs import Cards, Marks, findings_of, run_answer, runs_answer
from verl_rl_insight.server.explorer.samples import samples_answer
from verl_rl_insight.server.explorer.sources import Sources, SpanSource
from verl_rl_insight.server.explorer.steps import step_answer


class Request(Protocol):
    query: dict[str, list[str]]
    run: tuple[str, str] | None
    headers: dict[str, str]

    async def send(self, message: dict[str, object]) -> None: ...


class Hub(Protocol):
    def streams(self) -> list[dict[str, object]]: ...


class ApiLike(Protocol):
    """What the handlers use of ``routes.Api``."""

    @property
    def hub(self) -> Hub: ...
    @property
    def spans(self) -> SpanSource | None: ...
    @property
    def marks(self) -> Marks: ...
    @property
    def run_cards(self) -> Cards: ...
    @property
    def explorer(self) -> Sources: ...

    def _authorize(self, request: Request, run_may: bool = False) -> None: ...
    async def _in_thread(self, fn: Callable[[], object]) -> object: ...  # (the Api's takes *args too)
    async def _send_body(self, send: object, status: int, content_type: str, body: bytes) -> None: ...


async def _answer(api: ApiLike, request: Request, make: Callable[[], object]) -> None:
    body = await api._in_thread(make)
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)  # NaN and infinities: null
    await api._send_body(request.send, 200, "application/json", data)


def _has_token(api: ApiLike, request: Request) -> bool:
    """Whether the request carries the token (a run credential, or nothing, is no token: no card)."""
    from verl_rl_insight.server.api.routes import ApiError  # (routes imports this module)

    try:
        api._authorize(request)
    except (ApiError, RLInsightError):  # 401, a run credential's 403, a credential refused
        return False
    return request.run is None


async def get_runs(api: ApiLike, request: Request) -> None:
    await _answer(api, request, lambda: runs_answer(api.hub.streams(), api.explorer, api.marks))


async def get_run(api: ApiLike, request: Request) -> None:
    run = params.run_of(request.query)
    card_ok = _has_token(api, request)
    await _answer(
        api, request, lambda: run_answer(run, api.hub.streams(), api.explorer, api.marks, api.run_cards, card_ok)
    )


async def get_curves(api: ApiLike, request: Request) -> None:
    run = params.run_of(request.query)
    keys = params.keys_of(request.query)
    first, last = params.steps_of(request.query)
    await _answer(api, request, lambda: curves_body(api.explorer, run, keys, first, last))


def _step_of_run(api: ApiLike, run: tuple[str, str], step: int) -> dict[str, object]:
    spans = api.explorer.spans_of(api.spans, run)
    return step_answer(api.explorer, spans, run, step, findings_of(api.explorer, run, api.marks))


async def get_step(api: ApiLike, request: Request) -> None:
    run = params.run_of(request.query)
    step = params.step_of(request.query)
    await _answer(api, request, lambda: _step_of_run(api, run, step))


async def get_samples(api: ApiLike, request: Request) -> None:
    """The token, or a run credential of this run (``_authorize`` ran: the route is a guarded one)."""
    run = params.run_of(request.query)
    run_credential.check_run(request.run, run[0], run[1], "project, experiment_name")
    step = params.step_of(request.query)
    await _answer(api, request, lambda: samples_answer(api.explorer.spans_of(api.spans, run), run, step))


Handler = Callable[[ApiLike, Request], Awaitable[None]]
# (method, path, handler, guarded: the token, or a run credential of the run named, else 401)
ROUTES: tuple[tuple[str, str, Handler, bool], ...] = (
    ("GET", "/api/v1/explorer/runs", get_runs, False),
    ("GET", "/api/v1/explorer/run", get_run, False),
    ("GET", "/api/v1/explorer/curves", get_curves, False),
    ("GET", "/api/v1/explorer/step", get_step, False),
    ("GET", "/api/v1/explorer/samples", get_samples, True),  # prompts and responses
)


def bound(api: ApiLike, handler: Handler) -> Callable[..., Awaitable[None]]:
    """``handler`` of ``api``: what the routes table holds."""

    async def handle(request: Request) -> None:
        await handler(api, request)

    return handle
