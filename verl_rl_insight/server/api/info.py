"""The server about itself: liveness, readiness, this API's document, its services and endpoints."""

from verl_rl_insight.contract.errors import Unavailable
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.request import Request


async def get_healthy(ctx: Context, request: Request) -> None:
    await ctx.writer.text(request.send, b"ok\n")


async def get_ready(ctx: Context, request: Request) -> None:
    """200 once the server that owns this API has finished starting (its span store attached)."""
    if not ctx.parts.startup.ready:
        raise Unavailable("starting")
    await ctx.writer.text(request.send, b"ready\n")


async def get_openapi(ctx: Context, request: Request) -> None:
    await ctx.writer.body(request.send, 200, "application/json", ctx.openapi)


async def get_services(ctx: Context, request: Request) -> None:
    services = ctx.parts.services
    await ctx.json_from(request, lambda: {"services": services() if services else {}})


async def get_info(ctx: Context, request: Request) -> None:
    info = ctx.parts.info
    await ctx.json_from(request, lambda: info() if info else {})
