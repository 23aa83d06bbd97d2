"""Prometheus as a service of the rl-insight server: its config and its command line."""

import yaml

HEALTH_PATH = "/-/ready"


def connect_host(bind):
    """Where a local client reaches a service that listens on ``bind``."""
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind


def render_config(settings, rule_files=()):
    """prometheus.yml: the hub (keeping its labels and timestamps) and every registered target
    through http_sd, so a Prometheus of your own can use the same two jobs."""
    interval = f"{int(settings.scrape_interval_s * 1000)}ms"
    hub = f"{connect_host(settings.bind)}:{settings.port}"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {
                "job_name": "rl_insight_hub",
                "honor_labels": True,
                "honor_timestamps": True,
                "static_configs": [{"targets": [hub]}],
            },
            {
                # job, replica, engine, project, ... come from the registry as target labels
                "job_name": "rl_insight_targets",
                "http_sd_configs": [{"url": f"http://{hub}/api/v1/sd", "refresh_interval": interval}],
            },
        ],
    }
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
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
