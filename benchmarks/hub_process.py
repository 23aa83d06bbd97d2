"""The real server process (the hub alone) for the benchmarks, on a free loopback port."""

import json
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_hub(port, data_dir, **settings):
    """Start it (settings through stdin, as ``rl-insight server start --detach`` does); wait until ready."""
    settings = {
        "bind": "127.0.0.1",
        "port": port,
        "data_dir": data_dir,
        "services": {name: {"enabled": False} for name in ("prometheus", "tempo", "grafana")},
        # the benchmarks measure the hub, not the token: named, as `rl-insight server start --local-trust` names it
        **({} if settings.get("token") else {"local_trust": True}),
        **settings,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "verl_rl_insight.server.app"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    process.stdin.write(json.dumps(settings).encode())
    process.stdin.close()
    for _ in range(400):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1)
            return process
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("hub did not start")
