"""`rl-insight profile`: a future step of a running job profiled by verl's own profiler, asked for
through the server. The job is the demo (verl's real run_ppo and patches, its training loop
gating the profiler on `global_profiler.steps` as verl's fit loop does, its actor's profiler
verl's real DistProfiler with the torch tool, writing real traces on CPU)."""

import contextlib
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import isolated
from tests.helpers import (
    REPO,
    http,
    hub_process,
    require_prometheus,
    rl_insight,
    stop_group,
    wait_for,
    write_server_config,
)
from verl_rl_insight.commands.demo.command import PROJECT, compose
from verl_rl_insight.commands.demo.verl_step import step_metrics
from verl_rl_insight.trainer.plugins.profiler import arm, capability, refusal

pytestmark = pytest.mark.local_ray  # starts a local Ray cluster: one at a time under -n (tests/parallel.py)

TOKEN = "profile-token"


def test_the_requested_step_and_only_it_is_profiled_in_the_demo(tmp_path):
    require_prometheus()
    path, config = write_server_config(
        tmp_path, services={name: {"enabled": False} for name in ("tempo", "grafana", "alertmanager")}
    )
    env = {"VERL_RL_INSIGHT_CONFIG": None, "RL_INSIGHT_HOME": str(tmp_path / "home")}
    assert rl_insight("server", "start", "--detach", "--config", str(path), env=env).returncode == 0
    hub = f"http://127.0.0.1:{config['port']}"
    demo = subprocess.Popen(
        [sys.executable, "-m", "verl_rl_insight", "demo", "--steps", "16", "--step-seconds", "1.5"]
        + ["--experiment", "profiled", "--no-transfer-queue"],
        cwd=tmp_path,
        env={**__import__("os").environ, "RL_INSIGHT_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def step():
            streams = json.loads(http("GET", hub + "/api/v1/streams")[1])["streams"]
            found = [s["step"] for s in streams if s["labels"].get("experiment_name") == "profiled" and s["step"]]
            return max(found, default=0)

        at = wait_for(lambda: step() >= 2 and step(), 180, what="the demo at step 2")
        passed = rl_insight("profile", "--project", PROJECT, "--experiment", "profiled", "--steps", str(at), env=env)
        assert passed.returncode == 1 and f"step {at} has begun or passed" in passed.stderr
        target = step() + 5  # 7.5 s ahead: the command's own start-up takes seconds on a loaded machine
        asked = rl_insight(
            "profile", "--project", PROJECT, "--experiment", "profiled", "--steps", str(target), "--wait",
            "--timeout", "120", env=env,
        )  # fmt: skip
        assert asked.returncode == 0, asked.stdout + asked.stderr
        assert f"steps {target}..{target} of {PROJECT}/profiled" in asked.stdout
        under_data = tmp_path / "data" / "profiles" / PROJECT / "profiled"  # the server's data dir, not ./outputs
        assert f"finished: profiled steps {target}; traces in {under_data}" in asked.stdout
        listed = rl_insight("profile", "list", "--project", PROJECT, "--experiment", "profiled", "--json", env=env)
        [record] = json.loads(listed.stdout)["profiles"]
        assert record["state"] == "finished" and record["steps"] == [target]
        traces = Path(record["trace_dir"])
        assert traces == under_data and not (tmp_path / "outputs").exists()
        files = sorted(traces.glob("*.json.gz"))
        assert [f.name.split("_")[:4] for f in files] == [["actor", "train", f"step{target}", "rank0"]]
        events = json.loads(gzip.decompress(files[0].read_bytes()))["traceEvents"]
        assert any(e.get("name") == "aten::mm" for e in events)  # the actor's update, recorded
        table = rl_insight("profile", "list", env=env).stdout
        assert f"finished  {target} " in table and str(traces) in table
        # the trainer read the step's traces (rl-insight profile analyze, a process of its own) and sent
        # the per-rank summary, not the trace: the step page's answer has it
        query = f"project={PROJECT}&experiment_name=profiled&step={target}"
        page = wait_for(
            lambda: (p := json.loads(http("GET", hub + f"/api/v1/explorer/step?{query}")[1]))["profile"] and p,
            120,
            what="the profiled step's summary on the step page",
        )
        [update] = [phase for phase in page["profile"]["phases"] if phase["phase"] == "update_actor"]
        assert [r["rank"] for r in update["ranks"]] == ["0"] and update["ranks"][0]["duration_s"] > 0
        assert page["profile"]["answer"].startswith(f"step {target}: ")
        # and `rl-insight report` carries that step's page with its ranks
        report = tmp_path / "report.html"
        made = rl_insight("report", "--project", PROJECT, "--experiment", "profiled", "-o", str(report), env=env)
        assert made.returncode == 0, made.stderr
        assert f'"answer": "step {target}: ' in report.read_text()
        assert demo.wait(180) == 0
        # the profiled step on the timeline's profiler lane, and counted for the dashboards' annotations
        token = (Path(config["data_dir"]) / "secrets" / "hub-token").read_text().strip()  # made at the first start
        spans = [
            json.loads(line)
            for line in http(
                "GET",
                hub + f"/api/v1/spans?project={PROJECT}&experiment_name=profiled",
                headers={"Authorization": f"Bearer {token}"},  # a run's spans are read with the server's token
            )[1].splitlines()
        ]
        [mark] = [s for s in spans if s["attributes"].get("state_lane_id") == "profiler"]
        assert mark["attributes"]["verl.step"] == target and mark["attributes"]["requests"] == record["id"]
    finally:
        if demo.poll() is None:
            stop_group(demo)
        rl_insight("server", "stop", env=env)


@pytest.fixture(scope="module")
def verl_config():
    return compose("x", 3, 1, "vllm", 2, 0, 0, False)  # verl's own ppo_trainer config, as the demo composes it


def test_a_job_without_a_profiler_is_told_the_override_that_gives_it_one(verl_config):
    able = capability(verl_config)
    assert able["tool"] is None and able["roles"] == {}
    why = refusal({"role": None, "ranks": None}, able)
    assert "global_profiler.tool=torch" in why and "actor_rollout_ref.actor.profiler.enable=True" in why
    assert "+rl_insight.plugins.profiler.arm=torch" in why


def test_arming_gives_a_dormant_torch_profiler_and_requests_beyond_it_are_refused_with_the_fix(verl_config, tmp_path):
    from omegaconf import OmegaConf

    config = verl_config.copy()
    settings = OmegaConf.create({"arm": "torch", "arm_roles": ["actor"], "arm_ranks": [0]})
    assert arm(config, settings)
    assert config.global_profiler.steps == []  # nothing profiled until asked
    able = capability(config)
    assert able["tool"] == "torch" and able["roles"]["actor"] == [0] and Path(able["save_path"]).is_absolute()
    assert refusal({"role": "actor", "ranks": [0]}, able) is None
    assert "actor_rollout_ref.actor.profiler.ranks=[0,1]" in refusal({"role": "actor", "ranks": [0, 1]}, able)
    assert "actor_rollout_ref.ref.profiler.enable=True" in refusal({"role": "ref", "ranks": None}, able)


def test_an_armed_profiler_writes_under_rl_insight_home_or_the_path_named_not_in_the_working_directory(
    verl_config, tmp_path, monkeypatch
):
    from omegaconf import OmegaConf

    monkeypatch.chdir(tmp_path)  # the directory the job happens to be started from
    settings = {"arm": "torch", "arm_roles": ["actor"], "arm_ranks": [0]}
    config = verl_config.copy()
    assert arm(config, OmegaConf.create(settings))
    home = tmp_path / "home"  # RL_INSIGHT_HOME (conftest)
    assert config.global_profiler.save_path == str(home / "profiles" / PROJECT / "x")
    config = verl_config.copy()
    assert arm(config, OmegaConf.create({**settings, "save_path": str(tmp_path / "named")}))
    assert config.global_profiler.save_path == str(tmp_path / "named")
    config = verl_config.copy()
    OmegaConf.update(config, "global_profiler.save_path", "/data/my-traces")  # the job's own choice stays
    assert arm(config, OmegaConf.create(settings)) and config.global_profiler.save_path == "/data/my-traces"


@pytest.fixture
def hub(tmp_path):
    with hub_process(tmp_path, token=TOKEN) as url:
        yield url


@pytest.fixture(scope="module")
def refusing_hub(tmp_path_factory):
    """One hub for the requests it refuses: a 400 stores nothing, so those tests share it."""
    folder = tmp_path_factory.mktemp("refusing")
    with contextlib.ExitStack() as stack:
        with isolated(folder / "home"):
            url = stack.enter_context(hub_process(folder, token=TOKEN))
        yield url


@pytest.mark.parametrize(
    "body, field",
    [
        ({"project": "p", "experiment_name": "e", "first_step": 0}, "first_step"),
        ({"project": "p", "experiment_name": "e", "first_step": 5, "last_step": 3}, "last_step 3 is before"),
        ({"project": "p", "experiment_name": "e", "first_step": 1, "last_step": 500}, "last_step: at most 100"),
        ({"project": "p", "experiment_name": "e", "first_step": 1, "role": "judge"}, "role"),
        ({"project": "p", "experiment_name": "e", "first_step": 1, "ranks": [-1]}, "ranks[0]"),
        ({"project": "p", "experiment_name": "e", "first_step": 1, "steps": [1]}, "unknown field 'steps'"),
        ({"experiment_name": "e", "first_step": 1}, "project must be given"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_field(refusing_hub, body, field):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, text = http("POST", refusing_hub + "/api/v1/profiles", json.dumps(body).encode(), auth)
    assert status == 400 and field in json.loads(text)["error"], text
    assert json.loads(http("GET", refusing_hub + "/api/v1/profiles", headers=auth)[1])["profiles"] == []  # none kept


def test_requests_need_the_token_and_reports_name_only_their_own_run(hub, tmp_path):
    body = json.dumps({"project": "p", "experiment_name": "e", "first_step": 3}).encode()
    assert http("POST", hub + "/api/v1/profiles", body)[0] == 401
    assert http("GET", hub + "/api/v1/profiles")[0] == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, text = http("POST", hub + "/api/v1/profiles", body, auth)
    assert status == 200
    record = json.loads(text)
    assert record["state"] == "requested" and record["first_step"] == record["last_step"] == 3
    other = {"project": "p", "experiment_name": "other", "updates": [{"id": record["id"], "state": "armed"}]}
    status, text = http("POST", hub + "/api/v1/profiles/report", json.dumps(other).encode(), auth)
    assert status == 404 and record["id"] in json.loads(text)["error"]
    own = {**other, "experiment_name": "e", "capability": {"tool": "torch", "roles": {"actor": [0]}}}
    assert http("POST", hub + "/api/v1/profiles/report", json.dumps(own).encode(), auth)[0] == 200
    listed = json.loads(http("GET", hub + "/api/v1/profiles?project=p&experiment_name=e", headers=auth)[1])
    assert [p["state"] for p in listed["profiles"]] == ["armed"] and listed["capability"]["tool"] == "torch"
    assert (tmp_path / "data" / "profiles.json").stat().st_mode & 0o777 == 0o600


@pytest.fixture
def profile_server():
    """The real hub and API with a profile store, in this process, on loopback, open (no token)."""
    from types import SimpleNamespace

    from verl_rl_insight.server.api.asgi import Api
    from verl_rl_insight.server.api.http_server import HttpServer
    from verl_rl_insight.server.api.parts import ApiParts
    from verl_rl_insight.server.metrics.hub import MetricHub
    from verl_rl_insight.server.stores.profiles import ProfileStore

    hub = MetricHub()
    api = Api(ApiParts(hub, profiles=ProfileStore()))
    http_server = HttpServer(api, "127.0.0.1", 0).start()
    yield SimpleNamespace(url=f"http://127.0.0.1:{http_server.port}", hub=hub)
    http_server.stop()
    api.close()


def test_a_mistyped_run_is_refused_naming_the_known_ones_and_wait_ends_when_the_run_logs_no_more(
    profile_server, monkeypatch
):

    from verl.utils.tracking import Tracking

    server = profile_server
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    tracking = Tracking("proj", "run-a", default_backend=["rl_insight"])
    for step in (1, 2):
        tracking.log(step_metrics(step, 10), step=step)
    wait_for(lambda: [s for s in server.hub.streams() if s["step"] == 2], 10, what="step 2 at the hub")

    typo = rl_insight("profile", "--project", "proj", "--experiment", "run-b", "--steps", "9", "--server", server.url)
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert "no run proj/run-b at the server (project proj has run-a)" in typo.stderr
    assert json.loads(http("GET", server.url + "/api/v1/profiles")[1])["profiles"] == []  # nothing queued
    elsewhere = rl_insight(
        "profile", "--project", "prj", "--experiment", "run-a", "--steps", "9", "--server", server.url
    )
    assert elsewhere.returncode == 2 and "the server's runs: proj/run-a" in elsewhere.stderr, elsewhere.stderr

    waited = rl_insight(
        "profile", "--project", "proj", "--experiment", "run-a", "--steps", "9", "--wait", "--idle", "2",
        "--timeout", "120", "--server", server.url, timeout=120,
    )  # fmt: skip
    assert waited.returncode == 1, waited.stdout + waited.stderr
    assert "no new step of proj/run-a for" in waited.stderr and "(it is at step 2)" in waited.stderr
    tracking.finish()


def test_a_run_that_has_finished_is_refused_with_a_line_saying_so(monitoring_server, monkeypatch):
    import urllib.parse

    from verl.utils.tracking import Tracking

    hub, prom = monitoring_server
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", hub)
    tracking = Tracking("proj", "done", default_backend=["rl_insight"])
    for step in (1, 2):
        tracking.log(step_metrics(step, 10), step=step)
    tracking.finish()  # rl_insight_run_finished 1

    def finished_in_prometheus():
        query = 'rl_insight_run_finished{project="proj",experiment_name="done"}'
        found = json.loads(http("GET", f"{prom}/api/v1/query?query={urllib.parse.quote(query)}")[1])["data"]["result"]
        return found and float(found[0]["value"][1]) == 1

    wait_for(finished_in_prometheus, 30, what="the finished flag scraped")
    waited = rl_insight(
        "profile", "--project", "proj", "--experiment", "done", "--steps", "9", "--wait", "--timeout", "120",
        "--server", hub, timeout=120,
    )  # fmt: skip
    assert waited.returncode == 2, waited.stdout + waited.stderr  # refused: nothing queued for a step never coming
    assert "proj/done has finished: it has no coming step to profile" in waited.stderr
    assert json.loads(http("GET", hub + "/api/v1/profiles")[1])["profiles"] == []
