"""The server's token stays on the server: what the driver hands to Ray workers (and verl prints)
is a run credential, and against the real API on loopback it writes that run's metrics, targets,
spans and profile reports and nothing else: no other run, no read, no delete, no named scrape."""

import json

import pytest

from tests.helpers import http
from tests.test_timeline_store import STEP_SPANS, otlp
from verl_rl_insight.contract import run_credential
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.routes import Api
from verl_rl_insight.server.metrics.hub import MetricHub
from verl_rl_insight.server.stores.profiles import ProfileStore
from verl_rl_insight.server.stores.spans import SpanStore
from verl_rl_insight.trainer.verl_api.propagation import scoped_to_run

TOKEN = "the-servers-own-token"


@pytest.fixture
def server(tmp_path):
    hub = MetricHub()
    api = Api(hub, token=TOKEN, spans=SpanStore(tmp_path / "spans"), profiles=ProfileStore())
    http_server = HttpServer(api, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{http_server.port}", hub
    http_server.stop()
    api.close()


def worker_credential(url):
    """What a Ray worker of run p/e gets from the driver that holds the token."""
    env = scoped_to_run(
        {
            "RL_INSIGHT_SERVER_URL": url.replace("http://", f"http://rl-insight:{TOKEN}@"),
            "VERL_RL_INSIGHT_PROJECT": "p",
            "VERL_RL_INSIGHT_EXPERIMENT": "e",
        }
    )
    assert TOKEN not in json.dumps(env) and env["RL_INSIGHT_SERVER_URL"] == url
    return env["RL_INSIGHT_TOKEN"]


def call(method, url, credential, body=None, kind="application/json"):
    headers = {"Authorization": f"Bearer {credential}", "Content-Type": kind}
    status, answer = http(method, url, body=body, headers=headers)
    return status, answer.decode(errors="replace")


def push_body(*runs):
    return json.dumps(
        {"batches": [{"project": "p", "experiment_name": run, "step": 1, "metrics": {"m": 1.0}} for run in runs]}
    ).encode()


def target(run):
    labels = {"project": "p", "experiment_name": run}
    return json.dumps({"address": "127.0.0.1:8000", "job": f"vllm-{run}", "labels": labels}).encode()


def test_a_run_credential_writes_its_run_and_nothing_else(server):
    url, hub = server
    credential = worker_credential(url)
    protobuf = "application/x-protobuf"

    assert call("POST", url + "/api/v1/push", credential, push_body("e"))[0] == 200
    status, answer = call("POST", url + "/api/v1/push", credential, push_body("e", "other"))
    assert status == 403 and "batches[1]: this run credential writes p/e only, not p/other" in answer
    assert {s["labels"]["experiment_name"] for s in hub.streams()} == {"e"}  # the mixed push: nothing applied

    assert call("POST", url + "/api/v1/targets", credential, target("e"))[0] == 200
    assert call("POST", url + "/api/v1/targets", credential, target("other"))[0] == 403
    own_spans = otlp(STEP_SPANS).SerializeToString()
    assert call("POST", url + "/v1/traces", credential, own_spans, protobuf)[0] == 200
    other_spans = otlp(STEP_SPANS, experiment="other").SerializeToString()
    assert call("POST", url + "/v1/traces", credential, other_spans, protobuf)[0] == 403
    assert call("GET", url + "/api/v1/profiles?project=p&experiment_name=e", credential)[0] == 200
    assert call("GET", url + "/api/v1/profiles?project=p&experiment_name=other", credential)[0] == 403

    # nothing to read, delete or scrape; the token does all of it (the positive control)
    for method, path in (
        ("GET", "/api/v1/spans?project=p&experiment_name=e"),
        ("GET", "/metrics?scraper=stolen"),
        ("DELETE", "/api/v1/runs?project=p&experiment_name=other"),
        ("POST", "/api/v1/profiles"),
        ("DELETE", "/api/v1/targets?job=vllm-e&address=127.0.0.1:8000"),
    ):
        status, answer = call(method, url + path, credential, b"{}" if method == "POST" else None)
        expected = 200 if path.startswith("/api/v1/targets") else 403  # its own target it may remove
        assert status == expected, (method, path, status, answer)
        if expected == 403:
            assert "run credential" in answer
    assert call("GET", url + "/api/v1/spans?project=p&experiment_name=e", TOKEN)[0] == 200
    assert call("GET", url + "/metrics?scraper=mine", TOKEN)[0] == 200


def test_a_forged_or_expired_credential_is_refused(server):
    url, _ = server
    forged = run_credential.mint("another-servers-token", "p", "e")
    expired = run_credential.mint(TOKEN, "p", "e", days=-1)
    status, answer = call("POST", url + "/api/v1/push", forged, push_body("e"))
    assert status == 403 and "not signed by this server's token" in answer
    status, answer = call("POST", url + "/api/v1/push", expired, push_body("e"))
    assert status == 403 and "expired at" in answer and "restart the job" in answer
    assert call("POST", url + "/api/v1/push", worker_credential(url), push_body("e"))[0] == 200


def test_rl_insight_config_shows_that_a_token_is_set_not_the_token():
    from tests.helpers import rl_insight

    shown = rl_insight("config", env={"RL_INSIGHT_SERVER_URL": f"http://rl-insight:{TOKEN}@127.0.0.1:18080"})
    assert shown.returncode == 0 and "server_url: http://127.0.0.1:18080" in shown.stdout
    assert TOKEN not in shown.stdout + shown.stderr and "token: '***'" in shown.stdout
