"""``rl-insight server start|stop|status``: one server per RL_INSIGHT_HOME, found through its state file."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

from . import app
from .services import http_ok, pid_alive
from .settings import default_home


def read_state():
    """The running server's state, or None. A state file left by a crashed server is removed."""
    path = app.state_path()
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not pid_alive(state.get("pid", -1)):
        print(f"rl-insight: removing stale state file {path} (server pid {state.get('pid')} is gone)",
              file=sys.stderr)
        path.unlink(missing_ok=True)
        return None
    return state


def panel(status):
    lines = [f"rl-insight server running (pid {status['pid']})",
             f"  server IP    {status['server_ip']}",
             f"  metric hub   {status['hub_url']}/metrics   (trainers push to {status['hub_url']}/api/v1/push)"]
    for name, svc in status["services"].items():
        lines.append(f"  {name:<12} {svc['url']}")
    for name, (what, fix) in status["missing"].items():
        lines.append(f"  {name:<12} NOT RUNNING: {what}" + (f"; fix: {fix}" if fix else ""))
    lines.append("  token        " + ("required for pushes (RL_INSIGHT_TOKEN)" if status["token"]
                                       else "not set: anyone who reaches the port can push"))
    lines += ["", "On every training node:", f"  export RL_INSIGHT_SERVER_URL={status['hub_url']}"]
    return "\n".join(lines)


def start(settings, detach=False, out=sys.stdout):
    """Exit code: 0 all running, 1 running but a service is missing, 2 not started."""
    state = read_state()
    if state is not None:
        print(f"rl-insight server already running (pid {state['pid']}) at {state['hub_url']}; "
              "`rl-insight server stop` first", file=out)
        return 2
    if not detach:
        def on_ready(status):
            print(panel(status) + "\n\nCtrl+C stops the server.", file=out, flush=True)
        try:
            return app.run(settings, on_ready=on_ready)
        except app.PortInUse as exc:
            print(f"rl-insight server: {exc}", file=out)
            return 2
    log_path = settings.data_path / "logs" / "server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "verl_rl_insight.server.app",
             "--settings-json", json.dumps(dataclasses.asdict(settings))],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            print(f"rl-insight server failed to start (exit {process.returncode}):\n"
                  + _tail(log_path), file=out)
            return 2
        state = read_state()
        if state is not None and state.get("pid") == process.pid and http_ok(state["local_hub_url"] + "/-/ready"):
            print(panel(state), file=out)
            return 1 if state["missing"] else 0
        time.sleep(0.1)
    print(f"rl-insight server did not become ready within 60 s; see {log_path}", file=out)
    return 2


def stop(out=sys.stdout, timeout_s=15.0):
    state = read_state()
    if state is None:
        print("rl-insight server is not running", file=out)
        return 0
    pgid = state.get("pgid", state["pid"])
    try:
        os.killpg(pgid, signal.SIGTERM) if pgid != os.getpgid(0) else os.kill(state["pid"], signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and pid_alive(state["pid"]):
        time.sleep(0.1)
    if pid_alive(state["pid"]):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    app.state_path().unlink(missing_ok=True)
    print(f"rl-insight server (pid {state['pid']}) stopped", file=out)
    return 0


def status(out=sys.stdout):
    state = read_state()
    if state is None:
        print(f"rl-insight server is not running (no state in {default_home()})", file=out)
        return 3
    print(panel(state), file=out)
    for name, svc in state["services"].items():
        print(f"  {name}: pid {svc['pid']} {'alive' if pid_alive(svc['pid']) else 'DEAD'}", file=out)
    return 0


def _tail(path, lines=20):
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
