"""What a test that stands for "a trainer step" logs: what verl's fit loop logs, made by verl's own
metric functions (data, timing, throughput, rollout correction) on a step's batch, the demo's."""


def verl_step(step, rng):
    """What verl's fit loop logs at a step: verl's own metric functions on a step's batch (the demo's)."""
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    from verl_rl_insight.commands.demo.simulation import batch_for, curves

    timing = {"gen": 0.4, "update_actor": 0.3, "step": 1.0}
    batch = ray_trainer.compute_advantage(batch_for(step, rng), adv_estimator=AdvantageEstimator.GRPO)
    # fit's training/global_step is left out here: the hub refuses the batch that carries it (another
    # branch of this round fixes that); curves() has training/epoch
    return curves(step, 10, rng, timing, batch)
