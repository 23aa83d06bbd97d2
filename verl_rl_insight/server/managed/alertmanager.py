"""Alertmanager as a service of the rl-insight server: its config and its command line.

Receivers, routes and inhibit rules come from the server config's ``alertmanager:`` mapping in
Alertmanager's own syntax and are passed through. Without receivers, alerts are kept and shown
(``rl-insight alerts``, Alertmanager's UI) and nothing is sent. Alertmanager listens on loopback
only, and takes the login of credentials.py on every path (its ``--web.config.file``): a local
user without the server's files can neither silence an alert nor read the config's receivers
(``/api/v2/status``); people and scripts elsewhere go through the hub's ``/api/v1/alerts`` and
``/api/v1/silences``, where the token rules apply.
"""

from pathlib import Path

import yaml

from verl_rl_insight.contract import paths
from verl_rl_insight.server.managed.service import Links, ManagedService
from verl_rl_insight.server.settings.alertmanager import NO_RECEIVER, PASSED_THROUGH
from verl_rl_insight.server.settings.server import ServerSettings
from verl_rl_insight.server.stores import credentials
from verl_rl_insight.server.stores.files import write_atomically

HEALTH_PATH = paths.ALERTMANAGER_READY
HOST = "127.0.0.1"
DEFAULT_ROUTE = {
    "group_by": ["alertname", "project", "experiment_name"],
    "group_wait": "30s",
    "group_interval": "5m",
    "repeat_interval": "4h",
}


def receiver_names(settings: ServerSettings) -> list[str]:
    return [r["name"] for r in settings.alertmanager.get("receivers", [])]


def render_config(settings: ServerSettings) -> str:
    """alertmanager.yml: the user's sections as given; the top route sends to the first receiver
    unless it names one, grouped per run."""
    section = settings.alertmanager
    names = receiver_names(settings)
    config = {key: section[key] for key in PASSED_THROUGH if key in section and key not in ("route", "receivers")}
    config["route"] = {"receiver": names[0] if names else NO_RECEIVER, **DEFAULT_ROUTE, **section.get("route", {})}
    config["receivers"] = [{"name": NO_RECEIVER}, *section.get("receivers", [])]
    return yaml.safe_dump(config, sort_keys=False)


def url(settings: ServerSettings) -> str:
    return f"http://{HOST}:{settings.alertmanager_port}"


def command(binary: str, settings: ServerSettings, config_path: Path) -> list[str]:
    return [
        binary,
        f"--config.file={config_path}",
        f"--storage.path={settings.data_path / 'alertmanager'}",
        f"--web.listen-address={HOST}:{settings.alertmanager_port}",
        f"--web.config.file={credentials.web_config_file(settings.data_path, 'alertmanager')}",
        f"--web.external-url={url(settings)}",
        "--cluster.listen-address=",  # no gossip port: one Alertmanager per server
        "--data.maintenance-interval=1m",  # silences reach the disk within a minute
    ]


def write_config(settings: ServerSettings, links: Links) -> Path:
    """alertmanager.yml under the data dir, 0600: receivers hold webhook URLs and passwords."""
    path = settings.data_path / "alertmanager.yml"
    write_atomically(path, render_config(settings), mode=0o600)
    return path


SERVICE = ManagedService("alertmanager", HEALTH_PATH, url, write_config, command)
