"""The simulated demo's curves have the shape of a healthy public run (issue 37): an RL engineer's
first look must not read "the KL blew up" (``actor/kl_loss`` about 1.0, ``kl_coef`` wandering) or "the
entropy collapsed" (1.09 to 0.16 in 20 steps). The demo's step is made as the demo makes it (verl's
``compute_advantage`` on the demo's batch, then ``simulation.curves``); the healthy run it follows is
tests/data/real_runs/yushengsu_amd_grpo_deepseek7b_gsm8k.jsonl (its source beside it), and the
detectors (what ``diagnose`` runs) find nothing on it."""

import json
import random
from pathlib import Path

import pytest

from verl_rl_insight.commands.demo import simulation, verl_step
from verl_rl_insight.contract.naming import METRIC_PREFIX, metric_name
from verl_rl_insight.server.health import detectors

REAL = Path(__file__).parent.parent / "data" / "real_runs" / "yushengsu_amd_grpo_deepseek7b_gsm8k.jsonl"
STEPS = 20


def test_the_demos_kl_loss_is_the_healthy_public_runs_sampled_along_it():
    logged = [json.loads(line)["data"] for line in REAL.read_text().splitlines()]
    kl = [d["actor/kl_loss"] for d in logged if "actor/kl_loss" in d]
    sampled = tuple(kl[min(len(kl) - 1, round(i * (len(kl) - 1) / 10))] for i in range(11))
    assert simulation.HEALTHY_KL_LOSS == sampled
    assert {d["actor/kl_coef"] for d in logged if "actor/kl_coef" in d} == {simulation.HEALTHY_KL_COEF}


@pytest.fixture(scope="module")
def demo_steps():
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    rng = random.Random(0)
    timing = {"gen": 24.0, "reward": 3.0, "old_log_prob": 6.0, "adv": 0.5, "update_actor": 15.0, "step": 60.0}
    steps = {}
    for step in range(1, STEPS + 1):
        batch = verl_step.rollout_batch(step, STEPS, prompts=8)
        batch = ray_trainer.compute_advantage(
            batch, adv_estimator=AdvantageEstimator.GRPO, num_repeat=verl_step.ROLLOUT_N
        )
        steps[step] = simulation.curves(step, STEPS, rng, dict(timing), batch)
    return steps


def test_the_demos_kl_is_small_and_steady_and_its_entropy_decays_gently(demo_steps):
    kl = [float(m["actor/kl_loss"]) for m in demo_steps.values()]
    assert max(kl) < 0.12 and kl[0] < kl[-1]  # rises from ~0.001 to the healthy run's ~0.08, never ~1
    assert {m["actor/kl_coef"] for m in demo_steps.values()} == {0.001}
    entropy = [float(m["actor/entropy"]) for m in demo_steps.values()]
    assert 0.3 < entropy[-1] and entropy[-1] > 0.5 * entropy[0] and entropy[-1] < entropy[0], entropy
    score = [float(m["critic/score/mean"]) for m in demo_steps.values()]
    assert sum(score[-5:]) > sum(score[:5])  # it learns


def test_the_detectors_find_nothing_on_the_demos_run(demo_steps):
    history: dict[str, list[tuple[int, float]]] = {}
    for step, metrics in demo_steps.items():
        for key, value in metrics.items():
            number = float(value) if isinstance(value, (int, float)) else getattr(value, "item", lambda: None)()
            if isinstance(number, (int, float)):
                history.setdefault(metric_name(METRIC_PREFIX, key), []).append((step, float(number)))
    times = [(step, 1000.0 + 60 * step) for step in demo_steps]
    found = detectors.diagnose(history, times, finished=True, now=times[-1][1] + 60)
    assert not [f for f in found if f.severity != "info"], [f.as_json() for f in found]
