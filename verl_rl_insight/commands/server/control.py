"""``rl-insight server start|stop|status``: one server per RL_INSIGHT_HOME, found through its state file."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from verl_rl_insight.commands import http_fetch
from verl_rl_insight.contract import paths, server_url
from verl_rl_insight.server import app
from verl_rl_insight.server.managed.releases import OPTIONAL_SERVICES
from verl_rl_insight.server.managed.supervisor import (
    http_ok,
    pid_alive,
    pid_runs,
    stop_process_group,
)
from verl_rl_insight.server.settings.server import ServerSettings, default_home
from verl_rl_insight.server.stores import credentials
from verl_rl_insight.server.stores.files import private_folder

START_TIMEOUT_S = 180


def read_state(out: TextIO = sys.stderr) -> dict[str, Any] | None:
    """The running server's state, or None. A state file left by a crashed server is cleaned up:
    services it had started and that still run are ended, then the file is removed."""
    path = app.state_path()
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if pid_alive(state.get("pid", -1)):
        return state
    print(f"rl-insight: the server (pid {state.get('pid')}) is gone; cleaning up its state file {path}", file=out)
    _stop_orphans(state, out)
    path.unlink(missing_ok=True)
    return None


def _stop_orphans(state: dict[str, Any], out: TextIO) -> None:
    for name, svc in (state.get("services") or {}).items():
        if pid_runs(svc.get("pid"), svc.get("binary", "")):
            print(f"rl-insight: stopping {name} (pid {svc['pid']}) left running by the crashed server", file=out)
            stop_process_group(svc["pid"])


def state_secret(state: dict[str, Any], name: str) -> str | None:
    """A secret of the running server (this user can read its 0600 files), or None."""
    return credentials.read_secret(state["settings"]["data_dir"], name) if state.get("settings") else None


LOCAL_TRUST = (
    "OPEN to every user of this machine (started with --local-trust: no token; any local user may push, "
    "silence alerts and delete runs)"
)


def trainer_url(state: dict[str, Any], reveal: bool = True, local: bool = False) -> str:
    """RL_INSIGHT_SERVER_URL for trainers (``local``: on this machine): the hub's URL, carrying the
    token when one is required."""
    url = str(state["local_hub_url" if local else "hub_url"])
    if not state.get("token"):
        return url
    token = state_secret(state, credentials.TOKEN_FILE) if reveal else "***"
    return server_url.with_token(url, token) if token else url


def with_login(url: str, service: str = "prometheus") -> str:
    """``url`` with the login of this machine's server's ``service`` (Prometheus, Alertmanager)
    when ``url`` is that service and this user may read the server's files; else unchanged."""
    state = read_state()
    bare = url.rstrip("/")
    if state is None or not state.get("settings") or state["public_urls"].get(service) != bare:
        return url
    login = credentials.service_login(Path(state["settings"]["data_dir"]), service)
    return server_url.with_user(bare, *login) if login else url


