"""Validation under any of verl's names (issue 38): val-core/, val-aux/, val/ (agents'
val/<task>/success_rate), test_score/ and the keys a user names; which way is good from the name;
found from the third validation, and a fall of 90 % or more from the second.
"""

from __future__ import annotations

import json

import pytest

from tests import health_gradual as gradual
from tests import health_shapes as shapes
from tests.helpers import rl_insight
from tests.server.health.test_walk import offline, online
from verl_rl_insight.contract.errors import ConfigError
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.settings.server import ServerSettings


def with_validation(key, values, every=10, base=None):
    """The realistic GRPO shape whose only validation is ``key``: ``values(step)`` at every
    ``every`` steps (the shape's own val-core key removed)."""
    run = base or gradual.healthy(0)
    run.history = {k: v for k, v in run.history.items() if "val_core" not in k}
    run.history[detectors.series_name(key)] = [(s, values(s)) for s in range(every, 301, every)]
    return run


def sliding(level, share, onset=200, over=40):
    return lambda s: level * (1 - share * min(1.0, max(0, s - onset) / over)) + 0.004 * ((s // 10) % 3 - 1)


def validation_findings(run, **kw):
    return [f for f in offline(run, **kw) if f.detector == "validation_drop"]


def test_an_agents_success_rate_falling_under_val_task_success_rate_is_found():
    run = with_validation("val/valid_seen/success_rate", sliding(0.3, 0.5))
    [finding] = validation_findings(run)
    assert finding.severity == "warning" and 200 < finding.found_at <= 225, finding
    assert "valid_seen" in finding.metric and "success_rate" in finding.metric


def test_a_fall_under_val_aux_is_found_and_its_std_and_best_of_k_are_not_followed():
    run = with_validation("val-aux/math/reward/mean@4", sliding(0.6, 0.4))
    rising = {"val-aux/math/reward/std@4": 0.2, "val-aux/math/reward/best@4/mean": 0.8}
    for key, level in rising.items():
        run.history[detectors.series_name(key)] = [(s, level) for s in range(10, 301, 10)]
    [finding] = validation_findings(run)
    assert finding.metric.endswith("reward_mean_4") and 200 < finding.found_at <= 225


def test_a_fall_of_90_percent_between_two_validations_is_critical_at_the_second():
    """The issue's agent run: val/valid_seen/success_rate 7.6 % (39/512) before training, 0.2 % at
    the next validation 25 steps later."""
    run = with_validation("val/valid_seen/success_rate", lambda s: 0.076171875 if s == 0 else 0.001953125, every=25)
    run.history[detectors.series_name("val/valid_seen/success_rate")].insert(0, (0, 0.076171875))
    [finding] = validation_findings(run)
    assert (finding.severity, finding.found_at) == ("critical", 25)
    assert finding.evidence.startswith("step 25: 0.001953 against step 0: 0.07617")


def test_a_fall_is_found_from_the_third_validation():
    run = with_validation("test_score/gsm8k", lambda s: 0.5, every=10)  # GSM8K's 1319 questions
    run.history[detectors.series_name("test_score/gsm8k")] = [(10, 0.5125), (20, 0.3011), (30, 0.2987)]
    [finding] = validation_findings(run)
    assert finding.found_at == 30


def test_the_direction_comes_from_the_name_a_validation_loss_rising_is_a_drop():
    rising_loss = with_validation("val-core/math/loss/mean@1", lambda s: 1.0 + (0.6 if s > 200 else 0.0))
    assert [f.found_at for f in validation_findings(rising_loss)][:1] == [220]
    falling_loss = with_validation("val-core/math/loss/mean@1", lambda s: 1.0 - (0.6 if s > 200 else 0.0))
    assert validation_findings(falling_loss) == []
    falling_score = with_validation("val-core/math/acc/mean@1", lambda s: 1.0 - (0.6 if s > 200 else 0.0))
    assert [f.found_at for f in validation_findings(falling_score)][:1] == [220]


def test_a_key_the_user_names_is_followed_offline_online_and_by_diagnose_file(tmp_path):
    run = with_validation("eval/alfworld_pass_rate", sliding(0.4, 0.6))
    assert validation_findings(run) == []  # not a name verl uses: nobody follows it ...
    [finding] = validation_findings(run, validation_keys=["eval/alfworld_pass_rate"])  # ... unless named
    assert 200 < finding.found_at <= 225
    live, _ = online(run, validation_keys=["eval/"])  # a family: every key under it
    assert [f.found_at for f in live if f.detector == "validation_drop"] == [finding.found_at]
    path = tmp_path / "run.jsonl"
    keys = ("critic/score/mean", "actor/entropy", "response_length/mean", "eval/alfworld_pass_rate")
    with path.open("w") as f:
        for step, values in detectors.steps_of(run.history):
            data = {k: values[detectors.series_name(k)] for k in keys if detectors.series_name(k) in values}
            f.write(json.dumps({"step": step, "data": data}) + "\n")
    result = rl_insight("diagnose", "--file", str(path), "--json", "--validation-key", "eval/alfworld_pass_rate")
    said = [f["found_at"] for f in json.loads(result.stdout)["findings"] if f["detector"] == "validation_drop"]
    assert said == [finding.found_at], result.stdout
    unnamed = rl_insight("diagnose", "--file", str(path), "--json")
    assert [f for f in json.loads(unnamed.stdout)["findings"] if f["detector"] == "validation_drop"] == []


def test_a_real_healthy_runs_validation_noise_is_no_drop():
    """The GPG run's MATH validation has single low validations (0.389 among 0.5s at step 115, 6.9x
    one validation's noise; 0.415 at 135) that recover: one low point is worth knowing (info), not a
    warning."""
    run = shapes.real_run("diqiu_gpg_qwen2_7b_gsm8k_math_fsdp")
    found = validation_findings(run)
    assert {f.first_step for f in found} >= {115, 135}
    assert all(f.severity == "info" and "one point: worth knowing" in f.evidence for f in found), found


def test_the_server_config_names_validation_keys_and_a_wrong_one_is_a_clear_error(tmp_path):
    settings = ServerSettings(data_dir=str(tmp_path), validation_keys=["eval/alfworld_pass_rate"])
    assert settings.validation_keys == ["eval/alfworld_pass_rate"]
    with pytest.raises(ConfigError, match="validation_keys"):
        ServerSettings(data_dir=str(tmp_path), validation_keys="eval/alfworld_pass_rate")


def test_no_validation_drop_while_its_noise_is_unknown():
    """The fourth validation of a healthy 30-question set (the better of two at 0.167 against 0.217) was a drop
    "50000000000x the noise of that difference (+-0)": two validations before it give no noise
    (too few for their changes, and too few different values for the set's size). A drop must then be
    a quarter of the level: this one was 23 %."""
    run = shapes.HEALTHY_SHAPES["30-question validation set"](3)
    found = [f for f in offline(run) if f.detector == "validation_drop"]
    assert found == [], [(f.first_step, f.evidence) for f in found]
    values = [v for _, v in run.history[detectors.series_name("val-core/math/acc/mean@1")][:4]]
    assert max(values[2:]) < sum(values[:2]) / 2 - 0.04  # the early dip is still there: it can fail for its reason


def _validations(changes):
    """The AMD GRPO baseline (healthy; its GSM8K validation every 10 steps at ~0.69, +-0.006 a
    validation) with some of its validations set to other values, and the run cut after the last."""
    run = shapes.real_run("yushengsu_amd_grpo_deepseek7b_gsm8k")
    name = detectors.series_name("val/test_score/openai/gsm8k")
    last = max(changes)
    run.history = {
        k: [(s, changes.get(s, v) if k == name else v) for s, v in points if s <= last]
        for k, points in run.history.items()
    }
    return run


def drops(run):
    return [f for f in offline(run) if f.detector == "validation_drop" and f.last_step >= 790]


def test_one_validation_point_far_beyond_the_noise_is_a_warning():
    [low] = drops(_validations({800: 0.600}))  # 15 times one validation's noise
    assert (low.severity, low.first_step, low.found_at) == ("warning", 800, 800)


def test_three_declining_validations_are_a_warning_at_the_third():
    """0.69 -> 0.68 -> 0.66 -> 0.63: each worse than the one before, 9 % down in all (no one of them
    far below the level by itself, nor their median)."""
    run = _validations({800: 0.680, 810: 0.660, 820: 0.630})
    [decline] = drops(run)
    assert (decline.severity, decline.found_at) == ("warning", 820)
    assert decline.evidence.startswith("3 validations in a row each worse than the one before")
    assert drops(_validations({800: 0.680, 810: 0.660})) == []  # two: not yet
