"""The checks against the server: reachable, the token, the clock, its services, Prometheus' targets and
remote_write, Grafana's provisioning, and the run's recent samples at the hub."""

import email.utils
import json
import time
from typing import Any

from verl_rl_insight.commands import http_fetch
from verl_rl_insight.commands.doctor.report import Report
from verl_rl_insight.contract import paths, server_url


def check_server(report: Report, url: str, token: str | None) -> bool:
    try:
        headers = http_fetch.fetch_ok(url + paths.READY, timeout_s=5).headers
    except http_fetch.NoAnswer as exc:
        report.problem(
            "server reachable",
            f"{url} does not answer ({exc if exc.status is None else exc.status})",
            "rl-insight server start --detach on the monitor node; check firewalls and the address",
        )
        return False
    report.ok("server reachable", url)
    try:
        push = http_fetch.fetch("POST", url + paths.PUSH, token=token, body=json.dumps({"batches": []}), timeout_s=5)
        status, said = push.status, push.body[:200]
    except http_fetch.NoAnswer as exc:
        status, said = None, str(exc).encode()
    if status == 401:
        report.problem(
            "token",
            "the server requires a token and " + ("the one given is wrong" if token else "none was given"),
            "export the RL_INSIGHT_SERVER_URL line `rl-insight server start` printed (it carries the "
            "token; `rl-insight server status --secrets` on the server shows it again)",
        )
    elif status == 200:
        report.ok("token", "pushes are accepted" + (" (with the token)" if token else ""))
    else:
        report.problem("token", f"a test push got HTTP {status}: {said!r}", "see the server log")
    server_date = headers.get("Date")
    if server_date:
        skew = time.time() - email.utils.parsedate_to_datetime(server_date).timestamp()
        if abs(skew) > 2.5:
            report.problem(
                "clock skew",
                f"this machine is {skew:+.1f} s off the server",
                "sync clocks (chrony / ntp): replayed steps carry the trainer's time",
            )
        else:
            report.ok("clock skew", f"{skew:+.1f} s")
    return True


def check_services(report: Report, url: str) -> dict[str, Any]:
    from verl_rl_insight.commands.server import control
    from verl_rl_insight.server.managed.releases import OPTIONAL_SERVICES

    try:
        services: dict[str, Any] = http_fetch.fetch_json(url + paths.SERVICES, timeout_s=5)["services"]
    except http_fetch.NoAnswer:
        services = {}
    for name in ("prometheus", "alertmanager", "tempo", "grafana"):
        svc = services.get(name)
        if svc is None and name == "alertmanager" and services:
            report.skip("service alertmanager", "turned off: alerts fire in Prometheus and reach nobody")
        elif svc is None:
            report.problem(
                f"service {name}",
                "not run by this server",
                f"rl-insight server install {name}, then restart the server",
            )
        elif svc.get("missing") and control.optional_absent(name, svc):
            report.skip(f"service {name}", f"not installed: {OPTIONAL_SERVICES[name]}; to add it: {svc.get('fix')}")
        elif svc.get("missing"):
            report.problem(f"service {name}", svc["missing"], svc.get("fix") or "see the server log")
        elif not svc.get("healthy"):
            report.problem(
                f"service {name}",
                f"pid {svc.get('pid')} is not healthy ({svc.get('restarts')} restarts)",
                f"see {name}.log under the server's data dir",
            )
        else:
            report.ok(f"service {name}", f"{svc.get('url')} (restarts: {svc.get('restarts')})")
    return services


def check_targets(report: Report, prometheus_url: str, wait_s: float = 10.0) -> None:
    deadline = time.monotonic() + wait_s  # a server started a moment ago: its first scrapes are coming
    while True:
        try:
            targets = http_fetch.fetch_json(prometheus_url + paths.PROMETHEUS_TARGETS, timeout_s=5)["data"][
                "activeTargets"
            ]
        except http_fetch.NoAnswer as exc:
            if exc.status == 401:
                report.skip("Prometheus targets", "Prometheus takes its login, which only the server's user may read")
            else:
                report.skip("Prometheus targets", "Prometheus does not answer")
            return
        if (targets and all(t["health"] != "unknown" for t in targets)) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    down = [t for t in targets if t["health"] != "up"]
    for t in down:
        report.problem(
            f"target {t['labels'].get('job')} {t['labels'].get('instance')}",
            f"down: {t.get('lastError') or 'no scrape yet'}",
            "is the process running and its port reachable from the server? "
            "(vLLM: disable_log_stats=False; SGLang: enable_metrics)",
        )
    if not targets:
        report.problem(
            "Prometheus targets",
            "Prometheus scrapes nothing yet",
            "wait one scrape interval; else check prometheus.yml under the server's data dir",
        )
    elif not down:
        report.ok("Prometheus targets", f"{len(targets)} up")


def prom_vector(prometheus_url: str, promql: str) -> dict[tuple[tuple[str, str], ...], float] | None:
    """{labels tuple: value} of an instant query, or None when Prometheus does not answer."""
    try:
        result = http_fetch.fetch_json(prometheus_url + paths.PROMETHEUS_QUERY, params={"query": promql}, timeout_s=5)
    except http_fetch.NoAnswer:
        return None
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result["data"]["result"]}


