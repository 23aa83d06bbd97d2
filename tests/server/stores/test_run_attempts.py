"""Each trainer step's attempt (server/stores/run_attempts.py) as the hub exposes it: the rule of
contract/attempts.py, a series of the run's own stream, kept across a server restart, forgotten
with the run; a client cannot write it."""

from tests.helpers import http
from verl_rl_insight.contract.attempts import ATTEMPT_METRIC
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.metrics.hub import MetricHub
from verl_rl_insight.server.stores.run_attempts import RunAttempts

RUN = ("proj", "exp")
TOKEN = "attempts-t0ken-9b1f"


def hub_with(attempts):
    return MetricHub(attempts=attempts, clock=lambda: 10_000.0, listeners=(attempts.saved,))


def log(hub, step, at, experiment="exp", labels=None):
    batch = {"project": "proj", "experiment_name": experiment, "step": step, "time": at}
    batch.update(metrics={"rl_insight_monitor_x": float(step)}, **({"labels": labels} if labels else {}))
    return hub.push({"batches": [batch]})


def exposed_attempt(hub, experiment="exp"):
    body = hub.live_body().decode()  # what a scrape gets
    [line] = [x for x in body.splitlines() if x.startswith(f'{ATTEMPT_METRIC}{{experiment_name="{experiment}"')]
    return float(line.rsplit(" ", 1)[1])


def test_a_restart_from_an_earlier_step_is_a_new_attempt_a_resume_and_a_late_step_are_not(tmp_path):
    attempts = RunAttempts(tmp_path / "run-attempts.json")
    hub = hub_with(attempts)
    for step in range(1, 31):
        log(hub, step, 1000.0 + step)
    assert attempts.get(RUN) == 1
    for step in range(31, 34):  # verl resumed from its checkpoint: steps go on
        log(hub, step, 2000.0 + step)
    assert attempts.get(RUN) == 1
    log(hub, 29, 1029.5)  # sent late, with its own older time: it has its place before the newest
    assert attempts.get(RUN) == 1
    for step in (1, 2, 3):  # started again from step 1 under the same name
        log(hub, step, 3000.0 + step)
    assert attempts.get(RUN) == 2 and exposed_attempt(hub) == 2.0
    log(hub, 2, 4000.0)  # a resume from an older checkpoint (step 2 after step 3): another attempt
    assert attempts.get(RUN) == 3
    log(hub, 1, 5000.0, labels={"replica": "0"})  # a stream with extra labels is not the trainer's: no attempt
    assert attempts.get(RUN) == 3


def test_a_server_started_again_goes_on_counting_and_a_deleted_run_starts_from_one(tmp_path):
    path = tmp_path / "run-attempts.json"
    hub = hub_with(RunAttempts(path))
    for step, at in ((1, 1.0), (2, 2.0), (1, 3.0)):
        log(hub, step, 1000.0 + at)
    again = RunAttempts(path)  # the file a restarted server reads
    assert again.get(RUN) == 2
    hub = hub_with(again)
    log(hub, 2, 1004.0)
    log(hub, 1, 1005.0)
    assert again.get(RUN) == 3 and exposed_attempt(hub) == 3.0
    api = Api(ApiParts(hub, token=TOKEN))
    server = HttpServer(api, "127.0.0.1", 0).start()
    try:  # rl-insight runs delete
        url = f"http://127.0.0.1:{server.port}/api/v1/runs?project=proj&experiment_name=exp"
        status, body = http("DELETE", url, headers={"Authorization": f"Bearer {TOKEN}"})
        assert status == 200, body
    finally:
        server.stop()
        api.close()
    assert again.get(RUN) is None and RunAttempts(path).get(RUN) is None
    log(hub, 5, 1006.0)
    assert again.get(RUN) == 1


def test_a_client_cannot_write_the_attempt():
    hub = hub_with(RunAttempts())
    batch = {"project": "proj", "experiment_name": "exp", "step": 1, "time": 1000.0}
    answer = hub.push({"batches": [{**batch, "metrics": {ATTEMPT_METRIC: 7.0}}]})
    assert ATTEMPT_METRIC in answer.get("dropped_keys", {})
    assert exposed_attempt(hub) == 1.0
