"""Another user of the server's machine, who holds no token and cannot read the server's 0600
files, against the real Prometheus and Alertmanager that `rl-insight server start` runs on
loopback: no series deleted, no alert silenced, no receiver's secret read (401 each); with the
login the server keeps for its own user, each works; the login is on no command line."""

import json
import os
import stat
import subprocess
import sys
import urllib.parse

import pytest

from tests.helpers import http, require_prometheus, rl_insight, stack_prometheus, wait_for, write_server_config
from tests.server.managed.test_alerting import require_alertmanager

WEBHOOK = "http://127.0.0.1:9/hook?secret=webhook-s3cret"  # a receiver whose URL is its secret
NOBODY = 65534

ATTACK = """
import json, sys, urllib.error, urllib.request
prom, alertmanager, password_file = sys.argv[1:4]
def status(method, url, body=None):
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
try:
    open(password_file).read()
    read = "read"
except OSError as exc:
    read = type(exc).__name__
silence = json.dumps({"matchers": [{"name": "alertname", "value": ".+", "isRegex": True}],
                      "startsAt": "2020-01-01T00:00:00Z", "endsAt": "2999-01-01T00:00:00Z",
                      "createdBy": "x", "comment": "x"}).encode()
print(json.dumps({
    "password_file": read,
    "delete": status("POST", prom + "/api/v1/admin/tsdb/delete_series?match[]=up"),
    "silence": status("POST", alertmanager + "/api/v2/silences", silence),
    "status": status("GET", alertmanager + "/api/v2/status"),
}))
"""


def as_other_user(*argv):
    """Run the attack as user nobody when the tests run as root (they do in CI), else as this
    user without the login: what the other user sees is the same."""
    root = os.geteuid() == 0
    kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if root else {}
    # the system's Python: the one running the tests may live where nobody may not go (/root)
    python = "/usr/bin/python3" if root and os.path.exists("/usr/bin/python3") else sys.executable
    result = subprocess.run(
        [python, "-c", ATTACK, *argv], capture_output=True, text=True, timeout=60, cwd="/", env={}, **kwargs
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_local_user_without_the_login_cannot_delete_silence_or_read_the_receivers(tmp_path):
    require_prometheus()
    require_alertmanager()
    path, config = write_server_config(
        tmp_path,
        services={"tempo": {"enabled": False}, "grafana": {"enabled": False}},
        alertmanager={"receivers": [{"name": "oncall", "webhook_configs": [{"url": WEBHOOK}]}]},
    )
    started = rl_insight("server", "start", "--detach", "--config", str(path))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        data = tmp_path / "data"
        bare_prom = f"http://127.0.0.1:{config['prometheus_port']}"
        bare_am = f"http://127.0.0.1:{config['alertmanager_port']}"
        hub = f"http://127.0.0.1:{config['port']}/api/v1/hub"
        wait_for(lambda: json.loads(http("GET", hub)[1])["scraper_names"], 30, what="Prometheus scraping the hub")

        attack = as_other_user(bare_prom, bare_am, str(data / "secrets" / "prometheus-password"))
        if os.geteuid() == 0:
            assert attack["password_file"] == "PermissionError", attack
        assert attack["delete"][0] == 401, attack
        assert attack["silence"][0] == 401, attack
        assert attack["status"][0] == 401 and "webhook-s3cret" not in attack["status"][1], attack
        prom = stack_prometheus(data, config["prometheus_port"])
        alertmanager = stack_prometheus(data, config["alertmanager_port"], "alertmanager")
        query = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": "up"})
        assert json.loads(http("GET", query)[1])["data"]["result"], "nothing was deleted"

        # the positive control: with the login the server keeps, each of them works
        delete = prom + "/api/v1/admin/tsdb/delete_series?match[]=" + urllib.parse.quote('{job="nothing_here"}')
        assert http("POST", delete)[0] == 204
        status, body = http("GET", alertmanager + "/api/v2/status")
        assert status == 200 and "webhook-s3cret" in body.decode()
        silence = {
            "matchers": [{"name": "alertname", "value": "Nothing", "isRegex": False}],
            "startsAt": "2020-01-01T00:00:00Z",
            "endsAt": "2999-01-01T00:00:00Z",
            "createdBy": "test",
            "comment": "the positive control",
        }
        headers = {"Content-Type": "application/json"}
        assert http("POST", alertmanager + "/api/v2/silences", json.dumps(silence).encode(), headers)[0] == 200

        # `rl-insight server url --prometheus`: for scripts and a browser of the server's own user
        shown = rl_insight("server", "url", "--prometheus")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.strip() == prom and json.loads(
            http("GET", shown.stdout.strip() + "/api/v1/query?query=up")[1]
        )

        # the password: in 0600 files only, a bcrypt hash in what the services read, on no command line
        password = (data / "secrets" / "prometheus-password").read_text().strip()
        for name in ("secrets/prometheus-password", "secrets/alertmanager-password", "prometheus-web.yml",
                     "alertmanager-web.yml"):  # fmt: skip
            assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
        assert password not in (data / "prometheus-web.yml").read_text()
        assert "$2b$" in (data / "prometheus-web.yml").read_text()
        lines = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                lines.append(open(f"/proc/{pid}/cmdline").read().replace("\0", " "))
            except OSError:
                pass
        assert any(f"--web.config.file={data}/prometheus-web.yml" in line for line in lines)
        assert not [line for line in lines if password in line]
        for log in (data / "logs").iterdir():
            assert password not in log.read_text(errors="replace"), log
    finally:
        rl_insight("server", "stop")


def test_the_prometheus_url_needs_a_server_here(tmp_path):
    shown = rl_insight("server", "url", "--prometheus")
    assert shown.returncode == 3 and "no rl-insight server runs here" in shown.stderr


@pytest.mark.parametrize("service", ["prometheus", "alertmanager"])
def test_the_services_get_the_hash_and_their_login_survives_a_restart(tmp_path, service):
    import bcrypt
    import yaml

    from verl_rl_insight.server.stores import credentials

    first = credentials.write_service_logins(tmp_path)[service]
    again = credentials.write_service_logins(tmp_path)[service]
    assert first == again and first[0] == "rl-insight" and len(first[1]) >= 24
    hashed = yaml.safe_load(credentials.web_config_file(tmp_path, service).read_text())["basic_auth_users"]
    assert bcrypt.checkpw(first[1].encode(), hashed["rl-insight"].encode())
