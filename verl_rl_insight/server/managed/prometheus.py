"""Prometheus as a service of the rl-insight server: its config and its command line."""

import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from verl_rl_insight.contract import paths, server_url
from verl_rl_insight.server.managed import alert_rules, alertmanager
from verl_rl_insight.server.managed.service import Links, ManagedService
from verl_rl_insight.server.settings.prometheus_jobs import HUB_JOB, PROMETHEUS_JOB, TARGETS_JOB
from verl_rl_insight.server.settings.server import ServerSettings, YamlMapping
from verl_rl_insight.server.stores import credentials
from verl_rl_insight.server.stores.files import write_atomically

# remote_write keys whose values are secrets: never in server.json or a log
SECRET_KEYS = ("basic_auth", "authorization", "bearer_token", "oauth2", "sigv4", "azuread", "headers")

HEALTH_PATH = paths.PROMETHEUS_READY

# Prometheus listens on loopback only: Grafana and the hub reach it here; nobody elsewhere reads a
# run, its config (remote_write secrets) or its admin API; a local user without the server's
# files neither: every request takes the login of credentials.py (its --web.config.file)
LISTEN = "127.0.0.1"


def connect_host(bind: str) -> str:
    """Where a local client reaches a service that listens on ``bind``."""
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind


def url(settings: ServerSettings) -> str:
    return f"http://{LISTEN}:{settings.prometheus_port}"


def login_url(settings: ServerSettings) -> str:
    """``url`` with the login (``http://rl-insight:<password>@127.0.0.1:9090``) for a user who may
    read the server's files; the bare ``url`` for another."""
    login = credentials.service_login(settings.data_path, "prometheus")
    return server_url.with_user(url(settings), *login) if login else url(settings)


def basic_auth(settings: ServerSettings, service: str) -> dict[str, str]:
    """prometheus.yml's login to ``service`` of this server: the password read from its 0600 file."""
    return {
        "username": credentials.SERVICE_USER,
        "password_file": str(credentials.password_file(settings.data_path, service)),
    }


def scraper_name(settings: ServerSettings) -> str:
    """The name this Prometheus gives itself at the hub (``/metrics?scraper=``): one per server."""
    return f"prometheus-{settings.prometheus_port}"


def redacted_remote_write(entries: Sequence[YamlMapping]) -> list[YamlMapping]:
    """What may be shown of remote_write: each entry's url (without credentials) and name."""
    return [
        {
            "url": server_url.without_credentials(e["url"]),
            **({"name": e["name"]} if "name" in e else {}),
            **({"secrets": sorted(k for k in e if k in SECRET_KEYS)} if any(k in e for k in SECRET_KEYS) else {}),
        }
        for e in entries
    ]


def render_config(
    settings: ServerSettings,
    rule_files: Sequence[Path] = (),
    token_file: Path | None = None,
    alertmanager: str | None = None,
) -> str:
    """prometheus.yml: the hub (keeping its labels and timestamps, as a named scraper, with the
    token read from ``token_file``) and every registered target through http_sd, so a Prometheus
    of your own can use the same two jobs."""
    interval = f"{int(settings.scrape_interval_s * 1000)}ms"
    hub = f"{connect_host(settings.bind)}:{settings.port}"
    hub_job = {
        "job_name": HUB_JOB,
        "honor_labels": True,
        "honor_timestamps": True,
        "params": {"scraper": [scraper_name(settings)]},
        "static_configs": [{"targets": [hub]}],
    }
    if token_file is not None:
        hub_job["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            hub_job,
            {
                # job, replica, node, project, ... come from the registry as target labels
                "job_name": TARGETS_JOB,
                "http_sd_configs": [{"url": f"http://{hub}{paths.SERVICE_DISCOVERY}", "refresh_interval": interval}],
            },
        ],
    }
    # a scrape the store did not get is sent again with its own timestamps, behind newer samples
    # (metrics/delivery.py): the out-of-order window takes it, for as long as the hub holds history
    config["storage"] = {"tsdb": {"out_of_order_time_window": f"{int(settings.history_s) + 60}s"}}
    if settings.external_labels:
        config["global"]["external_labels"] = dict(settings.external_labels)
    if settings.remote_write:
        config["remote_write"] = [dict(entry) for entry in settings.remote_write]
        # Prometheus' own remote-write figures, for `rl-insight doctor` here and the store's users there
        config["scrape_configs"].append(
            {
                "job_name": PROMETHEUS_JOB,
                "static_configs": [{"targets": [f"{LISTEN}:{settings.prometheus_port}"]}],
                "basic_auth": basic_auth(settings, "prometheus"),
                "metric_relabel_configs": [
                    {"source_labels": ["__name__"], "regex": "prometheus_remote_storage_.*", "action": "keep"}
                ],
            }
        )
    if alertmanager:
        host = urllib.parse.urlsplit(alertmanager).netloc
        config["alerting"] = {
            "alertmanagers": [
                {"static_configs": [{"targets": [host]}], "basic_auth": basic_auth(settings, "alertmanager")}
            ]
        }
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    return yaml.safe_dump(config, sort_keys=False)


def command(binary: str, settings: ServerSettings, config_path: Path) -> list[str]:
    data = settings.data_path / "prometheus"
    return [
        binary,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={data}",
        f"--storage.tsdb.retention.time={settings.retention}",
        f"--web.listen-address={LISTEN}:{settings.prometheus_port}",
        f"--web.config.file={credentials.web_config_file(settings.data_path, 'prometheus')}",
        # no --web.enable-lifecycle: nobody can /-/quit; the admin API (`runs delete` deletes a
        # run's series) takes the login like every other path
        "--web.enable-admin-api",
    ]


def write_config(settings: ServerSettings, links: Links) -> Path:
    """prometheus.yml and its rule file under the data dir (0600: remote_write entries may carry
    credentials); the token for the hub's named scrape is read from its own 0600 file."""
    path = settings.data_path / "prometheus.yml"
    token_file = credentials.secrets_dir(settings.data_path) / credentials.TOKEN_FILE if settings.token else None
    text = render_config(
        settings,
        rule_files=[alert_rules.write(settings, links_to=links)],
        token_file=token_file,
        alertmanager=alertmanager.url(settings) if settings.enabled("alertmanager") else None,
    )
    write_atomically(path, text, mode=0o600)
    return path


SERVICE = ManagedService("prometheus", HEALTH_PATH, url, write_config, command)
