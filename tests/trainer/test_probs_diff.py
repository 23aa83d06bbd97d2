"""Log-prob mismatch metrics: hand-computed values, empty masks, equality with real verl's
calculate_debug_metrics, and the path through verl's real compute_advantage and Tracking."""

import math

import pytest
import torch

from tests.helpers import http
from verl_rl_insight.trainer.plugins.probs_diff import mismatch_metrics

P = "training/"


def test_hand_computed_values_on_a_small_batch():
    rollout = torch.log(torch.tensor([[0.5, 0.25, 0.9]]))
    actor = torch.log(torch.tensor([[0.52, 0.25, 0.7]]))
    mask = torch.tensor([[1, 1, 0]])  # the third token is padding: 0.2 must not count
    m = mismatch_metrics(rollout, actor, mask)
    assert m[P + "rollout_probs_diff_valid"] == 1
    assert m[P + "rollout_probs_diff_max"] == pytest.approx(0.02, abs=1e-6)
    assert m[P + "rollout_probs_diff_mean"] == pytest.approx(0.01, abs=1e-6)
    assert m[P + "rollout_probs_diff_std"] == pytest.approx(math.sqrt(2 * 0.01**2), abs=1e-6)
    assert m[P + "rollout_probs_diff_frac_gt_0_01"] == pytest.approx(0.5)
    assert m[P + "rollout_probs_diff_frac_gt_0_1"] == 0.0
    d = math.log(0.52 / 0.5)
    assert m[P + "rollout_log_probs_diff_max"] == pytest.approx(d, abs=1e-6)
    assert m[P + "rollout_actor_kl_k3"] == pytest.approx((math.exp(d) - 1 - d) / 2, abs=1e-7)
    assert m[P + "rollout_actor_probs_pearson_corr"] == pytest.approx(1.0, abs=1e-6)


def test_empty_mask_gives_valid_0_and_no_nan():
    m = mismatch_metrics(torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 4))
    assert m == {P + "rollout_probs_diff_valid": 0}
    assert not any(isinstance(v, float) and math.isnan(v) for v in m.values())


def random_batch(seed=0, batch=4, length=16):
    from verl import DataProto

    g = torch.Generator().manual_seed(seed)
    rollout = torch.log(torch.rand(batch, length, generator=g) * 0.9 + 0.05)
    actor = rollout + torch.randn(batch, length, generator=g) * 0.05
    mask = (torch.rand(batch, length, generator=g) > 0.2).long()
    return DataProto.from_dict(
        tensors={
            "responses": torch.randint(0, 100, (batch, length), generator=g),
            "rollout_log_probs": rollout,
            "old_log_probs": actor,
            "response_mask": mask,
            "token_level_rewards": torch.rand(batch, length, generator=g) * mask,
        },
        non_tensors={"uid": __import__("numpy").array(["a", "a", "b", "b"][:batch], dtype=object)},
    )


def test_equal_to_real_verl_calculate_debug_metrics():
    from verl.utils.debug.metrics import calculate_debug_metrics

    from verl_rl_insight.trainer.plugins.probs_diff import batch_metrics

    data = random_batch()
    theirs = calculate_debug_metrics(data)
    ours = batch_metrics(data)
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


def test_through_verl_compute_advantage_and_tracking_verl_values_kept(hub_server, monkeypatch):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.utils.tracking import Tracking

    tracking = Tracking("proj", "mismatch", default_backend=["rl_insight"])
    data = random_batch(seed=1)

    class Trainer:
        global_steps = 5

        def step(self):
            return ray_trainer.compute_advantage(data, adv_estimator=AdvantageEstimator.GRPO)

    out = Trainer().step()
    assert "advantages" in out.batch.keys()  # verl's computation is untouched
    expected = mismatch_metrics(
        data.batch["rollout_log_probs"], data.batch["old_log_probs"], data.batch["response_mask"]
    )
    tracking.log({"training/rollout_probs_diff_mean": 0.123, "actor/pg_loss": 0.5}, step=5)  # verl's value
    tracking.finish()
    text = http("GET", server.url + "/metrics")[1].decode()

    def value(name):  # the live value: the last line of the series (earlier ones carry timestamps)
        return float([x for x in text.splitlines() if x.startswith(name + "{")][-1].split()[1])

    assert value("rl_insight_monitor_training_rollout_probs_diff_mean") == 0.123  # kept
    assert value("rl_insight_monitor_training_rollout_probs_diff_max") == pytest.approx(
        expected[P + "rollout_probs_diff_max"]
    )  # added
    assert value("rl_insight_monitor_training_rollout_actor_kl_k3") == pytest.approx(
        expected[P + "rollout_actor_kl_k3"]
    )
    assert value("rl_insight_monitor_training_rollout_probs_diff_frac_gt_0_01") == pytest.approx(
        expected[P + "rollout_probs_diff_frac_gt_0_01"]
    )
