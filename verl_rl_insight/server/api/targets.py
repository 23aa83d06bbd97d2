"""Scrape targets: registered by trainers (their engines' metrics) and people, served to Prometheus."""

from verl_rl_insight.contract.errors import BadInput, NotFound
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.json_body import parse_json
from verl_rl_insight.server.api.request import Request
from verl_rl_insight.server.stores.targets import TargetError

FIELDS = ("address", "job", "labels", "ttl_s")


async def get_targets(ctx: Context, request: Request) -> None:
    await ctx.json_from(request, lambda: {"targets": ctx.parts.targets.list()})


async def get_sd(ctx: Context, request: Request) -> None:
    await ctx.json_from(request, ctx.parts.targets.http_sd)


async def post_target(ctx: Context, request: Request) -> None:
    """Register a target or renew its TTL (a run credential: a target labelled with its run, which
    the router has checked: ``named_runs``)."""
    async with ctx.body(request) as body:
        item = parse_json(body)
    if not isinstance(item, dict):
        raise TargetError('body must be an object {"address", "job", "labels", "ttl_s"}')
    unknown = sorted(set(item) - set(FIELDS))
    if unknown:
        raise TargetError(f"unknown field {unknown[0][:40]!r} (known: address, job, labels, ttl_s)")
    record = await ctx.in_thread(  # off the event loop: the host is resolved (own_address.py)
        lambda: ctx.parts.targets.register(
            item.get("address"), item.get("job"), item.get("labels") or {}, item.get("ttl_s", 90.0), writer=request.run
        )
    )
    await ctx.json(request, record)


async def delete_target(ctx: Context, request: Request) -> None:
    """Remove a target (a run credential: its own run's, which the router has checked: ``named_runs``)."""
    job, address = request.param("job"), request.param("address")
    if not job or not address:
        raise BadInput("give ?job=JOB&address=HOST:PORT")
    if not ctx.parts.targets.remove(address, job):
        raise NotFound(f"no target {job[:80]!r} {address[:80]!r}")
    await ctx.json(request, {"removed": {"job": job, "address": address}})