def check_remote_write(report: Report, prometheus_url: str) -> None:
    """Each remote_write queue of the server's Prometheus (its own figures, scraped as job
    rl_insight_prometheus): failing, retrying or falling behind is a problem."""

    job = '{job="rl_insight_prometheus"}'
    sent = prom_vector(prometheus_url, f"max by (remote_name, url) (prometheus_remote_storage_samples_total{job})")
    if not sent:
        return  # no remote_write configured (or not scraped yet)
    failed = (
        prom_vector(
            prometheus_url,
            f"max by (remote_name, url) (increase(prometheus_remote_storage_samples_failed_total{job}[5m]))",
        )
        or {}
    )
    retried = (
        prom_vector(
            prometheus_url,
            f"max by (remote_name, url) (increase(prometheus_remote_storage_samples_retried_total{job}[5m]))",
        )
        or {}
    )
    behind = (
        prom_vector(
            prometheus_url,
            f"max by (remote_name, url) (prometheus_remote_storage_highest_timestamp_"
            f"in_seconds{job} - ignoring(remote_name, url) group_right prometheus_remote_"
            f"storage_queue_highest_sent_timestamp_seconds{job})",
        )
        or {}
    )
    for key, total in sorted(sent.items()):
        labels = dict(key)
        what = f"remote write {labels.get('remote_name', '')}".rstrip()
        where = server_url.without_credentials(labels.get("url", "?"))
        lag = behind.get(key, 0.0)
        if failed.get(key, 0) > 0:
            report.problem(
                what,
                f"{failed[key]:.0f} samples to {where} failed in the last 5 min (refused: "
                "credentials, URL path or payload)",
                "see prometheus.log under the server's data dir "
                "and the store's own log; check remote_write in the server config",
            )
        elif retried.get(key, 0) > 0 or lag > 120:
            report.problem(
                what,
                f"{where} is {lag:.0f} s behind, {retried.get(key, 0):.0f} samples retried in the "
                "last 5 min (store down or too slow)",
                "check that the store answers from this machine; Prometheus keeps retrying from its WAL (about 2 h)",
            )
        else:
            report.ok(what, f"{where}: {total:.0f} samples sent, {lag:.0f} s behind")


def check_provisioning(report: Report, state: dict[str, Any] | None) -> None:
    data = state.get("settings", {}).get("data_dir") if state else None
    if not data:
        report.skip("Grafana provisioning", "the server is not on this machine")
        return
    from pathlib import Path

    from verl_rl_insight.dashboards import DASHBOARDS_DIR

    sources = Path(data) / "grafana" / "provisioning" / "datasources" / "rl-insight.yaml"
    text = sources.read_text() if sources.exists() else ""
    if "rl-insight-prometheus" in text and "rl-insight-tempo" in text:
        report.ok("datasources", f"provisioned in {sources}")
    else:
        report.problem(
            "datasources",
            f"{sources} is missing or lacks the rl-insight uids",
            "start the server with Grafana installed (rl-insight server install grafana)",
        )
    dashboards = sorted(p.name for p in DASHBOARDS_DIR.glob("*.json"))
    provider = Path(data) / "grafana" / "provisioning" / "dashboards" / "rl-insight.yaml"
    if provider.exists() and dashboards:
        report.ok("dashboards", f"{len(dashboards)} provisioned from {DASHBOARDS_DIR} (folder RL-Insight)")
    else:
        report.problem(
            "dashboards",
            "not provisioned",
            "start the server with Grafana, or rl-insight dashboards export DIR for your own Grafana",
        )


def check_samples(report: Report, url: str, project: str | None, experiment: str | None) -> None:
    try:
        streams = http_fetch.fetch_json(url + paths.STREAMS, timeout_s=5)["streams"]
    except http_fetch.NoAnswer:
        streams = []
    runs = [s for s in streams if "step" in s and s["step"] is not None]
    if not project:
        names = sorted({(s["labels"]["project"], s["labels"]["experiment_name"]) for s in runs})
        report.ok("recent samples", f"runs at the hub: {names}" if names else "no run has pushed yet")
        return
    mine = [
        s
        for s in runs
        if s["labels"].get("project") == project
        and (experiment is None or s["labels"].get("experiment_name") == experiment)
    ]
    if not mine:
        report.problem(
            "recent samples",
            f"nothing from project={project} experiment_name={experiment} at the hub",
            "is the job running with trainer.logger containing rl_insight and RL_INSIGHT_SERVER_URL set?",
        )
    elif min(s["idle_s"] for s in mine) > 600:
        report.problem(
            "recent samples",
            f"last push {min(s['idle_s'] for s in mine):.0f} s ago",
            "the job stalled, finished, or lost its connection to the server",
        )
    else:
        report.ok(
            "recent samples",
            f"step {max(s['step'] for s in mine)}, last push {min(s['idle_s'] for s in mine):.0f} s ago",
        )
