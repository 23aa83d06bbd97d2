"""The server process: metric hub, target registry and API in this process; Prometheus, Alertmanager,
Tempo and Grafana as supervised children (ports.py, service_start.py; what it writes of itself:
server_state.py).

Run by ``rl-insight server start`` (in the foreground, or detached through
``python -m verl_rl_insight.server.app --settings-json ...``).
"""

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.errors import Unavailable
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.compose import Parts, build
from verl_rl_insight.server.managed.backfill import promtool_beside, write_blocks
from verl_rl_insight.server.managed.supervisor import Service, Supervisor
from verl_rl_insight.server.ports import PortInUse, check_ports_free
from verl_rl_insight.server.run_series import delete_series, step_time_in
from verl_rl_insight.server.server_state import hub_url, public_urls, state_of, state_path, write_state
from verl_rl_insight.server.service_start import NotInstalled, start_service
from verl_rl_insight.server.settings.server import SERVICE_NAMES, ServerSettings
from verl_rl_insight.server.stores import credentials
from verl_rl_insight.server.stores.files import private_folder
from verl_rl_insight.server.stores.span_relay import SpanRelay
from verl_rl_insight.server.stores.spans import SpanStore

logger = logging.getLogger("verl_rl_insight.server")

__all__ = ["PortInUse", "Server", "main", "run", "state_path", "step_time_in"]


