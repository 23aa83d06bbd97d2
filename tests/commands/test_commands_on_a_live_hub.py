"""The commands against a live server, as a user meets them (the hub alone, or with a real Prometheus):
`samples` with a wrong token, `runs mark` of an unknown run or a step marked again, `diagnose` of an
unknown run, a CSV none of the detectors read, the logger spelled `rl-insight`, the card of an unresolved
config, a server older than a batch's keys, a profile asked of a finished run; with verl's real
``Tracking`` and Hydra config."""

import json
import os

import pytest

from tests.helpers import free_port, http, push, rl_insight, run_python, start_hub_process, stop_group, wait_for
from verl_rl_insight.commands.demo.verl_step import step_metrics
from verl_rl_insight.contract.naming import METRIC_PREFIX
from verl_rl_insight.contract.runs import RUN_FINISHED
from verl_rl_insight.trainer.client.metric_batch import MetricBatch

TOKEN = "round3-token-6a1f0d"


def pushed(url, project, experiment, steps, token=None):
    for step in steps:
        body = MetricBatch(project, experiment, step, 1.7e9 + step, step_metrics(step, 10), METRIC_PREFIX).to_json()
        status, answer = push(url, {"batches": [body]}, token)
        assert status == 200, answer


@pytest.fixture
def hub(tmp_path):
    port = free_port()
    process = start_hub_process(port, tmp_path, token=TOKEN)
    url = f"http://127.0.0.1:{port}"
    try:
        pushed(url, "p", "run-a", range(1, 4), TOKEN)
        yield url
    finally:
        stop_group(process)


def cli(url, *args, token=TOKEN):
    return rl_insight(
        *args, env={"RL_INSIGHT_SERVER_URL": url, "RL_INSIGHT_TOKEN": token, "VERL_RL_INSIGHT_CONFIG": None}
    )


def test_samples_with_a_wrong_token_says_the_token_was_refused_not_that_there_are_no_spans(hub):
    said = cli(hub, "samples", "--project", "p", "--experiment", "run-a", token="not-the-token")
    assert said.returncode == 2, said.stdout + said.stderr
    assert "refused the token (401)" in said.stderr and "no spans of" not in said.stderr, said.stderr


def test_runs_mark_refuses_an_unknown_run_and_marking_a_step_again_keeps_its_baseline_reset(hub):
    typo = cli(hub, "runs", "mark", "--project", "p", "--experiment", "run-b", "--step", "2", "--text", "x")
    assert typo.returncode == 2 and "no run p/run-b at the server (project p has run-a)" in typo.stderr, typo.stderr
    first = cli(hub, "runs", "mark", "--project", "p", "--experiment", "run-a", "--step", "2", "--text", "stage 2",
                "--reset-baseline")  # fmt: skip
    assert first.returncode == 0, first.stderr
    again = cli(hub, "runs", "mark", "--project", "p", "--experiment", "run-a", "--step", "2", "--text", "stage two")
    assert again.returncode == 0, again.stderr
    assert "baselines again here (its baseline reset kept: --no-reset-baseline drops it)" in again.stdout, again.stdout
    listed = json.loads(cli(hub, "runs", "marks", "--project", "p", "--experiment", "run-a", "--json").stdout)
    assert [(m["step"], m["text"], m["reset_baseline"]) for m in listed] == [(2, "stage two", True)]
    dropped = cli(hub, "runs", "mark", "--project", "p", "--experiment", "run-a", "--step", "2", "--text", "plain",
                  "--no-reset-baseline")  # fmt: skip
    assert dropped.returncode == 0 and "baselines" not in dropped.stdout, dropped.stdout


def test_diagnose_of_an_unknown_run_names_the_known_ones(monitoring_server):
    hub, _ = monitoring_server
    pushed(hub, "p", "run-a", range(1, 4))
    said = rl_insight("diagnose", "--project", "p", "--experiment", "nope", env={"RL_INSIGHT_SERVER_URL": hub})
    assert said.returncode == 2, said.stdout + said.stderr
    assert "no run p/nope at the server (project p has run-a)" in said.stderr, said.stderr


def test_a_csv_with_none_of_the_detectors_keys_says_nothing_was_checked_and_exits_2(tmp_path):
    csv = tmp_path / "run.csv"
    csv.write_text("step,my/own_loss,my/own_score\n1,0.5,0.1\n2,0.4,0.2\n3,0.3,0.3\n")
    said = rl_insight("diagnose", "--file", str(csv))
    assert said.returncode == 2, said.stdout + said.stderr
    assert "none of the keys the detectors read is in it: nothing was checked" in said.stderr, said.stderr
    assert "no finding" not in said.stdout


