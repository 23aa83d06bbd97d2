"""The server process: metric hub, target registry and API in this process; Prometheus, Tempo
and Grafana as supervised children.

Run by ``rl-insight server start`` (in the foreground, or detached through
``python -m verl_rl_insight.server.app --settings-json ...``).
"""

import argparse
import dataclasses
import errno
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from verl_rl_insight.contract import environment
from verl_rl_insight.contract.errors import RLInsightError
from verl_rl_insight.contract.http_client import HttpClient, Unreachable
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, STEP_TIME_METRIC
from verl_rl_insight.contract.promql import run_selector
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts, Startup
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.managed import (
    alert_rules,
    alertmanager,
    binaries,
    grafana,
    jobs,
    prometheus,
    tempo,
)
from verl_rl_insight.server.managed.supervisor import Service, Supervisor
from verl_rl_insight.server.metrics.delivery import DeliveryCheck
from verl_rl_insight.server.metrics.hub import OTHERS_SHARE, MetricHub
from verl_rl_insight.server.settings import SERVICE_NAMES, ServerSettings, default_home
from verl_rl_insight.server.stores import credentials
from verl_rl_insight.server.stores.files import private_folder, write_atomically
from verl_rl_insight.server.stores.marks import MarkStore
from verl_rl_insight.server.stores.profiles import ProfileStore
from verl_rl_insight.server.stores.revocations import Revocations
from verl_rl_insight.server.stores.run_cards import RunCardStore
from verl_rl_insight.server.stores.silences import Alerting
from verl_rl_insight.server.stores.span_relay import SpanRelay
from verl_rl_insight.server.stores.spans import SpanStore
from verl_rl_insight.server.stores.targets import TargetRegistry
from verl_rl_insight.server.timeline.live import LiveFigures

logger = logging.getLogger("verl_rl_insight.server")

MODULES = {"prometheus": prometheus, "alertmanager": alertmanager, "tempo": tempo, "grafana": grafana}


class PortInUse(RLInsightError):
    """A port the server needs is taken by another process."""


def state_path() -> Any:
    return default_home() / "server.json"


def advertise_ip(settings: ServerSettings) -> Any:
    """The address trainers should use: configured, else the bind address, else this host's."""
    if settings.advertise_host:
        return settings.advertise_host
    if os.environ.get(environment.ADVERTISE_IP):
        return os.environ[environment.ADVERTISE_IP]
    if settings.bind not in ("", "0.0.0.0", "::"):
        return settings.bind
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            address = str(info[4][0])
            if not address.startswith("127."):
                return address
    except OSError:
        pass
    return "127.0.0.1"


def check_port_free(bind: str, port: int, service: Any) -> Any:
    family = socket.AF_INET6 if ":" in (bind or "") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind or "0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(
                    f"port {port} ({service}) is already in use on {bind}; "
                    f"stop what uses it or set another port in the server config"
                ) from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise PortInUse(
                    f"cannot listen on {bind}: it is not an address of this machine "
                    "(bind: 0.0.0.0 listens on every interface)"
                ) from None
            raise PortInUse(f"cannot listen on {bind}:{port} ({service}): {exc.strerror or exc}") from None


def service_ports(settings: ServerSettings, name: str) -> Any:
    return {
        "prometheus": [(settings.prometheus_port, "Prometheus")],
        "alertmanager": [(settings.alertmanager_port, "Alertmanager")],
        "tempo": [
            (settings.tempo_port, "Tempo HTTP"),
            (settings.tempo_grpc_port, "Tempo gRPC"),
            (settings.otlp_http_port, "OTLP/HTTP"),
            (settings.otlp_grpc_port, "OTLP/gRPC"),
        ],
        "grafana": [(settings.grafana_port, "Grafana")],
    }[name]


