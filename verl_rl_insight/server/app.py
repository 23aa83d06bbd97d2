"""The server process: metric hub, target registry and API in this process; Prometheus, Alertmanager,
Tempo and Grafana as supervised children (ports.py, service_start.py; what it writes of itself:
server_state.py).

Run by ``rl-insight server start`` (in the foreground, or detached through
``python -m verl_rl_insight.server.app --settings-json ...``).
"""

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts, Startup
from verl_rl_insight.server.explorer.prometheus import PrometheusReader
from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.managed import alertmanager, jobs, prometheus
from verl_rl_insight.server.managed.alert_settings import health_params
from verl_rl_insight.server.managed.supervisor import Service, Supervisor
from verl_rl_insight.server.metrics.delivery import DeliveryCheck
from verl_rl_insight.server.metrics.hub import OTHERS_SHARE, MetricHub
from verl_rl_insight.server.ports import PortInUse, check_ports_free
from verl_rl_insight.server.run_series import delete_series, step_time_in
from verl_rl_insight.server.server_state import hub_url, public_urls, state_of, state_path, write_state
from verl_rl_insight.server.service_start import NotInstalled, start_service
from verl_rl_insight.server.settings import SERVICE_NAMES, ServerSettings
from verl_rl_insight.server.stores import credentials
from verl_rl_insight.server.stores.files import private_folder
from verl_rl_insight.server.stores.marks import MarkStore
from verl_rl_insight.server.stores.profiles import ProfileStore
from verl_rl_insight.server.stores.revocations import Revocations
from verl_rl_insight.server.stores.run_attempts import RunAttempts
from verl_rl_insight.server.stores.run_cards import RunCardStore
from verl_rl_insight.server.stores.run_keys import RunKeys
from verl_rl_insight.server.stores.silences import Alerting
from verl_rl_insight.server.stores.span_relay import SpanRelay
from verl_rl_insight.server.stores.spans import SpanStore
from verl_rl_insight.server.stores.targets import TargetRegistry
from verl_rl_insight.server.timeline.live import LiveFigures

HISTORY_SHARE = 1 / 16  # of memory_limit_mb: the explorer's histories of every run together (explorer/history.py)
CURVES_SHARE = 1 / 32  # of memory_limit_mb: the explorer's kept curves answers (explorer/curves.py)
SPAN_INDEX_SHARE = 1 / 64  # of memory_limit_mb: where each step's spans lie, for step pages (stores/span_index.py)

logger = logging.getLogger("verl_rl_insight.server")

__all__ = ["PortInUse", "Server", "main", "run", "state_path", "step_time_in"]


def confirm_stores(settings: ServerSettings) -> dict[str, str]:
    """Named scrapers whose store is read back before their history goes: the server's own
    Prometheus, and those configured."""
    stores = dict(settings.confirm_scrapers)
    if settings.enabled("prometheus"):  # with its login, once the server has made one
        stores[prometheus.scraper_name(settings)] = prometheus.login_url(settings)
    return stores


