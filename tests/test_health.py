"""Training health: the evaluation corpus (benchmarks/health_corpus.py: healthy runs of four
shapes, and runs with one failure mode injected at a known step) pushed through the real path (the
server process, whose detectors run on every step, and a real Prometheus scraping it with the
shipped rules loaded); `rl-insight diagnose` reads each run back. Then a NaN loss logged by verl's
real `Tracking` fires RLInsightNonFinite."""

import json
import math
import time

import pytest

from benchmarks import health_corpus as corpus
from tests.helpers import (
    Prometheus,
    free_port,
    push,
    rl_insight,
    run_python,
    start_hub_process,
    stop_group,
    wait_for,
)
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.managed.alert_rules import render

PROJECT = "health"


def wire(value):
    return value if math.isfinite(value) else ("NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf"))


def push_run(hub, experiment, history, start, failure=None):
    batches = [
        {
            "project": PROJECT,
            "experiment_name": experiment,
            "step": step,
            "time": start + at,
            "metrics": {detectors.series_name(k): wire(v) for k, v in metrics.items()},
        }
        for step, (metrics, at) in enumerate(zip(history, corpus.times(failure, len(history)), strict=True), 1)
    ]
    finished = {"rl_insight_run_finished": 1}  # what finish() sends: a run that ended is no stall
    batches.append(
        {"project": PROJECT, "experiment_name": experiment, "time": batches[-1]["time"] + 1, "metrics": finished}
    )
    for i in range(0, len(batches), 25):  # several pushes: the detectors see the steps in order
        status, body = push(hub, {"batches": batches[i : i + 25]})
        assert status == 200, body


@pytest.fixture(scope="module")
def corpus_pushed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("health")
    port = free_port()
    process = start_hub_process(port, tmp, alerts={"stalled_for": "60s"})  # the corpus' stall is 90 s
    hub = f"http://127.0.0.1:{port}"
    rules = tmp / "rules.yml"
    rules.write_text(render({"health_hold": "10m", "stalled_for": "60s"}))
    prometheus = None
    try:
        prometheus = Prometheus(tmp, [f"127.0.0.1:{port}"], rule_files=[rules])
        start = time.time() - corpus.STEPS * corpus.STEP_S - corpus.STALL_S - 30
        runs = corpus.runs()
        for name, failure, history in runs:
            push_run(hub, name, history, start, failure)

        def complete():
            found = prometheus.query(
                f'count_over_time(rl_insight_monitor_training_global_step{{project="{PROJECT}"}}[10m])'
            )
            return len(found) == len(runs)

        wait_for(complete, 30, what="every run in Prometheus")
        time.sleep(2)  # one more scrape: the last pushes' history
        yield hub, prometheus, runs
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_group(process)


