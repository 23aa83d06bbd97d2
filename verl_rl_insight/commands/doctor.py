"""``rl-insight doctor``: the "dashboard shows no data" checklist, automated.

Each check prints one line, ok or PROBLEM, and for a problem the fix. Exit code 1 when any
check found a problem. Hydra overrides after ``--`` are checked as the training job would see
them (``rl-insight doctor -- actor_rollout_ref.rollout.disable_log_stats=True``).
"""

import contextlib
import email.utils
import json
import logging
import os
import sys
import time
import urllib.parse
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

from verl_rl_insight.commands.printable import printable
from verl_rl_insight.contract import environment, server_url
from verl_rl_insight.contract.http_client import HttpClient, Unreachable

SUPPORTED_VERL = ((0, 6), (0, 10))  # 0.6 <= verl < 0.10


class Report:
    """The checklist's lines; what a check shows of a server's answer is made printable here."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.problems = 0

    def ok(self, what: Any, detail: str = "") -> None:
        print(printable(f"ok       {what}" + (f": {detail}" if detail else "")), file=self.out)

    def problem(self, what: Any, detail: Any, fix: Any) -> None:
        self.problems += 1
        print(printable(f"PROBLEM  {what}: {detail}"), printable(f"         fix: {fix}"), sep="\n", file=self.out)

    def skip(self, what: Any, why: Any) -> None:
        print(printable(f"skipped  {what}: {why}"), file=self.out)


@contextlib.contextmanager
def third_party_quiet() -> Iterator[None]:
    """No log record or Python warning of WARNING or below while the block runs (verl, Hydra and Ray
    log theirs on import: "No supported accelerator detected"); doctor's own lines are printed, not logged."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(before)


def fetch(url: str, method: str = "GET", body: Any = None, token: str | None = None, timeout: int = 5) -> Any:
    """(status, headers, body) or (None, None, error text)."""
    try:
        reply = HttpClient(token).request(method, url, data=body, timeout_s=timeout)
    except Unreachable as exc:
        return None, None, str(exc)
    return reply.status, reply.headers, reply.body


def check_server(report: Report, url: str, token: str | None) -> bool:
    status, headers, body = fetch(url + "/-/ready")
    if status != 200:
        report.problem(
            "server reachable",
            f"{url} does not answer ({body if status is None else status})",
            "rl-insight server start --detach on the monitor node; check firewalls and the address",
        )
        return False
    report.ok("server reachable", url)
    status, _, body = fetch(url + "/api/v1/push", "POST", json.dumps({"batches": []}).encode(), token)
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
        report.problem("token", f"a test push got HTTP {status}: {body[:200]!r}", "see the server log")
    server_date = headers.get("Date") if headers else None
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


def check_services(report: Report, url: str) -> Any:
    from verl_rl_insight.commands.server import control
    from verl_rl_insight.server.managed.releases import OPTIONAL_SERVICES

    status, _, body = fetch(url + "/api/v1/services")
    services = json.loads(body)["services"] if status == 200 else {}
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


def check_targets(report: Report, prometheus_url: Any, wait_s: float = 10.0) -> None:
    deadline = time.monotonic() + wait_s  # a server started a moment ago: its first scrapes are coming
    while True:
        status, _, body = fetch(prometheus_url + "/api/v1/targets")
        if status == 401:
            report.skip("Prometheus targets", "Prometheus takes its login, which only the server's user may read")
            return
        if status != 200:
            report.skip("Prometheus targets", "Prometheus does not answer")
            return
        targets = json.loads(body)["data"]["activeTargets"]
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


def prom_vector(prometheus_url: Any, promql: str) -> Any:
    """{labels tuple: value} of an instant query, or None when Prometheus does not answer."""
    status, _, body = fetch(prometheus_url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    if status != 200:
        return None
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in json.loads(body)["data"]["result"]}


def check_remote_write(report: Report, prometheus_url: Any) -> None:
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


def check_provisioning(report: Report, state: dict[str, Any]) -> None:
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


def _url_fix(url: str, needs_token: bool, server_here: bool = False) -> str:
    bare = url or "http://<server-ip>:18080"
    if server_here and needs_token:  # works when pasted, and this report (often pasted on) holds no token
        return 'export RL_INSIGHT_SERVER_URL="$(rl-insight server url)"'
    if not needs_token:
        return f"export RL_INSIGHT_SERVER_URL={bare}"
    scheme, _, rest = bare.partition("://")  # the URL carries the token; this report (often pasted) never shows it
    return (
        f"export RL_INSIGHT_SERVER_URL={scheme}://rl-insight:<token>@{rest}   (the line `rl-insight server start` "
        "printed; `rl-insight server status --secrets` shows it with the token)"
    )