class Server:
    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.attempts = RunAttempts(settings.data_path / "run-attempts.json")
        self.hub = MetricHub(
            max_series=int(settings.max_series),
            memory_limit_bytes=int(settings.memory_limit_mb * 2**20),
            history_s=settings.history_s,
            state_path=settings.data_path / "hub-state.json",
            latest_path=settings.data_path / "hub-latest.json",
            max_future_s=settings.max_future_s,
            confirming=frozenset(confirm_stores(settings)),
            attempts=RunAttempts(settings.data_path / "run-attempts.json"),  # each step's attempt, a series
        )
        self.delivery = DeliveryCheck(
            self.hub,
            confirm_stores(settings),
            settle_s=max(2.0, float(settings.scrape_interval_s)),
            jobs={prometheus.scraper_name(settings): jobs.HUB_JOB},
        )
        self.targets = TargetRegistry(
            settings.data_path / "targets.json",
            max_per_run=int(settings.max_targets_per_run),
            own_ports=frozenset(v for k, v in vars(settings).items() if k.endswith("port") and isinstance(v, int)),
        )
        self.api: Api | None = None
        self.http: HttpServer | None = None
        self.services: dict[str, Service] = {}
        self.missing: dict[str, list[str]] = {}  # service -> [what is missing, the command that fixes it]
        self.absent: set[str] = set()  # services whose binary is not installed at all (a state when optional)
        self.supervisor: Supervisor | None = None
        self.alerting: Alerting | None = None
        self.spans: SpanStore | None = None
        self.relay: SpanRelay | None = None
        self.startup = Startup(ready=False)  # what the API may use once the server has started
        self.figures = LiveFigures(
            self.hub.write_own,  # the server's own series: names a client may not push, not sent to listeners
            settle_s=settings.timeline_settle_s,
            book=lambda nbytes: self.hub.book_other("timeline", nbytes),
            budget_bytes=int(OTHERS_SHARE * self.hub.memory_limit_bytes),
        )
        self.health = HealthMonitor(
            self.hub.write_own, health_params(settings.alerts), validation_keys=settings.validation_keys
        )
        self.hub.listeners.append(self.health.observe)
        self.hub.listeners.append(self.attempts.saved)  # the attempts' file, written outside the hub's lock
        # the run explorer's step table (a listener too) and the detectors' settings diagnose reads
        history_bytes = int(HISTORY_SHARE * self.hub.memory_limit_bytes)  # by bytes, not a count of runs
        names = RunKeys(settings.data_path / "run-keys")  # the keys as logged, kept across restarts
        names.book_all(lambda nbytes: self.hub.book_other("run_keys", nbytes))
        curves_bytes = int(CURVES_SHARE * self.hub.memory_limit_bytes)
        self.explorer = Sources(
            self.hub.listeners, self.health.params, history_bytes=history_bytes, curves_bytes=curves_bytes, names=names
        )
        self._ticking = threading.Event()
        self.on_change: Callable[[], None] | None = None
        self.logins: dict[str, tuple[str, str]] = {}  # service -> its login (Prometheus, Alertmanager)

    def start(self) -> "Server":
        s = self.settings
        os.umask(0o077)  # every file and folder this server and its services make: this user's only
        private_folder(s.data_path)  # and one made before this release becomes so too
        credentials.resolve(s)
        self.logins = credentials.write_service_logins(s.data_path)
        self.delivery.stores = confirm_stores(s)  # the Prometheus login written just now
        check_ports_free(s)
        if s.enabled("alertmanager"):
            self.alerting = Alerting(
                alertmanager.url(s), s.data_path / "silences.json", login=self.logins["alertmanager"]
            )
        self.api = Api(self._api_parts(self._marks()))
        self.http = HttpServer(self.api, s.bind, s.port)
        try:
            self.http.start()
        except OSError as exc:
            raise PortInUse(f"the metric hub cannot listen on {s.bind}:{s.port}: {exc.strerror or exc}") from None
        for name in SERVICE_NAMES:
            if s.enabled(name):
                self._start_service(name)
        if "tempo" not in self.services and not s.otlp_endpoint:  # no Tempo: the hub keeps the spans
            self.spans = SpanStore(
                s.data_path / "spans", index_bytes=int(SPAN_INDEX_SHARE * self.hub.memory_limit_bytes)
            )
        elif "tempo" in self.services and not s.otlp_endpoint:  # Tempo: spans pass through the hub to it
            self.relay = SpanRelay(f"http://127.0.0.1:{s.otlp_http_port}/v1/traces")
        threading.Thread(target=self._tick, name="rl-insight-timeline-figures", daemon=True).start()
        threading.Thread(
            target=self.delivery.run, args=(self._ticking,), name="rl-insight-delivery", daemon=True
        ).start()
        if "prometheus" in self.services:  # a run the hub has not carried is read back from Prometheus
            self.explorer.prometheus = PrometheusReader(prometheus.url(s), self.logins["prometheus"])
        self.supervisor = Supervisor(self.services, on_restart=self._restarted)
        self.supervisor.start()
        self.startup.open(self.spans, self.relay)
        return self

    def _marks(self) -> MarkStore:
        """People's marks on steps; one with reset_baseline starts the live detectors' baselines again there."""
        s = self.settings
        marks = MarkStore(s.data_path / "marks.json", on_reset=self.health.reset_baseline, step_time=self.step_time)
        marks.on_change = self.hub.changed
        marks.book_all(lambda nbytes: self.hub.book_other("marks", nbytes))
        self.hub.listeners.append(marks.observe)
        self.hub.collectors.append(marks.lines)
        return marks

    def _api_parts(self, marks: MarkStore) -> ApiParts:
        s = self.settings
        return ApiParts(
            self.hub,
            targets=self.targets,
            token=s.token,
            max_body_bytes=int(s.max_body_mb * 2**20),
            services=self.service_status,
            info=self.info,
            alerting=self.alerting,
            startup=self.startup,  # until the span store and the services are in place: 503
            figures=self.figures,
            delete_series=self.delete_series,
            profiles=ProfileStore(s.data_path / "profiles.json"),
            revocations=Revocations(s.data_path / "revoked-runs.json", future_s=s.max_future_s),
            run_cards=RunCardStore(s.data_path / "run-cards"),
            marks=marks,
            explorer=self.explorer,
        )

    def _tick(self) -> None:
        """Make the figures of the steps that have settled, every second, until the server stops."""
        while not self._ticking.wait(1.0):
            self.figures.tick()

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

    def _restarted(self, service: Service) -> None:
        if service.name == "alertmanager" and self.alerting is not None:
            self.alerting.restore_when_ready()
        if self.on_change:
            self.on_change()

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
        """What trainers are told: where to send traces, where people look."""
        urls = public_urls(self.settings)
        if self.settings.otlp_endpoint:
            traces = self.settings.otlp_endpoint
        elif self.spans is not None or self.relay is not None:
            traces = hub_url(self.settings) + "/v1/traces"
        else:
            traces = urls["otlp_http"] + "/v1/traces"
        return {
            "otlp_traces": traces,
            "spans_kept_by_hub": self.spans is not None,
            "span_relay": dict(self.relay.stats) if self.relay is not None else None,
            "timeline_figures": dict(self.figures.stats),
            "health": self.health.params,
            "validation_keys": list(self.health.validation_keys),
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
        if self.api is not None:
            self.api.close()
        try:
            self.hub.save_latest()  # no push comes any more: a restarted hub exposes these at once
        except OSError as exc:
            logger.warning("metric hub: cannot save the latest values: %s", exc)
        if self.relay is not None:
            self.relay.close()
        if self.spans is not None:
            self.spans.close()
        self.targets.close()


def run(settings: ServerSettings, on_ready: Callable[[dict[str, object]], None] | None = None) -> int:
    """Start everything, write the state file, call ``on_ready(state)``, serve until SIGTERM/SIGINT."""
    # Hand the GIL on every 1 ms instead of 5: a push waiting behind a long rendering gets it sooner.
    sys.setswitchinterval(0.001)
    server = Server(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server.start()
        server.on_change = lambda: write_state(server.state())
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
