"""The hub's reads: the exposition Prometheus scrapes, what the hub holds, its own figures."""

import time

from verl_rl_insight.contract.wire import PushError
from verl_rl_insight.server.api.access import Access
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.http_server import response_written
from verl_rl_insight.server.api.request import Request
from verl_rl_insight.server.metrics import exposition
from verl_rl_insight.server.metrics.positions import check_scraper_name


async def get_metrics(ctx: Context, request: Request) -> None:
    """Live values; a named scraper (the token's) also gets the history it has not been sent, moved
    on once the response is written."""
    arrival = time.time()
    name = request.param("scraper")
    if name is None:
        body = await ctx.in_thread(ctx.hub.live_body)
        await ctx.writer.body(request.send, 200, exposition.CONTENT_TYPE, body)
        return
    try:
        check_scraper_name(name)
    except PushError as exc:
        raise PushError(f"scraper: {exc}") from None
    ctx.auth.authorize(request, Access.TOKEN)
    exposure = await ctx.in_thread(ctx.hub.expose, name, arrival)
    assert exposure is not None  # a named scrape always gets one
    written = False
    try:
        body = await ctx.in_thread(exposure.body)  # booked under the memory bound by the hub (Memory.reserve)
        await ctx.writer.body(request.send, 200, exposition.CONTENT_TYPE, body, booked=True)
        written = await response_written()
    finally:
        exposure.commit(written)
        ctx.save_soon()


async def get_streams(ctx: Context, request: Request) -> None:
    await ctx.json_from(request, lambda: {"streams": ctx.hub.streams()})


async def get_hub(ctx: Context, request: Request) -> None:
    await ctx.json_from(request, lambda: {**ctx.hub.summary(), "http_responses": dict(ctx.writer.responses)})
