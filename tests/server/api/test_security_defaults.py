"""Secure by default, with the real server, a real Prometheus and STAND-INs for Tempo and Grafana
(tests/standins/stand-in-service: no registry here offers them).

The "beyond loopback" test puts the client on another host: a network namespace this test makes
(ip netns + a veth pair on a private /30), so requests really come from a non-loopback address."""

import base64
import json
import os
import stat
import subprocess
import sys
import textwrap
import urllib.parse

import pytest
import yaml

from tests.helpers import REPO, http, require_prometheus, rl_insight, stack_prometheus, wait_for, write_server_config
from verl_rl_insight.server import app

STAND_IN = str(REPO / "tests" / "standins" / "stand-in-service")


def session_processes(sids):
    """{pid: argv} of every process in the sessions ``sids``."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) in sids:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        found[int(entry)] = f.read().decode(errors="replace").split("\0")
            except OSError:
                pass
    return found


def secret_files(data_dir):
    """(token, Grafana password) as the server keeps them; None where it keeps none."""
    secrets = data_dir / "secrets"
    return tuple(
        (secrets / name).read_text() if (secrets / name).exists() else None
        for name in ("hub-token", "grafana-admin-password")
    )


def test_no_secret_on_any_command_line_or_in_any_log(tmp_path):
    require_prometheus()
    path, config = write_server_config(
        tmp_path,
        token="t0ken-from-the-config-file",
        services={"tempo": {"binary": STAND_IN}, "grafana": {"binary": STAND_IN}},
    )
    started = rl_insight("server", "start", "--detach", "--config", str(path))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        token, password = secret_files(tmp_path / "data")
        assert token == "t0ken-from-the-config-file" and len(password) >= 24
        state = json.loads(app.state_path().read_text())
        # the server's session and each service's own (every service runs in a session of its own)
        processes = session_processes({state["pid"], *(svc["pid"] for svc in state["services"].values())})
        names = {os.path.basename(argv[0]) for argv in processes.values()} | {
            os.path.basename(argv[1]) for argv in processes.values() if len(argv) > 1
        }
        assert {"prometheus", "stand-in-service"} <= names, processes  # the server and every service it runs
        for pid, argv in processes.items():
            line = " ".join(argv)
            assert token not in line and password not in line, f"pid {pid}: {line}"
        assert token not in app.state_path().read_text() and password not in app.state_path().read_text()
        # Prometheus reads the token from its 0600 file and scrapes the hub as a named scraper
        prom = stack_prometheus(config["data_dir"], config["prometheus_port"])

        def hub_up():
            result = json.loads(http("GET", prom + "/api/v1/query?query=up{job='rl_insight_hub'}")[1])["data"]["result"]
            return result and result[0]["value"][1] == "1"

        wait_for(hub_up, 30, what="the hub scraped with the token")
        for folder in (tmp_path / "data" / "secrets",):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700
            for f in folder.iterdir():
                assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        assert stat.S_IMODE((tmp_path / "data" / "grafana.ini").stat().st_mode) == 0o600
    finally:
        rl_insight("server", "stop")
    for log in (tmp_path / "data" / "logs").rglob("*"):
        if log.is_file():
            text = log.read_text(errors="replace")
            assert token not in text and password not in text, log


def test_grafana_gets_a_generated_password_shown_only_on_request_and_no_anonymous_viewers(tmp_path):
    path, config = write_server_config(
        tmp_path,
        services={"prometheus": {"enabled": False}, "tempo": {"enabled": False}, "grafana": {"binary": STAND_IN}},
    )
    started = rl_insight("server", "start", "--detach", "--config", str(path))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        _, password = secret_files(tmp_path / "data")
        ini = (tmp_path / "data" / "grafana.ini").read_text()
        assert f"admin_password = {password}" in ini and password != "admin"
        assert "[auth.anonymous]\nenabled = false" in ini
        assert password not in started.stdout
        plain = rl_insight("server", "status")
        assert password not in plain.stdout and "--secrets" in plain.stdout
        shown = rl_insight("server", "status", "--secrets")
        assert f"Grafana password   {password}" in shown.stdout
    finally:
        rl_insight("server", "stop")
    again = rl_insight("server", "start", "--detach", "--config", str(path))  # the same password next time
    rl_insight("server", "stop")
    assert again.returncode == 0 and secret_files(tmp_path / "data")[1] == password
    config["grafana_admin_password"] = "admin"
    path.write_text(yaml.safe_dump(config))
    refused = rl_insight("server", "start", "--detach", "--config", str(path))
    assert refused.returncode == 2 and "well-known default" in refused.stdout + refused.stderr


def run(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=30)


@pytest.fixture
def other_host():
    """A network namespace joined to this one by a veth pair: (namespace, our address, its address)."""
    if os.geteuid() != 0 or subprocess.run(["which", "ip"], capture_output=True).returncode != 0:
        pytest.skip("needs root and iproute2 to make a network namespace (CI runs as root with iproute2)")
    suffix = os.getpid() % 50000
    ns, host_if, ns_if = f"rli-{suffix}", f"rlih{suffix}", f"rlin{suffix}"
    octet = 16 + suffix % 200
    here, there = f"10.213.{octet}.1", f"10.213.{octet}.2"
    made = run("ip", "netns", "add", ns, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
    try:
        run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        run("ip", "link", "set", ns_if, "netns", ns)
        run("ip", "addr", "add", f"{here}/30", "dev", host_if)
        run("ip", "link", "set", host_if, "up")
        run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{there}/30", "dev", ns_if)
        run("ip", "netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield ns, here, there
    finally:
        run("ip", "link", "del", host_if, check=False)
        run("ip", "netns", "del", ns, check=False)


def from_other_host(ns, requests):
    """Run HTTP requests [(method, url, body, headers)] from inside namespace ``ns``; their statuses."""
    code = textwrap.dedent("""
        import json, sys, urllib.error, urllib.request
        out = []
        for method, url, body, headers in json.loads(sys.argv[1]):
            req = urllib.request.Request(url, data=body.encode() if body else None, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    out.append(r.status)
            except urllib.error.HTTPError as e:
                out.append(e.code)
            except OSError as e:
                out.append(str(e))
        print(json.dumps(out))
    """)
    result = run("ip", "netns", "exec", ns, sys.executable, "-c", code, json.dumps(requests))
    return json.loads(result.stdout)


def test_beyond_loopback_strangers_cannot_write_and_prometheus_cannot_be_stopped(tmp_path, other_host):
    require_prometheus()
    ns, here, there = other_host
    path, config = write_server_config(
        tmp_path, bind=here, services={"tempo": {"enabled": False}, "grafana": {"enabled": False}}
    )
    started = rl_insight("server", "start", "--detach", "--config", str(path))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        token, _ = secret_files(tmp_path / "data")
        hub, prom = f"http://{here}:{config['port']}", f"http://{here}:{config['prometheus_port']}"
        assert f"export RL_INSIGHT_SERVER_URL=http://rl-insight:{token}@{here}:{config['port']}" in started.stdout
        batch = json.dumps({"batches": [{"project": "p", "experiment_name": "stranger", "metrics": {"m": 1}}]})
        target = json.dumps({"address": "127.0.0.1:80", "job": "ssrf"})
        bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        basic = {"Authorization": "Basic " + base64.b64encode(f"rl-insight:{token}".encode()).decode()}
        statuses = from_other_host(
            ns,
            [
                ("POST", hub + "/api/v1/push", batch, {"Content-Type": "application/json"}),
                ("POST", hub + "/api/v1/push", batch, {"Authorization": "Bearer wrong"}),
                ("POST", hub + "/api/v1/targets", target, {}),
                ("DELETE", hub + "/api/v1/targets?job=x&address=127.0.0.1:1", None, {}),
                ("GET", hub + "/metrics?scraper=stolen-cursor", None, {}),
                ("GET", hub + "/metrics", None, {}),
                ("POST", hub + "/api/v1/push", batch, bearer),
                ("POST", hub + "/api/v1/push", batch, basic),
                ("POST", prom + "/-/quit", None, {}),
                ("POST", prom + "/-/reload", None, {}),
                ("POST", prom + "/api/v1/admin/tsdb/delete_series?match[]=up", None, {}),
                ("GET", prom + "/api/v1/status/config", None, {}),
                (
                    "POST",
                    hub + "/api/v1/silences",
                    json.dumps({"project": "p", "experiment_name": "e", "duration_s": 3600}),
                    {},
                ),
                ("DELETE", hub + "/api/v1/silences?id=0000", None, {}),
                ("POST", f"http://{here}:{config['alertmanager_port']}/api/v2/silences", "{}", {}),
            ],
        )
        assert statuses[:5] == [401, 401, 401, 401, 401], statuses
        assert statuses[5:8] == [200, 200, 200], statuses
        # Prometheus listens on loopback only: nothing of it (config, admin API, lifecycle) answers there
        assert not any(isinstance(s, int) for s in statuses[8:12]), statuses
        local = stack_prometheus(config["data_dir"], config["prometheus_port"])
        assert http("GET", local + "/-/ready")[0] == 200, "Prometheus must run, on loopback"
        query = local + "/api/v1/query?query=up{job='rl_insight_hub'}==1"
        wait_for(lambda: json.loads(http("GET", query)[1])["data"]["result"], what="Prometheus scraping the hub")
        assert statuses[12:14] == [401, 401], statuses
        assert not isinstance(statuses[14], int), "Alertmanager must listen on loopback only"
        alertmanager = stack_prometheus(config["data_dir"], config["alertmanager_port"], "alertmanager")
        assert http("GET", alertmanager + "/-/ready")[0] == 200, "and run there"
        assert json.loads(http("GET", f"http://{here}:{config['port']}/api/v1/targets")[1])["targets"] == []
        # with Prometheus on loopback its admin API is on: `runs delete` removes the run's series
        run = local + "/api/v1/query?" + urllib.parse.urlencode({"query": '{experiment_name="stranger"}'})
        wait_for(lambda: json.loads(http("GET", run)[1])["data"]["result"], what="the pushed run in Prometheus")
        deleted = rl_insight("runs", "delete", "--server", f"http://rl-insight:{token}@{here}:{config['port']}",
                             "--project", "p", "--experiment", "stranger", "--yes")  # fmt: skip
        assert deleted.returncode == 0 and "Prometheus: deleted" in deleted.stdout, deleted.stdout + deleted.stderr
        assert json.loads(http("GET", run)[1])["data"]["result"] == []
    finally:
        rl_insight("server", "stop")


def test_server_status_prints_an_export_line_that_is_never_a_wrong_token_and_one_that_works(tmp_path):
    disabled = {name: {"enabled": False} for name in ("prometheus", "alertmanager", "tempo", "grafana")}
    path, config = write_server_config(tmp_path, token="status-token-1234", services=disabled)
    started = rl_insight("server", "start", "--detach", "--config", str(path))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        status = rl_insight("server", "status")
        assert "status-token-1234" not in status.stdout and "%2A" not in status.stdout, status.stdout
        exports = [line.strip() for line in status.stdout.splitlines() if "export RL_INSIGHT_SERVER_URL=" in line]
        placeholder, here = exports
        hub = f"127.0.0.1:{config['port']}"
        assert placeholder == f"export RL_INSIGHT_SERVER_URL=http://rl-insight:<token>@{hub}"
        assert "`rl-insight server url` prints the whole URL" in status.stdout
        pasted = subprocess.run(["bash", "-c", placeholder], capture_output=True, text=True, timeout=10)
        assert pasted.returncode != 0  # pasted, the shell refuses it: no trainer runs with a wrong token
        # the line for this machine, pasted (with this interpreter as `rl-insight`), gives the real URL
        line = here.removeprefix("on this machine: ").replace(
            "rl-insight server", f"{sys.executable} -m verl_rl_insight server"
        )
        shell = subprocess.run(
            ["bash", "-c", f'{line} && echo "$RL_INSIGHT_SERVER_URL"'], capture_output=True, text=True, timeout=60
        )
        assert shell.stdout.strip() == f"http://rl-insight:status-token-1234@{hub}", shell.stdout + shell.stderr
    finally:
        rl_insight("server", "stop")
