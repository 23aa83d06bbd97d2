"""No write without the token, on loopback too: the attacker holds a local shell as another user
(nobody, when the tests run as root) and no token, against the server `rl-insight server start`
runs on loopback (the hub alone). The server made its token at the first start (0600), the CLI of
the server's own user reads it, and the tokenless mode exists only when named on the command line
(``--local-trust``), which `server status` prints."""

import json
import os
import stat
import subprocess
import sys

from tests.helpers import http, rl_insight, write_server_config

NOBODY = 65534
NO_SERVICES = {name: {"enabled": False} for name in ("prometheus", "alertmanager", "tempo", "grafana")}
ATTACK = """
import json, sys, urllib.error, urllib.request
hub = sys.argv[1]
def call(method, path, body=None):
    request = urllib.request.Request(hub + path, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
push = {"batches": [{"project": "victim", "experiment_name": "run", "step": 99, "metrics": {"loss": 0.0}}]}
mark = {"project": "victim", "experiment_name": "run", "step": 1, "text": "mine now"}
print(json.dumps({
    "push": call("POST", "/api/v1/push", json.dumps(push).encode()),
    "mark": call("POST", "/api/v1/runs/marks", json.dumps(mark).encode()),
    "delete": call("DELETE", "/api/v1/runs?project=victim&experiment_name=run"),
}))
"""


def as_other_user(hub):
    root = os.geteuid() == 0
    kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if root else {}
    python = "/usr/bin/python3" if root and os.path.exists("/usr/bin/python3") else sys.executable
    result = subprocess.run(
        [python, "-c", ATTACK, hub], capture_output=True, text=True, timeout=60, cwd="/", env={}, **kwargs
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_server_on_loopback_takes_no_write_without_its_token(tmp_path):
    path, config = write_server_config(tmp_path, services=NO_SERVICES)
    started = rl_insight("server", "start", "--detach", "--config", str(path))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        hub = f"http://127.0.0.1:{config['port']}"
        token_file = tmp_path / "data" / "secrets" / "hub-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600  # made at the first start, this user's only
        assert as_other_user(hub) == {"push": 401, "mark": 401, "delete": 401}
        # the server's own user: its run logs a step with the token from the file it owns (a run is marked
        # after its first step), and the CLI reads the same file
        owner = {"Authorization": f"Bearer {token_file.read_text().strip()}", "Content-Type": "application/json"}
        step = {"batches": [{"project": "victim", "experiment_name": "run", "step": 1, "metrics": {"loss": 0.0}}]}
        assert http("POST", hub + "/api/v1/push", json.dumps(step).encode(), owner)[0] == 200
        marked = rl_insight("runs", "mark", "--project", "victim", "--experiment", "run", "--step", "1", "--text", "ok")
        assert marked.returncode == 0, marked.stdout + marked.stderr
        shown = rl_insight("server", "status")
        assert "need the token" in shown.stdout and "OPEN" not in shown.stdout, shown.stdout
    finally:
        rl_insight("server", "stop")


def test_the_tokenless_mode_is_named_on_the_command_line_and_status_says_so(tmp_path):
    (tmp_path / "file").mkdir()
    in_file, _ = write_server_config(tmp_path / "file", services=NO_SERVICES, local_trust=True)
    path, config = write_server_config(tmp_path, services=NO_SERVICES)
    refused = rl_insight("server", "start", "--detach", "--config", str(in_file))
    assert refused.returncode != 0 and "--local-trust" in refused.stdout + refused.stderr
    started = rl_insight("server", "start", "--detach", "--local-trust", "--config", str(path))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        hub = f"http://127.0.0.1:{config['port']}"
        assert as_other_user(hub)["push"] == 200  # what the person chose, and was told
        shown = rl_insight("server", "status")
        assert "OPEN to every user of this machine" in shown.stdout and "--local-trust" in shown.stdout, shown.stdout
        assert http("GET", hub + "/-/ready")[0] == 200
    finally:
        rl_insight("server", "stop")
