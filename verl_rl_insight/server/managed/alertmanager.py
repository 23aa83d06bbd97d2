"""Alertmanager as a service of the rl-insight server: its config and its command line.

Receivers, routes and inhibit rules come from the server config's ``alertmanager:`` mapping in
Alertmanager's own syntax and are passed through. Without receivers, alerts are kept and shown
(``rl-insight alerts``, Alertmanager's UI) and nothing is sent. Alertmanager listens on loopback
only, and takes the login of credentials.py on every path (its ``--web.config.file``): a local
user without the server's files can neither silence an alert nor read the config's receivers
(``/api/v2/status``); people and scripts elsewhere go through the hub's ``/api/v1/alerts`` and
``/api/v1/silences``, where the token rules apply.
"""

from typing import Any

import yaml

from verl_rl_insight.server.settings import ServerSettings
from verl_rl_insight.server.stores import credentials

HEALTH_PATH = "/-/ready"
HOST = "127.0.0.1"
NO_RECEIVER = "rl-insight-none"  # where alerts go when no receiver is configured
PASSED_THROUGH = ("global", "route", "receivers", "inhibit_rules", "time_intervals", "mute_time_intervals", "templates")
DEFAULT_ROUTE = {
    "group_by": ["alertname", "project", "experiment_name"],
    "group_wait": "30s",
    "group_interval": "5m",
    "repeat_interval": "4h",
}


def check_settings(section: Any) -> Any:
    """The ``alertmanager:`` mapping: a ValueError naming the key that is wrong."""
    if not isinstance(section, dict):
        raise ValueError("alertmanager must be a mapping (receivers, route, ... in Alertmanager's syntax)")
    unknown = sorted(set(section) - set(PASSED_THROUGH))
    if unknown:
        raise ValueError(
            f"alertmanager: unknown key(s) {', '.join(map(str, unknown))}; known: {', '.join(PASSED_THROUGH)}"
        )
    receivers = section.get("receivers", [])
    if not isinstance(receivers, list):
        raise ValueError("alertmanager.receivers must be a list of receivers ({name: ..., webhook_configs: ...})")
    names = set()
    for i, receiver in enumerate(receivers):
        name = receiver.get("name") if isinstance(receiver, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"alertmanager.receivers[{i}] needs a name")
        if name in names or name == NO_RECEIVER:
            raise ValueError(
                f"alertmanager.receivers[{i}]: the name {name!r} is " + ("taken twice" if name in names else "reserved")
            )
        names.add(name)
    if not isinstance(section.get("route", {}), dict):
        raise ValueError("alertmanager.route must be a mapping (receiver, group_by, routes, ...)")


def receiver_names(settings: ServerSettings) -> Any:
    return [r["name"] for r in settings.alertmanager.get("receivers", [])]


def render_config(settings: ServerSettings) -> Any:
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


def command(binary: Any, settings: ServerSettings, config_path: Any) -> Any:
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
