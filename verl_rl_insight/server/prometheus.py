"""Prometheus as a service of the rl-insight server: its config and its command line."""

import yaml

HEALTH_PATH = "/-/ready"


def connect_host(bind):
    """Where a local client reaches a service that listens on ``bind``."""
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind


def scraper_name(settings):
    """The name this Prometheus gives itself at the hub (``/metrics?scraper=``): one per server."""
    return f"prometheus-{settings.prometheus_port}"


def render_config(settings, rule_files=(), token_file=None):
    """prometheus.yml: the hub (keeping its labels and timestamps, as a named scraper, with the
    token read from ``token_file``) and every registered target through http_sd, so a Prometheus
    of your own can use the same two jobs."""
    interval = f"{int(settings.scrape_interval_s * 1000)}ms"
    hub = f"{connect_host(settings.bind)}:{settings.port}"
    hub_job = {
        "job_name": "rl_insight_hub",
        "honor_labels": True,
        "honor_timestamps": True,
        "params": {"scraper": [scraper_name(settings)]},
        "static_configs": [{"targets": [hub]}],
    }
    if token_file is not None:
        hub_job["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            hub_job,
            {
                # job, replica, node, project, ... come from the registry as target labels
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
        # no --web.enable-lifecycle / --web.enable-admin-api: nobody can /-/quit or delete series
    ]
