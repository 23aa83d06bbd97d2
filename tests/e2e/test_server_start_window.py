"""The server's start-up window: its port opens before the span store has loaded. A span posted in
that window gets a retryable 503 with Retry-After, never the 404 "keeps no spans" on which OTLP
exporters drop the batch; OpenTelemetry's own OTLP/HTTP exporter retries and its spans are kept.
The window is made deterministic: the real server (app.Server, every service off) with a span
store whose load waits until the test lets it finish (a SLOW-LOAD subclass of the real store)."""

import threading
import urllib.error
import urllib.request

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from tests.helpers import free_port, http, wait_for
from tests.server.stores.test_timeline_store import STEP_SPANS, otlp
from verl_rl_insight.server import app
from verl_rl_insight.server.settings.server import ServerSettings
from verl_rl_insight.server.stores.spans import SpanStore

SERVICES = ("prometheus", "alertmanager", "tempo", "grafana")


@pytest.fixture
def starting(tmp_path, monkeypatch):
    """(server URL, the event that lets the span store finish loading, the Server) while it starts."""
    loaded = threading.Event()

    class SlowLoadingSpanStore(SpanStore):
        def __init__(self, *args, **kwargs):
            assert loaded.wait(30), "the test never let the span store load"
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(app, "SpanStore", SlowLoadingSpanStore)
    port = free_port()
    settings = ServerSettings(
        bind="127.0.0.1",
        port=port,
        data_dir=str(tmp_path / "data"),
        services={name: {"enabled": False} for name in SERVICES},
        local_trust=True,  # what `rl-insight server start --local-trust` names: spans posted without a token
    )
    server = app.Server(settings)
    starter = threading.Thread(target=server.start, daemon=True)
    starter.start()
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: http("GET", url + "/-/healthy")[0] == 200, 20, 0.02, "the port open")
    yield url, loaded, server
    loaded.set()
    starter.join(30)
    server.stop()


def post_spans(url):
    """(status, Retry-After) of one OTLP/HTTP post."""
    body = otlp(STEP_SPANS).SerializeToString()
    request = urllib.request.Request(
        url + "/v1/traces", data=body, method="POST", headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers.get("Retry-After")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Retry-After")


def test_a_span_posted_while_the_span_store_loads_gets_a_retryable_503_never_a_404(starting):
    url, loaded, _ = starting
    assert http("GET", url + "/-/ready")[0] == 503  # the port is open, the server is not ready
    assert post_spans(url) == (503, "1")
    assert http("GET", url + "/api/v1/info")[0] == 503  # nor told where spans go before it knows
    loaded.set()
    wait_for(lambda: http("GET", url + "/-/ready")[0] == 200, 20, 0.05, "ready")
    assert post_spans(url) == (200, None)


def test_opentelemetrys_exporter_retries_through_the_window_and_its_spans_are_kept(starting):
    url, loaded, server = starting
    exporter = OTLPSpanExporter(endpoint=url + "/v1/traces", timeout=20)
    provider = TracerProvider(resource=Resource.create({"service.name": "trainer"}))
    results = []

    class Recording(SimpleSpanProcessor):
        def on_end(self, span):
            results.append(exporter.export([span]))

    provider.add_span_processor(Recording(exporter))
    sender = threading.Thread(
        target=lambda: (
            provider.get_tracer("t")
            .start_span("step", attributes={"project": "p", "experiment_name": "e", "state_lane_id": "trainer"})
            .end()
        )  # fmt: skip
    )
    sender.start()
    wait_for(lambda: server.parts.api.responses.get("5xx"), 20, 0.02, "the exporter's first post answered 503")
    loaded.set()
    sender.join(30)
    assert results == [SpanExportResult.SUCCESS]
    assert server.spans is not None and [r["project"] for r in server.spans.runs()] == ["p"]
