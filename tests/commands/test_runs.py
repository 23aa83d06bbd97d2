"""Runs: two simulated runs pushed to the real hub and a real Prometheus; `runs list` shows both,
`runs export` gives their steps and values exactly as logged, `runs delete` removes one from the
hub and from Prometheus (queried) and leaves the other; the compare dashboard's queries return
data for both runs."""

import csv
import json
import time
import urllib.parse

import pytest

from tests.helpers import http, push, rl_insight, stack_prometheus, wait_for
from verl_rl_insight.dashboards.build import build
from verl_rl_insight.dashboards.compare import CURVES
from verl_rl_insight.dashboards.panels import every_panel
from verl_rl_insight.dashboards.training import metric

PROJECT = "runs"
STEPS = 10


def value(run, key, step):
    """What run ``run`` logs for ``key`` at ``step`` (distinct per run, key and step)."""
    return round({"a": 1.0, "b": -2.0}[run] * (step + {"score": 0.5, "entropy": 0.25}[key]) / 7, 12)


def log(hub, run):
    for step in range(1, STEPS + 1):
        metrics = {
            "rl_insight_monitor_critic_score_mean": value(run, "score", step),
            "rl_insight_monitor_actor_entropy": value(run, "entropy", step),
        }
        for _, key, _ in CURVES[1:]:  # every other curve the compare dashboard draws
            if key not in ("actor/entropy", "perf/throughput"):
                metrics[metric(key)] = step / 10
        if step % 2 == 0:  # logged every other step only: an empty cell elsewhere
            metrics["rl_insight_monitor_perf_throughput"] = 1000.0 + step
        batch = {
            "project": PROJECT,
            "experiment_name": f"run-{run}",
            "step": step,
            "time": time.time() - 60 + step,
            "metrics": metrics,
        }
        assert push(hub, {"batches": [batch]})[0] == 200


