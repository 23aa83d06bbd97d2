"""`rl-insight doctor` on a healthy setup (real Prometheus, STAND-INs for Tempo and Grafana, data
pushed through verl's real Tracking) and on broken ones: each finding says what to fix."""

import json

import pytest

from tests.helpers import (
    REPO,
    free_port,
    http,
    require_prometheus,
    rl_insight,
    stack_prometheus,
    wait_for,
    write_server_config,
)
from verl_rl_insight.commands.demo.verl_step import step_metrics

STAND_IN = str(REPO / "tests" / "standins" / "stand-in-service")
RIGHT = ["trainer.logger=[console,rl_insight]", "actor_rollout_ref.rollout.disable_log_stats=False"]


cli = rl_insight


@pytest.fixture
def server(tmp_path):
    require_prometheus()
    path, config = write_server_config(
        tmp_path, token="s3cret", services={"tempo": {"binary": STAND_IN}, "grafana": {"binary": STAND_IN}}
    )
    started = cli("server", "start", "--detach", "--config", str(path))
    assert started.returncode == 0, started.stdout + started.stderr
    yield config
    cli("server", "stop")


def test_healthy_setup_every_check_is_ok(server, monkeypatch):
    url = f"http://127.0.0.1:{server['port']}"
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", url)
    monkeypatch.setenv("RL_INSIGHT_TOKEN", "s3cret")
    from verl.utils.tracking import Tracking

    tracking = Tracking("doc", "healthy", default_backend=["rl_insight"])
    tracking.log(step_metrics(1), step=1)  # what verl's trainer logs at a step
    tracking.finish()
    prom = stack_prometheus(server["data_dir"], server["prometheus_port"])
    wait_for(
        lambda: (
            json.loads(http("GET", prom + "/api/v1/targets")[1] or b'{"data":{"activeTargets":[]}}')["data"][
                "activeTargets"
            ]
            and all(
                t["health"] == "up"
                for t in json.loads(http("GET", prom + "/api/v1/targets")[1])["data"]["activeTargets"]
            )
        ),
        30,
        what="hub scraped",
    )
    result = cli("doctor", "--project", "doc", "--experiment", "healthy", "--", *RIGHT)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [x for x in result.stdout.splitlines() if x.strip()]
    assert lines[-1] == "all checks passed"
    for check in (
        "server reachable",
        "token",
        "clock skew",
        "service prometheus",
        "service tempo",
        "service grafana",
        "Prometheus targets",
        "recent samples",
        "datasources",
        "dashboards",
        "RL_INSIGHT_SERVER_URL",
        "verl version",
        "patches active",
        "Ray workers",
        "trainer.logger",
        "disable_log_stats",
    ):
        assert any(x.startswith(f"ok       {check}") for x in lines), f"no ok line for {check}:\n{result.stdout}"


def test_broken_setups_say_what_to_fix(server):
    url = f"http://127.0.0.1:{server['port']}"
    wrong = cli(
        "doctor",
        "--project",
        "doc",
        "--experiment",
        "none-yet",
        "--",
        "trainer.logger=[console]",
        "actor_rollout_ref.rollout.disable_log_stats=True",
        env={"RL_INSIGHT_SERVER_URL": url, "RL_INSIGHT_TOKEN": "wrong"},
    )
    assert wrong.returncode == 1
    out = wrong.stdout
    assert "PROBLEM  token: the server requires a token and the one given is wrong" in out
    assert "PROBLEM  recent samples: nothing from project=doc experiment_name=none-yet" in out
    assert "PROBLEM  trainer.logger: ['console'] has no rl_insight" in out
    assert "fix: actor_rollout_ref.rollout.disable_log_stats=False" in out
    down = cli("doctor", env={"RL_INSIGHT_SERVER_URL": f"http://127.0.0.1:{free_port()}"})
    assert down.returncode == 1
    assert "PROBLEM  server reachable" in down.stdout and "fix: rl-insight server start --detach" in down.stdout


def test_the_fix_for_an_unset_server_url_carries_the_token_where_one_is_needed(monkeypatch):
    """Following the fix must not end in 401 on every push; the report itself shows no secret."""
    import io

    from verl_rl_insight.commands.doctor.report import Report
    from verl_rl_insight.commands.doctor.trainer import check_environment

    monkeypatch.delenv("RL_INSIGHT_SERVER_URL", raising=False)
    out = io.StringIO()
    check_environment(Report(out), "http://127.0.0.1:18080", needs_token=True)
    text = out.getvalue()
    assert "fix: export RL_INSIGHT_SERVER_URL=http://rl-insight:<token>@127.0.0.1:18080" in text
    assert "rl-insight server status --secrets" in text
    out = io.StringIO()
    check_environment(Report(out), "http://127.0.0.1:18080")  # loopback without a token: the plain URL
    assert "fix: export RL_INSIGHT_SERVER_URL=http://127.0.0.1:18080\n" in out.getvalue()


def test_doctor_prints_its_own_lines_only_no_raw_warning_of_verl_or_its_libraries():
    """verl logs "No supported accelerator detected" and more when imported on a machine like this
    one: doctor imports verl, and the person reads a checklist, not those."""
    done = cli("doctor", "--", "trainer.logger=[console]")
    own = ("ok       ", "PROBLEM  ", "skipped  ", "         fix: ", "all checks passed")
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    strays = [line for line in lines if not line.startswith(own) and not line.endswith("problem(s)")]
    assert "ok       verl version" in done.stdout and strays == [], strays
