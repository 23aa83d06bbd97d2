"""One run, one answer (issue 37): a run resumed under its name (verl from a checkpoint: steps N+1...)
and a run started again from step 1 under its name (a new attempt) read the same in the explorer's
list and page, ``rl-insight runs list`` and ``rl-insight diagnose``; the demo says a name is taken.
The steps are what verl's trainer logs (the demo's step dicts), sent as the trainer's own batches
(``MetricBatch.to_json``) to the real server, stored by a real Prometheus."""

import json
import time
import urllib.parse

import pytest

from tests.helpers import (
    http,
    push,
    require_prometheus,
    rl_insight,
    stack_prometheus,
    wait_for,
    write_server_config,
)
from verl_rl_insight.commands.demo.verl_step import step_metrics
from verl_rl_insight.contract.attempts import attempts, superseded
from verl_rl_insight.contract.naming import METRIC_PREFIX
from verl_rl_insight.contract.wire import validate_push
from verl_rl_insight.server.explorer.prometheus import _by_step
from verl_rl_insight.server.history.histories import Histories
from verl_rl_insight.trainer.client.metric_batch import MetricBatch

pytestmark = pytest.mark.local_ray  # starts a local Ray cluster: one at a time under -n (tests/parallel.py)

TOKEN = "attempts-token-2c9e7a"
PROJECT = "rl-insight-demo"  # the demo's project: `demo --experiment restarted` meets the run
RESTARTED, RESUMED = "restarted", "resumed"


def batch(experiment, step, at, total=30):
    return MetricBatch(PROJECT, experiment, step, at, step_metrics(step, total, test_freq=0), METRIC_PREFIX)


def test_a_step_going_back_later_in_time_is_a_new_attempt_and_a_resume_is_not():
    first = {100.0 + s: s for s in range(1, 31)}
    assert superseded(first) == set()
    restart = {**first, **{200.0 + s: s for s in range(1, 4)}}
    assert superseded(restart) == {100.0 + s for s in range(1, 31)}  # every old step: the new attempt is the run
    resume = {**first, **{200.0 + s: s for s in range(31, 34)}}
    assert superseded(resume) == set()
    # a resume from a checkpoint at step 20 after step 25 was logged: 21-25 are the new attempt's
    crashed = {**{100.0 + s: s for s in range(1, 26)}, **{200.0 + s: s for s in range(21, 24)}}
    assert superseded(crashed) == {100.0 + s for s in range(21, 26)}
    by_step = _by_step({"rl_insight_monitor_training_global_step": {t: float(s) for t, s in restart.items()},
                        "x": {t: float(t) for t in restart}})  # fmt: skip
    assert [(step, values["x"]) for step, _, values in by_step] == [(1, 201.0), (2, 202.0), (3, 203.0)]


def test_the_explorers_history_keeps_the_newest_attempt_and_a_late_step_in_its_place():
    histories = Histories()
    run = (PROJECT, RESTARTED)

    def observe(step, at):
        body = batch(RESTARTED, step, at).to_json()
        histories.observe([_batch(body)])

    for s in range(1, 31):
        observe(s, 100.0 + s)
    for s in range(1, 4):
        observe(s, 200.0 + s)
    assert histories.get(run).steps == [1, 2, 3]
    observe(5, 210.0)
    observe(4, 209.0)  # sent late (its own, older time): put in its place, not an attempt
    assert histories.get(run).steps == [1, 2, 3, 4, 5]
    for s in range(6, 9):
        observe(s, 300.0 + s)  # a resume: steps going on
    assert histories.get(run).steps == list(range(1, 9))


