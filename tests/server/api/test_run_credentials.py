"""The server's token stays on the server: what the driver hands to Ray workers (and verl prints)
is a run credential, and against the real API on loopback it writes that run's metrics, targets,
spans and profile reports and nothing else: no other run, no read, no delete, no named scrape."""

import json

import pytest

from tests.helpers import http
from tests.server.stores.test_timeline_store import STEP_SPANS, otlp
from verl_rl_insight.contract import run_credential
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts, Startup
from verl_rl_insight.server.metrics.hub import MetricHub
from verl_rl_insight.server.stores.profiles import ProfileStore
from verl_rl_insight.server.stores.spans import SpanStore
from verl_rl_insight.trainer.verl_api.propagation import scoped_to_run

TOKEN = "the-servers-own-token"


@pytest.fixture
def server(tmp_path):
    hub = MetricHub()
    api = Api(ApiParts(hub, token=TOKEN, startup=Startup(spans=SpanStore(tmp_path / "spans")), profiles=ProfileStore()))
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


def test_one_runs_credentials_are_revoked_and_a_job_started_afterwards_writes_again(tmp_path):
    """A credential leaked in a training log: `rl-insight runs revoke` refuses it (403 naming the
    revocation) and every credential of that run minted before, not another run's; a credential
    minted afterwards (the job restarted) writes again; the revocation survives a server restart,
    and only the token may revoke (a run credential gets 403, a stranger 401)."""
    import os
    import stat

    from tests.helpers import rl_insight
    from verl_rl_insight.server.stores.revocations import Revocations

    def serve():
        revocations = Revocations(tmp_path / "revoked-runs.json")
        api = Api(ApiParts(MetricHub(), token=TOKEN, revocations=revocations))
        return api, HttpServer(api, "127.0.0.1", 0).start()

    api, http_server = serve()
    url = f"http://127.0.0.1:{http_server.port}"
    leaked, other = worker_credential(url), run_credential.mint(TOKEN, "p", "other")
    assert call("POST", url + "/api/v1/push", leaked, push_body("e"))[0] == 200  # the positive control
    assert call("POST", url + "/api/v1/runs/revoke?project=p&experiment_name=e", leaked)[0] == 403
    assert http("POST", url + "/api/v1/runs/revoke?project=p&experiment_name=e")[0] == 401
    env = dict(os.environ, RL_INSIGHT_SERVER_URL=url, RL_INSIGHT_TOKEN=TOKEN)
    revoked = rl_insight("runs", "revoke", "--project", "p", "--experiment", "e", env=env)
    assert revoked.returncode == 0 and "revoked p/e" in revoked.stdout, revoked.stdout + revoked.stderr
    status, answer = call("POST", url + "/api/v1/push", leaked, push_body("e"))
    assert status == 403 and "was revoked at" in answer
    assert call("POST", url + "/api/v1/push", other, push_body("other"))[0] == 200  # another run: untouched
    restarted_job = run_credential.mint(TOKEN, "p", "e")
    assert call("POST", url + "/api/v1/push", restarted_job, push_body("e"))[0] == 200
    assert stat.S_IMODE((tmp_path / "revoked-runs.json").stat().st_mode) == 0o600
    http_server.stop()
    api.close()
    api, http_server = serve()  # the server restarted
    url = f"http://127.0.0.1:{http_server.port}"
    try:
        assert call("POST", url + "/api/v1/push", leaked, push_body("e"))[0] == 403
        assert call("POST", url + "/api/v1/push", restarted_job, push_body("e"))[0] == 200
    finally:
        http_server.stop()
        api.close()


def test_a_damaged_revocation_file_refuses_every_credential_minted_before_and_the_server_starts(tmp_path):
    from verl_rl_insight.server.stores.revocations import Revocations

    path = tmp_path / "revoked-runs.json"
    before = run_credential.mint(TOKEN, "p", "e")
    path.write_text('{"runs": [["p", "e"')  # cut mid-write by an older release
    revocations = Revocations(path)
    with pytest.raises(run_credential.Forbidden, match="revoked"):
        run_credential.verify(TOKEN, before, revoked=revocations.revoked_at)
    assert list(tmp_path.glob("revoked-runs.json.damaged-*"))
    import time

    time.sleep(0.01)
    assert run_credential.verify(TOKEN, run_credential.mint(TOKEN, "p", "e"), revoked=revocations.revoked_at)


