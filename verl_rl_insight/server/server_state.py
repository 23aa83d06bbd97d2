"""What the server writes of itself for the CLI (``server.json``: no secret in it, they stay in secrets/)."""

import json
import os
import time
from pathlib import Path

from verl_rl_insight.server.managed import alertmanager, prometheus, tempo
from verl_rl_insight.server.managed.supervisor import Service
from verl_rl_insight.server.ports import advertise_ip
from verl_rl_insight.server.settings.server import ServerSettings, default_home
from verl_rl_insight.server.stores.files import write_atomically


def state_path() -> Path:
    return Path(default_home()) / "server.json"


def hub_url(s: ServerSettings) -> str:
    return f"http://{advertise_ip(s)}:{s.port}"


def public_urls(s: ServerSettings) -> dict[str, str]:
    """Where people and trainers reach each service."""
    ip = advertise_ip(s)
    return {
        "prometheus": prometheus.url(s),  # loopback only, with a login (rl-insight server url --prometheus)
        "tempo": tempo.url(s),  # loopback only: no login of its own
        "otlp_http": f"http://{ip}:{s.otlp_http_port}",
        "otlp_grpc": f"{ip}:{s.otlp_grpc_port}",
        "grafana": f"http://{ip}:{s.grafana_port}",
        "alertmanager": alertmanager.url(s),
    }


def _redacted_settings(s: ServerSettings) -> dict[str, object]:
    return s.as_mapping() | {
        "token": "***" if s.token else "",
        "grafana_admin_password": "***",
        "remote_write": prometheus.redacted_remote_write(s.remote_write),
        "alertmanager": {"receivers": alertmanager.receiver_names(s)},
    }


def state_of(
    s: ServerSettings, services: dict[str, Service], missing: dict[str, list[str]], absent: set[str]
) -> dict[str, object]:
    ip = advertise_ip(s)
    return {
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "started": time.time(),
        "server_ip": ip,
        "hub_url": f"http://{ip}:{s.port}",
        "local_hub_url": f"http://{prometheus.connect_host(s.bind)}:{s.port}",
        "public_urls": public_urls(s),
        "alert_receivers": alertmanager.receiver_names(s),
        "services": {
            name: {"pid": svc.pid, "binary": svc.binary, "url": svc.url, "version": svc.version}
            for name, svc in services.items()
        },
        "missing": missing,
        "absent": sorted(absent),
        "token": bool(s.token),
        "local_trust": s.local_trust,
        "secrets_dir": str(s.data_path / "secrets"),
        "grafana_admin_user": s.grafana_admin_user,
        "grafana_anonymous_viewer": s.grafana_anonymous_viewer,
        "settings": _redacted_settings(s),
    }


def write_state(state: dict[str, object]) -> None:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(state, indent=2))  # no secret in it: they stay in secrets/
