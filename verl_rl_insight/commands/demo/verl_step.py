"""What verl's trainer logs at a step, built as ``RayPPOTrainer.fit`` builds it (verl 0.9.1,
``verl/trainer/ppo/ray_trainer.py``; the v1 ``trainer_base``, fully async, one-step-off and
separation trainers log the same keys), for the demo's simulated run and for every test that
stands for "a trainer step".

Everything verl computes from the step's batch is computed here by verl's own functions on a small
real ``DataProto``: the balance of sequence lengths (``log_seqlen_unbalance``), the entropy after
``old_log_prob`` (``agg_loss``), the rollout/actor mismatch (``calculate_debug_metrics``), the
advantages (``compute_advantage``, GRPO), the policy-loss figures (``compute_policy_loss_vanilla``),
the data, timing and throughput metrics (``compute_data_metrics``, ``compute_timing_metrics``,
``compute_throughout_metrics``), the agent loop's timings (``AgentLoopManager._performance_metrics``)
and, every ``test_freq`` steps, the validation keys (``RayPPOTrainer._val_metrics_update``). What a
worker reports about its model (grad norm, learning rate, memory, MFU) cannot be computed without
one: those keys are verl's, their values PPO-shaped. The curves move like a run: the score rises,
the entropy falls. Seeded by the step: the same step gives the same dict.

    for step, metrics in trainer_steps(10):
        tracking.log(data=metrics, step=step)   # what fit does, val_before_train's step 0 included
"""

from __future__ import annotations

import functools
import inspect
import math
import random
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verl import DataProto

# verl's values are Python, numpy and torch scalars, as fit hands them to Tracking.log
StepMetrics = dict[str, object]

ROLLOUT_N = 4  # responses per prompt (actor_rollout_ref.rollout.n)
PROMPTS = 8  # prompts a step (data.train_batch_size)
DATA_SOURCES = ("openai/gsm8k", "lighteval/MATH")


def progress_of(step: int, total_steps: int) -> float:
    return min(1.0, max(0.0, step / max(total_steps, 1)))


def score_chance(step: int, total_steps: int) -> float:
    """The chance that a response is right: rises, then levels off, as in a healthy GSM8K run."""
    return 0.25 + 0.55 * (1 - math.exp(-3 * progress_of(step, total_steps)))


