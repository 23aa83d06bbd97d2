"""`rl-insight server start|status|stop` with a real Prometheus (Debian package) and STAND-INs
for Tempo and Grafana (tests/standins/stand-in-service: no registry here offers them)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest
import yaml

from tests.helpers import (
    REPO,
    free_port,
    http,
    require_prometheus,
    rl_insight,
    stack_prometheus,
    stop_group,
    wait_for,
    write_server_config,
)
from tests.server.stores.test_timeline_store import otlp
from verl_rl_insight.server.managed.supervisor import pid_alive

STAND_IN = str(REPO / "tests" / "standins" / "stand-in-service")


cli = rl_insight


@pytest.fixture
def server_config(tmp_path):
    return write_server_config(tmp_path, services={"tempo": {"binary": STAND_IN}, "grafana": {"binary": STAND_IN}})


def services(config):
    status, body = http("GET", f"http://127.0.0.1:{config['port']}/api/v1/services")
    assert status == 200
    return json.loads(body)["services"]


class NodeExporter:
    """The real node-exporter (Debian package prometheus-node-exporter), on a free loopback port,
    with the load-average collector only."""

    def __init__(self, folder):
        binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
        if binary is None:
            pytest.skip("node-exporter not installed (Debian package prometheus-node-exporter; .ci/run installs it)")
        self.address = f"127.0.0.1:{free_port()}"
        self.log = open(folder / "node-exporter.log", "wb")
        self.process = subprocess.Popen(
            [binary, f"--web.listen-address={self.address}", "--collector.disable-defaults", "--collector.loadavg"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: http("GET", f"http://{self.address}/metrics")[0] == 200, 20, what="node-exporter up")

    def close(self):
        stop_group(self.process)
        self.log.close()


def test_start_supervise_discover_and_stop(server_config):
    require_prometheus()
    path, config = server_config
    started = cli("server", "start", "--detach", "--local-trust", "--config", str(path))  # no token to carry
    exporter = NodeExporter(path.parent)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        out = started.stdout
        assert f"Grafana      http://127.0.0.1:{config['grafana_port']}" in out
        assert "password: rl-insight server status --secrets" in out
        assert f"Prometheus   http://127.0.0.1:{config['prometheus_port']}" in out
        hub = f"http://127.0.0.1:{config['port']}"
        assert f"OTLP         {hub}/v1/traces   (spans pass through the hub to Tempo)" in out
        assert f"export RL_INSIGHT_SERVER_URL=http://127.0.0.1:{config['port']}" in out

        again = cli("server", "start", "--detach", "--local-trust", "--config", str(path))
        assert again.returncode == 2 and "already running" in again.stdout

        status = cli("server", "status")
        assert status.returncode == 0, status.stdout
        info = json.loads(http("GET", f"http://127.0.0.1:{config['port']}/api/v1/info")[1])
        assert info["otlp_traces"] == f"http://127.0.0.1:{config['port']}/v1/traces"
        # spans sent to the hub reach Tempo (its stand-in records what it receives) byte for byte
        body = otlp([("step", "trainer", 1, 10**18, 10**18 + 10**9, 1, 0)]).SerializeToString()
        headers = {"Content-Type": "application/x-protobuf"}  # started with --local-trust: no token
        assert http("POST", f"http://127.0.0.1:{config['port']}/v1/traces", body, headers)[0] == 200
        received = path.parent / "data" / "received-spans.bin"
        wait_for(lambda: received.exists() and received.read_bytes() == len(body).to_bytes(4, "big") + body, 20)

        # the relay counts a body once Tempo has answered, which is after Tempo wrote it down
        def relay_counted():
            counts = json.loads(http("GET", f"http://127.0.0.1:{config['port']}/api/v1/info")[1])["span_relay"]
            return counts if any(counts.values()) else None

        relay = wait_for(relay_counted, 10, what="the span relay's count")
        assert relay == {"relayed": 1, "dropped": 0, "failed": 0}
        assert "prometheus" in status.stdout and "DOWN" not in status.stdout

        # a target registered through the API reaches Prometheus through http_sd
        added = cli("targets", "add", exporter.address, "--job", "node-exporter", "--label", "node=n1")
        assert added.returncode == 0, added.stderr
        prom = stack_prometheus(config["data_dir"], config["prometheus_port"])

        def node_load():
            status, body = http("GET", prom + "/api/v1/query?query=node_load1")
            return json.loads(body)["data"]["result"] if status == 200 else []

        [sample] = wait_for(node_load, 30, what="http_sd target scraped")
        assert sample["metric"]["job"] == "node-exporter" and sample["metric"]["node"] == "n1"
        assert 0 <= float(sample["value"][1]) < 1000  # this machine's load average, as node-exporter read it

        # Prometheus killed: the server restarts it, counts it, and it scrapes again
        before = services(config)["prometheus"]
        os.kill(before["pid"], signal.SIGKILL)
        after = wait_for(
            lambda: (s := services(config)["prometheus"])["restarts"] == 1 and s["healthy"] and s,
            30,
            what="prometheus restarted",
        )
        assert after["pid"] != before["pid"]
        assert wait_for(node_load, 30, what="scraping again after the restart")
        # the Tempo stand-in is supervised the same way
        tempo_before = services(config)["tempo"]
        os.kill(tempo_before["pid"], signal.SIGKILL)
        wait_for(
            lambda: (s := services(config)["tempo"])["restarts"] == 1 and s["healthy"],
            30,
            what="tempo stand-in restarted",
        )
        assert "restarted" in (path.parent / "data" / "logs" / "server.log").read_text()
        pids = [svc["pid"] for svc in services(config).values()]
        assert all(pid_alive(pid) for pid in pids)
    finally:
        exporter.close()
        stopped = cli("server", "stop")
    assert stopped.returncode == 0
    wait_for(lambda: not any(pid_alive(pid) for pid in pids), 20, what="every service ended")
    assert cli("server", "status").returncode == 3


def test_a_missing_service_does_not_stop_the_others_and_the_exit_code_says_so(server_config, tmp_path):
    path, config = server_config
    config["services"]["grafana"] = {"binary": str(tmp_path / "no-such-grafana")}
    config["services"]["prometheus"] = {"enabled": False}
    path.write_text(yaml.safe_dump(config))
    started = cli("server", "start", "--detach", "--config", str(path))
    try:
        assert started.returncode == 1, started.stdout
        assert "grafana      NOT RUNNING: configured binary" in started.stdout
        assert "fix: rl-insight server install grafana" in started.stdout
        assert services(config)["tempo"]["healthy"]  # the others run
        assert http("GET", f"http://127.0.0.1:{config['port']}/-/ready")[0] == 200
    finally:
        cli("server", "stop")


def test_port_in_use_is_a_clear_error_naming_the_port(server_config):
    path, config = server_config
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", config["grafana_port"]))
        busy.listen()
        started = cli("server", "start", "--detach", "--config", str(path))
    assert started.returncode == 2
    assert f"port {config['grafana_port']} (Grafana) is already in use" in started.stdout


def test_stale_state_file_of_a_crashed_server_is_cleaned_up(server_config):
    path, config = server_config
    config["services"] = {"prometheus": {"enabled": False}, "tempo": {"enabled": False}, "grafana": {"enabled": False}}
    path.write_text(yaml.safe_dump(config))
    (path.parent / "orphan.ini").write_text(f"[server]\nhttp_addr = 127.0.0.1\nhttp_port = {free_port()}\n")
    orphan = subprocess.Popen([STAND_IN, f"--config={path.parent / 'orphan.ini'}"], start_new_session=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = {
        "pid": dead.pid,
        "pgid": dead.pid,
        "hub_url": "http://127.0.0.1:1",
        "services": {"grafana": {"pid": orphan.pid, "binary": STAND_IN}},
    }
    from verl_rl_insight.server import app

    app.state_path().parent.mkdir(parents=True, exist_ok=True)
    app.state_path().write_text(json.dumps(state))
    started = cli("server", "start", "--detach", "--config", str(path))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "is gone; cleaning up its state file" in started.stderr
        assert "stopping grafana" in started.stderr  # what the crashed server left running
        orphan.wait(10)
    finally:
        cli("server", "stop")
        if orphan.poll() is None:
            orphan.kill()


def test_token_guards_target_writes_reads_stay_open(hub_server):
    server = hub_server(token="s3cret")
    body = json.dumps({"address": "127.0.0.1:9100", "job": "node-exporter"}).encode()
    assert http("POST", server.url + "/api/v1/targets", body)[0] == 401
    assert http("DELETE", server.url + "/api/v1/targets?job=node-exporter&address=127.0.0.1:9100")[0] == 401
    assert http("POST", server.url + "/api/v1/targets", body, {"Authorization": "Bearer s3cret"})[0] == 200
    assert http("GET", server.url + "/api/v1/sd")[0] == 200
    assert http("GET", server.url + "/api/v1/targets")[0] == 200


def test_targets_expire_after_their_ttl_and_bad_ones_are_refused(hub_server):
    from verl_rl_insight.server.stores.targets import TargetRegistry

    clock = [0.0]
    registry = TargetRegistry(clock=lambda: clock[0])
    registry.register("127.0.0.1:8000", "vllm", {"replica": "0"}, ttl_s=30)
    registry.register("127.0.0.1:9100", "node-exporter", {}, ttl_s=0)
    clock[0] = 29
    registry.register("127.0.0.1:8000", "vllm", {"replica": "0"}, ttl_s=30)  # heartbeat
    clock[0] = 50
    assert [t["job"] for t in registry.list()] == ["node-exporter", "vllm"]
    clock[0] = 60
    assert registry.http_sd() == [{"targets": ["127.0.0.1:9100"], "labels": {"job": "node-exporter"}}]
    server = hub_server()
    for bad in (
        {"address": "http://x:1/metrics", "job": "a"},
        {"address": "x:99999", "job": "a"},
        {"address": "x:1", "job": "bad job"},
        {"address": "x:1", "job": "a", "labels": {"__x": "1"}},
        {"address": "x:1", "job": "a", "ttl_s": -1},
    ):
        status, answer = http("POST", server.url + "/api/v1/targets", json.dumps(bad).encode())
        assert status == 400 and json.loads(answer)["error"], bad


def test_foreground_server_stops_everything_on_ctrl_c(server_config):
    path, config = server_config
    config["services"]["prometheus"] = {"enabled": False}
    path.write_text(yaml.safe_dump(config))
    process = subprocess.Popen(
        [sys.executable, "-m", "verl_rl_insight", "server", "start", "--config", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "Ctrl+C" in line:
                break
        assert any("Grafana" in line for line in lines), "".join(lines)
        pids = [svc["pid"] for svc in services(config).values()]
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl+C in the terminal does
        assert process.wait(30) == 0
        wait_for(lambda: not any(pid_alive(pid) for pid in pids), 20, what="services ended")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_prometheus_data_survives_a_server_restart(server_config):
    require_prometheus()
    path, config = server_config
    config["services"] = {"tempo": {"enabled": False}, "grafana": {"enabled": False}}
    path.write_text(yaml.safe_dump(config))
    hub = f"http://127.0.0.1:{config['port']}"

    def stored():
        prom = stack_prometheus(config["data_dir"], config["prometheus_port"])
        status, body = http("GET", prom + "/api/v1/query?query=rl_insight_monitor_persisted[1h]")
        return json.loads(body)["data"]["result"] if status == 200 else []

    assert cli("server", "start", "--detach", "--local-trust", "--config", str(path)).returncode == 0
    try:
        batch = {
            "project": "p",
            "experiment_name": "persist",
            "step": 1,
            "metrics": {"rl_insight_monitor_persisted": 7},
        }
        assert http("POST", hub + "/api/v1/push", json.dumps({"batches": [batch]}).encode())[0] == 200
        wait_for(stored, 20, what="first scrape")
    finally:
        cli("server", "stop")
    assert cli("server", "start", "--detach", "--config", str(path)).returncode == 0
    try:
        [series] = wait_for(stored, 20, what="old samples after the restart")
        assert float(series["values"][0][1]) == 7.0
    finally:
        cli("server", "stop")
