"""Alerts firing and silences, through the server's Alertmanager."""

from collections.abc import Callable

from verl_rl_insight.contract.errors import NotFound
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.json_body import parse_json
from verl_rl_insight.server.api.request import Request
from verl_rl_insight.server.stores.silences import Alerting

OFF = "alerting is off on this server: it runs no Alertmanager (installed? services.alertmanager.enabled?)"


def _alerting(ctx: Context) -> Alerting:
    if ctx.parts.alerting is None:
        raise NotFound(OFF)
    return ctx.parts.alerting


async def _answer(ctx: Context, request: Request, action: Callable[..., object], *args: object) -> None:
    await ctx.json(request, await ctx.in_thread(action, *args))


async def get_alerts(ctx: Context, request: Request) -> None:
    await _answer(ctx, request, _alerting(ctx).firing)


async def get_silences(ctx: Context, request: Request) -> None:
    await _answer(ctx, request, _alerting(ctx).silences)


async def post_silence(ctx: Context, request: Request) -> None:
    async with ctx.body(request) as body:
        item = parse_json(body)
    await _answer(ctx, request, _alerting(ctx).silence, item)


async def delete_silence(ctx: Context, request: Request) -> None:
    await _answer(ctx, request, _alerting(ctx).unsilence, request.param("id") or "")
