"""The services the server runs, by name, in the order it starts them (``SERVICE_NAMES``)."""

from verl_rl_insight.server.managed import alertmanager, grafana, prometheus, tempo
from verl_rl_insight.server.managed.service import ManagedService

SERVICES: dict[str, ManagedService] = {
    service.name: service for service in (prometheus.SERVICE, alertmanager.SERVICE, tempo.SERVICE, grafana.SERVICE)
}
