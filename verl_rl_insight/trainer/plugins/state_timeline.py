"""RL state timeline: trainer phases and rollout ``generate`` calls as OpenTelemetry spans.

Sent over OTLP/HTTP, batched, to the Tempo endpoint: ``plugins.state_timeline.otlp_endpoint``,
else ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``, else the rl-insight
server's host on port ``otlp_port`` (4318). Spans wait in a bounded queue; when it is full new
spans are dropped and counted (``rl_insight_timeline_dropped_spans_total``), never waited for.
Per state and lane, time spent and count are also metrics: ``rl_insight_state_seconds_total``,
``rl_insight_state_count_total`` (``rate()`` gives the share of time a replica generates).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, NamedTuple

from omegaconf import DictConfig

from verl_rl_insight.contract.verl_phases import SPAN_NAMES
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.config import ServerUrl, plugin_settings
from verl_rl_insight.trainer.hook_types import RunInfo, Trajectory
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.plugins.span_export import (
    HOST,
    AnnouncedEndpointExporter,
    CountingSpanProcessor,
    explicit_endpoint,
    origin,
    otlp_endpoint,
    span_attributes,
)
from verl_rl_insight.trainer.services import Services, Timeline

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span, Tracer
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "AnnouncedEndpointExporter",
    "CountingSpanProcessor",
    "Plugin",
    "otlp_endpoint",
    "span_attributes",
    "span_name",
]

logger = logging.getLogger("verl_rl_insight")


class OpenState(NamedTuple):
    """A state entered on a lane of this thread and not exited yet."""

    name: str
    span: Span
    start_ns: int


def span_name(state: str) -> str:
    return SPAN_NAMES.get(state, state)


def make_tracer(config: DictConfig, endpoint: str, server: ServerUrl | None) -> tuple[Tracer, CountingSpanProcessor]:
    """A tracer of its own provider (the user's global one is untouched) sending to ``endpoint``
    (where none was named: to the OTLP endpoint ``server`` announces)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # The exporter logs an error for every failed batch; this plugin warns once itself and counts.
    logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter").setLevel(logging.CRITICAL + 1)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    settings = plugin_settings(config, "state_timeline")
    provider = TracerProvider(
        resource=Resource.create({"service.name": "verl", "host.name": HOST, "process.pid": os.getpid()})
    )

    def make_exporter(url: str) -> SpanExporter:
        # the token only goes to the rl-insight server itself, never to a collector elsewhere
        ours = server is not None and server.token and origin(url) == origin(server.base)
        return OTLPSpanExporter(
            endpoint=url, timeout=5, headers={"Authorization": f"Bearer {server.token}"} if ours and server else None
        )

    exporter = (
        AnnouncedEndpointExporter(server, endpoint, make_exporter)
        if explicit_endpoint(config) is None and server is not None
        else make_exporter(endpoint)
    )
    processor = CountingSpanProcessor(
        exporter,
        max_queue=settings.max_queue_spans,
        batch_size=settings.batch_spans,
        interval_s=settings.export_interval_s,
    )
    provider.add_span_processor(processor)
    return provider.get_tracer("verl_rl_insight"), processor


class Plugin:
    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self.processor: CountingSpanProcessor | None = None  # None when no endpoint is configured
        self.local = threading.local()  # per thread: {lane: [open states]}
        self.durations: dict[tuple[str, str], list[float]] = {}  # (state, lane) -> [seconds, count]
        self.durations_lock = threading.Lock()
        self.timeline = Timeline()  # the process's (Services.timeline) from configure on: samples sends through it

    @hookimpl
    def rl_insight_configure(self, config: DictConfig, services: Services) -> None:
        self.timeline = services.timeline
        endpoint = otlp_endpoint(config, services.server)
        if endpoint is None:
            logger.warning(
                "rl-insight: no OTLP endpoint (no server URL, no OTEL_EXPORTER_OTLP_ENDPOINT): "
                "the RL state timeline is not sent"
            )
            return
        self.tracer, self.processor = make_tracer(config, endpoint, services.server)
        self.timeline.tracer, self.timeline.processor = self.tracer, self.processor

    def _stack(self, lane: str) -> list[OpenState]:
        stacks: dict[str, list[OpenState]] | None = getattr(self.local, "stacks", None)
        if stacks is None:
            stacks = self.local.stacks = {}
        return stacks.setdefault(lane, [])

    def _parent_context(self, lane: str) -> Context:
        from opentelemetry import context, trace

        stack = self._stack(lane)
        return trace.set_span_in_context(stack[-1].span) if stack else context.Context()

    def _count(self, name: str, lane: str, duration_ns: int) -> None:
        with self.durations_lock:
            entry = self.durations.setdefault((name, lane), [0.0, 0])
            entry[0] += duration_ns / 1e9
            entry[1] += 1

    def _start_span(
        self, tracer: Tracer, run: RunInfo, name: str, lane: str, start_ns: int, attributes: dict[str, object]
    ) -> Span:
        """The span of state ``name``, a child of the innermost open state on its lane of this thread."""
        return tracer.start_span(
            span_name(name),
            context=self._parent_context(lane),
            start_time=start_ns,
            attributes=span_attributes(run, name, lane, attributes),
        )

    @hookimpl
    def rl_insight_state_enter(
        self, run: RunInfo, name: str, lane: str, start_ns: int, attributes: dict[str, object]
    ) -> None:
        if self.tracer is not None:
            span = self._start_span(self.tracer, run, name, lane, start_ns, attributes)
            self._stack(lane).append(OpenState(name, span, start_ns))

    @hookimpl
    def rl_insight_state_exit(
        self, run: RunInfo, name: str, lane: str, end_ns: int, attributes: dict[str, object]
    ) -> None:
        stack = self._stack(lane)
        for i in range(len(stack) - 1, -1, -1):
            if stack[i].name == name:
                state = stack.pop(i)
                for key, value in (attributes or {}).items():
                    state.span.set_attribute(key, value)
                state.span.end(end_time=end_ns)
                self._count(name, lane, end_ns - state.start_ns)
                return

    @hookimpl
    def rl_insight_state_span(
        self, run: RunInfo, name: str, lane: str, start_ns: int, end_ns: int, attributes: dict[str, object]
    ) -> None:
        lane = lane or "trainer"
        self._count(name, lane, end_ns - start_ns)
        if self.tracer is not None:
            self._start_span(self.tracer, run, name, lane, start_ns, attributes).end(end_time=end_ns)

    @hookimpl
    def rl_insight_collect(self, run: RunInfo) -> list[MetricBatch] | None:
        now = time.time()
        with self.durations_lock:
            items = [(k, list(v)) for k, v in self.durations.items()]
        batches = [
            MetricBatch(
                run.project,
                run.experiment_name,
                None,
                now,
                {"rl_insight_state_seconds_total": seconds, "rl_insight_state_count_total": count},
                labels={"state": state, "lane": lane},
            )
            for (state, lane), (seconds, count) in items
        ]
        stats = self.processor.stats if self.processor is not None else None
        if stats is not None and any(stats.as_dict().values()):
            batches.append(
                MetricBatch(
                    run.project,
                    run.experiment_name,
                    None,
                    now,
                    {
                        "rl_insight_timeline_dropped_spans_total": stats.dropped,
                        "rl_insight_timeline_exported_spans_total": stats.exported,
                        "rl_insight_timeline_failed_spans_total": stats.failed,
                    },
                    labels={"process": f"{HOST}:{os.getpid()}"},
                )
            )
        return batches

    @hookimpl
    def rl_insight_shutdown(self, timeout_s: float) -> None:
        if self.processor is not None:
            self.processor.force_flush(int(min(timeout_s, 5.0) * 1000))
            self.processor.shutdown()
        self.tracer = self.timeline.tracer = None
        self.timeline.processor = None

    @hookimpl
    def rl_insight_trajectory(self, run: RunInfo, trajectory: Trajectory) -> None:
        """An agent-loop trajectory: one span on lane agent_loop, its traced ops as children."""
        if self.tracer is None:
            return
        from opentelemetry import context, trace
        from opentelemetry.trace import Status, StatusCode

        attributes = dict(trajectory["attributes"], ops=len(trajectory["ops"]), ops_dropped=trajectory["ops_dropped"])
        span = self.tracer.start_span(
            "agent trajectory",
            context=context.Context(),
            start_time=trajectory["start_ns"],
            attributes=span_attributes(run, "agent_trajectory", "agent_loop", attributes),
        )
        if trajectory.get("error"):
            span.set_status(Status(StatusCode.ERROR, trajectory.get("error")))
        parent = trace.set_span_in_context(span)
        for op in trajectory["ops"]:
            extra = dict(
                op["attributes"],
                op=op["name"],
                step=trajectory["attributes"].get("step"),
                sample_index=trajectory["attributes"].get("sample_index"),
            )
            child = self.tracer.start_span(
                op["span_name"],
                context=parent,
                start_time=op["start_ns"],
                attributes=span_attributes(run, f"agent_{op['kind']}", "agent_loop", extra),
            )
            if op.get("error"):
                child.set_status(Status(StatusCode.ERROR, op.get("error")))
            child.end(end_time=op.get("end_ns"))
        span.end(end_time=trajectory.get("end_ns"))
