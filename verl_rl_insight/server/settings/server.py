"""Server settings: defaults < YAML file (--config) < command-line options.

One YAML file holds every port, the bind address, retention, the data dir and, under
``services.<name>``, per-service overrides: ``enabled``, ``binary`` (run this executable),
``version`` / ``sha256`` / ``url`` (what ``server install`` fetches).
"""

import dataclasses
import ipaddress
import os
import re
import socket
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from verl_rl_insight.contract import environment, paths
from verl_rl_insight.contract.errors import ConfigError
from verl_rl_insight.contract.naming import is_label_name, is_scraper_name
from verl_rl_insight.contract.wire_limits import MAX_FUTURE_S
from verl_rl_insight.server.settings.alertmanager import check_settings
from verl_rl_insight.server.settings.alerts import AlertSettings
from verl_rl_insight.server.settings.memory import DEFAULT_MEMORY_LIMIT_MB, MemoryShares

# a run's own targets at most (its labels' project and experiment_name): the largest job one hub
# holds, 16,384 GPUs as 2,048 nodes of 8, registers a rollout replica per node (2,048) and its
# TransferQueue endpoint; 64 more for other endpoints of its own (stores/targets.py)
MAX_TARGETS_PER_RUN = 2_048 + 64

# a mapping of the YAML config as yaml.safe_load gives it: checked key by key where it is read, or
# passed through in the syntax of the service that reads it (Alertmanager, Prometheus)
YamlMapping = dict[str, Any]
ServiceSection = YamlMapping  # services.<name>: enabled, binary, version, sha256, url, ...

SERVICE_NAMES = ("prometheus", "alertmanager", "tempo", "grafana")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None)
        return True
    except (socket.gaierror, UnicodeError):
        return False


def check_http_url(name: str, value: object) -> None:
    """'' or an http(s) URL with a host; a ConfigError naming the setting otherwise."""
    if value == "":
        return
    parts = urllib.parse.urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an http:// or https:// URL with a host, got {value!r}")


# header names whose values are credentials
SECRET_HEADER = re.compile(r"auth|token|secret|password|key|cookie", re.IGNORECASE)


def check_remote_write(entries: object) -> None:
    """Prometheus' remote_write list as given (its own syntax, passed through): a ConfigError naming
    the entry when it is not a list of mappings with an http(s) url."""
    if not isinstance(entries, list):
        raise ConfigError("remote_write must be a list of {url: ..., ...} entries, as in prometheus.yml")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigError(f"remote_write[{i}] must be a mapping with a url, got {entry!r}")
        check_http_url(f"remote_write[{i}].url", entry.get("url"))
        headers = entry.get("headers") or {}
        for name in headers if isinstance(headers, dict) else ():
            if SECRET_HEADER.search(str(name)):
                raise ConfigError(
                    f"remote_write[{i}].headers.{name}: Prometheus shows header values in clear "
                    f"({paths.PROMETHEUS_CONFIG}); put the credential under authorization: {{credentials: ...}} "
                    "or basic_auth: {username: ..., password: ...}, which it shows as <secret>"
                )


def check_external_labels(labels: object) -> None:
    if not isinstance(labels, dict):
        raise ConfigError("external_labels must be a mapping of label name to value")
    for name, value in labels.items():
        if not is_label_name(name):
            raise ConfigError(f"external_labels: {name!r} is not a Prometheus label name")
        if not isinstance(value, str):
            raise ConfigError(f"external_labels.{name} must be a string, got {value!r}")


def default_home() -> Path:
    return Path(os.environ.get(environment.HOME, Path.home() / ".rl-insight"))


