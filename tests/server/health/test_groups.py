"""The detector ``zero_variance_groups``: most GRPO groups carry no gradient for several steps.

No public run logs plugin group_stats' keys, so it is judged two ways: on real verl runs through
what verl logs (``critic/score/max`` = ``min``: every group is uniform; the collapsed GRPO run of
tests/data/real_runs shows it from step 11), and on runs made of verl's own functions: each step a
batch of GRPO groups (``tests.trainer.test_group_stats.grpo_batch``) through verl's real ``compute_advantage``,
verl's ``compute_data_metrics`` (the step's dict) and the plugin's ``batch_metrics`` (its keys),
the groups' solve rates changing over the steps."""

import json
import random

import pytest

from tests import health_shapes as shapes
from tests.helpers import rl_insight
from tests.server.health.test_walk import offline, online
from tests.trainer.test_group_stats import grpo, grpo_batch
from verl_rl_insight.server.health import detectors

N = 8  # responses per prompt (rollout.n)
PROMPTS = 32


def step_dict(step, rates, n=N, seed=0):
    """fit's dict for one step: the prompts' responses scored 1 with each prompt's solve rate."""
    from verl.trainer.ppo.metric_utils import compute_data_metrics

    from verl_rl_insight.trainer.plugins.group_stats import batch_metrics

    pick = random.Random(f"{seed}/{step}")
    groups = [
        (f"s{step}p{i}", "math", [float(pick.random() < p) for _ in range(n)], [pick.randint(1, 8) for _ in range(n)])
        for i, p in enumerate(rates)
    ]
    out = grpo(grpo_batch(groups))
    metrics = {"training/global_step": step, "training/epoch": 0, **compute_data_metrics(out, use_critic=False)}
    return {**metrics, **batch_metrics(out, {})}


def run_of(steps):
    """A run's history ({series name: [(step, value)]}) from its steps' dicts."""
    history = {}
    for step, metrics in steps:
        for key, value in metrics.items():
            history.setdefault(detectors.series_name(key), []).append((step, float(value)))
    return shapes.Run("groups", history)


def drifting_run(after, at=20, steps=40):
    """Mixed groups (solve rates 0.2-0.8), then from step ``at`` every prompt at ``after``."""
    mixed = [0.2 + 0.6 * i / (PROMPTS - 1) for i in range(PROMPTS)]
    return run_of((s, step_dict(s, mixed if s < at else [after] * PROMPTS)) for s in range(1, steps + 1))


def groups_findings(found):
    return [f for f in found if f.detector == "zero_variance_groups"]


def test_groups_that_all_fail_from_a_step_are_a_warning_from_that_step_with_where_to_look():
    run = drifting_run(after=0.0)  # from step 20 no response is solved (a broken reward, too hard a set)
    [finding] = groups_findings(offline(run))
    assert (finding.first_step, finding.found_at, finding.severity) == (20, 24, "warning")
    assert finding.evidence == (
        "step 20: 100% of the groups have all-equal rewards (GRPO gives them no gradient): "
        "every response of the batch got the same reward"
    )
    assert finding.metric == "rl_insight/group/zero_variance_share" and finding.value == 1.0
    mode = detectors.BY_NAME["zero_variance_groups"]
    assert "DAPO" in mode.usually and "reward function" in mode.look
    live, _ = online(run)
    assert [f.as_json() for f in groups_findings(live)] == [finding.as_json()]


def test_groups_that_all_succeed_are_information_not_a_warning():
    """A training set the policy solves: no gradient from its prompts, worth knowing (raise the
    difficulty, DAPO's filter), not a failure of the run."""
    run = drifting_run(after=0.99)  # 0.99^8: 92 % of the groups all solved
    [finding] = groups_findings(offline(run))
    assert (finding.first_step, finding.severity) == (20, "info")
    assert finding.evidence.endswith("% none solved") and "% all solved" in finding.evidence
    live, emitted = online(run)  # online the same finding, and its warning alert's counter never rises
    assert [f.as_json() for f in groups_findings(live)] == [finding.as_json()]
    counts = [
        b.values[b.names.index("rl_insight_health_findings_total")]
        for made in emitted  # what the hub takes from the monitor after each step (its derived series)
        for b in made
        if dict(b.labels).get("detector") == "zero_variance_groups"
    ]
    assert counts and set(counts) == {0.0}


def test_mixed_groups_and_groups_of_one_response_are_no_finding():
    mixed = drifting_run(after=0.5)  # 8 responses at 0.5: a group is uniform with 2 x 0.5^8 < 1 %
    assert groups_findings(offline(mixed)) == []
    # PPO's rollout.n = 1: every group of one response is "all equal"; the detector says nothing
    ppo = run_of((s, step_dict(s, [0.0] * PROMPTS, n=1)) for s in range(1, 41))
    assert detectors.series_name("rl_insight/group/zero_variance_share") in ppo.history
    assert groups_findings(offline(ppo)) == []


def test_a_real_grpo_run_whose_responses_all_fail_is_found_from_its_scores():
    """The collapsed on-policy-distillation GRPO run: from step 11 every response scores -1
    (critic/score/max = min), so every group is uniform."""
    run = shapes.real_run("jianghoucheng_opd_grpo_qwen3_4b_dapo_math_collapse")
    [finding] = groups_findings(offline(run))
    assert (finding.first_step, finding.found_at, finding.severity) == (11, 15, "warning")
    assert "every response scored -1 (critic/score/max = min)" in finding.evidence
    live, _ = online(run)
    assert [f.as_json() for f in groups_findings(live)] == [finding.as_json()]


@pytest.mark.parametrize("run", shapes.real_runs(None), ids=lambda r: r.name)
def test_no_healthy_real_run_is_found(run):
    if run.source == "healthy":
        assert groups_findings(offline(run)) == []


def test_the_healthy_real_grpo_runs_own_scores_as_groups_give_at_most_information():
    """The verl docs' AMD GRPO baseline (rollout.n 5, GSM8K): its own critic/score/mean at every
    20th step as each prompt's solve rate, 64 prompts of 5 responses through compute_advantage:
    late in the run 0.97 of the responses are right and most groups are all solved. That is worth
    knowing, never a warning."""
    real = shapes.real_run("yushengsu_amd_grpo_deepseek7b_gsm8k")
    scores = real.history[detectors.series_name("critic/score/mean")]
    run = run_of((s, step_dict(s, [v] * 64, n=5, seed=1)) for s, v in scores[::20])
    found = groups_findings(offline(run))
    share = run.history[detectors.series_name("rl_insight/group/zero_variance_share")]
    assert max(v for _, v in share) >= 0.8  # most groups carry no gradient there ...
    assert found and {f.severity for f in found} == {"info"}  # ... and it says so, as information


def test_diagnose_file_prints_the_finding_and_exits_1(tmp_path):
    run = drifting_run(after=0.0)
    path = tmp_path / "run.jsonl"
    with path.open("w") as f:
        for step, values in detectors.steps_of(run.history):
            f.write(json.dumps({"step": step, "data": {detectors.verl_key(n): v for n, v in values.items()}}) + "\n")
    result = rl_insight("diagnose", "--file", str(path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "WARNING   zero_variance_groups  steps 20-40  rl_insight/group/zero_variance_share" in result.stdout
