"""The training-health walk in this process, on real verl runs (``tests/data/real_runs``, verl's ``file``
logger format) and on realistic shapes built from them (``tests/health_shapes.py``): the offline walk
(``detectors.diagnose``) and the online one (``HealthMonitor``, fed the batches the hub accepts) find the same
findings; baselines start again at a reset step; each new failure mode is found near the step it began.

The same runs go through the real server and ``rl-insight diagnose --file`` in
tests/server/health/test_detectors_on_real_runs.py."""

import math

import pytest

from tests import health_shapes as shapes
from verl_rl_insight.contract.wire import validate_push
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.live import HealthMonitor

START = 1_700_000_000.0


def wire(value):
    return value if math.isfinite(value) else ("NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf"))


def batches_of(run, project="p", experiment="e"):
    """The run's steps as the push bodies a trainer sends (one step each, its own time)."""
    at = dict(run.times)
    for step, metrics in detectors.steps_of(run.history):
        yield {
            "project": project,
            "experiment_name": experiment,
            "step": step,
            "time": START + at.get(step, float(step)),
            "metrics": {name: wire(v) for name, v in metrics.items()},
        }


def online(run, resets=(), reset_late=None, validation_keys=()):
    """The findings of the server's HealthMonitor fed the run step by step, as the hub gives them."""
    emitted = []
    monitor = HealthMonitor(validation_keys=validation_keys)
    for step in resets:
        monitor.reset_baseline("p", "e", step)
    for body in batches_of(run):
        if reset_late is not None and body["step"] == reset_late[0]:
            monitor.reset_baseline("p", "e", reset_late[1])
        monitor.observe(validate_push({"batches": [body]}, now=START + 10**9))
        monitor.walk()  # what the server does every second (app.Server._tick), then the hub takes the series
        emitted.append(monitor.collect())
    return monitor.findings("p", "e"), emitted


def offline(run, resets=(), validation_keys=()):
    at = dict(run.times)
    times = [(s, START + at.get(s, float(s))) for s, _ in detectors.steps_of(run.history)]
    return detectors.diagnose(run.history, times, resets=resets, validation_keys=validation_keys)


def test_there_are_real_runs_to_judge_on():
    runs = shapes.real_runs()
    assert len(runs) >= 8, [r.name for r in runs]  # tests/data/real_runs has 8 healthy runs and 1 failure
    assert all(r.source == "healthy" for r in runs)
    assert set(shapes.EXPECTED) <= {r.name for r in shapes.real_runs("failure")}


def planned_drop(at=200):
    """The verl docs' own PPO baseline (Qwen2.5-0.5B, GSM8K) with a planned change at step
    ``at``: harder prompts from there on, so the score falls to half its level and stays there."""
    run = shapes.real_run("verldata_ppo_qwen05b_gsm8k_resp512")
    name = detectors.series_name("critic/score/mean")
    run.history[name] = [(s, v * 0.5 if s >= at else v) for s, v in run.history[name]]
    return run


def test_a_planned_change_at_a_reset_step_is_no_finding_offline():
    run = planned_drop()
    without = [f for f in offline(run) if f.detector == "reward_collapse"]
    assert without and without[0].first_step >= 200, without  # without the reset it is a collapse
    assert [f for f in offline(run, resets=(200,)) if f.severity != "info"] == []


def test_a_planned_change_at_a_reset_step_is_no_finding_online():
    run = planned_drop()
    without, _ = online(run)
    assert "reward_collapse" in {f.detector for f in without}
    found, _ = online(run, resets=(200,))
    assert [f for f in found if f.severity != "info"] == []
    # marked while the run is already past the step (the mark comes a few steps late): the steps
    # before it stop being baseline from then on
    late, _ = online(run, reset_late=(201, 200))
    assert [f for f in late if f.severity != "info"] == []


@pytest.mark.parametrize("run", shapes.real_runs(None), ids=lambda r: r.name)
def test_online_and_offline_find_the_same_on_a_real_run(run):
    found, emitted = online(run)
    assert [f.as_json() for f in found] == [f.as_json() for f in offline(run)]
    assert any(emitted)  # the monitor gave the hub what it said


NEW_MODES = (
    "entropy_collapse",
    "entropy_blowup",
    "response_length_collapse",
    "no_learning_signal",
    "train_val_divergence",
)
SLOWEST = {"train_val_divergence": 60}  # validations come every 10 steps: it needs a few of them


@pytest.mark.parametrize("on_shape", (False, True), ids=("real run", "long-CoT GRPO shape"))
@pytest.mark.parametrize("failure", NEW_MODES)
def test_each_new_mode_is_found_online_and_offline_near_the_step_it_began(failure, on_shape):
    """The failure grows over tens of steps from ``inject_at`` (entropy 50x down over 30 steps,
    10x up, lengths to a tenth, reward / advantages / gradient exactly 0, validation sliding 0.25
    over 50 steps while the score rises), injected into a real healthy run or the realistic shape."""
    if on_shape:
        run = shapes.inject(shapes.grpo_run("r1", 0), failure, 150)
    else:
        base, at = shapes.FAILURES[failure]
        run = shapes.inject(shapes.real_run(base), failure, at)
    found = offline(run)
    steps = shapes.detection(run, found)
    assert steps is not None and 0 <= steps <= SLOWEST.get(failure, 35), (steps, found)
    live, _ = online(run)
    assert shapes.detection(run, live) == steps
    assert [f.as_json() for f in live] == [f.as_json() for f in found]


def test_no_learning_signal_is_critical_and_says_why():
    base, at = shapes.FAILURES["no_learning_signal"]
    run = shapes.inject(shapes.real_run(base), "no_learning_signal", at)
    [finding] = [f for f in offline(run) if f.detector == "no_learning_signal"]
    assert finding.severity == "critical"
    assert finding.first_step == at and finding.found_at == at + 2  # three steps without a signal
    assert "every advantage is 0" in finding.evidence and "actor/grad_norm is 0" in finding.evidence


@pytest.mark.parametrize("run", shapes.healthy_shapes(seeds=3), ids=lambda r: r.name)
def test_a_realistic_healthy_shape_gets_no_critical_and_at_most_one_warning(run):
    """Slow entropy decay, a base model's fast entropy drop, R1 length growth with truncation rising
    with it, a 30-question validation set, 40-minute steps with checkpoint steps 3x longer, ppo_kl
    noise around 0, a solved task."""
    found = [f for f in offline(run) if f.severity != "info"]
    assert [f for f in found if f.severity == "critical"] == []
    assert len(found) <= 1, found


def test_a_plateau_is_information_not_a_warning():
    run = shapes.grpo_run("solved", 0, solved=True, length_growth=False)
    found = offline(run)
    assert {f.detector for f in found} == {"reward_plateau"} and {f.severity for f in found} == {"info"}


@pytest.mark.parametrize("name", sorted(shapes.EXPECTED))
def test_a_real_failed_run_is_found_by_the_step_its_source_describes(name):
    """A real run its source labels a failure (a GRPO run whose responses collapse to one token):
    each mode it shows is found by the step the source describes, online as offline."""
    run = shapes.real_run(name)
    assert run.source.startswith("failure")
    found = offline(run)
    for detector, by in shapes.EXPECTED[name].items():
        mine = [f for f in found if f.detector == detector]
        assert mine and mine[0].found_at <= by, (detector, found)
    assert found[0].severity == "critical"
    live, _ = online(run)
    assert [f.as_json() for f in live] == [f.as_json() for f in found]
