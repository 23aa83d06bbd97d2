"""Spans: OTLP/HTTP from trainers (kept here, or passed on to Tempo), read back per run, and the
timeline's figures of the newest step made from them."""

from collections.abc import Iterator
from typing import TYPE_CHECKING

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.errors import BadInput, Forbidden, NotFound, UnsupportedEncoding
from verl_rl_insight.contract.run_credential import NamedRun
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.request import Request, run_of
from verl_rl_insight.server.stores.otlp import RunSpan
from verl_rl_insight.server.stores.spans import SpanStore
from verl_rl_insight.server.stores.spans import decode as decode_spans
from verl_rl_insight.server.stores.spans import records as span_records

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

NO_SPANS = "this server keeps no spans: they go to its Tempo (or the otlp_endpoint set)"
PROTOBUF = "application/x-protobuf"


def _store(ctx: Context) -> SpanStore:
    spans = ctx.parts.startup.spans
    if spans is None:
        raise NotFound(NO_SPANS)
    return spans


async def post_traces(ctx: Context, request: Request) -> None:
    """OTLP/HTTP (protobuf), what Tempo's receiver takes: kept per run when Tempo is not running,
    passed on to it when it is; either way the timeline's per-step figures are made from it."""
    spans, relay, figures = ctx.parts.startup.spans, ctx.parts.startup.relay, ctx.parts.figures
    if spans is None and relay is None:
        raise NotFound(NO_SPANS)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != PROTOBUF:
        raise UnsupportedEncoding(f"Content-Type {kind[:60]!r}: OTLP/HTTP here is application/x-protobuf")
    encoding = request.headers.get("content-encoding")
    async with ctx.body(request) as body:
        otlp = await ctx.in_thread(decode_spans, body, encoding, ctx.parts.max_body_bytes)
        found: list[RunSpan] = await ctx.in_thread(lambda: list(span_records(otlp)))  # for store and figures
        if request.gate is not None:  # every span's run, before anything is kept or passed on
            request.gate(_runs_of_spans(otlp, found))
        if relay is not None:
            relay.send(body, encoding)
        if spans is not None:
            await ctx.in_thread(spans.add, otlp, found)
        if figures is not None:
            await ctx.in_thread(figures.observe, found)
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    await ctx.writer.body(request.send, 200, PROTOBUF, ExportTraceServiceResponse().SerializeToString())


def _runs_of_spans(otlp: "ExportTraceServiceRequest", found: list[RunSpan]) -> Iterator[NamedRun]:
    """Every span's run, for the run gate (read only for a run credential): Forbidden when a span
    names none (a run credential sends its own run's spans only)."""
    total = sum(len(ss.spans) for rs in otlp.resource_spans for ss in rs.scope_spans)
    if len(found) != total:
        raise Forbidden(
            f"spans: {total - len(found)} without project and experiment_name; a run credential sends its run's"
        )
    for one in found:
        yield NamedRun(one.project, one.experiment, "spans")


async def get_span_runs(ctx: Context, request: Request) -> None:
    """The runs with spans here, newest first, a page at a time (``limit`` 100, at most 1000)."""
    store = _store(ctx)
    try:
        limit = int(request.param("limit") or 100)
        offset = int(request.param("offset") or 0)
    except ValueError:
        raise BadInput("limit and offset must be whole numbers") from None
    if not 1 <= limit <= 1000 or not 0 <= offset <= 10**9:
        raise BadInput("limit must be 1 to 1000, offset 0 or more")

    def page() -> dict[str, object]:
        runs, total = store.page(limit, offset)
        following = offset + len(runs)
        return {"runs": runs, "total": total, "next_offset": following if following < total else None}

    await ctx.json_from(request, page)


async def get_last_step(ctx: Context, request: Request) -> None:
    """The newest step the server made figures of, as lanes (what ``rl-insight watch`` draws)."""
    project, experiment = run_of(request)
    figures = ctx.parts.figures
    last = figures.last_step(project, experiment) if figures is not None else None
    if last is None:
        raise NotFound(f"no step of {project[:100]!r} / {experiment[:100]!r} has come with its spans yet")
    await ctx.json(request, last)


async def get_spans(ctx: Context, request: Request) -> None:
    store = _store(ctx)
    project, experiment = run_of(request)
    body = await ctx.in_thread(store.read, project, experiment)
    if body is None:
        raise NotFound(
            f"no spans of {project[:100]!r} / {experiment[:100]!r} here "
            f"(GET {paths.SPAN_RUNS} lists the runs that have some)"
        )
    await ctx.writer.body(request.send, 200, "application/x-ndjson", body)
