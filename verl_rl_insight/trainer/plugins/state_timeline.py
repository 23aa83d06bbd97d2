"""RL state timeline: trainer phases and rollout ``generate`` calls as OpenTelemetry spans.

Sent over OTLP/HTTP, batched, to the Tempo endpoint: ``plugins.state_timeline.otlp_endpoint``,
else ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``, else the rl-insight
server's host on port ``otlp_port`` (4318). Spans wait in a bounded queue; when it is full new
spans are dropped and counted (``rl_insight_timeline_dropped_spans_total``), never waited for.
Per state and lane, time spent and count are also metrics: ``rl_insight_state_seconds_total``,
``rl_insight_state_count_total`` (``rate()`` gives the share of time a replica generates).
"""

import collections
import logging
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor

from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.config import plugin_settings
from verl_rl_insight.trainer.hookspecs import hookimpl

logger = logging.getLogger("verl_rl_insight")

# verl's phase names -> low-cardinality span names; the raw name stays in attribute state_name
SPAN_NAMES: dict[str, str] = {
    "step": "trainer step",
    "gen": "rollout generate",
    "generate_sequences": "rollout generate",
    "vllm_generate": "rollout generate",
    "sglang_generate": "rollout generate",
    "reward": "reward compute",
    "old_log_prob": "actor old_log_prob",
    "ref": "ref log_prob",
    "values": "critic values",
    "adv": "advantage compute",
    "update_critic": "critic update",
    "update_actor": "actor update",
    "update_weights": "weights sync",
    "save_checkpoint": "checkpoint save",
    "testing": "validation",
    # verl's separate_async trainer (trainer/ppo/v1/trainer_separate_async.py): the GPUs handed over
    "switch_to_rollout": "switch to rollout",
    "switch_wait": "switch wait",
    "switch_to_trainer": "switch to trainer",
    # DistProfiler.annotate roles (verl >= 0.9, on worker lanes rank_<n>)
    "actor_update": "actor update",
    "actor_compute_log_prob": "actor log_prob",
    "ref_compute_log_prob": "ref log_prob",
    "rollout": "rollout generate",
    "async_rollout": "rollout generate",
    "train_batch": "train batch",
    "forward_backward": "forward backward",
}

_tracer = None
_processor = None
_local = threading.local()
_durations: collections.defaultdict[tuple[str, str], list[float]] = collections.defaultdict(
    lambda: [0.0, 0]
)  # (state, lane) -> [seconds, count]
_durations_lock = threading.Lock()
_host = socket.gethostname()


def span_name(state: str) -> str:
    return SPAN_NAMES.get(state, state)


