"""What the server needs to know to run one of its services (Prometheus, Alertmanager, Tempo,
Grafana): one small shape that each service's module fills in (``SERVICE``) and that the server
reads in ``services.py``, so starting a service never branches on its name."""

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from verl_rl_insight.server.settings.server import ServerSettings

Links = Mapping[str, str]  # the server's public URLs (grafana, prometheus, ...), for links in alerts


@dataclasses.dataclass(frozen=True)
class ManagedService:
    name: str
    health_path: str  # answered 200 once the service is ready, below ``url``
    url: Callable[[ServerSettings], str]  # where the server and its users reach it
    write_config: Callable[[ServerSettings, Links], Path]  # writes its config (0600 where it holds secrets)
    command: Callable[[str, ServerSettings, Path], list[str]]  # its command line: no secret on it

    def ready_url(self, settings: ServerSettings) -> str:
        return self.url(settings) + self.health_path