def check_environment(report: Report, url: str, needs_token: bool = False, server_here: bool = False) -> None:
    if os.environ.get(environment.SERVER_URL):
        report.ok("RL_INSIGHT_SERVER_URL", server_url.redact(os.environ[environment.SERVER_URL]))
    else:
        report.problem(
            "RL_INSIGHT_SERVER_URL",
            "not set in this shell: trainers would send nothing",
            _url_fix(url, needs_token, server_here),
        )
    try:
        import verl
    except ImportError:
        report.problem("verl", "not importable in this Python", "pip install verl (0.6 to 0.9.x)")
        return
    version = tuple(int(p) for p in verl.__version__.split(".")[:2] if p.isdigit())
    if SUPPORTED_VERL[0] <= version < SUPPORTED_VERL[1]:
        report.ok("verl version", verl.__version__)
    else:
        report.problem("verl version", f"{verl.__version__} is outside 0.6 to 0.9.x", "use a supported verl")
    import verl.utils.tracking as tracking

    if "rl_insight" in tracking.Tracking.supported_backend and hasattr(tracking.Tracking.__init__, "__wrapped__"):
        report.ok("patches active", "Tracking accepts rl_insight in this Python environment")
    else:
        report.problem(
            "patches active",
            "verl's Tracking is not patched here",
            "unset VERL_RL_INSIGHT_AUTOLOAD=0, or run the job with rl-insight run -- ...",
        )
    try:
        import verl.trainer.main_ppo as main_ppo

        quiet = logging.getLogger("verl_rl_insight")
        quiet.disabled = True  # no run is named here, so no credential is made: that is not news
        try:
            env = main_ppo.get_ppo_ray_runtime_env()["env_vars"]
        finally:
            quiet.disabled = False
    except Exception as exc:
        report.skip("Ray workers", f"verl.trainer.main_ppo does not import here ({exc})")
        return
    ours = server_url.without_credentials(os.environ.get(environment.SERVER_URL) or "")
    if ours and env.get(environment.SERVER_URL) == ours:
        report.ok(
            "Ray workers", "RL_INSIGHT_* reach them through verl's runtime_env, with a run credential, not the token"
        )
    elif os.environ.get(environment.SERVER_URL):
        report.problem(
            "Ray workers",
            "RL_INSIGHT_SERVER_URL would not reach them",
            "check that verl.trainer.main_ppo is patched (patches active above)",
        )


def check_overrides(report: Report, overrides: Any) -> None:
    if not overrides:
        report.skip("trainer config", "no Hydra overrides given (rl-insight doctor -- <your overrides>)")
        return
    import verl.trainer.main_ppo as main_ppo
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(
        config_dir=os.path.join(os.path.dirname(main_ppo.__file__), "config"), version_base=None
    ):
        config = compose(config_name="ppo_trainer", overrides=list(overrides))
    loggers = config.trainer.logger
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    if "rl_insight" in loggers:
        report.ok("trainer.logger", str(loggers))
    else:
        report.problem("trainer.logger", f"{loggers} has no rl_insight", 'trainer.logger=\'["console","rl_insight"]\'')
    if config.actor_rollout_ref.rollout.disable_log_stats:
        report.problem(
            "disable_log_stats",
            "True: vLLM / SGLang serve no engine metrics",
            "actor_rollout_ref.rollout.disable_log_stats=False",
        )
    else:
        report.ok("disable_log_stats", "False: engine metrics are served")
    tq = config.get("transfer_queue") or {}
    if tq.get("enable") and not (tq.get("metrics") or {}).get("enabled"):
        report.problem(
            "transfer_queue.metrics.enabled",
            "TransferQueue is on but its metrics are off",
            "transfer_queue.metrics.enabled=True",
        )
    else:
        report.ok("transfer_queue.metrics.enabled", str((tq.get("metrics") or {}).get("enabled", False)))


def check_samples(report: Report, url: str, project: str | None, experiment: str | None) -> None:
    status, _, body = fetch(url + "/api/v1/streams")
    streams = json.loads(body)["streams"] if status == 200 else []
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


def run(
    server: str | None = None,
    project: str | None = None,
    experiment: str | None = None,
    overrides: Any = (),
    out: TextIO = sys.stdout,
) -> Any:
    from verl_rl_insight.commands.server import control

    report = Report(out)
    state = control.read_state(out=out)
    raw = server or os.environ.get(environment.SERVER_URL) or ""
    if not raw and state:
        raw = control.trainer_url(state, local=True)
    url, url_token = server_url.split(raw.rstrip("/")) if raw else ("", None)
    token = os.environ.get(environment.TOKEN) or url_token
    reachable = bool(url) and check_server(report, url, token)
    if not url:
        report.problem(
            "server reachable",
            "no server: RL_INSIGHT_SERVER_URL is unset and none runs here",
            "rl-insight server start --detach, then export the line it prints",
        )
    if reachable:
        services = check_services(report, url)
        status, _, body = fetch(url + "/api/v1/info")
        info = json.loads(body) if status == 200 else {}
        if "prometheus" in info.get("services", ()):
            from verl_rl_insight.commands.server.control import with_login

            prometheus = with_login(info["prometheus"])  # the login of the server here, when this user may read it
            check_targets(report, prometheus)
            check_remote_write(report, prometheus)
        check_samples(report, url, project, experiment)
    grafana = services.get("grafana") if reachable else None
    if grafana is not None and grafana.get("missing") and control.optional_absent("grafana", grafana):
        report.skip(
            "Grafana provisioning", "no Grafana here (see above); rl-insight dashboards export DIR for your own"
        )
    else:
        check_provisioning(report, state)
    with third_party_quiet():  # importing verl logs its platform warnings: not a check's finding
        check_environment(
            report, url, needs_token=bool(token or (state and state.get("token"))), server_here=bool(state)
        )
        check_overrides(report, overrides)
    print(f"\n{report.problems} problem(s)" if report.problems else "\nall checks passed", file=out)
    return 1 if report.problems else 0
