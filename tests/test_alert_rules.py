"""Alert rules: promtool accepts them, a real Prometheus loads them and fires the log-prob
mismatch alert once pushed data crosses the threshold for the whole window, and not before."""

import shutil
import subprocess
import time

import pytest
import yaml

from tests.helpers import Prometheus, push, wait_for
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.managed import alert_rules
from verl_rl_insight.server.settings import ServerSettings


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
        *(d.alert for d in detectors.ALL if d.online),  # training health (tests/test_health.py)
    }
    assert "> 0.02 and" in rules["RLInsightRolloutProbsDiffCritical"]["expr"]
    assert "> 0.005 and" in rules["RLInsightRolloutProbsDiffWarning"]["expr"]
    assert "[30m]" in rules["RLInsightTrainingStalled"]["expr"]
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
