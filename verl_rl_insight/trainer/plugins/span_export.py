"""Sending the timeline's spans: their attributes, where to (the OTLP endpoint the user named, else
the one the rl-insight server announces) and a batching span processor whose bounded queue drops and
counts instead of blocking the training thread (state_timeline.py uses them all, the samples plugin
the attributes)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence

from omegaconf import DictConfig
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.counters import Counters
from verl_rl_insight.trainer.config import ServerUrl, plugin_settings
from verl_rl_insight.trainer.hook_types import RunInfo

logger = logging.getLogger("verl_rl_insight")

HOST = socket.gethostname()


def span_attributes(run: RunInfo, name: str, lane: str, attributes: dict[str, object]) -> dict[str, object]:
    """A timeline span's attributes: the run, the state and its lane, this process, then ``attributes``
    (``step`` as ``verl.step``; a value OpenTelemetry cannot carry as its text; None left out)."""
    attrs: dict[str, object] = {
        "project": run.project,
        "experiment_name": run.experiment_name,
        "state_name": name,
        "state_lane_id": lane,
        "node": HOST,
        "pid": os.getpid(),
    }
    for key, value in (attributes or {}).items():
        if value is not None:
            attrs["verl.step" if key == "step" else key] = (
                value if isinstance(value, (bool, int, float, str)) else str(value)
            )
    return attrs


def explicit_endpoint(config: DictConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The endpoint the user named (plugin config, then the standard OTEL_* variables), or None."""
    environ = os.environ if environ is None else environ
    if plugin_settings(config, "state_timeline").get("otlp_endpoint"):
        return str(plugin_settings(config, "state_timeline").otlp_endpoint)
    if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return environ["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + paths.OTLP_TRACES
    return None


def origin(url: str) -> tuple[str, str | None, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def otlp_endpoint(config: DictConfig, server: ServerUrl | None, environ: Mapping[str, str] | None = None) -> str | None:
    """Where spans go; for a ``server`` alone, the default that ``AnnouncedEndpointExporter`` refines."""
    explicit = explicit_endpoint(config, environ)
    if explicit is None and server is not None:
        host = urllib.parse.urlsplit(server.base).hostname
        port = plugin_settings(config, "state_timeline").otlp_port
        return f"http://{host}:{port}{paths.OTLP_TRACES}"
    return explicit


class AnnouncedEndpointExporter:
    """Asks the rl-insight server (``/api/v1/info``) where its OTLP receiver is, on the first export,
    on the span thread; falls back to the server's host and ``otlp_port``."""

    def __init__(self, server: ServerUrl, fallback: str, make_exporter: Callable[[str], SpanExporter]) -> None:
        self.server = server
        self.fallback = fallback
        self.make_exporter = make_exporter
        self.exporter: SpanExporter | None = None

    @property
    def _endpoint(self) -> str:
        return getattr(self.exporter, "_endpoint", self.fallback)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.exporter is None:
            endpoint = self.fallback
            try:
                from verl_rl_insight.contract.http_client import HttpClient

                info = HttpClient().request("GET", self.server.at(paths.INFO), timeout_s=2, max_bytes=2**20)
                announced = info.json().get("otlp_traces") if info.ok else None
                endpoint = announced if isinstance(announced, str) and announced else endpoint
            except Exception:
                pass
            self.exporter = self.make_exporter(endpoint)
        return self.exporter.export(spans)

    def shutdown(self) -> None:
        if self.exporter is not None:
            self.exporter.shutdown()


@dataclasses.dataclass(slots=True)
class SpanExportStats(Counters):
    dropped: int = 0  # spans the full queue had no room for (written under the processor's lock)
    exported: int = 0  # spans the exporter took (written by the export thread only) ...
    failed: int = 0  # ... and those it did not


class CountingSpanProcessor(SpanProcessor):  # type: ignore[misc]  # opentelemetry is not followed
    """A batching span processor whose queue drops (and counts) instead of blocking or silently losing."""

    def __init__(
        self, exporter: SpanExporter, max_queue: int = 8192, batch_size: int = 512, interval_s: float = 1.0
    ) -> None:
        self.exporter = exporter
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.interval_s = interval_s
        self.stats = SpanExportStats()
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rl-insight-spans", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            if len(self._queue) >= self.max_queue:
                self.stats.dropped += 1
                if self.stats.dropped == 1:
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
            if ok:
                self.stats.exported += len(batch)
            else:
                self.stats.failed += len(batch)
            if not ok and self.stats.failed == len(batch):
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
