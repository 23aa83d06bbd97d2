"""Alert rules: promtool accepts them, a real Prometheus loads them and fires the log-prob
mismatch alert once pushed data crosses the threshold for the whole window, and not before; the
stall alert waits for a run's first step time and is relative to the run's own step times."""

import shutil
import subprocess
import time

import pytest
import yaml

from tests.helpers import Prometheus, free_port, push, start_hub_process, stop_group, wait_for
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.managed import alert_rules
from verl_rl_insight.server.settings import alerts as alert_settings
from verl_rl_insight.server.settings.server import ServerSettings


def test_promtool_accepts_the_rules_and_thresholds_are_configurable(tmp_path):
    settings = ServerSettings(data_dir=str(tmp_path), alerts={"probs_diff_critical": 0.02, "stalled_for": "30m"})
    path = alert_rules.write(settings)
    rules = {r["alert"]: r for r in yaml.safe_load(path.read_text())["groups"][0]["rules"]}
    assert set(rules) == {
        "RLInsightRolloutProbsDiffWarning",
        "RLInsightRolloutProbsDiffCritical",
        "RLInsightGradNormRising",
        "RLInsightTrainingStalled",
        "RLInsightRolloutReplicaDown",
        "RLInsightGPUMemoryNearlyFull",
        "RLInsightThroughputCollapse",
        "RLInsightRolloutLongTail",
        "RLInsightTrainerIdle",
        "RLInsightSlowReplica",
        *(d.alert for d in detectors.ALL if d.online),  # training health (health/test_detectors_on_real_runs.py)
    }
    assert "> 0.02 and" in rules["RLInsightRolloutProbsDiffCritical"]["expr"]
    assert "> 0.005 and" in rules["RLInsightRolloutProbsDiffWarning"]["expr"]
    # stalled_for is the stall's floor (the rest is the run's own median step time: see below)
    assert "1800)" in rules["RLInsightTrainingStalled"]["expr"]
    with pytest.raises(ValueError, match="unknown alert setting"):
        ServerSettings(data_dir=str(tmp_path), alerts={"probs_dif_critical": 1})
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus has it; .ci/run installs it)")
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_probs_diff_alert_fires_after_the_threshold_is_crossed_and_not_before(tmp_path, hub_server):
    server = hub_server()
    settings = ServerSettings(data_dir=str(tmp_path), alerts={"probs_diff_window": "6s", "probs_diff_min_steps": 3})
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{server.port}"], rule_files=[alert_rules.write(settings)])

    def log(step, value):
        batch = {
            "project": "p",
            "experiment_name": "drift",
            "step": step,
            "time": time.time(),
            "metrics": {"rl_insight_monitor_training_rollout_probs_diff_mean": value},
        }
        assert push(server.url, {"batches": [batch]})[0] == 200

    def raised(states=("pending", "firing")):
        """The probs-diff alerts in those states: "not before" means not even pending (its
        expression already true, waiting out a `for`)."""
        return {
            a["labels"]["alertname"]
            for a in prometheus.alerts()
            if a["state"] in states and a["labels"]["alertname"].startswith("RLInsightRolloutProbsDiff")
        }

    def firing():
        return raised(("firing",))

    try:
        for step in range(1, 9):  # normal: 0.003, one step a second, longer than the window
            log(step, 0.003)
            time.sleep(1)
        assert raised() == set()
        log(9, 0.02)  # one bad step: the window still holds good ones
        time.sleep(2)
        assert raised() == set()
        for step in range(10, 22):
            log(step, 0.02)
            time.sleep(1)
            if firing():
                break
        assert wait_for(firing, 10, what="probs diff alerts") == {
            "RLInsightRolloutProbsDiffWarning",
            "RLInsightRolloutProbsDiffCritical",
        }
        [alert] = [a for a in prometheus.alerts() if a["labels"]["alertname"] == "RLInsightRolloutProbsDiffCritical"]
        assert alert["labels"]["experiment_name"] == "drift" and alert["labels"]["severity"] == "critical"
    finally:
        prometheus.stop()


def test_the_stall_alert_is_relative_to_the_runs_own_step_time_and_never_before_it_has_one(tmp_path):
    """The real server process (its stall detector pushes each run's median step time) and a
    real Prometheus with the shipped rules, stalled_for 3s (the floor): a run whose only step has
    no step time never fires; a run of 0.2 s steps fires once it has been silent for the floor; a
    run of 20 s steps (5x: 100 s) silent as long does not."""
    port = free_port()
    process = start_hub_process(port, tmp_path)
    hub = f"http://127.0.0.1:{port}"
    rules = tmp_path / "rules.yml"
    rules.write_text(alert_rules.render(alert_settings.AlertSettings(stalled_for="3s")))
    prometheus = None

    def log(experiment, step, step_s=None):
        metrics = {"rl_insight_monitor_actor_pg_loss": 0.1}
        if step_s is not None:
            metrics["rl_insight_monitor_timing_s_step"] = step_s
        batch = {"project": "p", "experiment_name": experiment, "step": step, "time": time.time(), "metrics": metrics}
        assert push(hub, {"batches": [batch]})[0] == 200

    def firing():
        return {
            a["labels"]["experiment_name"]
            for a in prometheus.alerts()
            if a["state"] == "firing" and a["labels"]["alertname"] == "RLInsightTrainingStalled"
        }

    try:
        prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"], rule_files=[rules])
        log("first-step", 1)  # verl's first step, before any step has a time
        for step in range(1, 4):
            log("fast", step, 0.2)
            log("slow", step, 20.0)
        assert wait_for(firing, 20, what="the fast run's stall") == {"fast"}
        time.sleep(4)  # more evaluations: 7 s and more of silence for every run
        assert firing() == {"fast"}
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_group(process)


def test_no_alert_setting_is_shadowed_by_a_detector_setting_of_the_same_name():
    """Both live in the server config's ``alerts:`` block: a name in both would set the other's
    value too (grad_norm_ratio once made RLInsightGradNormRising's ratio the spike detector's)."""
    assert set(alert_settings.RULE_SETTINGS) & set(detectors.DEFAULTS.as_dict()) == set()
    assert len(alert_settings.NAMES) == len(set(alert_settings.NAMES))
    alerts = alert_settings.AlertSettings.from_mapping({"grad_norm_ratio": 2.5})
    assert "2.5 * avg_over_time" in alert_rules.render(alerts) and alerts.detectors == detectors.DEFAULTS


def test_stalled_for_is_the_one_stall_floor_of_the_rule_and_the_detector(caplog):
    """``stalled_for`` sets the rule's floor and the stall detector's ``stall_s`` (its name on the
    wire) alike; ``stall_s`` in ``alerts:``, once silently overwritten by stalled_for, is honoured as
    its deprecated alias with a warning naming stalled_for, and both at once are refused."""
    alerts = alert_settings.AlertSettings.from_mapping({"stalled_for": "20m"})
    assert alerts.detectors.stall_s == 1200.0 and "1200)" in alert_rules.render(alerts)
    old = alert_settings.AlertSettings.from_mapping({"stall_s": 600})
    assert old.stalled_for == "600s" and old.detectors.stall_s == 600.0 and "600)" in alert_rules.render(old)
    assert "stalled_for: 600s" in caplog.text
    with pytest.raises(ValueError, match="stall_s and stalled_for are the same setting"):
        alert_settings.AlertSettings.from_mapping({"stall_s": 600, "stalled_for": "10m"})