def query(prom, promql):
    status, body = http("GET", prom + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert status == 200, body
    return json.loads(body)["data"]["result"]


@pytest.fixture
def two_runs(monitoring_server):
    hub, prom = monitoring_server
    log(hub, "a")
    log(hub, "b")
    wait_for(
        lambda: (
            len(query(prom, f'rl_insight_monitor_training_global_step{{project="{PROJECT}"}}')) == 2
            and all(
                float(r["value"][1]) == STEPS
                for r in query(prom, f'rl_insight_monitor_training_global_step{{project="{PROJECT}"}}')
            )
        ),
        30,
        what="both runs",
    )
    return hub, prom


def test_list_export_and_delete(two_runs, tmp_path):
    hub, prom = two_runs
    listed = rl_insight("runs", "list", "--server", hub, "--project", PROJECT)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert sorted(r[1] for r in rows) == ["run-a", "run-b"] and all(r[2] == str(STEPS) for r in rows)
    assert all(r[-1] == "running" for r in rows) and all(r[4] == "ago" for r in rows)  # "12s ago"

    out = tmp_path / "a.csv"
    exported = rl_insight(
        "runs", "export", "--server", hub, "--project", PROJECT, "--experiment", "run-a", "-o", str(out)
    )
    assert exported.returncode == 0, exported.stderr
    table = list(csv.DictReader(out.open()))
    assert [int(r["step"]) for r in table] == list(range(1, STEPS + 1))
    for r in table:
        step = int(r["step"])
        assert float(r["critic_score_mean"]) == value("a", "score", step)  # exactly as logged
        assert float(r["actor_entropy"]) == value("a", "entropy", step)
        assert r["perf_throughput"] == ("" if step % 2 else repr(1000.0 + step))

    parquet = tmp_path / "a.parquet"
    as_parquet = rl_insight(
        "runs",
        "export",
        "--server",
        hub,
        "--project",
        PROJECT,
        "--experiment",
        "run-a",
        "--format",
        "parquet",
        "-o",
        str(parquet),
    )
    try:
        import pyarrow.parquet as pq
    except ImportError:  # the optional extra: without it, one line naming it
        assert as_parquet.returncode == 2 and "pip install 'verl-rl-insight[export]'" in as_parquet.stderr
    else:
        assert as_parquet.returncode == 0, as_parquet.stderr
        columns = pq.read_table(parquet).to_pydict()
        assert columns["step"] == list(range(1, STEPS + 1))
        assert columns["critic_score_mean"] == [value("a", "score", s) for s in range(1, STEPS + 1)]

    refused = rl_insight("runs", "delete", "--server", hub, "--project", PROJECT, "--experiment", "run-a")
    assert refused.returncode == 2 and "--yes" in refused.stderr  # no terminal to ask in
    deleted = rl_insight("runs", "delete", "--server", hub, "--project", PROJECT, "--experiment", "run-a", "--yes")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert "Prometheus: deleted" in deleted.stdout
    assert query(prom, f'{{project="{PROJECT}",experiment_name="run-a"}}') == []
    assert len(query(prom, f'rl_insight_monitor_critic_score_mean{{project="{PROJECT}",experiment_name="run-b"}}')) == 1
    streams = json.loads(http("GET", hub + "/api/v1/streams")[1])["streams"]
    # run-a's streams are gone (its trainer stream and the server's own health streams), run-b's stay
    assert {s["labels"]["experiment_name"] for s in streams if s["labels"].get("project") == PROJECT} == {"run-b"}
    time.sleep(2.5)  # scrapes after the delete do not bring the run back
    assert query(prom, f'{{project="{PROJECT}",experiment_name="run-a"}}') == []
    again = rl_insight("runs", "list", "--server", hub, "--project", PROJECT)
    assert "run-a" not in again.stdout and "run-b" in again.stdout


def test_the_compare_dashboard_shows_both_runs(two_runs):
    _, prom = two_runs
    dashboard = build()["rl_insight_compare_runs.json"]
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names == ["project", "experiment_name"] and dashboard["templating"]["list"][1]["multi"] is True
    checked = 0
    for panel in every_panel(dashboard):
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$project", PROJECT).replace("$experiment_name", "run-a|run-b")
            result = query(prom, expr)
            assert {r["metric"].get("experiment_name") for r in result} == {"run-a", "run-b"}, panel["title"]
            checked += 1
    xy = [p for p in every_panel(dashboard) if p["type"] == "xychart"]
    assert len(xy) >= 8 and all(p["options"]["series"][0]["x"]["field"]["matcher"]["options"] == "step" for p in xy)
    assert checked >= 20


@pytest.mark.parametrize("restart", ["clean", "crash"])
def test_after_a_server_restart_runs_list_keeps_each_runs_age_and_shows_the_newest_first(tmp_path, restart):
    """Each run's age is that of its last step by the trainer's time (the runs pushed just now,
    stamped 3, 15 and 40 minutes ago), whoever gives it: the hub, which keeps its streams across a
    clean restart, or, when the hub lost them (a crash: the values written at stop removed),
    Prometheus alone. Not the restart's time, not "0s ago", not the time of the push."""
    from tests.helpers import free_port, require_prometheus

    require_prometheus()
    hub_port, prom_port = free_port(), free_port()
    start = ("server", "start", "--detach", "--local-trust", "--bind", "127.0.0.1", "--port", str(hub_port),
             "--prometheus-port", str(prom_port), "--scrape-interval", "1", "--data-dir", str(tmp_path / "data"),
             "--no-tempo", "--no-grafana", "--no-alertmanager")  # fmt: skip
    hub = f"http://127.0.0.1:{hub_port}"
    assert rl_insight(*start).returncode == 0
    prom = stack_prometheus(tmp_path / "data", prom_port)
    try:
        now = time.time()
        for run, minutes_ago in (("old-run", 40), ("new-run", 3), ("mid-run", 15)):
            for step in (1, 2):
                stamped = now - minutes_ago * 60 - (2 - step) * 10
                batch = {"project": PROJECT, "experiment_name": run, "step": step, "time": stamped,
                         "metrics": {"rl_insight_monitor_actor_entropy": 0.5}}  # fmt: skip
                assert push(hub, {"batches": [batch]})[0] == 200
        wait_for(lambda: len(query(prom, f'rl_insight_monitor_training_step_time_seconds{{project="{PROJECT}"}}')) == 3)
        assert rl_insight("server", "stop").returncode == 0
        if restart == "crash":
            (tmp_path / "data" / "hub-latest.json").unlink()
        assert rl_insight(*start).returncode == 0
        listed = rl_insight("runs", "list", "--server", hub, "--project", PROJECT)
        assert listed.returncode == 0, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines()[1:]]
        assert [(r[1], r[3]) for r in rows] == [("new-run", "3m"), ("mid-run", "15m"), ("old-run", "40m")], (
            listed.stdout
        )
        where = {r["experiment_name"]: r["where"] for r in json.loads(
            rl_insight("runs", "list", "--server", hub, "--project", PROJECT, "--json").stdout)}  # fmt: skip
        assert all(("hub" in w) == (restart == "clean") for w in where.values()), where
    finally:
        rl_insight("server", "stop")
