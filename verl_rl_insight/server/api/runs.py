"""A run as a whole: forget it, revoke its credentials, its card, people's marks on its steps."""

from verl_rl_insight.contract.errors import BadInput
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.request import Request, run_of


async def delete_run(ctx: Context, request: Request) -> None:
    """Forget a run: its hub streams, its spans, its series in Prometheus, its marks."""
    project, experiment = run_of(request)
    parts = ctx.parts

    def delete() -> dict[str, object]:
        streams, series = parts.hub.delete_run(project, experiment)
        spans = parts.startup.spans
        deleted_spans = spans.delete(project, experiment) if spans is not None else False
        prometheus = parts.delete_series(project, experiment) if parts.delete_series else "no Prometheus here"
        marks = parts.marks.forget(project, experiment)
        imported = parts.imports.forget((project, experiment))
        if parts.hub.attempts is not None:  # a later run of that name counts its attempts from 1 again
            parts.hub.attempts.forget((project, experiment))
        if parts.explorer is not None:
            parts.explorer.histories.forget((project, experiment))
            parts.explorer.names.forget((project, experiment))
        return {
            "project": project,
            "experiment_name": experiment,
            "hub_streams": streams,
            "hub_series": series,
            "spans": deleted_spans,
            "prometheus": prometheus,
            "marks": marks,
            "imported": imported,
        }

    result = await ctx.in_thread(delete)
    ctx.save_soon()
    await ctx.json(request, result)


async def revoke_run(ctx: Context, request: Request) -> None:
    """Refuse the run credentials of a run minted until now (the token only: the route's access)."""
    project, experiment = run_of(request)
    at = await ctx.in_thread(ctx.parts.revocations.revoke, project, experiment)
    await ctx.json(request, {"project": project, "experiment_name": experiment, "revoked_at": at})


async def put_run_card(ctx: Context, request: Request) -> None:
    """The trainer's card of its run (a run credential writes its own run's only)."""
    token = ctx.parts.token
    secrets = (token,) if token else ()
    async with ctx.body(request) as body:
        result = await ctx.in_thread(ctx.parts.run_cards.put, body, secrets)
    await ctx.json(request, result)


async def get_run_card(ctx: Context, request: Request) -> None:
    project, experiment = run_of(request)
    await ctx.json_from(request, lambda: ctx.parts.run_cards.get(project, experiment))


async def post_mark(ctx: Context, request: Request) -> None:
    """Mark a step (the token, or a run credential of that run: the router checks which run)."""
    async with ctx.body(request) as body:
        record = await ctx.in_thread(ctx.parts.marks.add, body)
    await ctx.json(request, record)


async def get_marks(ctx: Context, request: Request) -> None:
    project, experiment = run_of(request)
    await ctx.json_from(request, lambda: ctx.parts.marks.of_run(project, experiment))


async def get_keys(ctx: Context, request: Request) -> None:
    """The run's keys as its trainer logged them: {series name: logged key} (only names that do not tell it)."""
    project, experiment = run_of(request)
    sources = ctx.parts.explorer
    keys = sources.logged((project, experiment)) if sources is not None else {}
    await ctx.json(request, {"project": project, "experiment_name": experiment, "keys": keys})


async def delete_mark(ctx: Context, request: Request) -> None:
    project, experiment = run_of(request)
    step = request.param("step")
    if not isinstance(step, str) or not step.isascii() or not step.isdigit() or len(step) > 16:
        raise BadInput("step must be given as a whole number: ?step=N")
    result = await ctx.in_thread(ctx.parts.marks.remove, project, experiment, int(step))
    await ctx.json(request, result)
