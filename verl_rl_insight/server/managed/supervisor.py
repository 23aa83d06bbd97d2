"""Service: one supervised child process (Prometheus, Tempo, Grafana).

Each child runs in its own process group, so that stopping it ends everything it started.
A child that dies is restarted with exponential back-off (1 s doubling to 30 s, reset after
a minute of uptime); every restart is logged and counted.
"""

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from verl_rl_insight.contract.http_client import HttpClient, Unreachable

logger = logging.getLogger("verl_rl_insight.server")


class Service:
    def __init__(
        self,
        name: str,
        argv: Sequence[str | Path],
        log_path: Path,
        ready_url: str | None = None,
        url: str | None = None,
        version: str | None = None,
        binary: str | None = None,
        data_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        login: tuple[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.ready_url = ready_url
        self.url = url
        self.version = version
        self.binary = binary or self.argv[0]
        self.data_dir = data_dir
        self.env = env
        self.cwd = cwd
        self.login = login  # what the health check logs in with (Prometheus, Alertmanager)
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.last_exit: int | None = None
        self.started_at: float | None = None
        self._stopping = False
        self._next_restart: float | None = None
        self._backoff = 1.0

    def start(self) -> int:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
                cwd=self.cwd,
            )
        self.started_at = time.monotonic()
        return self.process.pid

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def healthy(self) -> bool:
        return self.alive() and (self.ready_url is None or http_ok(self.ready_url, login=self.login))

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            if self.ready_url is None or http_ok(self.ready_url, login=self.login):
                return True
            time.sleep(0.1)
        return False

    def check(self, on_restart: Callable[["Service"], None] | None = None) -> None:
        """Called by the supervisor: restart a dead child when its back-off has passed."""
        if self._stopping or self.process is None or self.alive():
            if self.alive() and self.started_at and time.monotonic() - self.started_at > 60:
                self._backoff = 1.0
            return
        now = time.monotonic()
        if self._next_restart is None:
            self.last_exit = self.process.returncode
            self._next_restart = now + self._backoff
            logger.warning(
                "%s exited with code %s; restart #%d in %.0f s (log: %s)",
                self.name,
                self.last_exit,
                self.restarts + 1,
                self._backoff,
                self.log_path,
            )
            return
        if now >= self._next_restart:
            self._next_restart = None
            self._backoff = min(self._backoff * 2, 30.0)
            self.restarts += 1
            self.start()
            logger.warning("%s restarted (pid %d, restart #%d)", self.name, self.pid, self.restarts)
            if on_restart is not None:
                on_restart(self)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping = True
        if not self.alive() or self.process is None:
            return
        stop_process_group(self.process.pid, timeout_s, self.process)

    def status(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "alive": self.alive(),
            "healthy": self.healthy(),
            "url": self.url,
            "version": self.version,
            "binary": self.binary,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "data_bytes": dir_size(self.data_dir) if self.data_dir else None,
        }


class Supervisor:
    def __init__(
        self,
        services: Mapping[str, Service],
        on_restart: Callable[[Service], None] | None = None,
        interval_s: float = 0.5,
    ) -> None:
        self.services = services
        self.on_restart = on_restart
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            for service in list(self.services.values()):
                try:
                    service.check(self.on_restart)
                except Exception:
                    logger.exception("supervising %s failed", service.name)

    def stop(self) -> None:
        self._stop.set()
        for service in self.services.values():
            service.stop()


def stop_process_group(pgid: int, timeout_s: float = 10.0, process: "subprocess.Popen[bytes] | None" = None) -> None:
    """SIGTERM the group, wait, then SIGKILL what is left."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            break
        if process is None and not pid_alive(pgid):
            break
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if process is not None:
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            pass


_health = HttpClient()


def http_ok(url: str, timeout_s: float = 1.0, login: tuple[str, str] | None = None) -> bool:
    try:
        client = HttpClient(basic_auth=login) if login else _health
        return client.request("GET", url, timeout_s=timeout_s).status == 200
    except Unreachable:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def pid_runs(pid: int, binary: str | Path) -> bool:
    """True when ``pid`` is alive and runs ``binary`` (guards against a reused pid)."""
    if not pid or not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    # argv[1] too: a script started through its #! line shows its interpreter first
    return os.path.basename(str(binary)) in {os.path.basename(a) for a in argv[:2]}


def dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total
