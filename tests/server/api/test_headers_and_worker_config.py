"""Every answer of the API carries ``X-Content-Type-Options: nosniff`` (a JSON answer holding text a
run logged is never read as HTML or script by a browser), 2xx, 4xx and the scrape alike; and a
setting that names a secret (an unknown ``plugins.metric_push.token`` given as a Hydra override) is
not handed to the Ray workers: secrets never travel in config, the workers get a run credential."""

import json
import logging
import urllib.error
import urllib.request

import pytest

from verl_rl_insight.contract import environment, run_credential
from verl_rl_insight.trainer.config import ENV_CONFIG_JSON, ENV_TOKEN
from verl_rl_insight.trainer.runtime import ENV_EXPERIMENT, ENV_PROJECT
from verl_rl_insight.trainer.verl_api.propagation import forwarded_environment, prepare_driver_environment
from verl_rl_insight.trainer.verl_api.tracking_backend import ENV_VERL_ENABLE

TOKEN = "nosniff-t0ken"


def answer_headers(method, url, body=None, headers=None):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers


def test_every_api_answer_carries_nosniff(hub_server):
    server = hub_server(token=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    batch = {"project": "p", "experiment_name": "e", "step": 1, "metrics": {"m": 1.0}}
    asked = [
        ("GET", "/api/v1/hub", None, auth, 200),
        ("GET", "/metrics", None, {}, 200),
        ("GET", "/openapi.json", None, {}, 200),
        ("POST", "/api/v1/push", json.dumps({"batches": [batch]}).encode(), auth, 200),
        ("POST", "/api/v1/push", b'{"batches": [{"project": ""}]}', auth, 400),
        ("POST", "/api/v1/push", json.dumps({"batches": [batch]}).encode(), {}, 401),
        ("GET", "/api/v1/explorer/run?project=p&experiment_name=none", None, auth, 404),
        ("GET", "/api/v1/no-such-route", None, auth, 404),
    ]
    for method, path, body, headers, status in asked:
        got, answer = answer_headers(method, server.url + path, body, headers)
        assert got == status, (method, path, got)
        assert answer.get_all("X-Content-Type-Options") == ["nosniff"], (method, path, got)


@pytest.mark.parametrize("key", ["token", "api_key", "password", "auth_header"])
def test_a_secret_named_plugin_setting_never_reaches_the_ray_workers_env(monkeypatch, caplog, key):
    """What verl's ``run_ppo`` does: the driver publishes its rl_insight block, then the patched
    runtime_env takes ``forwarded_environment()`` to every worker (and verl prints it)."""
    published = (ENV_CONFIG_JSON, ENV_TOKEN, ENV_VERL_ENABLE, environment.COMMAND, environment.WORKDIR)
    for name in (*published, ENV_PROJECT, ENV_EXPERIMENT):  # what the driver sets: undone after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"http://rl-insight:{TOKEN}@127.0.0.1:18080")
    secret = f"plugin-secret-{key}-7c1d"
    config = {
        "trainer": {
            "project_name": "p",
            "experiment_name": "e",
            "logger": ["console", "rl_insight"],
            "rl_insight": {"plugins": {"metric_push": {key: secret, "max_retries": 3}, "hardware": {"enabled": True}}},
        }
    }
    caplog.set_level(logging.WARNING, logger="verl_rl_insight")
    prepare_driver_environment(config)
    env = forwarded_environment()
    text = json.dumps(env)
    assert secret not in text and TOKEN not in text
    block = json.loads(env["VERL_RL_INSIGHT_CONFIG"])
    assert block["plugins"] == {"metric_push": {"max_retries": 3}, "hardware": {"enabled": True}}
    assert run_credential.is_run_credential(env["RL_INSIGHT_TOKEN"])  # the positive control
    assert f"plugins.metric_push.{key}" in caplog.text and secret not in caplog.text