def rollout_batch(
    step: int,
    total_steps: int = 100,
    prompts: int = 8,
    response_length: int = 64,
    prompt_length: int = 32,
) -> DataProto:
    """A step's batch as fit holds it after ``gen`` and ``old_log_prob``: prompts and responses,
    their masks, rewards (a 0/1 score on the last token), the rollout's and the actor's log probs
    (a small mismatch that drifts), critic values, each prompt repeated ``ROLLOUT_N`` times."""
    import numpy as np
    import torch
    from verl import DataProto

    batch = prompts * ROLLOUT_N
    g = torch.Generator().manual_seed(step)
    rollout = torch.log(torch.rand(batch, response_length, generator=g) * 0.9 + 0.05)
    drift = 0.004 + 0.002 * math.sin(step / 5)
    actor = rollout + torch.randn(batch, response_length, generator=g) * drift
    lengths = torch.randint(response_length // 4, response_length + 1, (batch,), generator=g)
    mask = (torch.arange(response_length)[None, :] < lengths[:, None]).long()
    prompt_lengths = torch.randint(prompt_length // 2, prompt_length + 1, (batch,), generator=g)
    prompt_mask = (torch.arange(prompt_length)[None, :] >= prompt_length - prompt_lengths[:, None]).long()
    scores = torch.zeros(batch, response_length)
    right = (torch.rand(batch, generator=g) < score_chance(step, total_steps)).float()
    scores[torch.arange(batch), lengths - 1] = right
    return DataProto.from_dict(
        tensors={
            "responses": torch.randint(0, 1000, (batch, response_length), generator=g),
            "prompts": torch.randint(0, 1000, (batch, prompt_length), generator=g),
            "attention_mask": torch.cat([prompt_mask, mask], dim=1),
            "response_mask": mask,
            "rollout_log_probs": rollout,
            "old_log_probs": actor,
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
            # the critic's predictions: near what the response scores, as a trained critic's are
            "values": (right[:, None] - 0.5) * mask + torch.randn(batch, response_length, generator=g) * 0.1,
        },
        non_tensors={
            "uid": np.array([f"step{step}-q{i // ROLLOUT_N}" for i in range(batch)], dtype=object),
            "data_source": np.array([DATA_SOURCES[i // ROLLOUT_N % 2] for i in range(batch)], dtype=object),
        },
        meta_info={"global_token_num": (prompt_lengths + lengths).tolist()},
    )


def phase_seconds(step: int, step_s: float = 60.0, testing: bool = False) -> dict[str, float]:
    """``timing_raw`` of a step as ``marked_timer`` fills it (seconds): the phases fit times, in
    the shares a colocated GRPO step spends in them."""
    rng = random.Random(step)
    shares = {
        "gen": 0.45,
        "reward": 0.03,
        "old_log_prob": 0.1,
        "ref": 0.06,
        "values": 0.05,
        "adv": 0.005,
        "update_critic": 0.08,
        "update_actor": 0.2,
        "update_weights": 0.02,
        "stop_profile": 0.0001,
    }
    timing = {name: step_s * share * rng.uniform(0.9, 1.1) for name, share in shares.items()}
    if testing:
        timing["testing"] = step_s * 0.15 * rng.uniform(0.9, 1.1)
    timing["step"] = sum(timing.values())
    return timing


def agent_loop_timing(batch: DataProto, seconds: float) -> dict[str, float]:
    """What the agent loop returns in ``meta_info["timing"]`` (fit adds it to ``timing_raw``), by
    verl's own ``AgentLoopManager._performance_metrics`` over per-sample figures."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager

    rng = random.Random(len(batch) * 7919 + int(seconds * 1000))
    samples = [
        {
            "generate_sequences": seconds * min(1.0, rng.lognormvariate(-0.7, 0.4)),
            "tool_calls": 0.0,
            "compute_score": 0.0,
            "num_preempted": 0,
        }
        for _ in range(len(batch))
    ]
    timing: dict[str, float] = AgentLoopManager._performance_metrics(None, [samples], batch)
    return timing


def validation_metrics(step: int, total_steps: int = 100, samples: int = 16) -> StepMetrics:
    """What ``_validate`` returns: ``val-core/<source>/reward/mean@1`` and the ``val-aux`` keys, by
    verl's own ``_val_metrics_update`` over per-sample scores."""
    import numpy as np
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    rng = random.Random(10_000 + step)
    chance = score_chance(step, total_steps) + 0.05
    scores = [float(rng.random() < chance) for _ in range(samples)]
    sources = np.array([DATA_SOURCES[i % 2] for i in range(samples)], dtype=object)
    uids = [f"val-{i}" for i in range(samples)]
    metrics: StepMetrics = RayPPOTrainer._val_metrics_update(None, sources, uids, {"reward": scores}, [])
    return metrics


def _policy_figures(batch: DataProto, progress: float, rng: random.Random) -> StepMetrics:
    """The actor update's outputs as fit renames them (``actor/*``, ``perf/mfu/actor``): the
    policy-loss figures by verl's own loss on the batch, the rest what a worker reports."""
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos

    config = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "clip_ratio_c": 3.0})
    config.global_batch_info = {}
    old = batch.batch["old_log_probs"]
    g = torch.Generator().manual_seed(int(rng.random() * 2**31))
    new = old + torch.randn(old.shape, generator=g) * 0.05
    pg_loss, pg_metrics = core_algos.compute_policy_loss_vanilla(
        old_log_prob=old,
        log_prob=new,
        advantages=batch.batch["advantages"],
        response_mask=batch.batch["response_mask"],
        loss_agg_mode="token-mean",
        config=config,
    )
    grad_norm = 0.4 + 0.3 * math.exp(-4 * progress) + abs(rng.gauss(0, 0.08))
    if rng.random() < 0.05:  # real grad norms are heavy-tailed: a single step of 3-10x the median
        grad_norm *= rng.uniform(3, 6)
    return {
        **pg_metrics,
        "actor/pg_loss": pg_loss.item(),
        "actor/loss": pg_loss.item(),
        "actor/grad_norm": grad_norm,
        "actor/lr": 1e-6 * min(1.0, 0.1 + progress * 10),  # warm-up, then constant
        "actor/perf/max_memory_allocated_gb": 61.5 + rng.gauss(0, 0.5),
        "actor/perf/max_memory_reserved_gb": 70.0 + rng.gauss(0, 0.5),
        "actor/perf/cpu_memory_used_gb": 120.0 + rng.gauss(0, 2),
        "perf/mfu/actor": 0.35 + rng.gauss(0, 0.02),
    }


def _critic_figures(progress: float, rng: random.Random) -> StepMetrics:
    """The critic update's outputs as fit renames them (``critic/*``, ``perf/mfu/critic``)."""
    return {
        "critic/vf_loss": 0.5 * math.exp(-2 * progress) + abs(rng.gauss(0, 0.02)),
        "critic/vf_clipfrac": min(1.0, abs(0.05 + rng.gauss(0, 0.01))),
        "critic/vpred_mean": 0.3 + rng.gauss(0, 0.05),
        "critic/grad_norm": 1.5 + abs(rng.gauss(0, 0.2)),
        "critic/lr": 1e-5,
        "perf/mfu/critic": 0.3 + rng.gauss(0, 0.02),
    }


def step_metrics(
    step: int,
    total_steps: int = 100,
    *,
    epoch: int = 0,
    test_freq: int = 5,
    use_critic: bool = True,
    n_gpus: int = 8,
    batch: DataProto | None = None,
    timing: dict[str, float] | None = None,
) -> StepMetrics:
    """One step's ``metrics``, the keys in the order fit adds them, as ``logger.log(data=metrics,
    step=global_steps)`` gets them. ``batch`` / ``timing``: the step's own (the demo's), else made
    here (and the result kept: the same step is the same dict, a copy each call); ``test_freq``:
    validation keys on every such step and the last (0: never)."""
    if batch is None and timing is None:
        return dict(_made_step(step, total_steps, epoch, test_freq, use_critic, n_gpus))
    return _step_metrics(step, total_steps, epoch, test_freq, use_critic, n_gpus, batch, timing)


@functools.lru_cache(maxsize=4096)
def _made_step(step: int, total_steps: int, epoch: int, test_freq: int, use_critic: bool, n_gpus: int) -> StepMetrics:
    return _step_metrics(step, total_steps, epoch, test_freq, use_critic, n_gpus, None, None)


def _step_metrics(
    step: int,
    total_steps: int,
    epoch: int,
    test_freq: int,
    use_critic: bool,
    n_gpus: int,
    batch: DataProto | None,
    timing: dict[str, float] | None,
) -> StepMetrics:
    import torch
    from verl.trainer.ppo import metric_utils
    from verl.trainer.ppo.core_algos import AdvantageEstimator, agg_loss
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.utils.debug.metrics import calculate_debug_metrics
    from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions, log_seqlen_unbalance

    progress = progress_of(step, total_steps)
    rng = random.Random(step)
    testing = test_freq > 0 and (step == total_steps or step % test_freq == 0)
    batch = batch if batch is not None else rollout_batch(step, total_steps)
    timing = dict(timing) if timing is not None else phase_seconds(step, testing=testing)
    timing.update(agent_loop_timing(batch, timing.get("gen", 1.0)))
    metrics: StepMetrics = {}
    # _balance_batch: the sequence lengths over 2 data-parallel ranks
    seqlens = batch.batch["attention_mask"].sum(-1)
    partitions = get_seqlen_balanced_partitions(calculate_workload(seqlens), k_partitions=2, equal_size=True)
    metrics.update(log_seqlen_unbalance(seqlen_list=seqlens.tolist(), partitions=partitions, prefix="global_seqlen"))
    # old_log_prob: the entropy of the actor's distribution, falling gently as the policy sharpens (about
    # 0.6 to 0.4 nats: a healthy run's; a fall to a tenth in 20 steps reads as a collapse)
    g = torch.Generator().manual_seed(step)
    entropys = torch.rand(batch.batch["response_mask"].shape, generator=g) * 1.2 * (1 - 0.35 * progress)
    entropy = agg_loss(loss_mat=entropys, loss_mask=batch.batch["response_mask"], loss_agg_mode="token-mean")
    metrics.update({"actor/entropy": entropy.detach().item(), "perf/mfu/actor_infer": 0.25 + rng.gauss(0, 0.02)})
    metrics.update(calculate_debug_metrics(batch))
    if "advantages" not in batch.batch.keys():
        # verl's own, not through this package's patch: what a plugin adds at a step is its own to add
        advantage = inspect.unwrap(compute_advantage)
        batch = advantage(batch, adv_estimator=AdvantageEstimator.GRPO, num_repeat=ROLLOUT_N)
    if use_critic:
        metrics.update(_critic_figures(progress, rng))
    metrics.update(_policy_figures(batch, progress, rng))
    if testing:
        metrics.update(validation_metrics(step, total_steps))
    metrics.update({"training/global_step": step, "training/epoch": epoch})
    metrics.update(metric_utils.compute_data_metrics(batch=batch, use_critic=use_critic))
    metrics.update(metric_utils.compute_timing_metrics(batch=batch, timing_raw=timing))
    metrics.update(metric_utils.compute_throughout_metrics(batch=batch, timing_raw=timing, n_gpus=n_gpus))
    return metrics


def trainer_steps(
    total_steps: int, *, first_step: int = 1, test_freq: int = 5, val_before_train: bool = True
) -> Iterator[tuple[int, StepMetrics]]:
    """(step, metrics) of every ``logger.log`` call of a run of ``total_steps`` steps, in fit's
    order: the validation before training at step 0 (``val_before_train``), then each step."""
    if val_before_train and first_step == 1:
        yield 0, validation_metrics(0, total_steps)
    for step in range(first_step, total_steps + 1):
        yield step, step_metrics(step, total_steps, test_freq=test_freq)
