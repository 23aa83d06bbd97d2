"""Prometheus as a service of the rl-insight server: its config and its command line."""

import shutil

import yaml


def find_binary():
    """The prometheus executable on PATH (the Debian package puts it there), or None."""
    return shutil.which("prometheus")


def connect_host(bind):
    """Where a local client reaches a service that listens on ``bind``."""
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind


def render_config(settings):
    """prometheus.yml: scrape the hub, keeping the labels (and timestamps) it exposes."""
    interval = f"{int(settings.scrape_interval_s * 1000)}ms"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{
            "job_name": "rl_insight_hub",
            "honor_labels": True,
            "honor_timestamps": True,
            "static_configs": [{"targets": [f"{connect_host(settings.bind)}:{settings.port}"]}],
        }],
    }
    return yaml.safe_dump(config, sort_keys=False)


def command(binary, settings, config_path):
    data = settings.data_path / "prometheus"
    return [
        binary,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={data}",
        f"--storage.tsdb.retention.time={settings.retention}",
        f"--web.listen-address={settings.bind}:{settings.prometheus_port}",
        "--web.enable-lifecycle",
    ]
