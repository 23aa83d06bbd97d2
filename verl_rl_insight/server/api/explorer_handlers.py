"""The explorer's HTTP handlers, each ``(ctx, request)`` like every handler of the API: the checks of
what the request names, the answer made off the event loop, sent as JSON (msgspec: NaN and
infinities as null). The route table (server/api/routes.py, ``EXPLORER_ROUTES``) names them."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from verl_rl_insight.contract.errors import NotFound, RLInsightError
from verl_rl_insight.contract.profile_summary import analyze_command
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.server.api.access import Access
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.explorer_pages import serve
from verl_rl_insight.server.api.request import Request
from verl_rl_insight.server.explorer import params
from verl_rl_insight.server.explorer.curves import cached_curves_body
from verl_rl_insight.server.explorer.runs import findings_of, run_answer, runs_answer
from verl_rl_insight.server.explorer.samples import samples_answer
from verl_rl_insight.server.explorer.slow import moved_at
from verl_rl_insight.server.explorer.sources import Sources, SpanRecord
from verl_rl_insight.server.explorer.steps import step_answer


def _sources(ctx: Context) -> Sources:
    if ctx.parts.explorer is None:
        raise NotFound("this server keeps no run explorer")
    return ctx.parts.explorer


async def _answer(ctx: Context, request: Request, make: Callable[[], object]) -> None:
    body = await ctx.in_thread(make)
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    await ctx.writer.body(request.send, 200, "application/json", data)


def _has_token(ctx: Context, request: Request) -> bool:
    """Whether the request carries the token (a run credential, or nothing, is no token: no card)."""
    try:
        ctx.auth.authorize(request, Access.TOKEN)
    except RLInsightError:  # 401, a run credential's 403, a credential refused
        return False
    return request.run is None


async def get_runs(ctx: Context, request: Request) -> None:
    sources = _sources(ctx)
    await _answer(ctx, request, lambda: runs_answer(ctx.hub.streams(), sources, ctx.parts.marks))


async def get_run(ctx: Context, request: Request) -> None:
    sources, run = _sources(ctx), params.run_of(request.query)
    card_ok = _has_token(ctx, request)
    diff_from = params.diff_from(request.query)
    parts = ctx.parts
    await _answer(
        ctx,
        request,
        lambda: run_answer(run, ctx.hub.streams(), sources, parts.marks, parts.run_cards, card_ok, diff_from),
    )


async def get_curves(ctx: Context, request: Request) -> None:
    sources, run = _sources(ctx), params.run_of(request.query)
    keys = params.keys_of(request.query)
    first, last = params.steps_of(request.query)
    await _answer(ctx, request, lambda: cached_curves_body(sources, run, keys, first, last))


def _step_of_run(ctx: Context, sources: Sources, run: Run, step: int) -> dict[str, object]:
    spans = sources.step_spans(ctx.parts.startup.spans, run, step)
    answer = step_answer(sources, spans, run, step, findings_of(sources, run, ctx.parts.marks))
    profiles = ctx.parts.profiles
    answer["profile"] = profiles.summary(run[0], run[1], step) if profiles is not None else None
    trace_dir = profiles.trace_dir(run[0], run[1], step) if profiles is not None else None
    answer["trace_dir"] = trace_dir  # where the trainer wrote the step's traces (on its node)
    answer["profile_analyze"] = analyze_command(trace_dir, step) if trace_dir else None
    answer["moved_with"] = moved_at(sources, run, step)
    return answer


async def get_step(ctx: Context, request: Request) -> None:
    sources, run = _sources(ctx), params.run_of(request.query)
    step = params.step_of(request.query)
    await _answer(ctx, request, lambda: _step_of_run(ctx, sources, run, step))


def _own_spans(ctx: Context, run: Run, step: int) -> list[SpanRecord]:
    """The step's own spans (its samples carry its step), read where the span store's index says."""
    store = ctx.parts.startup.spans
    return store.step_spans(run[0], run[1], step) if store is not None else []


async def get_samples(ctx: Context, request: Request) -> None:
    """The token, or a run credential of this run (the route is a RUN_CREDENTIAL one: the router checks it)."""
    _sources(ctx)
    run = params.run_of(request.query)
    step = params.step_of(request.query)
    await _answer(ctx, request, lambda: samples_answer(_own_spans(ctx, run, step), run, step))


async def get_page(ctx: Context, request: Request) -> None:
    """The page shell (``/``, ``/runs/...``) or a vendored file (``/static/explorer/...``), told
    apart by the path as sent: a run named ``a/b`` has the page ``/runs/p/a%2Fb``, which the decoded
    path would split into one segment too many."""
    raw = request.scope.get("raw_path")
    await serve(request, raw.decode("latin-1") if isinstance(raw, bytes) else request.path)