def _batch(body):
    """A pushed body as the hub hands it to its listeners (decoded and validated, as a push is)."""
    return validate_push({"batches": [body]}, time.time())[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_prometheus()
    tmp = tmp_path_factory.mktemp("attempts")
    path, config = write_server_config(
        tmp, token=TOKEN, services={"tempo": {"enabled": False}, "grafana": {"enabled": False}}
    )
    env = {"VERL_RL_INSIGHT_CONFIG": None, "RL_INSIGHT_HOME": str(tmp / "home")}
    started = rl_insight("server", "start", "--detach", "--config", str(path), env=env, timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    base = f"http://127.0.0.1:{config['port']}"
    try:
        now = time.time()
        sent = [(RESTARTED, s, now - 200 + s) for s in range(1, 31)] + [(RESTARTED, s, now - 60 + s) for s in (1, 2, 3)]
        sent += [(RESUMED, s, now - 200 + s) for s in range(1, 31)] + [(RESUMED, s, now - 60 + s) for s in (31, 32, 33)]
        for experiment, step, at in sent:
            status, body = push(base, {"batches": [batch(experiment, step, at).to_json()]}, TOKEN)
            assert status == 200, body
        yield {"base": base, "env": env, "prometheus": stack_prometheus(tmp / "data", config["prometheus_port"])}
    finally:
        rl_insight("server", "stop", env=env, timeout=60)


def explorer(base, what, **query):
    url = f"{base}/api/v1/explorer/{what}?{urllib.parse.urlencode(query)}"
    status, body = http("GET", url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200, body
    return json.loads(body)


def diagnosed_steps(server, experiment):
    result = rl_insight("diagnose", "--project", PROJECT, "--experiment", experiment, "--json", env=server["env"])
    return json.loads(result.stdout)["steps"] if result.stdout.startswith("{") else None


@pytest.mark.parametrize(("experiment", "steps"), [(RESTARTED, [1, 3]), (RESUMED, [1, 33])])
def test_list_page_runs_list_and_diagnose_agree_on_a_restarted_and_a_resumed_run(server, experiment, steps):
    first, last = steps
    listed = rl_insight("runs", "list", "--json", env=server["env"])
    assert listed.returncode == 0, listed.stderr
    [row] = [r for r in json.loads(listed.stdout) if r["experiment_name"] == experiment]
    assert row["step"] == last
    [shown] = [r for r in explorer(server["base"], "runs")["runs"] if r["experiment"] == experiment]
    assert shown["step"] == last
    page = explorer(server["base"], "run", project=PROJECT, experiment_name=experiment)
    assert page["step"] == last
    curves = explorer(server["base"], "curves", project=PROJECT, experiment_name=experiment, keys="critic/score/mean")
    assert curves["steps"] == list(range(first, last + 1))
    assert wait_for(lambda: diagnosed_steps(server, experiment) == steps, 60, interval=2, what="diagnose's steps")


def test_the_demo_on_a_taken_name_says_so_and_shows_no_token(server):
    result = rl_insight("demo", "--experiment", RESTARTED, "--steps", "3", env=server["env"], timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert f"the name {RESTARTED!r} is taken" in said and "up to step 3" in said, said
    assert TOKEN not in said and "#" * 31 not in said


def prometheus(server, query, at=None):
    params = {"query": query, **({"time": f"{at:.3f}"} if at is not None else {})}
    status, body = http("GET", f"{server['prometheus']}/api/v1/query?{urllib.parse.urlencode(params)}")
    assert status == 200, body
    return json.loads(body)["data"]["result"]


def panel_query(title, experiment):
    """The generated trainer dashboard's query of panel ``title``, as Grafana sends it for the run."""
    from verl_rl_insight.dashboards import DASHBOARDS_DIR
    from verl_rl_insight.dashboards.panels import every_panel

    dashboard = json.loads((DASHBOARDS_DIR / "verl_trainer_v1_with_vllm_engine.json").read_text())
    [panel] = [p for p in every_panel(dashboard) if p.get("title") == title]
    expr = panel["targets"][0]["expr"]
    return expr.replace("$project", PROJECT).replace("$experiment_name", experiment)


@pytest.mark.parametrize(("experiment", "attempts_seen"), [(RESTARTED, {"1", "2"}), (RESUMED, {"1"})])
def test_grafanas_trainer_panels_name_each_point_by_the_attempt_that_logged_it(server, experiment, attempts_seen):
    """Each sample Prometheus holds of the run's global step, read back through the dashboard's
    "Global step" and "Entropy" panels at its own time: the panel names it by the attempt the rule
    of contract/attempts.py gives its step (steps 1-30, then 1-3: attempt 1, then 2; a resume
    31-33 stays attempt 1), with the step's own value (the join multiplies by 1)."""
    step_name = f"{METRIC_PREFIX}training_global_step"
    run = f'{{project="{PROJECT}",experiment_name="{experiment}"}}'

    def stored():
        found = prometheus(server, f"{step_name}{run}[10m]")
        return found and {float(v) for _, v in found[0]["values"]} >= {33.0 if experiment == RESUMED else 30.0, 3.0}

    wait_for(stored, 30, interval=1, what="every step in Prometheus")
    samples = [(float(t), int(float(v))) for t, v in prometheus(server, f"{step_name}{run}[10m]")[0]["values"]]
    starts = [start for start, _ in attempts(dict(samples))]
    seen = set()
    for at, step in samples:
        expected = str(1 + sum(start <= at for start in starts))
        [point] = prometheus(server, panel_query("Global step", experiment), at)
        assert (point["metric"]["attempt"], float(point["value"][1])) == (expected, step), (at, step)
        [entropy] = prometheus(server, panel_query("Entropy", experiment), at)
        [own] = prometheus(server, f"{METRIC_PREFIX}actor_entropy{run}", at)
        assert (entropy["metric"]["attempt"], entropy["value"][1]) == (expected, own["value"][1])
        seen.add(expected)
    assert seen == attempts_seen