class Server:
    def __init__(self, settings: ServerSettings, on_change: Callable[[dict[str, object]], None] | None = None) -> None:
        self.settings = settings
        self.on_change = on_change  # called with the server's state when a service restarts (its state file)
        self.parts: Parts | None = None  # built by ``start`` (compose.py), once the credentials are written
        self.http: HttpServer | None = None
        self.services: dict[str, Service] = {}
        self.missing: dict[str, list[str]] = {}  # service -> [what is missing, the command that fixes it]
        self.absent: set[str] = set()  # services whose binary is not installed at all (a state when optional)
        self.supervisor: Supervisor | None = None
        self.spans: SpanStore | None = None
        self.relay: SpanRelay | None = None
        self._ticking = threading.Event()
        self.logins: dict[str, tuple[str, str]] = {}  # service -> its login (Prometheus, Alertmanager)

    def start(self) -> "Server":
        s = self.settings
        os.umask(0o077)  # every file and folder this server and its services make: this user's only
        private_folder(s.data_path)  # and one made before this release becomes so too
        credentials.resolve(s)
        self.logins = credentials.write_service_logins(s.data_path)
        check_ports_free(s)
        parts = self.parts = build(s, self.logins, self)
        self.http = HttpServer(parts.api, s.bind, s.port)
        try:
            self.http.start()
        except OSError as exc:
            raise PortInUse(f"the metric hub cannot listen on {s.bind}:{s.port}: {exc.strerror or exc}") from None
        for name in SERVICE_NAMES:
            if s.enabled(name):
                self._start_service(name)
        if "tempo" not in self.services and not s.otlp_endpoint:  # no Tempo: the hub keeps the spans
            self.spans = SpanStore(s.data_path / "spans", index_bytes=s.memory_shares.span_index)
        elif "tempo" in self.services and not s.otlp_endpoint:  # Tempo: spans pass through the hub to it
            self.relay = SpanRelay(f"http://127.0.0.1:{s.otlp_http_port}{paths.OTLP_TRACES}")
        threading.Thread(target=self._tick, args=(parts,), name="rl-insight-timeline-figures", daemon=True).start()
        threading.Thread(
            target=parts.delivery.run, args=(self._ticking,), name="rl-insight-delivery", daemon=True
        ).start()
        self.supervisor = Supervisor(self.services, on_restart=self._restarted)
        self.supervisor.start()
        parts.startup.open(self.spans, self.relay)
        return self

    def _tick(self, parts: Parts) -> None:
        """Every second until the server stops: make the figures of the steps that have settled,
        walk the detectors over the steps pushed since (off the push path and off the scrape:
        ``health/live.py``), and hand the hub what they made (a scrape does it too)."""
        while not self._ticking.wait(1.0):
            parts.figures.tick()
            parts.health.walk()
            parts.hub.take_derived()

    def delete_series(self, project: str, experiment: str | None) -> str:
        """Delete a run's series in this server's Prometheus (its admin API, on loopback); says what happened."""
        service = self.services.get("prometheus")
        if service is None or service.url is None:
            return "no Prometheus runs here"
        wait_s = min(self.settings.scrape_interval_s, 30.0) + 1.0
        return delete_series(service.url, self.logins["prometheus"], project, experiment, wait_s)

    def step_time(self, project: str, experiment: str, step: int) -> float | None:
        """The trainer's time of ``step`` from this server's Prometheus (None: it runs none, or does not say)."""
        service = self.services.get("prometheus")
        url = service.url if service is not None else None
        return step_time_in(url, project, experiment, step, self.logins["prometheus"]) if url else None

    def import_blocks(self, text: Iterator[str]) -> int:
        """A run (OpenMetrics text) made into blocks and moved into this server's Prometheus."""
        service = self.services.get("prometheus")
        if service is None:
            raise Unavailable("imports need the server's own Prometheus; this server runs none")
        promtool = promtool_beside(service.binary)
        if promtool is None:
            raise Unavailable(f"imports need promtool beside {service.binary} or on PATH (it comes with Prometheus)")
        return write_blocks(promtool, self.settings.data_path / "prometheus", text)

    def _restarted(self, service: Service) -> None:
        alerting = self.parts.alerting if self.parts is not None else None
        if service.name == "alertmanager" and alerting is not None:
            alerting.restore_when_ready()
        if self.on_change is not None:
            self.on_change(self.state())

    def _start_service(self, name: str) -> None:
        started = start_service(self.settings, name, self.logins, public_urls(self.settings))
        if isinstance(started, NotInstalled):
            self.missing[name] = [started.what, started.fix]
            if started.absent:
                self.absent.add(name)
            return
        self.services[name] = started

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Wait for every started service; a service that does not come up is reported missing."""
        for name, service in list(self.services.items()):
            if not service.wait_ready(timeout_s):
                self.missing[name] = [f"{name} did not become ready; see {service.log_path}", ""]
        return not self.missing

    def info(self) -> dict[str, object]:
        """What trainers are told: where to send traces, where people look (asked once started)."""
        parts = self.parts
        if parts is None:
            raise RuntimeError("the server has not started")
        urls = public_urls(self.settings)
        if self.settings.otlp_endpoint:
            traces = self.settings.otlp_endpoint
        elif self.spans is not None or self.relay is not None:
            traces = hub_url(self.settings) + paths.OTLP_TRACES
        else:
            traces = urls["otlp_http"] + paths.OTLP_TRACES
        return {
            "otlp_traces": traces,
            "spans_kept_by_hub": self.spans is not None,
            "span_relay": self.relay.stats.as_dict() if self.relay is not None else None,
            "timeline_figures": parts.figures.stats.as_dict(),
            "health_walk": dataclasses.asdict(parts.health.stats),  # steps fed, runs walked again, bytes booked
            "health": parts.health.params.as_dict(),  # the wire format diagnose reads (HealthSettings.from_wire)
            "validation_keys": list(parts.health.validation_keys),
            "tempo": urls["tempo"],
            "prometheus": urls["prometheus"],
            "grafana": urls["grafana"],
            "services": sorted(self.services),
        }

    def service_status(self) -> dict[str, dict[str, object]]:
        status: dict[str, dict[str, object]] = {name: svc.status() for name, svc in self.services.items()}
        for name, (what, fix) in self.missing.items():
            status.setdefault(name, {}).update({"missing": what, "fix": fix, "absent": name in self.absent})
        return status

    def state(self) -> dict[str, object]:
        return state_of(self.settings, self.services, self.missing, self.absent)

    def stop(self) -> None:
        self._ticking.set()
        if self.supervisor is not None:
            self.supervisor.stop()
        else:
            for svc in self.services.values():
                svc.stop()
        if self.http is not None:
            self.http.stop()
        if self.parts is not None:
            self.parts.api.close()
            try:
                self.parts.hub.save_latest()  # no push comes any more: a restarted hub exposes these at once
            except OSError as exc:
                logger.warning("metric hub: cannot save the latest values: %s", exc)
        if self.relay is not None:
            self.relay.close()
        if self.spans is not None:
            self.spans.close()
        if self.parts is not None:
            self.parts.targets.close()


def run(settings: ServerSettings, on_ready: Callable[[dict[str, object]], None] | None = None) -> int:
    """Start everything, write the state file, call ``on_ready(state)``, serve until SIGTERM/SIGINT."""
    # Hand the GIL on every 1 ms instead of 5: a push waiting behind a long rendering gets it sooner.
    sys.setswitchinterval(0.001)
    server = Server(settings, on_change=write_state)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server.start()
        server.wait_ready()
        write_state(server.state())
        if on_ready is not None:
            on_ready(server.state())
        stop.wait()
    finally:
        server.stop()
        try:
            if json.loads(state_path().read_text()).get("pid") == os.getpid():
                state_path().unlink()
        except (OSError, ValueError):
            pass
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m verl_rl_insight.server.app",
        description="the server process; reads its settings as JSON from stdin "
        "(never from the command line: they may hold secrets)",
    )
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = ServerSettings(**json.loads(sys.stdin.read()))
    try:
        return run(settings)
    except (PortInUse, credentials.CredentialError) as exc:
        print(f"rl-insight server: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
