"""Profile requests (``rl-insight profile``) and what the trainers say of them."""

import msgspec

from verl_rl_insight.contract.errors import Conflict, NotFound
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.request import Request
from verl_rl_insight.server.stores.profiles import ProfileStore


def _store(ctx: Context) -> ProfileStore:
    if ctx.parts.profiles is None:
        raise NotFound("this server takes no profile requests")
    return ctx.parts.profiles


class RunFinished(Conflict):
    """A profile asked of a run that said it finished: it has no coming step to profile."""


class _Run(msgspec.Struct):
    project: str = ""
    experiment_name: str = ""


def _refuse_finished(ctx: Context, body: bytes) -> None:
    """409 naming the state when the run the request names has finished (``rl_insight_run_finished`` 1
    as the explorer holds it: from the hub, or read back from Prometheus after a restart); a body that
    names no run is the store's to refuse, field by field."""
    try:
        run = msgspec.json.decode(body, type=_Run)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return
    sources = ctx.parts.explorer
    if sources is None or not run.project or not run.experiment_name:
        return
    held = sources.history((run.project, run.experiment_name))
    with sources.histories.lock:
        finished = held is not None and held.finished == 1
    if finished:
        raise RunFinished(
            f"{run.project[:100]}/{run.experiment_name[:100]} is in state finished: it has no coming step to profile"
        )


async def post_profile(ctx: Context, request: Request) -> None:
    store = _store(ctx)
    async with ctx.body(request) as body:

        def ask() -> object:
            _refuse_finished(ctx, body)
            return store.request(body)

        record = await ctx.in_thread(ask)
    await ctx.json(request, record)


async def get_profiles(ctx: Context, request: Request) -> None:
    store = _store(ctx)
    project, experiment = request.param("project") or None, request.param("experiment_name") or None
    await ctx.json_from(request, lambda: store.list(project, experiment))


async def post_profile_report(ctx: Context, request: Request) -> None:
    store = _store(ctx)
    async with ctx.body(request) as body:
        result = await ctx.in_thread(store.report, body)
    await ctx.json(request, result)