def panel(state: dict[str, Any], reveal_token: bool = True) -> str:
    urls = state["public_urls"]
    services = state["services"]
    secrets_dir = state.get("secrets_dir", "<data dir>/secrets")
    lines = [
        f"rl-insight server running (pid {state['pid']})",
        f"  server IP    {state['server_ip']}",
        f"  metric hub   {state['hub_url']}{paths.METRICS}   (trainers push to {state['hub_url']}{paths.PUSH})",
    ]
    if "grafana" in services:
        anonymous = "; anonymous viewers allowed" if state.get("grafana_anonymous_viewer") else ""
        lines.append(
            f"  Grafana      {urls['grafana']}   (login {state['grafana_admin_user']}, password: "
            f"rl-insight server status --secrets{anonymous}; folder RL-Insight)"
        )
    if "prometheus" in services:
        lines.append(f"  Prometheus   {urls['prometheus']}   (with its login: rl-insight server url --prometheus)")
    if "alertmanager" in services:
        receivers = state.get("alert_receivers") or []
        sent = f"notifies {', '.join(receivers)}" if receivers else "no receivers: alerts are shown, not sent"
        lines.append(f"  Alertmanager {urls['alertmanager']}   (this machine only; {sent}; rl-insight alerts)")
    if "tempo" in services:
        lines.append(f"  Tempo        {urls['tempo']}   (queries)")
        if not state.get("settings", {}).get("otlp_endpoint"):
            traces = state["hub_url"] + paths.OTLP_TRACES
            lines.append(f"  OTLP         {traces}   (spans pass through the hub to Tempo)")
    settings = state.get("settings", {})
    if settings.get("otlp_endpoint"):
        lines.append(f"  spans        {settings['otlp_endpoint']}   (trainers are told to send there)")
    for entry in settings.get("remote_write") or ():
        name = f" {entry['name']}" if entry.get("name") else ""
        lines.append(f"  remote write{name}: {entry['url']}   (every series Prometheus stores goes there too)")
    for name, (what, fix) in state["missing"].items():
        if optional_absent(name, state):
            lines.append(f"  {name:<12} not installed: {OPTIONAL_SERVICES[name]}")
            lines.append(f"               to add it: {fix}")
        else:
            lines.append(f"  {name:<12} NOT RUNNING: {what}" + (f"\n               fix: {fix}" if fix else ""))
    lines.append(
        "  writes       "
        + (f"need the token (kept in {secrets_dir}, carried by the URL below)" if state["token"] else LOCAL_TRUST)
    )
    lines += ["", "On every training node:"]
    if reveal_token or not state.get("token"):
        lines.append(f"  export RL_INSIGHT_SERVER_URL={trainer_url(state)}")
    else:  # the token is not printed here: a placeholder the shell refuses, and the commands that print it
        scheme, _, rest = state["hub_url"].partition("://")
        lines += [
            f"  export RL_INSIGHT_SERVER_URL={scheme}://{server_url.TOKEN_USER}:<token>@{rest}",
            "  (<token>: the token is not shown here; `rl-insight server url` prints the whole URL, "
            "`rl-insight server status --secrets` the token)",
            '  on this machine: export RL_INSIGHT_SERVER_URL="$(rl-insight server url --local)"',
        ]
    return "\n".join(lines)


def optional_absent(name: str, state: dict[str, Any]) -> bool:
    """An optional service (Grafana, Tempo) that is simply not installed: a state, not a failure.
    ``state``: the server's state (its ``absent`` names) or one service's status (``absent``)."""
    absent = state.get("absent")
    return name in OPTIONAL_SERVICES and (absent is True or (isinstance(absent, list) and name in absent))


def failing(state: dict[str, Any]) -> bool:
    return any(not optional_absent(name, state) for name in state["missing"])


