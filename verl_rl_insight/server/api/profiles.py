"""Profile requests (``rl-insight profile``) and what the trainers say of them."""

from verl_rl_insight.contract import run_credential
from verl_rl_insight.contract.errors import NotFound
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.request import Request
from verl_rl_insight.server.stores.profiles import ProfileStore


def _store(ctx: Context) -> ProfileStore:
    if ctx.parts.profiles is None:
        raise NotFound("this server takes no profile requests")
    return ctx.parts.profiles


async def post_profile(ctx: Context, request: Request) -> None:
    store = _store(ctx)
    async with ctx.body(request) as body:
        record = await ctx.in_thread(store.request, body)
    await ctx.json(request, record)


async def get_profiles(ctx: Context, request: Request) -> None:
    store = _store(ctx)
    project, experiment = request.param("project") or None, request.param("experiment_name") or None
    if request.run is not None:
        run_credential.check_run(request.run, project, experiment, "project, experiment_name")
    await ctx.json_from(request, lambda: store.list(project, experiment))


async def post_profile_report(ctx: Context, request: Request) -> None:
    store = _store(ctx)
    async with ctx.body(request) as body:
        result = await ctx.in_thread(store.report, body, request.run)
    await ctx.json(request, result)
