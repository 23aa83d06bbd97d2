"""The server process: metric hub and API in this process, services as supervised children.

Run by ``rl-insight server start`` (in the foreground, or detached through
``python -m verl_rl_insight.server.app --settings-json ...``).
"""

import argparse
import dataclasses
import errno
import json
import logging
import os
import signal
import socket
import sys
import threading
import time

from . import prometheus
from .http_api import ApiServer
from .hub import MetricHub
from .services import ManagedProcess
from .settings import ServerSettings, default_home

logger = logging.getLogger("verl_rl_insight.server")


class PortInUse(RuntimeError):
    pass


def state_path():
    return default_home() / "server.json"


def advertise_ip(settings):
    """The address trainers should use: configured, else the bind address, else this host's."""
    if settings.advertise_host:
        return settings.advertise_host
    if os.environ.get("RL_INSIGHT_ADVERTISE_IP"):
        return os.environ["RL_INSIGHT_ADVERTISE_IP"]
    if settings.bind not in ("", "0.0.0.0", "::"):
        return settings.bind
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            if not info[4][0].startswith("127."):
                return info[4][0]
    except OSError:
        pass
    return "127.0.0.1"


def check_port_free(bind, port, service):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind or "0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"port {port} ({service}) is already in use on {bind}; "
                                f"stop what uses it or choose another port") from None
            raise


class Server:
    def __init__(self, settings):
        self.settings = settings
        self.hub = MetricHub()
        self.api = None
        self.services = {}
        self.missing = {}   # service -> (what is missing, the command that fixes it)
        self._stopped = threading.Event()

    def start(self):
        s = self.settings
        s.data_path.mkdir(parents=True, exist_ok=True)
        check_port_free(s.bind, s.port, "metric hub")
        self.api = ApiServer((s.bind, s.port), self.hub, token=s.token)
        threading.Thread(target=self.api.serve_forever, name="api", daemon=True).start()
        if s.prometheus:
            self._start_prometheus()
        return self

    def _start_prometheus(self):
        s = self.settings
        binary = prometheus.find_binary()
        if binary is None:
            self.missing["prometheus"] = ("no prometheus binary on PATH", "apt-get install -y prometheus")
            return
        check_port_free(s.bind, s.prometheus_port, "Prometheus")
        config_path = s.data_path / "prometheus.yml"
        config_path.write_text(prometheus.render_config(s))
        url = f"http://{prometheus.connect_host(s.bind)}:{s.prometheus_port}"
        service = ManagedProcess("prometheus", prometheus.command(binary, s, config_path),
                                 s.data_path / "logs" / "prometheus.log", ready_url=url + "/-/ready")
        service.url = url
        service.start()
        self.services["prometheus"] = service

    def wait_ready(self, timeout_s=30.0):
        failed = [name for name, svc in self.services.items() if not svc.wait_ready(timeout_s)]
        for name in failed:
            self.missing[name] = (f"{name} did not become ready; see {self.services[name].log_path}", "")
        return not failed

    def status(self):
        s = self.settings
        ip = advertise_ip(s)
        return {
            "pid": os.getpid(),
            "pgid": os.getpgid(0),
            "started": time.time(),
            "server_ip": ip,
            "hub_url": f"http://{ip}:{s.port}",
            "local_hub_url": f"http://{prometheus.connect_host(s.bind)}:{s.port}",
            "services": {name: {"pid": svc.process.pid, "url": getattr(svc, "url", None)}
                         for name, svc in self.services.items()},
            "missing": self.missing,
            "token": bool(s.token),
            "settings": dataclasses.asdict(s) | {"token": "***" if s.token else ""},
        }

    def stop(self):
        if self._stopped.is_set():
            return
        self._stopped.set()
        for svc in self.services.values():
            svc.stop()
        if self.api is not None:
            self.api.shutdown()
            self.api.server_close()


def run(settings, on_ready=None):
    """Start everything, write the state file, call ``on_ready(status)``, serve until SIGTERM/SIGINT."""
    server = Server(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server.start()
        server.wait_ready()
        status = server.status()
        path = state_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(status, indent=2))
        if on_ready is not None:
            on_ready(status)
        stop.wait()
    finally:
        server.stop()
        try:
            if json.loads(state_path().read_text()).get("pid") == os.getpid():
                state_path().unlink()
        except (OSError, ValueError):
            pass
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m verl_rl_insight.server.app")
    parser.add_argument("--settings-json", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = ServerSettings(**json.loads(args.settings_json))
    try:
        return run(settings)
    except PortInUse as exc:
        print(f"rl-insight server: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