def explicit_endpoint(config: Any, environ: Mapping[str, str] | None = None) -> Any:
    """The endpoint the user named (plugin config, then the standard OTEL_* variables), or None."""
    environ = os.environ if environ is None else environ
    if plugin_settings(config, "state_timeline").get("otlp_endpoint"):
        return str(plugin_settings(config, "state_timeline").otlp_endpoint)
    if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return environ["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
    return None


def _origin(url: str) -> Any:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def otlp_endpoint(config: Any, environ: Mapping[str, str] | None = None) -> Any:
    """Where spans go; for a server URL alone, the default that ``AnnouncedEndpointExporter`` refines."""
    explicit = explicit_endpoint(config, environ)
    if explicit is None and config.get("server_url"):
        host = urllib.parse.urlsplit(str(config.server_url)).hostname
        port = plugin_settings(config, "state_timeline").otlp_port
        return f"http://{host}:{port}/v1/traces"
    return explicit


class AnnouncedEndpointExporter:
    """Asks the rl-insight server (``/api/v1/info``) where its OTLP receiver is, on the first export,
    on the span thread; falls back to the server's host and ``otlp_port``."""

    def __init__(self, server_url: Any, fallback: Any, make_exporter: Any) -> None:
        self.server_url = server_url.rstrip("/")
        self.fallback = fallback
        self.make_exporter = make_exporter
        self.exporter: Any = None

    @property
    def _endpoint(self) -> Any:
        return getattr(self.exporter, "_endpoint", self.fallback)

    def export(self, spans: Any) -> Any:
        if self.exporter is None:
            endpoint = self.fallback
            try:
                from verl_rl_insight.contract.http_client import HttpClient

                info = HttpClient().request("GET", self.server_url + "/api/v1/info", timeout_s=2, max_bytes=2**20)
                announced = info.json().get("otlp_traces") if info.ok else None
                endpoint = announced if isinstance(announced, str) and announced else endpoint
            except Exception:
                pass
            self.exporter = self.make_exporter(endpoint)
        return self.exporter.export(spans)

    def shutdown(self) -> None:
        if self.exporter is not None:
            self.exporter.shutdown()


class CountingSpanProcessor(SpanProcessor):  # type: ignore[misc]  # opentelemetry is not followed
    """A batching span processor whose queue drops (and counts) instead of blocking or silently losing."""

    def __init__(self, exporter: Any, max_queue: int = 8192, batch_size: int = 512, interval_s: float = 1.0) -> None:
        self.exporter = exporter
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.interval_s = interval_s
        self.stats: collections.Counter[str] = collections.Counter()
        self._queue: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rl-insight-spans", daemon=True)
        self._thread.start()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: Any) -> None:
        with self._lock:
            if len(self._queue) >= self.max_queue:
                self.stats["dropped"] += 1
                if self.stats["dropped"] == 1:
                    logger.warning(
                        "rl-insight: span queue full (%d); timeline spans are dropped and counted", self.max_queue
                    )
                return
            self._queue.append(span)
            if len(self._queue) >= self.batch_size:
                self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self._export_all()
            if self._stop.is_set():
                return

    def _export_all(self) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        while True:
            with self._lock:
                batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
            if not batch:
                self._idle.set()
                return
            self._idle.clear()
            try:
                ok = self.exporter.export(batch) == SpanExportResult.SUCCESS
            except Exception:
                ok = False
            self.stats["exported" if ok else "failed"] += len(batch)
            if not ok and self.stats["failed"] == len(batch):
                logger.warning(
                    "rl-insight: cannot send timeline spans to %s; they are counted as failed",
                    getattr(self.exporter, "_endpoint", "the OTLP endpoint"),
                )

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        self._idle.clear()
        self._wake.set()
        while time.monotonic() < deadline:
            with self._lock:
                empty = not self._queue
            if empty and self._idle.wait(0.05):
                return True
        return False

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()


@hookimpl
def rl_insight_configure(config: Any) -> None:
    global _tracer, _processor
    _tracer = _processor = None
    with _durations_lock:
        _durations.clear()
    endpoint = otlp_endpoint(config)
    if endpoint is None:
        logger.warning(
            "rl-insight: no OTLP endpoint (no server URL, no OTEL_EXPORTER_OTLP_ENDPOINT): "
            "the RL state timeline is not sent"
        )
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # The exporter logs an error for every failed batch; this plugin warns once itself and counts.
    logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter").setLevel(logging.CRITICAL + 1)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    settings = plugin_settings(config, "state_timeline")
    provider = TracerProvider(
        resource=Resource.create({"service.name": "verl", "host.name": _host, "process.pid": os.getpid()})
    )

    def make_exporter(url: str) -> Any:
        # the token only goes to the rl-insight server itself, never to a collector elsewhere
        ours = config.get("token") and config.get("server_url") and _origin(url) == _origin(str(config.server_url))
        return OTLPSpanExporter(
            endpoint=url, timeout=5, headers={"Authorization": f"Bearer {config.token}"} if ours else None
        )

    exporter = (
        make_exporter(endpoint)
        if explicit_endpoint(config) is not None
        else AnnouncedEndpointExporter(str(config.server_url), endpoint, make_exporter)
    )
    _processor = CountingSpanProcessor(
        exporter,
        max_queue=settings.max_queue_spans,
        batch_size=settings.batch_spans,
        interval_s=settings.export_interval_s,
    )
    provider.add_span_processor(_processor)
    _tracer = provider.get_tracer("verl_rl_insight")  # this provider only: the user's global one is untouched


def _attributes(run: Any, name: str, lane: str, attributes: dict[str, Any]) -> Any:
    attrs = {
        "project": run.project,
        "experiment_name": run.experiment_name,
        "state_name": name,
        "state_lane_id": lane,
        "node": _host,
        "pid": os.getpid(),
    }
    for key, value in (attributes or {}).items():
        if value is not None:
            attrs["verl.step" if key == "step" else key] = (
                value if isinstance(value, (bool, int, float, str)) else str(value)
            )
    return attrs


