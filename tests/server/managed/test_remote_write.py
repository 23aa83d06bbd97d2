"""Past one node: the server's Prometheus remote-writes every series to an existing store, a real
VictoriaMetrics (Debian package victoria-metrics, started here on loopback with basic auth), and
`rl-insight doctor` tells a working queue from a refused one. Spans go where the server config says."""

import base64
import json
import os
import secrets
import shutil
import stat
import subprocess
import time
import urllib.parse

import pytest

from tests.helpers import (
    free_port,
    http,
    push,
    require_prometheus,
    rl_insight,
    stack_prometheus,
    stop_group,
    wait_for,
    write_server_config,
)
from verl_rl_insight.server.settings.server import ServerSettings


class VictoriaMetrics:
    def __init__(self, folder, username, password):
        binary = shutil.which("victoria-metrics")
        if binary is None:
            pytest.skip("victoria-metrics not installed (Debian package victoria-metrics; .ci/run installs it)")
        self.url = f"http://127.0.0.1:{free_port()}"
        self.auth = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        self.log = open(folder / "victoria-metrics.log", "wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"-storageDataPath={folder / 'vm-data'}",
                f"-httpListenAddr={self.url[7:]}",
                f"-httpAuth.username={username}",
                f"-httpAuth.password={password}",
                "-search.latencyOffset=0s",
                "-search.disableCache",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: self.get("/health")[0] == 200, 20, what="VictoriaMetrics ready")

    def get(self, path):
        return http("GET", self.url + path, headers={"Authorization": self.auth})

    def query(self, promql):
        status, body = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        return json.loads(body)["data"]["result"] if status == 200 else []

    def stop(self):
        stop_group(self.process)
        self.log.close()


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"remote_write": {"url": "http://x/api/v1/write"}}, "remote_write must be a list"),
        ({"remote_write": ["http://x/api/v1/write"]}, "remote_write[0] must be a mapping"),
        ({"remote_write": [{"name": "central"}]}, "remote_write[0].url must be an http:// or https:// URL"),
        ({"remote_write": [{"url": "ftp://x/write"}]}, "remote_write[0].url must be an http:// or https:// URL"),
        (
            {"remote_write": [{"url": "http://x/write", "headers": {"Authorization": "Bearer s3cret"}}]},
            "remote_write[0].headers.Authorization: Prometheus shows header values in clear",
        ),
        ({"external_labels": {"__name__": "x"}}, "external_labels: '__name__' is not a Prometheus label name"),
        ({"external_labels": {"monitor": 3}}, "external_labels.monitor must be a string"),
        ({"otlp_endpoint": "collector:4318"}, "otlp_endpoint must be an http:// or https:// URL"),
    ],
)
def test_a_wrong_remote_write_or_otlp_setting_is_named(settings, message):
    with pytest.raises(ValueError) as caught:
        ServerSettings(bind="127.0.0.1", data_dir="/tmp/unused", **settings)
    assert message in str(caught.value)


def test_every_series_reaches_victoriametrics_and_doctor_names_the_refused_queue(tmp_path):
    require_prometheus()
    password = secrets.token_urlsafe(16)
    store = VictoriaMetrics(tmp_path, "central", password)
    write = f"{store.url}/api/v1/write"
    path, config = write_server_config(
        tmp_path,
        services={"tempo": {"enabled": False}, "grafana": {"enabled": False}},
        external_labels={"monitor": "node-a"},
        remote_write=[
            {"url": write, "name": "central", "basic_auth": {"username": "central", "password": password}},
            {
                "url": write,
                "name": "wrong",
                "basic_auth": {"username": "central", "password": "not-it"},
                "queue_config": {"batch_send_deadline": "1s", "min_backoff": "100ms"},
            },
        ],
        otlp_endpoint=f"http://127.0.0.1:{free_port()}/v1/traces",
    )
    env = {"RL_INSIGHT_SERVER_URL": None, "RL_INSIGHT_TOKEN": None}
    started = rl_insight("server", "start", "--detach", "--local-trust", "--config", str(path), env=env)
    hub = f"http://127.0.0.1:{config['port']}"
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        batch = {
            "project": "far",
            "experiment_name": "rw-run",
            "step": 7,
            "time": time.time(),
            "metrics": {"rl_insight_monitor_actor_entropy": 0.625},
        }
        assert push(hub, {"batches": [batch]})[0] == 200

        # what a user of the central store sees: the value, the run's labels, which monitor sent it
        entropy = 'rl_insight_monitor_actor_entropy{project="far"}'
        [series] = wait_for(lambda: store.query(entropy), 40, what="the trainer's value in VictoriaMetrics")
        assert float(series["value"][1]) == 0.625
        assert series["metric"]["experiment_name"] == "rw-run" and series["metric"]["monitor"] == "node-a"
        assert store.query('rl_insight_monitor_training_global_step{experiment_name="rw-run"}')[0]["value"][1] == "7"

        # trainers are told where spans go
        assert json.loads(http("GET", hub + "/api/v1/info")[1])["otlp_traces"] == config["otlp_endpoint"]

        # the password is in prometheus.yml (0600) and nowhere a person or another user reads
        data = tmp_path / "data"
        assert stat.S_IMODE(os.stat(data / "prometheus.yml").st_mode) == 0o600
        status = rl_insight("server", "status", env=env)
        shown = status.stdout + json.dumps(json.loads(http("GET", hub + "/api/v1/services")[1]))
        shown += "".join(p.read_text(errors="replace") for p in (data / "logs").glob("*.log"))
        shown += (tmp_path / "home" / "server.json").read_text() if (tmp_path / "home").exists() else ""
        shown += " ".join(
            open(f"/proc/{pid}/cmdline").read()
            for pid in os.listdir("/proc")
            if pid.isdigit()
            and os.path.exists(f"/proc/{pid}/cmdline")
            and "prometheus" in open(f"/proc/{pid}/cmdline").read()
        )
        prom = stack_prometheus(config["data_dir"], config["prometheus_port"])
        shown += json.loads(http("GET", prom + "/api/v1/status/config")[1])["data"]["yaml"]  # with its login
        assert "<secret>" in shown  # the positive control: Prometheus' config was read
        assert password not in shown and "not-it" not in shown
        assert write in status.stdout  # status names where the series go

        wait_for(
            lambda: json.loads(
                http(
                    "GET",
                    prom
                    + "/api/v1/query?query="
                    + urllib.parse.quote(
                        'increase(prometheus_remote_storage_samples_failed_total{remote_name="wrong"}[5m]) > 0'
                    ),
                )[1]
            )["data"]["result"],
            60,
            what="the refused queue counted",
        )
        doctor = rl_insight("doctor", "--server", hub, env=env)
        lines = doctor.stdout.splitlines()
        assert any(line.startswith("ok       remote write central: " + write) for line in lines), doctor.stdout
        assert any(line.startswith("PROBLEM  remote write wrong: ") and "failed" in line for line in lines), (
            doctor.stdout
        )
        assert doctor.returncode == 1
    finally:
        stopped = rl_insight("server", "stop", env=env)
        store.stop()
    assert stopped.returncode == 0, stopped.stdout
