"""Failures that build over tens of steps are found near their onset, and the same runs without
them stay quiet (issue 38): every level detector judges a change at two time scales, the cliff
and the run's level now against its own level 20-60 steps before (``server/health/trends.py``).

The shapes: ``tests/health_gradual.py`` (the realistic long-CoT GRPO run, a healthy start of
200 steps, each failure of ``health_shapes.inject`` at its size spread over 20, 40 or 60 steps).
"""

from __future__ import annotations

import pytest

from tests import health_gradual as gradual
from tests import health_shapes as shapes
from tests.server.health.test_walk import offline, online
from verl_rl_insight.server.health import detectors

SEEDS = (0, 1, 2)


@pytest.mark.parametrize("over", gradual.OVERS)
@pytest.mark.parametrize("mode", sorted(gradual.GRADUAL))
def test_a_failure_that_builds_over_tens_of_steps_is_found_within_25_steps_of_its_onset(mode, over):
    for seed in SEEDS:
        run = gradual.gradual(mode, over, seed)
        found = offline(run)
        steps = gradual.mode_alarm(run, found)
        assert steps is not None and steps <= gradual.WITHIN, (
            mode,
            over,
            seed,
            [(f.detector, f.found_at) for f in found],
        )
        assert gradual.first_alarm(found) <= steps  # nothing else was said first, wrongly, before the onset
        assert all(f.found_at is None or f.found_at >= gradual.ONSET or f.severity == "info" for f in found)


@pytest.mark.parametrize("mode", ["", "validation_drop"], ids=["every 10 steps", "validation every 5 steps"])
def test_the_same_shapes_without_the_failure_get_no_warning(mode):
    for seed in SEEDS:
        found = [f for f in offline(gradual.healthy(seed, mode)) if f.severity != "info"]
        assert found == [], [(f.detector, f.first_step, f.evidence) for f in found]


def test_a_slow_entropy_collapse_while_the_score_slides_is_critical_and_says_both():
    """The issue's run: entropy to a fifteenth over 60 steps while the score slides."""
    run = gradual.gradual("entropy_collapse", 60, 0)
    [finding] = [f for f in offline(run) if f.detector == "entropy_collapse"]
    assert finding.severity == "critical"
    assert "the training score fell" in finding.evidence and "Mann-Kendall" in finding.evidence
    live, _ = online(run)
    assert [f.as_json() for f in live if f.detector == "entropy_collapse"] == [finding.as_json()]


def test_entropy_falling_while_the_score_rises_is_learning_not_a_finding():
    """A base model learns its answer format: entropy falls 3x in its first tens of steps while the
    score climbs (the real AMD GRPO/PPO runs and the GPG runs do this too)."""
    for seed in SEEDS:
        run = shapes.grpo_run("base", seed, base_model=True)
        assert [f for f in offline(run) if f.detector == "entropy_collapse"] == []
    run = gradual.healthy(0)
    entropy = detectors.series_name("actor/entropy")
    run.history[entropy] = [(s, v * (15 ** -min(1.0, max(0, s - 200) / 60))) for s, v in run.history[entropy]]
    found = [f for f in offline(run) if f.detector == "entropy_collapse"]  # the score still rises there
    assert all(f.severity != "critical" for f in found)


def test_a_run_that_ends_with_a_third_of_its_responses_cut_is_a_warning_whatever_its_trend():
    """A share that climbs slowly to 36 % (no cliff, no 2x against the window) is found by its level."""
    run = gradual.healthy(0)
    clip = detectors.series_name("response_length/clip_ratio")
    run.history[clip] = [(s, 0.1 + 0.26 * s / 300) for s, _ in run.history[clip]]
    [finding] = [f for f in offline(run) if f.detector == "response_truncation"]
    assert finding.severity == "warning" and "above the level 0.3" in finding.evidence
    assert 0.3 < finding.value <= 0.36


def test_a_step_that_logs_its_scores_but_no_update_is_no_learning_and_critical():
    """verl skips the update (every response malformed, every group filtered): the step logs its
    rewards and lengths but not actor/grad_norm or actor/pg_loss."""
    run = shapes.real_run("verldata_ppo_qwen05b_gsm8k_resp512")
    for key in ("actor/grad_norm", "actor/pg_loss"):
        name = detectors.series_name(key)
        run.history[name] = [(s, v) for s, v in run.history[name] if s < 200]
    [finding] = [f for f in offline(run) if f.detector == "no_learning_signal"]
    assert (finding.severity, finding.first_step) == ("critical", 200)
    assert "verl skipped the update" in finding.evidence


def test_one_slow_step_that_completed_is_a_warning_and_no_step_at_all_is_critical():
    run = shapes.real_run("diqiu_gpg_qwen2_7b_gsm8k_math_fsdp")  # step 160 took 22543 s, then the run went on
    [stall] = [f for f in offline(run) if f.detector == "stall"]
    assert (stall.first_step, stall.severity) == (160, "warning")
    times = [(s, float(s) * 200) for s, _ in detectors.steps_of(run.history)]
    waiting = detectors.diagnose(run.history, times, finished=False, now=times[-1][1] + 5 * 3600)
    assert [f.severity for f in waiting if f.evidence.startswith("no step for")] == ["critical"]