def diagnose(hub, prometheus, experiment, *more):
    result = rl_insight(
        "diagnose", "--project", PROJECT, "--experiment", experiment, "--server", hub,
        "--prometheus", prometheus.url, "--json", *more,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    found = json.loads(result.stdout)["findings"]
    assert result.returncode == (1 if found else 0)
    return found


@pytest.mark.parametrize("shape", corpus.HEALTHY)
def test_no_finding_on_a_healthy_run(corpus_pushed, shape):
    hub, prometheus, _ = corpus_pushed
    found = diagnose(hub, prometheus, shape)
    if shape == "flat":
        assert {f["detector"] for f in found} == {"reward_plateau"}  # the one thing a flat run may show
    else:
        assert found == []


@pytest.mark.parametrize("failure", corpus.FAILURES)
def test_each_injected_failure_is_found_with_its_detector_and_steps(corpus_pushed, failure):
    hub, prometheus, _ = corpus_pushed
    found = diagnose(hub, prometheus, f"inject-{failure}")
    mine = [f for f in found if f["detector"] == failure]
    assert mine, found
    assert any(f["first_step"] <= corpus.INJECT_AT <= f["last_step"] for f in mine), mine
    assert found[0]["severity"] == "critical" or all(f["severity"] == "warning" for f in found)  # ranked
    assert all(f["evidence"] and f["metric"] for f in mine)


def test_the_online_findings_agree_with_diagnose_and_fire_their_alerts(corpus_pushed):
    """What the server found step by step (rl_insight_health_findings_total) is what diagnose finds
    offline; every injected mode with an online rule fires RLInsight<Mode> for its run only."""
    hub, prometheus, runs = corpus_pushed
    for name, _, _ in runs:
        offline = {
            f["detector"]: sum(f["last_step"] - f["first_step"] + 1 for f in found)
            for found in [diagnose(hub, prometheus, name)]
            for f in found
            if detectors.BY_NAME[f["detector"]].online and f["detector"] != "reward_plateau"
        }
        online = {
            r["metric"]["detector"]: float(r["value"][1])
            for r in prometheus.query(f'rl_insight_health_findings_total{{experiment_name="{name}"}} > 0')
            if r["metric"]["detector"] != "reward_plateau"
        }
        # a streak's steps are counted online as they come: the steps of its sustain before it
        # became a finding are not (diagnose counts them in its first step)
        assert set(online) == set(offline), name
    expected = {
        (detectors.BY_NAME[failure].alert, f"inject-{failure}")
        for failure in corpus.FAILURES
        if detectors.BY_NAME[failure].online
    }

    def firing():
        return {
            (a["labels"]["alertname"], a["labels"]["experiment_name"])
            for a in prometheus.alerts()
            if a["state"] == "firing" and a["labels"]["alertname"] in {d.alert for d in detectors.ALL}
        }

    wait_for(lambda: firing() >= expected, 30, what="the alert of every injected mode")
    extra = {(alert, run) for alert, run in firing() - expected if alert != "RLInsightRewardPlateau"}
    assert extra <= {("RLInsightValidationDrop", "inject-reward_collapse")}, extra  # a collapse drops validation too


NAN_SCRIPT = """
from verl.utils.tracking import Tracking
from verl_rl_insight.commands.demo.verl_step import step_metrics  # what verl's trainer logs at a step
tracking = Tracking("health", "nan-loss", default_backend=["rl_insight"])
for step in range(1, 6):
    tracking.log(step_metrics(step, 6), step=step)
tracking.log({**step_metrics(6, 6), "actor/pg_loss": float("nan")}, step=6)
tracking.finish()
print("LOGGED")
"""


def test_a_nan_loss_logged_by_verls_tracking_fires_the_non_finite_alert(tmp_path):
    """verl's real Tracking with the rl_insight backend, in its own process; the alert fires on
    the step's NaN (its rule has no `for`: the first evaluation after the scrape that brings it)."""
    port = free_port()
    process = start_hub_process(port, tmp_path)
    hub = f"http://127.0.0.1:{port}"
    rules = tmp_path / "rules.yml"
    rules.write_text(render())
    prometheus = None
    try:
        prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"], rule_files=[rules])
        result = run_python(NAN_SCRIPT, env={"RL_INSIGHT_SERVER_URL": hub})
        assert result.returncode == 0 and "LOGGED" in result.stdout, result.stderr[-2000:]

        def firing():
            return [
                a
                for a in prometheus.alerts()
                if a["labels"]["alertname"] == "RLInsightNonFinite" and a["state"] == "firing"
            ]

        [alert] = wait_for(firing, 30, what="RLInsightNonFinite")
        assert alert["labels"]["experiment_name"] == "nan-loss" and alert["labels"]["severity"] == "critical"
        assert "rl-insight diagnose --project health --experiment nan-loss" in alert["annotations"]["description"]
        found = rl_insight(
            "diagnose", "--project", "health", "--experiment", "nan-loss", "--server", hub,
            "--prometheus", prometheus.url,
        )  # fmt: skip
        assert found.returncode == 1 and "CRITICAL  non_finite  step 6  actor/pg_loss" in found.stdout, found.stdout
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_group(process)