TRACKING = """
from verl.utils.tracking import Tracking
from verl_rl_insight.commands.demo.verl_step import step_metrics
tracking = Tracking("p", "hyphen", default_backend=["console", "rl-insight"])
tracking.log(step_metrics(1, 10), step=1)
tracking.finish()
print("LOGGED")
"""


def test_the_logger_spelled_rl_hyphen_insight_is_the_same_backend(hub):
    env = {"RL_INSIGHT_SERVER_URL": f"http://rl-insight:{TOKEN}@{hub[7:]}"}
    logged = run_python(TRACKING, env=env)
    assert logged.returncode == 0 and "LOGGED" in logged.stdout, logged.stderr[-2000:]

    def seen():
        streams = json.loads(http("GET", hub + "/api/v1/streams")[1])["streams"]
        return [s for s in streams if s["labels"].get("experiment_name") == "hyphen" and s["step"] == 1]

    wait_for(seen, 20, what="the hyphen run's step at the hub")


def test_the_card_of_an_unresolved_config_holds_no_reference_runs_show_would_print(monkeypatch):
    """verl's own Hydra config handed over without ``resolve=True`` (the demo does): the card resolves
    ``${oc.select:...}`` and ``${..x}`` as OmegaConf would."""
    from omegaconf import OmegaConf

    from tests.server.stores.test_run_card import verl_config
    from verl_rl_insight.trainer.client.run_card import build_card

    raw = OmegaConf.to_container(verl_config("unresolved", "1e-6", 4))  # not resolved
    assert "${oc.select:" in json.dumps(raw)
    card = build_card("cards", "unresolved", raw, [], environ=dict(os.environ))
    text = json.dumps(card["config"])
    left = [part.split("}")[0] for part in text.split("${")[1:]]
    assert not [ref for ref in left if not ref.startswith(("oc.env", "oc.create", "oc.dict", "eval"))], left[:10]
    resolved = OmegaConf.to_container(verl_config("unresolved", "1e-6", 4), resolve=True)
    assert (
        card["config"]["actor_rollout_ref"]["actor"]["rollout_n"] == resolved["actor_rollout_ref"]["actor"]["rollout_n"]
    )


def test_a_server_older_than_a_batchs_keys_still_gets_every_value():
    """A trainer newer than its server: the server (a TEST DOUBLE of the previous release's push, which
    refuses a field it does not know with that release's words) gets the values, without the keys."""
    import http.server
    import threading

    from verl_rl_insight.trainer.client.sender import BatchSender

    got = []

    class OldPush(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if any("keys" in b for b in body["batches"]):
                answer, status = {"error": "batches[0]: unknown field 'keys' (known: experiment_name, ...)"}, 400
            else:
                got.extend(body["batches"])
                answer, status = {"accepted": len(body["batches"]), "duplicates": 0, "hub": "old"}, 200
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OldPush)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sender = BatchSender(f"http://127.0.0.1:{server.server_address[1]}/api/v1/push", linger_s=0.01)
        for step in (1, 2):
            sender.submit(MetricBatch("p", "old", step, 1.7e9 + step, step_metrics(step, 10), METRIC_PREFIX))
        assert sender.flush(20)
        sender.close(5)
    finally:
        server.shutdown()
    assert [b["step"] for b in got] == [1, 2]
    assert all(f"{METRIC_PREFIX}perf_mfu_actor" in b["metrics"] and "keys" not in b for b in got)  # values kept


def test_a_profile_asked_of_a_finished_run_is_refused_over_http_naming_its_state(hub):
    ask = {"project": "p", "experiment_name": "run-a", "first_step": 5}
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    status, answer = http("POST", hub + "/api/v1/profiles", json.dumps(ask).encode(), headers)
    assert status == 200, answer  # still running: a coming step can be profiled
    finish = MetricBatch("p", "run-a", None, 1.7e9 + 10, {RUN_FINISHED: 1}).to_json()
    assert push(hub, {"batches": [finish]}, TOKEN)[0] == 200
    status, answer = http("POST", hub + "/api/v1/profiles", json.dumps({**ask, "first_step": 6}).encode(), headers)
    assert status == 409, answer
    assert json.loads(answer)["error"] == "p/run-a is in state finished: it has no coming step to profile"
    listed = json.loads(http("GET", hub + "/api/v1/profiles?project=p&experiment_name=run-a", headers=headers)[1])
    assert [r["first_step"] for r in listed["profiles"]] == [5]  # the refused one was not kept
