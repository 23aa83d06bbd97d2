"""Starting one managed service (Prometheus, Alertmanager, Tempo, Grafana): its binary found, its
config written (0600 where it may hold credentials), its process started under the supervisor's eye."""

import dataclasses

from verl_rl_insight.server.managed import binaries
from verl_rl_insight.server.managed.services import SERVICES
from verl_rl_insight.server.managed.supervisor import Service
from verl_rl_insight.server.settings.server import ServerSettings

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


def start_service(
    s: ServerSettings, name: str, logins: dict[str, Login], links_to: dict[str, str]
) -> Service | NotInstalled:
    """Service ``name`` started (not yet ready), or what keeps it from starting."""
    configured = s.service(name).get("binary")
    found = binaries.resolve(name, str(configured) if configured else None)
    if found is None:
        what = f"configured binary {configured} is not executable" if configured else f"{name} is not installed"
        return NotInstalled(what, fix_command(name), absent=not configured)
    spec = SERVICES[name]
    config_path = spec.write_config(s, links_to)
    service = Service(
        name,
        spec.command(found["binary"], s, config_path),
        s.data_path / "logs" / f"{name}.log",
        ready_url=spec.ready_url(s),
        url=spec.url(s),
        version=found.get("version"),
        binary=found["binary"],
        data_dir=s.data_path / name,
        cwd=str(s.data_path),
        login=logins.get(name),
    )
    service.start()
    return service
