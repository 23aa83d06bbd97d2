"""ManagedProcess: one service the server runs (Prometheus now; Tempo and Grafana later)."""

import os
import signal
import subprocess
import time
import urllib.request


class ManagedProcess:
    def __init__(self, name, argv, log_path, ready_url=None):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.ready_url = ready_url
        self.process = None

    def start(self):
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        return self.process.pid

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout_s=30.0):
        """True once ``ready_url`` answers 200 (or the process runs, without a URL)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            if self.ready_url is None or http_ok(self.ready_url):
                return True
            time.sleep(0.1)
        return False

    def stop(self, timeout_s=10.0):
        if not self.alive():
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def http_ok(url, timeout_s=1.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except Exception:
        return False


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
