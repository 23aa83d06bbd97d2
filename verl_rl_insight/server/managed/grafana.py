"""Grafana as a service of the rl-insight server: grafana.ini and provisioning.

Datasources have fixed uids so dashboards can name them: ``rl-insight-prometheus`` and
``rl-insight-tempo``. Dashboards are provisioned from the package (folder "RL-Insight"), so
an upgrade of verl-rl-insight brings its dashboards along.
"""

import configparser
import io
import os
from pathlib import Path

import yaml

from verl_rl_insight.dashboards import DASHBOARDS_DIR
from verl_rl_insight.server.managed import prometheus, tempo
from verl_rl_insight.server.managed.service import Links, ManagedService
from verl_rl_insight.server.settings.server import ServerSettings
from verl_rl_insight.server.stores import credentials
from verl_rl_insight.server.stores.files import write_atomically

HEALTH_PATH = "/api/health"
PROMETHEUS_UID = "rl-insight-prometheus"
TEMPO_UID = "rl-insight-tempo"
FOLDER = "RL-Insight"


def home_path(binary: str | Path) -> Path:
    """Grafana's --homepath for a binary: <home>/bin/grafana, or Debian's /usr/share/grafana."""
    home = Path(binary).resolve().parent.parent
    if (home / "conf" / "defaults.ini").exists():
        return home
    return Path("/usr/share/grafana")


def render_ini(settings: ServerSettings) -> str:
    data = settings.data_path / "grafana"
    ini = configparser.ConfigParser(interpolation=None)
    ini["server"] = {"http_addr": settings.bind, "http_port": str(settings.grafana_port)}
    ini["paths"] = {
        "data": str(data),
        "logs": str(settings.data_path / "logs" / "grafana"),
        "plugins": str(data / "plugins"),
        "provisioning": str(data / "provisioning"),
    }
    ini["security"] = {"admin_user": settings.grafana_admin_user, "admin_password": settings.grafana_admin_password}
    ini["auth.anonymous"] = {"enabled": "true" if settings.grafana_anonymous_viewer else "false", "org_role": "Viewer"}
    ini["analytics"] = {"reporting_enabled": "false", "check_for_updates": "false", "check_for_plugin_updates": "false"}
    ini["dashboards"] = {"default_home_dashboard_path": ""}
    out = io.StringIO()
    ini.write(out)
    return out.getvalue()


def prometheus_login(settings: ServerSettings) -> dict[str, bool | str | dict[str, str]]:
    """The datasource's login to the server's Prometheus (the provisioning file is 0600)."""
    login = credentials.service_login(settings.data_path, "prometheus")
    if login is None:
        return {}
    return {"basicAuth": True, "basicAuthUser": login[0], "secureJsonData": {"basicAuthPassword": login[1]}}


def render_datasources(settings: ServerSettings) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": 1,
            "datasources": [
                {
                    "name": "RL-Insight Prometheus",
                    "uid": PROMETHEUS_UID,
                    "type": "prometheus",
                    "access": "proxy",
                    "url": prometheus.url(settings),
                    "isDefault": True,
                    "editable": False,
                    "jsonData": {"timeInterval": f"{int(settings.scrape_interval_s)}s", "manageAlerts": True},
                    **prometheus_login(settings),
                },
                {
                    "name": "RL-Insight Tempo",
                    "uid": TEMPO_UID,
                    "type": "tempo",
                    "access": "proxy",
                    "url": settings.tempo_query_url or tempo.url(settings),
                    "editable": False,
                    "jsonData": {"nodeGraph": {"enabled": True}, "tracesToMetrics": {"datasourceUid": PROMETHEUS_UID}},
                },
            ],
        },
        sort_keys=False,
    )


def render_dashboard_provider(dashboards_dir: Path = DASHBOARDS_DIR) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": 1,
            "providers": [
                {
                    "name": "rl-insight",
                    "folder": FOLDER,
                    "type": "file",
                    "disableDeletion": True,
                    "allowUiUpdates": False,
                    "updateIntervalSeconds": 30,
                    "options": {"path": str(dashboards_dir)},
                }
            ],
        },
        sort_keys=False,
    )


def write_files(settings: ServerSettings, links: Links | None = None) -> Path:
    """Render grafana.ini and the provisioning tree under the data dir; returns the ini path."""
    data = settings.data_path / "grafana"
    for sub in (
        "provisioning/datasources",
        "provisioning/dashboards",
        "provisioning/plugins",
        "provisioning/alerting",
        "plugins",
    ):
        (data / sub).mkdir(parents=True, exist_ok=True)
    (settings.data_path / "logs" / "grafana").mkdir(parents=True, exist_ok=True)
    # 0600: holds the Prometheus login
    write_atomically(data / "provisioning" / "datasources" / "rl-insight.yaml", render_datasources(settings))
    (data / "provisioning" / "dashboards" / "rl-insight.yaml").write_text(render_dashboard_provider())
    ini_path = settings.data_path / "grafana.ini"
    ini_path.write_text(render_ini(settings))
    os.chmod(ini_path, 0o600)  # holds the admin password
    return ini_path


def command(binary: str, settings: ServerSettings, config_path: Path) -> list[str]:
    home = home_path(binary)
    name = Path(binary).name
    if name == "grafana":
        return [binary, "server", f"--homepath={home}", f"--config={config_path}"]
    return [binary, f"--homepath={home}", f"--config={config_path}"]  # grafana-server


def url(settings: ServerSettings) -> str:
    return f"http://{prometheus.connect_host(settings.bind)}:{settings.grafana_port}"


SERVICE = ManagedService("grafana", HEALTH_PATH, url, write_files, command)
