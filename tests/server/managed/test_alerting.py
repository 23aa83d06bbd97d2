"""Alerts that reach people: `rl-insight server start` runs a real Alertmanager (Debian package
prometheus-alertmanager), a webhook receiver on loopback configured through alertmanager.receivers
gets the log-prob mismatch alert with the run and its dashboard link, `rl-insight alerts silence`
stops the next notification, a killed Alertmanager comes back with the silence."""

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from tests.helpers import http, push, require_prometheus, rl_insight, wait_for, write_server_config
from verl_rl_insight.server.managed import alertmanager
from verl_rl_insight.server.settings.server import ServerSettings

ALERT = "RLInsightRolloutProbsDiffCritical"


def require_alertmanager():
    if not (shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")):
        pytest.skip("Alertmanager not installed (Debian package prometheus-alertmanager; .ci/run installs it)")


class Webhook:
    """A receiver on loopback: every notification Alertmanager posts, with the time it came."""

    def __init__(self):
        self.received = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                hook.received.append((time.time(), json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, since=0.0, status="firing"):
        return [a for at, note in self.received if at >= since for a in note["alerts"] if a["status"] == status]


class Trainer(threading.Thread):
    """Steps with a log-prob mismatch far above the critical threshold, twice a second."""

    def __init__(self, hub, project, experiment):
        super().__init__(daemon=True)
        self.hub, self.project, self.experiment = hub, project, experiment
        self.stop = threading.Event()

    def run(self):
        step = 0
        while not self.stop.is_set():
            step += 1
            batch = {
                "project": self.project,
                "experiment_name": self.experiment,
                "step": step,
                "time": time.time(),
                "metrics": {"rl_insight_monitor_training_rollout_probs_diff_mean": 0.05},
            }
            push(self.hub, {"batches": [batch]})
            self.stop.wait(0.5)


def test_amtool_accepts_the_rendered_config(tmp_path):
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager has it)")
    settings = ServerSettings(
        bind="127.0.0.1",
        data_dir=str(tmp_path),
        alertmanager={
            "global": {"resolve_timeout": "5m"},
            "receivers": [
                {"name": "oncall", "webhook_configs": [{"url": "http://127.0.0.1:9/hook"}]},
                {
                    "name": "mail",
                    "email_configs": [{"to": "rl@example.org", "from": "am@example.org", "smarthost": "127.0.0.1:587"}],
                },
            ],
            "route": {"routes": [{"receiver": "mail", "matchers": ['severity="critical"']}]},
            "inhibit_rules": [
                {
                    "source_matchers": ['severity="critical"'],
                    "target_matchers": ['severity="warning"'],
                    "equal": ["project", "experiment_name"],
                }
            ],
        },
    )
    path = tmp_path / "alertmanager.yml"
    path.write_text(alertmanager.render_config(settings))
    checked = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = yaml.safe_load(path.read_text())
    assert config["route"]["receiver"] == "oncall"
    assert config["route"]["group_by"] == ["alertname", "project", "experiment_name"]


@pytest.mark.parametrize(
    "section, message",
    [
        ({"receivers": {"name": "x"}}, "alertmanager.receivers must be a list"),
        ({"receivers": [{"webhook_configs": []}]}, "alertmanager.receivers[0] needs a name"),
        ({"receivers": [{"name": "a"}, {"name": "a"}]}, "alertmanager.receivers[1]: the name 'a' is taken twice"),
        ({"receivers": [{"name": "rl-insight-none"}]}, "is reserved"),
        ({"routes": []}, "alertmanager: unknown key(s) routes"),
    ],
)
def test_a_wrong_alertmanager_section_is_named(section, message):
    with pytest.raises(ValueError) as caught:
        ServerSettings(bind="127.0.0.1", data_dir="/tmp/unused", alertmanager=section)
    assert message in str(caught.value)


def test_notification_silence_and_a_killed_alertmanager(tmp_path):
    require_prometheus()
    require_alertmanager()
    hook = Webhook()
    path, config = write_server_config(
        tmp_path,
        services={"tempo": {"enabled": False}, "grafana": {"enabled": False}},
        alerts={"probs_diff_window": "10s", "probs_diff_min_steps": 2},
        alertmanager={
            "receivers": [{"name": "oncall", "webhook_configs": [{"url": hook.url}]}],
            "route": {"group_wait": "1s", "group_interval": "1s", "repeat_interval": "2s"},
        },
    )
    started = rl_insight("server", "start", "--detach", "--local-trust", "--config", str(path))
    hub = f"http://127.0.0.1:{config['port']}"
    trainer = Trainer(hub, "alerting", "mismatch run")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "Alertmanager http://127.0.0.1:" in started.stdout and "notifies oncall" in started.stdout
        trainer.start()

        # the notification: which alert, which run, and a link to the run's dashboard
        [alert, *_] = wait_for(
            lambda: [a for a in hook.alerts() if a["labels"]["alertname"] == ALERT],
            60,
            what="the critical mismatch alert at the webhook",
        )
        assert alert["labels"]["project"] == "alerting" and alert["labels"]["experiment_name"] == "mismatch run"
        link = alert["annotations"]["dashboard"]
        assert link.startswith(f"http://127.0.0.1:{config['grafana_port']}/d/verl_trainer_v1_with_vllm_engine?")
        assert urllib.parse.parse_qs(urllib.parse.urlsplit(link).query) == {
            "var-project": ["alerting"],
            "var-experiment_name": ["mismatch run"],
        }
        assert float(alert["annotations"]["value"]) == 0.05
        assert "/graph?" in alert["annotations"]["graph"]

        listed = rl_insight("alerts")
        assert listed.returncode == 0, listed.stderr
        [row] = [line for line in listed.stdout.splitlines() if line.startswith(ALERT)]
        assert "alerting/mismatch run" in row and "0.05" in row and row.rstrip().endswith("firing")

        # silenced: nothing more reaches the receiver
        silenced = rl_insight(
            "alerts",
            "silence",
            "--project",
            "alerting",
            "--experiment",
            "mismatch run",
            "--for",
            "2h",
            "--comment",
            "debugging the engine dtype",
        )
        assert silenced.returncode == 0, silenced.stderr
        silence_id = silenced.stdout.split("(id ")[1].split(")")[0]
        quiet_from = time.time() + 2  # a notification already on its way may still land
        time.sleep(8)  # four repeat intervals
        assert hook.alerts(since=quiet_from) == []
        wait_for(lambda: "silenced" in rl_insight("alerts").stdout, 20, what="the alert shown as silenced")

        # unsilenced: notifications again
        assert rl_insight("alerts", "unsilence", silence_id).returncode == 0
        loud_from = time.time()
        wait_for(lambda: hook.alerts(since=loud_from), 30, what="notifications after unsilence")

        # Alertmanager killed: restarted by the server, with the silence made through the hub
        again = rl_insight(
            "alerts",
            "silence",
            "--project",
            "alerting",
            "--experiment",
            "mismatch run",
            "--for",
            "1h",
            "--alert",
            ALERT,
        )
        assert again.returncode == 0, again.stderr
        second_id = again.stdout.split("(id ")[1].split(")")[0]
        services = lambda: json.loads(http("GET", hub + "/api/v1/services")[1])["services"]  # noqa: E731
        old_pid = services()["alertmanager"]["pid"]
        os.kill(old_pid, signal.SIGKILL)
        wait_for(
            lambda: services()["alertmanager"]["pid"] != old_pid and services()["alertmanager"]["healthy"],
            30,
            what="Alertmanager restarted",
        )

        def restored():
            shown = rl_insight("alerts", "silences", "--json")
            return shown.returncode == 0 and [
                s
                for s in json.loads(shown.stdout)
                if {"name": "alertname", "value": ALERT, "isRegex": False, "isEqual": True} in s["matchers"]
            ]

        wait_for(restored, 30, what="the silence put back after the restart")
        assert rl_insight("alerts", "unsilence", second_id).returncode == 0  # the ID people were given
        assert not restored()
    finally:
        trainer.stop.set()
        stopped = rl_insight("server", "stop")
    assert stopped.returncode == 0, stopped.stdout


@pytest.mark.parametrize(
    "body, field",
    [
        ([], "body must be an object"),
        ({"project": "p", "experiment_name": "e", "duration_s": 3600, "matchers": []}, "unknown field 'matchers'"),
        ({"experiment_name": "e", "duration_s": 3600}, "project must be"),
        ({"project": "p\n", "experiment_name": "e", "duration_s": 3600}, "project must be"),
        ({"project": "p", "experiment_name": "e" * 300, "duration_s": 3600}, "experiment_name must be"),
        ({"project": "p", "experiment_name": "e", "duration_s": 3600, "alertname": ".*"}, "alertname must be"),
        ({"project": "p", "experiment_name": "e", "duration_s": 10}, "duration_s must be"),
        ({"project": "p", "experiment_name": "e", "duration_s": float("nan")}, "duration_s must be"),
        ({"project": "p", "experiment_name": "e", "duration_s": True}, "duration_s must be"),
        ({"project": "p", "experiment_name": "e", "duration_s": 1e12}, "duration_s must be"),
        ({"project": "p", "experiment_name": "e", "duration_s": 3600, "comment": 5}, "comment must be"),
    ],
)
def test_a_bad_silence_is_a_400_naming_the_field(body, field):
    """Never reaches Alertmanager: a regex, a control character or an endless silence is refused."""
    from verl_rl_insight.server.api.errors import http_status
    from verl_rl_insight.server.stores.silences import AlertingError, silence_request

    with pytest.raises(AlertingError) as refused:
        silence_request(body)
    assert http_status(refused.value) == 400 and field in str(refused.value)


def test_unsilence_takes_only_a_silence_id(tmp_path):
    from verl_rl_insight.server.api.errors import http_status
    from verl_rl_insight.server.stores.silences import Alerting, AlertingError

    alerting = Alerting("http://127.0.0.1:9", tmp_path / "silences.json")
    for bad in ("../../api/v2/status", "", "a" * 65, "id with space"):
        with pytest.raises(AlertingError) as refused:
            alerting.unsilence(bad)
        assert http_status(refused.value) == 400 and "silence ID" in str(refused.value)


def test_silences_are_bounded_in_count_and_the_one_too_many_is_a_4xx_saying_what_to_do(tmp_path):
    """1,000 running silences kept (as a long-lived server would have them after a script went
    wild): one more is refused with 422 before Alertmanager is asked, naming the command that ends
    some; once one has ended, a silence is taken again (the positive control: it reaches the
    Alertmanager, here an address nobody listens on, so it fails there as unreachable)."""
    import json as json_

    from tests.helpers import free_port
    from verl_rl_insight.server.api.errors import http_status
    from verl_rl_insight.server.stores.silences import MAX_SILENCES, Alerting, AlertmanagerDown, _iso

    later = _iso(time.time() + 3600)
    kept = [{"matchers": [], "endsAt": later, "id": f"{i:08x}", "ids": [f"{i:08x}"]} for i in range(MAX_SILENCES)]
    state = tmp_path / "silences.json"
    state.write_text(json_.dumps(kept))
    alerting = Alerting(f"http://127.0.0.1:{free_port()}", state, timeout_s=1)
    body = {"project": "p", "experiment_name": "e", "duration_s": 3600}
    with pytest.raises(Exception) as refused:
        alerting.silence(body)
    assert http_status(refused.value) == 422 and "alerts unsilence" in str(refused.value)
    alerting._kept[0]["endsAt"] = _iso(time.time() - 1)  # one has ended
    with pytest.raises(AlertmanagerDown):
        alerting.silence(body)
