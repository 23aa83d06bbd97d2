"""Tempo as a service of the rl-insight server: tempo.yaml (OTLP in on 4318/4317, local storage).

Tempo has no login of its own, and its spans hold prompts: it listens on loopback only, where
Grafana and the hub's span relay reach it (as Prometheus and Alertmanager do)."""

import re
from pathlib import Path

import yaml

from verl_rl_insight.server.managed.service import Links, ManagedService
from verl_rl_insight.server.settings.server import ServerSettings

HEALTH_PATH = "/ready"
HOST = "127.0.0.1"


def retention_hours(retention: str) -> str:
    """Prometheus-style retention (``30d``, ``12h``, ``2w``) as Tempo's hours string."""
    match = re.fullmatch(r"(\d+)([hdw])", str(retention).strip())
    if not match:
        raise ValueError(f"retention must look like 30d, 12h or 2w, got {retention!r}")
    hours = int(match.group(1)) * {"h": 1, "d": 24, "w": 168}[match.group(2)]
    return f"{hours}h"


def render_config(settings: ServerSettings) -> str:
    data = settings.data_path / "tempo"
    config = {
        "stream_over_http_enabled": True,
        "server": {
            "http_listen_address": HOST,
            "http_listen_port": settings.tempo_port,
            "grpc_listen_address": HOST,
            "grpc_listen_port": settings.tempo_grpc_port,
            "log_level": "info",
        },
        "distributor": {
            "receivers": {
                "otlp": {
                    "protocols": {
                        # this machine only: trainers send spans to the hub (token checked), which passes them on
                        "http": {"endpoint": f"{HOST}:{settings.otlp_http_port}"},
                        "grpc": {"endpoint": f"{HOST}:{settings.otlp_grpc_port}"},
                    }
                }
            }
        },
        "ingester": {"max_block_duration": "5m"},
        "compactor": {"compaction": {"block_retention": retention_hours(settings.retention)}},
        "storage": {
            "trace": {
                "backend": "local",
                "wal": {"path": str(data / "wal")},
                "local": {"path": str(data / "blocks")},
            }
        },
        "usage_report": {"reporting_enabled": False},
    }
    return yaml.safe_dump(config, sort_keys=False)


def url(settings: ServerSettings) -> str:
    return f"http://{HOST}:{settings.tempo_port}"


def command(binary: str, settings: ServerSettings, config_path: Path) -> list[str]:
    return [binary, f"-config.file={config_path}"]


def write_config(settings: ServerSettings, links: Links) -> Path:
    path = settings.data_path / "tempo.yaml"
    path.write_text(render_config(settings))
    return path


SERVICE = ManagedService("tempo", HEALTH_PATH, url, write_config, command)
