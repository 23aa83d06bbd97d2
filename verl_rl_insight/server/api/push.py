"""Metric batches from trainers."""

from verl_rl_insight.contract.errors import Conflict, RLInsightError
from verl_rl_insight.contract.wire import HUB_HEADER
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.request import Request


async def post_push(ctx: Context, request: Request) -> None:
    hub = ctx.hub
    expected = request.headers.get(HUB_HEADER.lower())
    if expected is not None and expected != hub.instance:
        # the sender's batches before this one went to a hub that is gone: it resends them first
        raise Conflict(
            f"this hub restarted (instance {hub.instance}, the push expects {expected[:40]!r}); "
            "send the recent batches again"
        )
    async with ctx.body(request) as body, ctx.parse:
        try:
            result = await ctx.in_thread(hub.push_body, body, request.gate)  # each batch's run
        except RLInsightError:
            ctx.refused()
            raise
    await ctx.json(request, result)
