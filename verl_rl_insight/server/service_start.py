"""Starting one managed service (Prometheus, Alertmanager, Tempo, Grafana): its binary found, its
config written (0600 where it may hold credentials), its process started under the supervisor's eye."""

import dataclasses
from pathlib import Path

from verl_rl_insight.server.managed import alert_rules, alertmanager, binaries, grafana, prometheus, tempo
from verl_rl_insight.server.managed.supervisor import Service
from verl_rl_insight.server.settings import ServerSettings
from verl_rl_insight.server.stores import credentials
from verl_rl_insight.server.stores.files import write_atomically

MODULES = {"prometheus": prometheus, "alertmanager": alertmanager, "tempo": tempo, "grafana": grafana}
Login = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class NotInstalled:
    """A service that cannot start: what is missing and the command that fixes it."""

    what: str
    fix: str
    absent: bool  # no binary at all (a state, when the service is optional), not a configured one broken


def fix_command(name: str) -> str:
    if name in ("prometheus", "alertmanager"):
        package = "prometheus" if name == "prometheus" else "prometheus-alertmanager"
        return f"rl-insight server install {name}   (or: apt-get install -y {package})"
    return f"rl-insight server install {name} (offline: --local-archive DIR)"


def write_config(s: ServerSettings, name: str, links_to: dict[str, str]) -> Path:
    """The service's config file under the data dir; ``links_to``: the public URLs the alerts link to."""
    if name == "grafana":
        return Path(grafana.write_files(s))
    if name == "prometheus":
        config_path = Path(s.data_path) / "prometheus.yml"
        token_file = credentials.secrets_dir(s.data_path) / credentials.TOKEN_FILE if s.token else None
        # 0600: remote_write entries may carry credentials
        alertmanager_url = alertmanager.url(s) if s.enabled("alertmanager") else None
        rules = [alert_rules.write(s, links_to=links_to)]
        config = prometheus.render_config(s, rule_files=rules, token_file=token_file, alertmanager=alertmanager_url)
        write_atomically(config_path, config, mode=0o600)
        return config_path
    if name == "alertmanager":  # 0600: receivers hold webhook URLs and passwords
        config_path = Path(s.data_path) / "alertmanager.yml"
        write_atomically(config_path, alertmanager.render_config(s), mode=0o600)
        return config_path
    config_path = Path(s.data_path) / "tempo.yaml"
    config_path.write_text(tempo.render_config(s))
    return config_path


def service_url(s: ServerSettings, name: str) -> str:
    urls = {"alertmanager": alertmanager.url(s), "prometheus": prometheus.url(s), "tempo": tempo.url(s)}
    port = {
        "prometheus": s.prometheus_port,
        "tempo": s.tempo_port,
        "grafana": s.grafana_port,
        "alertmanager": s.alertmanager_port,
    }[name]
    return urls.get(name, f"http://{prometheus.connect_host(s.bind)}:{port}")


def start_service(
    s: ServerSettings, name: str, logins: dict[str, Login], links_to: dict[str, str]
) -> Service | NotInstalled:
    """Service ``name`` started (not yet ready), or what keeps it from starting."""
    configured = s.service(name).get("binary")
    found = binaries.resolve(name, configured)
    if found is None:
        what = f"configured binary {configured} is not executable" if configured else f"{name} is not installed"
        return NotInstalled(what, fix_command(name), absent=not configured)
    config_path = write_config(s, name, links_to)
    url = service_url(s, name)
    service = Service(
        name,
        MODULES[name].command(found["binary"], s, config_path),
        s.data_path / "logs" / f"{name}.log",
        ready_url=url + MODULES[name].HEALTH_PATH,
        url=url,
        version=found.get("version"),
        binary=found["binary"],
        data_dir=s.data_path / name,
        cwd=str(s.data_path),
        login=logins.get(name),
    )
    service.start()
    return service