def start(settings: ServerSettings, detach: bool = False, out: TextIO = sys.stdout, reveal_token: bool = True) -> int:
    """Exit code: 0 running (without an optional service that is not installed), 1 running but a
    service failed, 2 not started."""
    state = read_state()
    if state is not None:
        print(
            f"rl-insight server already running (pid {state['pid']}) at {state['hub_url']}; "
            "`rl-insight server stop` first",
            file=out,
        )
        return 2
    if not detach:
        result = {}

        def on_ready(state: dict[str, Any]) -> None:
            result["missing"] = failing(state)
            print(panel(state) + "\n\nCtrl+C stops the server and every service.", file=out, flush=True)

        try:
            app.run(settings, on_ready=on_ready)
        except (app.PortInUse, credentials.CredentialError) as exc:
            print(f"rl-insight server: {exc}", file=out)
            return 2
        return 1 if result.get("missing") else 0
    log_path = settings.data_path / "logs" / "server.log"
    os.umask(0o077)  # the log and its folder, made here before the server starts: this user's only
    private_folder(settings.data_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_start = log_path.stat().st_size if log_path.exists() else 0  # this attempt's lines begin here
    with open(log_path, "ab") as log:
        # settings through a pipe: they may hold the token and a password (/proc/<pid>/cmdline is public)
        process = subprocess.Popen(
            [sys.executable, "-m", "verl_rl_insight.server.app"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE,
            start_new_session=True,
        )
    assert process.stdin is not None
    process.stdin.write(json.dumps(settings.as_mapping()).encode())
    process.stdin.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            print(
                f"rl-insight server failed to start (exit {process.returncode}; the full log: {log_path}):\n"
                + _tail(log_path, log_start),
                file=out,
            )
            return 2
        try:
            state = json.loads(app.state_path().read_text())
        except (OSError, ValueError):
            state = None
        if state is not None and state.get("pid") == process.pid and http_ok(state["local_hub_url"] + paths.READY):
            print(panel(state, reveal_token=reveal_token), file=out)
            return 1 if failing(state) else 0
        time.sleep(0.1)
    print(f"rl-insight server did not become ready within {START_TIMEOUT_S} s; see {log_path}", file=out)
    return 2


def stop(out: TextIO = sys.stdout, timeout_s: float = 20.0) -> int:
    state = read_state()
    if state is None:
        print("rl-insight server is not running", file=out)
        return 0
    try:
        os.kill(state["pid"], signal.SIGTERM)  # the server stops its services itself
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and pid_alive(state["pid"]):
        time.sleep(0.1)
    if pid_alive(state["pid"]):
        print(f"rl-insight server (pid {state['pid']}) did not stop in {timeout_s:.0f} s; killing it", file=out)
        stop_process_group(state["pgid"], 1.0)
    try:  # services restarted after the state was read have new pids: read again
        state = json.loads(app.state_path().read_text()) if app.state_path().exists() else state
    except (OSError, ValueError):
        pass
    _stop_orphans(state, out)
    app.state_path().unlink(missing_ok=True)
    print(f"rl-insight server (pid {state['pid']}) stopped", file=out)
    return 0


def status(out: TextIO = sys.stdout, show_secrets: bool = False) -> int:
    state = read_state()
    if state is None:
        print(f"rl-insight server is not running (no state in {default_home()})", file=out)
        return 3
    print(panel(state, reveal_token=show_secrets), file=out)
    if show_secrets:
        password = state_secret(state, credentials.GRAFANA_PASSWORD_FILE)
        token = state_secret(state, credentials.TOKEN_FILE) if state["token"] else None
        print(f"\n  token              {token or '(none: --local-trust, writes are open on loopback)'}", file=out)
        print(f"  Grafana password   {password or '(none)'}   (user {state['grafana_admin_user']})", file=out)
    else:
        print("  (rl-insight server status --secrets shows the token and the Grafana password)", file=out)
    try:
        services = http_fetch.fetch_json(state["local_hub_url"] + paths.SERVICES, timeout_s=5)["services"]
        hub = http_fetch.fetch_json(state["local_hub_url"] + paths.HUB, timeout_s=5)
    except Exception as exc:
        print(f"\n  (cannot ask the server for service details: {exc})", file=out)
        return 1
    print(
        f"\n  metric hub   {hub['series']:,} series in {hub['streams']:,} streams; memory "
        f"{hub['memory_bytes'] / 2**20:,.1f} of {hub['memory_limit_bytes'] / 2**20:,.0f} MiB; history "
        f"{hub['history_snapshots']:,} snapshots ({hub['history_evicted_unsent_total']:,} dropped unsent); "
        f"scrapers: {', '.join(hub['scraper_names']) or 'none yet'}",
        file=out,
    )
    print("\n  service      pid      health    restarts  version   data", file=out)
    unhealthy = False
    for name, svc in services.items():
        if "missing" in svc and not svc.get("pid"):
            absent = optional_absent(name, svc)
            print(f"  {name:<12} -        {'absent' if absent else 'missing':<9} -         -         -", file=out)
            unhealthy |= not absent
            continue
        unhealthy |= not svc["healthy"]
        size = "-" if svc.get("data_bytes") is None else f"{svc['data_bytes'] / 2**20:.1f} MiB"
        print(
            f"  {name:<12} {svc['pid']:<8} {'healthy' if svc['healthy'] else 'DOWN':<9} {svc['restarts']:<9} "
            f"{svc.get('version') or '?':<9} {size}",
            file=out,
        )
    return 1 if unhealthy else 0


def _tail(path: Path, start: int = 0, lines: int = 20) -> str:
    """The last ``lines`` lines written to ``path`` after byte ``start``."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