def fix_command(name: str) -> str:
    if name in ("prometheus", "alertmanager"):
        package = "prometheus" if name == "prometheus" else "prometheus-alertmanager"
        return f"rl-insight server install {name}   (or: apt-get install -y {package})"
    return f"rl-insight server install {name} (offline: --local-archive DIR)"


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
        self.hub = MetricHub(
            max_series=int(settings.max_series),
            memory_limit_bytes=int(settings.memory_limit_mb * 2**20),
            history_s=settings.history_s,
            state_path=settings.data_path / "hub-state.json",
            latest_path=settings.data_path / "hub-latest.json",
            max_future_s=settings.max_future_s,
            confirming=frozenset(confirm_stores(settings)),
        )
        self.delivery = DeliveryCheck(
            self.hub,
            confirm_stores(settings),
            settle_s=max(2.0, float(settings.scrape_interval_s)),
            jobs={prometheus.scraper_name(settings): jobs.HUB_JOB},
        )
        self.targets = TargetRegistry(
            settings.data_path / "targets.json", max_per_run=int(settings.max_targets_per_run)
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
            self.hub.push_own,  # the server's own series: names a client may not push
            settle_s=settings.timeline_settle_s,
            book=lambda nbytes: self.hub.book_other("timeline", nbytes),
            budget_bytes=int(OTHERS_SHARE * self.hub.memory_limit_bytes),
        )
        self.health = HealthMonitor(self.hub.push_own, alert_rules.health_params(settings.alerts))
        self.hub.listeners.append(self.health.observe)
        self._ticking = threading.Event()
        self.on_change: Callable[[], None] | None = None
        self.logins: dict[str, tuple[str, str]] = {}  # service -> its login (Prometheus, Alertmanager)

    def start(self) -> Any:
        s = self.settings
        os.umask(0o077)  # every file and folder this server and its services make: this user's only
        private_folder(s.data_path)  # and one made before this release becomes so too
        credentials.resolve(s)
        self.logins = credentials.write_service_logins(s.data_path)
        self.delivery.stores = confirm_stores(s)  # the Prometheus login written just now
        check_port_free(s.bind, s.port, "metric hub")
        for name in SERVICE_NAMES:
            if s.enabled(name):
                listen = {"prometheus": prometheus.LISTEN, "tempo": tempo.HOST}.get(name, s.bind)
                for port, what in service_ports(s, name):
                    check_port_free(listen, port, what)
        if s.enabled("alertmanager"):
            self.alerting = Alerting(
                alertmanager.url(s), s.data_path / "silences.json", login=self.logins["alertmanager"]
            )
        # a mark with reset_baseline starts the live detectors' baselines again at its step
        marks = MarkStore(s.data_path / "marks.json", on_reset=self.health.reset_baseline, step_time=self.step_time)
        marks.on_change = self.hub.changed
        marks.book_all(lambda nbytes: self.hub.book_other("marks", nbytes))
        self.hub.listeners.append(marks.observe)
        self.hub.collectors.append(marks.lines)
        self.api = Api(
            ApiParts(
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
            )
        )
        self.http = HttpServer(self.api, s.bind, s.port)
        try:
            self.http.start()
        except OSError as exc:
            raise PortInUse(f"the metric hub cannot listen on {s.bind}:{s.port}: {exc.strerror or exc}") from None
        for name in SERVICE_NAMES:
            if s.enabled(name):
                self._start_service(name)
        if "tempo" not in self.services and not s.otlp_endpoint:  # no Tempo: the hub keeps the spans
            self.spans = SpanStore(s.data_path / "spans")
        elif "tempo" in self.services and not s.otlp_endpoint:  # Tempo: spans pass through the hub to it
            self.relay = SpanRelay(f"http://127.0.0.1:{s.otlp_http_port}/v1/traces")
        threading.Thread(target=self._tick, name="rl-insight-timeline-figures", daemon=True).start()
        threading.Thread(
            target=self.delivery.run, args=(self._ticking,), name="rl-insight-delivery", daemon=True
        ).start()
        self.supervisor = Supervisor(self.services, on_restart=self._restarted)
        self.supervisor.start()
        self.startup.open(self.spans, self.relay)
        return self

    def _tick(self) -> None:
        """Make the figures of the steps that have settled, every second, until the server stops."""
        while not self._ticking.wait(1.0):
            self.figures.tick()

    def delete_series(self, project: str, experiment: str | None) -> str:
        """Delete a run's series in this server's Prometheus (its admin API, on loopback); says what happened."""
        service = self.services.get("prometheus")
        if service is None:
            return "no Prometheus runs here"
        # twice: a scrape served just before the hub forgot the run may land after the first delete
        for attempt in range(2):
            if attempt:
                time.sleep(min(self.settings.scrape_interval_s, 30.0) + 1.0)
            try:
                reply = HttpClient(basic_auth=self.logins["prometheus"]).request(
                    "POST",
                    f"{service.url}/api/v1/admin/tsdb/delete_series",
                    params={"match[]": run_selector(project, experiment)},
                    timeout_s=30,
                )
            except Unreachable as exc:
                return f"not deleted: {exc}"
            if not reply.ok:
                return f"not deleted: Prometheus answered {reply.status}: {reply.error()}"
        return "deleted"

    def step_time(self, project: str, experiment: str, step: int) -> float | None:
        """The trainer's time of ``step`` from this server's Prometheus (None: it runs none, or does not say)."""
        service = self.services.get("prometheus")
        url = service.url if service is not None else None
        return step_time_in(url, project, experiment, step, self.logins["prometheus"]) if url else None

    def _restarted(self, service: Any) -> None:
        if service.name == "alertmanager" and self.alerting is not None:
            self.alerting.restore_when_ready()
        if self.on_change:
            self.on_change()

    def _start_service(self, name: str) -> None:
        s = self.settings
        found = binaries.resolve(name, s.service(name).get("binary"))
        if found is None:
            configured = s.service(name).get("binary")
            what = f"configured binary {configured} is not executable" if configured else f"{name} is not installed"
            self.missing[name] = [what, fix_command(name)]
            if not configured:
                self.absent.add(name)
            return
        module = MODULES[name]
        if name == "grafana":
            config_path = grafana.write_files(s)
        elif name == "prometheus":
            config_path = s.data_path / "prometheus.yml"
            token_file = credentials.secrets_dir(s.data_path) / credentials.TOKEN_FILE if s.token else None
            # 0600: remote_write entries may carry credentials
            alertmanager_url = alertmanager.url(s) if s.enabled("alertmanager") else None
            write_atomically(
                config_path,
                prometheus.render_config(
                    s,
                    rule_files=[alert_rules.write(s, links_to=self.state()["public_urls"])],
                    token_file=token_file,
                    alertmanager=alertmanager_url,
                ),
                mode=0o600,
            )
        elif name == "alertmanager":  # 0600: receivers hold webhook URLs and passwords
            config_path = s.data_path / "alertmanager.yml"
            write_atomically(config_path, alertmanager.render_config(s), mode=0o600)
        else:
            config_path = s.data_path / "tempo.yaml"
            config_path.write_text(tempo.render_config(s))
        host = prometheus.connect_host(s.bind)
        port = {
            "prometheus": s.prometheus_port,
            "tempo": s.tempo_port,
            "grafana": s.grafana_port,
            "alertmanager": s.alertmanager_port,
        }[name]
        urls = {"alertmanager": alertmanager.url(s), "prometheus": prometheus.url(s), "tempo": tempo.url(s)}
        url = urls.get(name, f"http://{host}:{port}")
        service = Service(
            name,
            module.command(found["binary"], s, config_path),
            s.data_path / "logs" / f"{name}.log",
            ready_url=url + module.HEALTH_PATH,
            url=url,
            version=found.get("version"),
            binary=found["binary"],
            data_dir=s.data_path / name,
            cwd=str(s.data_path),
            login=self.logins.get(name),
        )
        service.start()
        self.services[name] = service

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Wait for every started service; a service that does not come up is reported missing."""
        for name, service in list(self.services.items()):
            if not service.wait_ready(timeout_s):
                self.missing[name] = [f"{name} did not become ready; see {service.log_path}", ""]
        return not self.missing

    def info(self) -> Any:
        """What trainers are told: where to send traces, where people look."""
        state = self.state()
        urls = state["public_urls"]
        if self.settings.otlp_endpoint:
            traces = self.settings.otlp_endpoint
        elif self.spans is not None or self.relay is not None:
            traces = state["hub_url"] + "/v1/traces"
        else:
            traces = urls["otlp_http"] + "/v1/traces"
        return {
            "otlp_traces": traces,
            "spans_kept_by_hub": self.spans is not None,
            "span_relay": dict(self.relay.stats) if self.relay is not None else None,
            "timeline_figures": dict(self.figures.stats),
            "health": self.health.params,
            "tempo": urls["tempo"],
            "prometheus": urls["prometheus"],
            "grafana": urls["grafana"],
            "services": sorted(self.services),
        }

    def service_status(self) -> Any:
        status = {name: svc.status() for name, svc in self.services.items()}
        for name, (what, fix) in self.missing.items():
            status.setdefault(name, {}).update({"missing": what, "fix": fix, "absent": name in self.absent})
        return status

    def state(self) -> Any:
        s = self.settings
        ip = advertise_ip(s)
        return {
            "pid": os.getpid(),
            "pgid": os.getpgid(0),
            "started": time.time(),
            "server_ip": ip,
            "hub_url": f"http://{ip}:{s.port}",
            "local_hub_url": f"http://{prometheus.connect_host(s.bind)}:{s.port}",
            "public_urls": {
                "prometheus": prometheus.url(s),  # loopback only, with a login (rl-insight server url --prometheus)
                "tempo": tempo.url(s),  # loopback only: no login of its own
                "otlp_http": f"http://{ip}:{s.otlp_http_port}",
                "otlp_grpc": f"{ip}:{s.otlp_grpc_port}",
                "grafana": f"http://{ip}:{s.grafana_port}",
                "alertmanager": alertmanager.url(s),
            },
            "alert_receivers": alertmanager.receiver_names(s),
            "services": {
                name: {"pid": svc.pid, "binary": svc.binary, "url": svc.url, "version": svc.version}
                for name, svc in self.services.items()
            },
            "missing": self.missing,
            "absent": sorted(self.absent),
            "token": bool(s.token),
            "secrets_dir": str(s.data_path / "secrets"),
            "grafana_admin_user": s.grafana_admin_user,
            "grafana_anonymous_viewer": s.grafana_anonymous_viewer,
            "settings": dataclasses.asdict(s)
            | {
                "token": "***" if s.token else "",
                "grafana_admin_password": "***",
                "remote_write": prometheus.redacted_remote_write(s.remote_write),
                "alertmanager": {"receivers": alertmanager.receiver_names(s)},
            },
        }

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


def step_time_in(
    prometheus_url: str, project: str, experiment: str, step: int, login: tuple[str, str] | None = None
) -> float | None:
    """The trainer's time of ``step`` (or of the first step after it that Prometheus has), read on a
    one-minute grid over the last 35 days: exact for steps of a minute or more; None where it does not say."""
    run = run_selector(project, experiment)
    query = (
        f"min(min_over_time(({STEP_TIME_METRIC}{run} and on(project, experiment_name) "
        f"({GLOBAL_STEP_METRIC}{run} >= {int(step)}))[35d:1m]))"
    )
    try:
        reply = HttpClient(basic_auth=login).request(
            "GET", f"{prometheus_url}/api/v1/query", params={"query": query}, timeout_s=20
        )
        found = reply.json()["data"]["result"] if reply.ok else []
        return float(found[0]["value"][1]) if found else None
    except (Unreachable, ValueError, KeyError, IndexError, TypeError) as exc:
        logger.warning("marks: step %d of %s/%s: no time from Prometheus (%s)", step, project, experiment, exc)
        return None


def write_state(server: Server) -> None:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(server.state(), indent=2))  # no secret in it: they stay in secrets/


def run(settings: ServerSettings, on_ready: Any = None) -> int:
    """Start everything, write the state file, call ``on_ready(state)``, serve until SIGTERM/SIGINT."""
    # Hand the GIL on every 1 ms instead of 5: a push waiting behind a long rendering gets it sooner.
    sys.setswitchinterval(0.001)
    server = Server(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server.start()
        server.on_change = lambda: write_state(server)
        server.wait_ready()
        write_state(server)
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


def main(argv: Any = None) -> int:
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
