import contextlib
import json
import os

import pytest

from tests.helpers import free_port, require_prometheus, rl_insight
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.metrics.hub import MetricHub
from verl_rl_insight.trainer import runtime

pytest_plugins = ["tests.fast_tests", "tests.parallel"]  # fast/slow markers; how -n spreads the suite


HARDWARE_OFF = json.dumps({"plugins": {"hardware": {"enabled": False}}})


def isolate(monkeypatch, home):
    """No RL_INSIGHT_* leaks in from the shell; ``home`` is RL_INSIGHT_HOME."""
    for key in list(os.environ):
        if key.startswith(("RL_INSIGHT_", "VERL_RL_INSIGHT_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("RL_INSIGHT_HOME", str(home))
    # The hardware sampler pushes host series of its own every few seconds; tests that count
    # streams or pushes would see them. tests/trainer/test_hardware.py turns it back on.
    monkeypatch.setenv("VERL_RL_INSIGHT_CONFIG", HARDWARE_OFF)


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch, tmp_path):
    """Every test gets its own home and runtime (isolate)."""
    isolate(monkeypatch, tmp_path / "home")
    yield
    runtime.shutdown(timeout_s=2)


@contextlib.contextmanager
def isolated(home):
    """isolate, for what a module's shared fixture starts (before any test's isolated_environment)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        isolate(monkeypatch, home)
        yield


class HubUnderTest:
    """The real metric hub and HTTP API (uvicorn) in this process, on a free loopback port."""

    def __init__(self, token=None, info=None, max_body_bytes=None, port=0, **hub_kwargs):
        explorer = Sources()  # the run explorer hears the pushes, as the server wires it (compose.py)
        self.hub = MetricHub(**hub_kwargs, listeners=(explorer.histories.observe, explorer.names.observe))
        body = {"max_body_bytes": max_body_bytes} if max_body_bytes else {}
        self.api = Api(ApiParts(self.hub, token=token, info=info, explorer=explorer, **body))
        self.server = HttpServer(self.api, "127.0.0.1", port).start()
        self.port = self.server.port
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self):
        self.server.stop()
        self.api.close()


@pytest.fixture
def hub_server():
    """The real metric hub and HTTP API, in this process, on a free loopback port."""
    servers = []

    def make(**kwargs):
        servers.append(HubUnderTest(**kwargs))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


@pytest.fixture
def receiver(monkeypatch):
    """A real OTLP/HTTP receiver on loopback that the trainer side sends its spans to."""
    from tests.otlp_receiver import OtlpReceiver

    receiver = OtlpReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url)
    yield receiver
    receiver.close()


@pytest.fixture(autouse=True, scope="session")
def activated():
    """The .pth file activates every interpreter; say so explicitly for this one too."""
    from verl_rl_insight.trainer.activation import bootstrap

    bootstrap.activate()


@contextlib.contextmanager
def monitoring_stack(folder, env=None):
    """`rl-insight server start --detach --local-trust`: the hub and a real Prometheus scraping every
    second, writes without a token (the tests that use it test what is written, not the token); its
    data in ``folder``; ``server stop`` at the end, in the same environment (``env``, as rl_insight takes it)."""
    require_prometheus()
    hub, prom = free_port(), free_port()
    started = rl_insight(
        "server",
        "start",
        "--detach",
        "--local-trust",
        "--bind",
        "127.0.0.1",
        "--port",
        str(hub),
        "--prometheus-port",
        str(prom),
        "--scrape-interval",
        "1",
        "--data-dir",
        str(folder / "data"),
        "--no-tempo",
        "--no-grafana",
        "--no-alertmanager",
        env=env,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    from tests.helpers import stack_prometheus

    try:
        yield f"http://127.0.0.1:{hub}", stack_prometheus(folder / "data", prom)
    finally:
        rl_insight("server", "stop", env=env)


@pytest.fixture
def monitoring_server(tmp_path):
    """A stack of the test's own (monitoring_stack), in its home: for tests that write to it."""
    with monitoring_stack(tmp_path) as stack:
        yield stack


@pytest.fixture(scope="module")
def shared_monitoring_server(tmp_path_factory):
    """One stack (monitoring_stack) for all the tests of a module that only read what its fixtures
    wrote: started once, in a home of its own, isolated as isolated_environment isolates a test.
    (hub URL, Prometheus URL, the environment of its home for rl_insight: a command that finds the
    stack's login there, as `watch` does, runs in it)."""
    folder = tmp_path_factory.mktemp("stack")
    env = {key: None for key in os.environ if key.startswith(("RL_INSIGHT_", "VERL_RL_INSIGHT_"))}
    env.update(RL_INSIGHT_HOME=str(folder / "home"), VERL_RL_INSIGHT_CONFIG=HARDWARE_OFF)
    with monitoring_stack(folder, env) as (hub, prom):
        yield hub, prom, env


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Every skip with its reason; in CI (CI=true, as .ci/run sets) a skip fails the run: a security,
    delivery or end-to-end test that did not run proves nothing, and a green run must not hide it."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    terminalreporter.section("skipped, with the reasons")
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        terminalreporter.write_line(f"{report.nodeid}: {reason}")
    if in_ci():
        terminalreporter.write_line(f"CI=true: {len(skipped)} skipped test(s) fail this run", red=True)


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if in_ci() and reporter is not None and reporter.stats.get("skipped") and exitstatus == 0:
        session.exitstatus = 1