@dataclasses.dataclass
class ServerSettings:
    bind: str = "0.0.0.0"  # address every service listens on
    advertise_host: str = ""  # what trainers should use; found automatically when empty
    port: int = 18080  # metric hub and API
    prometheus_port: int = 9090
    tempo_port: int = 3200  # Tempo HTTP API (queries, /ready)
    tempo_grpc_port: int = 9095  # Tempo's internal gRPC server
    otlp_http_port: int = 4318  # OTLP/HTTP traces into Tempo
    otlp_grpc_port: int = 4317  # OTLP/gRPC traces into Tempo
    grafana_port: int = 3000
    alertmanager_port: int = 9093  # on loopback only; elsewhere through the hub's API
    scrape_interval_s: float = 5.0
    retention: str = "30d"  # Prometheus and Tempo
    data_dir: str = ""
    token: str = ""  # RL_INSIGHT_TOKEN; generated at the first start when empty (kept in secrets/hub-token, 0600)
    # no token, writes open to every local user: only named on the command line (--local-trust), on loopback
    local_trust: bool = False
    grafana_admin_user: str = "admin"
    grafana_admin_password: str = ""  # generated when empty (rl-insight server status --secrets)
    grafana_anonymous_viewer: bool = False
    # the server's one memory bound: the hub's latest values and history, the explorer's histories, ...
    # each part its share of it (settings/memory.py, memory_shares)
    memory_limit_mb: float = DEFAULT_MEMORY_LIMIT_MB
    max_series: int = 500_000  # the metric hub's series, all runs together
    max_targets_per_run: int = MAX_TARGETS_PER_RUN  # scrape targets one run may register (stores/targets.py)
    history_s: float = 600.0  # history every scraper has seen is dropped after this
    max_body_mb: float = 8  # one push request
    max_future_s: float = MAX_FUTURE_S  # a batch stamped further ahead of this server's clock is refused (400)
    timeline_settle_s: float = 15.0  # a step's timeline figures: this long after its span, or at the next step
    services: dict[str, ServiceSection] = dataclasses.field(default_factory=dict)
    # past one node: Prometheus' own remote_write entries ({url: ..., basic_auth: ..., ...}), passed
    # through, and labels that tell this monitor server's series apart in the shared store
    remote_write: list[YamlMapping] = dataclasses.field(default_factory=list)
    external_labels: dict[str, str] = dataclasses.field(default_factory=dict)
    otlp_endpoint: str = ""  # spans to an existing collector / distributed Tempo, announced to trainers
    tempo_query_url: str = ""  # that Tempo's query API, for Grafana's Tempo datasource
    alertmanager: YamlMapping = dataclasses.field(default_factory=dict)  # receivers, route, ...: Alertmanager's syntax
    # alert thresholds and the detectors' settings, set by name (settings/alerts.py); a mapping given
    # here is read into the typed section
    alerts: AlertSettings = dataclasses.field(default_factory=AlertSettings)
    # the verl keys (or families ending in /) a run validates under beyond verl's own names
    # (val-core/, val-aux/, val/, test_score/): the validation detectors follow these first
    validation_keys: list[str] = dataclasses.field(default_factory=list)
    # named scrapers whose history goes only once their store shows it: name -> that Prometheus'
    # base URL (its query API); the server's own Prometheus is always one
    confirm_scrapers: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.data_dir:
            self.data_dir = str(default_home() / "data")
        if not self.token:
            self.token = os.environ.get(environment.TOKEN, "")
        if not isinstance(self.alerts, AlertSettings):  # unknown keys are an error now, not at the first alert
            self.alerts = AlertSettings.from_mapping(self.alerts)
        if not isinstance(self.validation_keys, list) or not all(
            isinstance(k, str) and k for k in self.validation_keys
        ):
            raise ConfigError("validation_keys must be a list of verl keys (a family ends in /: val-aux/my_task/)")
        if not isinstance(self.services, dict):
            raise ConfigError("services must be a mapping of service name to settings")
        unknown = sorted(set(self.services) - set(SERVICE_NAMES))
        if unknown:
            raise ConfigError(f"unknown service(s) {', '.join(unknown)}; known: {', '.join(SERVICE_NAMES)}")
        if not isinstance(self.bind, str) or not _is_address(self.bind):
            raise ConfigError(
                f"bind {self.bind!r} is not an IP address or a host name this machine resolves "
                "(0.0.0.0: every interface, 127.0.0.1: this machine only)"
            )
        for name in (
            "memory_limit_mb",
            "max_series",
            "history_s",
            "max_body_mb",
            "scrape_interval_s",
            "timeline_settle_s",
            "max_future_s",
            "max_targets_per_run",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
                raise ConfigError(f"{name} must be a positive number, got {value!r}")

        check_settings(self.alertmanager)
        check_remote_write(self.remote_write)
        check_external_labels(self.external_labels)
        for name in ("otlp_endpoint", "tempo_query_url"):
            check_http_url(name, getattr(self, name))
        if not isinstance(self.confirm_scrapers, dict):
            raise ConfigError("confirm_scrapers must be a mapping of scraper name to its Prometheus' URL")
        for name, url in self.confirm_scrapers.items():
            if not is_scraper_name(name):
                raise ConfigError(f"confirm_scrapers: {name!r} is not a scraper name (1 to 64 of [a-zA-Z0-9_.:-])")
            check_http_url(f"confirm_scrapers.{name}", url)
        ports = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name.endswith("port")}
        for name, value in ports.items():
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
                raise ConfigError(f"{name} must be a port number (1-65535), got {value!r}")
        taken: dict[int, str] = {}
        for name, value in ports.items():
            if value in taken:
                raise ConfigError(f"{name} and {taken[value]} are both {value}")
            taken[value] = name

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser()

    @property
    def memory_shares(self) -> MemoryShares:
        """``memory_limit_mb`` divided between the parts that hold memory under it."""
        return MemoryShares.of_mb(self.memory_limit_mb)

    def as_mapping(self) -> YamlMapping:
        """The settings as a config file would give them, ``ServerSettings(**as_mapping())`` the same
        settings: how the server process is handed them (as JSON, through a pipe)."""
        return dataclasses.asdict(self) | {"alerts": self.alerts.as_mapping()}

    def service(self, name: str) -> ServiceSection:
        return dict(self.services.get(name) or {})

    def enabled(self, name: str) -> bool:
        return bool(self.service(name).get("enabled", True))

    @classmethod
    def load(cls, config_file: str | Path | None = None, **overrides: object) -> "ServerSettings":
        """Settings from a YAML file and keyword overrides (None values are ignored)."""
        values = {}
        if config_file:
            with open(config_file) as f:
                loaded = yaml.safe_load(f) or {}
            if not isinstance(loaded, dict):
                raise ConfigError(f"{config_file}: expected a mapping of settings")
            known = {f.name for f in dataclasses.fields(cls)} - {"local_trust"}
            if "local_trust" in loaded:
                raise ConfigError(
                    f"{config_file}: local_trust is not a setting of a file: name it on the command line "
                    "(rl-insight server start --local-trust), where whoever starts the server sees it"
                )
            unknown = sorted(set(loaded) - known)
            if unknown:
                raise ConfigError(
                    f"{config_file}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
                )
            values.update(loaded)
        disabled = overrides.pop("disable", None) or ()
        if not isinstance(disabled, (list, tuple)):
            raise ConfigError(f"disable must be a list of service names, got {disabled!r}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        if disabled:
            services = {k: dict(v or {}) for k, v in (values.get("services") or {}).items()}
            for name in disabled:
                services.setdefault(name, {})["enabled"] = False
            values["services"] = services
        return cls(**values)
