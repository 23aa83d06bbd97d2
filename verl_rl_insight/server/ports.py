"""The addresses the server listens on and tells trainers: a port taken is said before anything starts."""

import errno
import os
import socket

from verl_rl_insight.contract import environment
from verl_rl_insight.contract.errors import RLInsightError
from verl_rl_insight.server.managed import prometheus, tempo
from verl_rl_insight.server.settings.server import SERVICE_NAMES, ServerSettings


class PortInUse(RLInsightError):
    """A port the server needs is taken by another process."""


def advertise_ip(settings: ServerSettings) -> str:
    """The address trainers should use: configured, else the bind address, else this host's."""
    if settings.advertise_host:
        return settings.advertise_host
    if os.environ.get(environment.ADVERTISE_IP):
        return os.environ[environment.ADVERTISE_IP]
    if settings.bind not in ("", "0.0.0.0", "::"):
        return settings.bind
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            address = str(info[4][0])
            if not address.startswith("127."):
                return address
    except OSError:
        pass
    return "127.0.0.1"


def check_port_free(bind: str, port: int, service: str) -> None:
    family = socket.AF_INET6 if ":" in (bind or "") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind or "0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(
                    f"port {port} ({service}) is already in use on {bind}; "
                    f"stop what uses it or set another port in the server config"
                ) from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise PortInUse(
                    f"cannot listen on {bind}: it is not an address of this machine "
                    "(bind: 0.0.0.0 listens on every interface)"
                ) from None
            raise PortInUse(f"cannot listen on {bind}:{port} ({service}): {exc.strerror or exc}") from None


def service_ports(settings: ServerSettings, name: str) -> list[tuple[int, str]]:
    return {
        "prometheus": [(settings.prometheus_port, "Prometheus")],
        "alertmanager": [(settings.alertmanager_port, "Alertmanager")],
        "tempo": [
            (settings.tempo_port, "Tempo HTTP"),
            (settings.tempo_grpc_port, "Tempo gRPC"),
            (settings.otlp_http_port, "OTLP/HTTP"),
            (settings.otlp_grpc_port, "OTLP/gRPC"),
        ],
        "grafana": [(settings.grafana_port, "Grafana")],
    }[name]


def check_ports_free(settings: ServerSettings) -> None:
    """Every port of the hub and of the services enabled is free, or PortInUse naming it."""
    check_port_free(settings.bind, settings.port, "metric hub")
    for name in SERVICE_NAMES:
        if settings.enabled(name):
            listen = {"prometheus": prometheus.LISTEN, "tempo": tempo.HOST}.get(name, settings.bind)
            for port, what in service_ports(settings, name):
                check_port_free(listen, port, what)