def _stack(lane: str) -> Any:
    stacks = getattr(_local, "stacks", None)
    if stacks is None:
        stacks = _local.stacks = {}
    return stacks.setdefault(lane, [])


def _parent_context(lane: str) -> Any:
    from opentelemetry import context, trace

    stack = _stack(lane)
    return trace.set_span_in_context(stack[-1][1]) if stack else context.Context()


@hookimpl
def rl_insight_state_enter(run: Any, name: str, lane: str, start_ns: int, attributes: dict[str, Any]) -> None:
    if _tracer is None:
        return
    span = _tracer.start_span(
        span_name(name),
        context=_parent_context(lane),
        start_time=start_ns,
        attributes=_attributes(run, name, lane, attributes),
    )
    _stack(lane).append((name, span, start_ns))


@hookimpl
def rl_insight_state_exit(run: Any, name: str, lane: str, end_ns: int, attributes: dict[str, Any]) -> None:
    stack = _stack(lane)
    for i in range(len(stack) - 1, -1, -1):
        if stack[i][0] == name:
            _, span, start_ns = stack.pop(i)
            for key, value in (attributes or {}).items():
                span.set_attribute(key, value)
            span.end(end_time=end_ns)
            _count(name, lane, end_ns - start_ns)
            return


@hookimpl
def rl_insight_state_span(
    run: Any, name: str, lane: str, start_ns: int, end_ns: int, attributes: dict[str, Any]
) -> None:
    lane = lane or "trainer"
    _count(name, lane, end_ns - start_ns)
    if _tracer is None:
        return
    span = _tracer.start_span(
        span_name(name),
        context=_parent_context(lane),
        start_time=start_ns,
        attributes=_attributes(run, name, lane, attributes),
    )
    span.end(end_time=end_ns)


def _count(name: str, lane: str, duration_ns: Any) -> None:
    with _durations_lock:
        entry = _durations[(name, lane)]
        entry[0] += duration_ns / 1e9
        entry[1] += 1


@hookimpl
def rl_insight_collect(run: Any) -> Any:
    now = time.time()
    with _durations_lock:
        items = [(k, list(v)) for k, v in _durations.items()]
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
    if _processor is not None and any(_processor.stats.values()):
        batches.append(
            MetricBatch(
                run.project,
                run.experiment_name,
                None,
                now,
                {
                    "rl_insight_timeline_dropped_spans_total": _processor.stats["dropped"],
                    "rl_insight_timeline_exported_spans_total": _processor.stats["exported"],
                    "rl_insight_timeline_failed_spans_total": _processor.stats["failed"],
                },
                labels={"process": f"{_host}:{os.getpid()}"},
            )
        )
    return batches


@hookimpl
def rl_insight_shutdown(timeout_s: float) -> None:
    global _tracer
    if _processor is not None:
        _processor.force_flush(int(min(timeout_s, 5.0) * 1000))
        _processor.shutdown()
    _tracer = None


def processor() -> Any:
    """The span processor (for stats and tests); None when no endpoint is configured."""
    return _processor


@hookimpl
def rl_insight_trajectory(run: Any, trajectory: Any) -> None:
    """An agent-loop trajectory: one span on lane agent_loop, its traced ops as children."""
    if _tracer is None:
        return
    from opentelemetry import context, trace
    from opentelemetry.trace import Status, StatusCode

    attributes = dict(trajectory["attributes"], ops=len(trajectory["ops"]), ops_dropped=trajectory["ops_dropped"])
    span = _tracer.start_span(
        "agent trajectory",
        context=context.Context(),
        start_time=trajectory["start_ns"],
        attributes=_attributes(run, "agent_trajectory", "agent_loop", attributes),
    )
    if trajectory.get("error"):
        span.set_status(Status(StatusCode.ERROR, trajectory["error"]))
    parent = trace.set_span_in_context(span)
    for op in trajectory["ops"]:
        extra = dict(
            op["attributes"],
            op=op["name"],
            step=trajectory["attributes"].get("step"),
            sample_index=trajectory["attributes"].get("sample_index"),
        )
        child = _tracer.start_span(
            op["span_name"],
            context=parent,
            start_time=op["start_ns"],
            attributes=_attributes(run, f"agent_{op['kind']}", "agent_loop", extra),
        )
        if op.get("error"):
            child.set_status(Status(StatusCode.ERROR, op["error"]))
        child.end(end_time=op["end_ns"])
    span.end(end_time=trajectory["end_ns"])