def test_a_config_that_is_not_a_json_object_is_not_handed_to_ray_workers():
    """VERL_RL_INSIGHT_CONFIG written as YAML by mistake (with the token in it): the driver cannot
    take the token out of it, so the workers do not get it at all (and could not read it)."""
    env = scoped_to_run(
        {
            "VERL_RL_INSIGHT_CONFIG": f"token: {TOKEN}",
            "RL_INSIGHT_TOKEN": TOKEN,
            "VERL_RL_INSIGHT_PROJECT": "p",
            "VERL_RL_INSIGHT_EXPERIMENT": "e",
        }
    )
    assert TOKEN not in json.dumps(env) and "VERL_RL_INSIGHT_CONFIG" not in env
    assert run_credential.is_run_credential(env["RL_INSIGHT_TOKEN"])  # the positive control: a credential instead
    kept = scoped_to_run({"VERL_RL_INSIGHT_CONFIG": json.dumps({"token": TOKEN, "plugins": {"hardware": False}})})
    assert json.loads(kept["VERL_RL_INSIGHT_CONFIG"]) == {"plugins": {"hardware": False}}


def test_a_revoke_goes_by_the_servers_clock_not_by_the_minting_nodes(tmp_path):
    """A driver whose clock is 10 minutes fast mints a credential that says it was made after any
    revoke of the next 10 minutes: the server refuses it after the revoke all the same (it saw
    it in use before), and one of that node first seen after the revoke; a job started since on a
    node with a right clock writes; it all survives a restart. A clock further ahead than the
    server's future window is refused at once, naming the skew."""
    import time

    from verl_rl_insight.server.stores.revocations import Revocations

    def serve(future_s):
        api = Api(
            ApiParts(
                MetricHub(), token=TOKEN, revocations=Revocations(tmp_path / "revoked-runs.json", future_s=future_s)
            )
        )
        server = HttpServer(api, "127.0.0.1", 0).start()
        return api, server, f"http://127.0.0.1:{server.port}"

    api, http_server, url = serve(future_s=900)  # this server takes clocks up to 15 minutes ahead
    try:
        fast = run_credential.mint(TOKEN, "p", "e", now=time.time() + 600)
        unused_fast = run_credential.mint(TOKEN, "p", "e", now=time.time() + 590)  # minted before, used after
        assert call("POST", url + "/api/v1/push", fast, push_body("e"))[0] == 200  # in use before the revoke
        revoke = url + "/api/v1/runs/revoke?project=p&experiment_name=e"
        assert http("POST", revoke, headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
        status, answer = call("POST", url + "/api/v1/push", fast, push_body("e"))
        assert status == 403 and "was revoked at" in answer and "in use then" in answer, answer
        status, answer = call("POST", url + "/api/v1/push", unused_fast, push_body("e"))
        assert status == 403 and "by a clock ahead of this server's" in answer, answer
        time.sleep(0.01)
        restarted_job = run_credential.mint(TOKEN, "p", "e")  # a node with a right clock
        assert call("POST", url + "/api/v1/push", restarted_job, push_body("e"))[0] == 200
    finally:
        http_server.stop()
        api.close()
    api, http_server, url = serve(future_s=900)  # the server restarted
    try:
        for refused in (fast, unused_fast):
            assert call("POST", url + "/api/v1/push", refused, push_body("e"))[0] == 403
        assert call("POST", url + "/api/v1/push", restarted_job, push_body("e"))[0] == 200
    finally:
        http_server.stop()
        api.close()
    api, http_server, url = serve(future_s=300)  # the default window: 10 minutes ahead is past it
    try:
        other_run = run_credential.mint(TOKEN, "p", "other", now=time.time() + 600)
        status, answer = call("POST", url + "/api/v1/push", other_run, push_body("other"))
        assert status == 403 and "ahead of this server's clock" in answer and "max_future_s" in answer, answer
    finally:
        http_server.stop()
        api.close()
