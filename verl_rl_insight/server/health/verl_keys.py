"""The verl keys the health walk reads, named once: the score, entropy under both of its names, what
tells a run that learns nothing, the group statistics, the step time and the values that must stay
finite (from verl's own metric functions, ``verl/trainer/ppo/metric_utils.py``, and the trainer's
update outputs)."""

SCORE = ("critic/score/mean", "critic/rewards/mean")
ENTROPY = ("actor/entropy", "actor/entropy_loss")  # older verl logs the mean entropy as entropy_loss
SIGNAL_KEYS = (
    "critic/advantages/max",
    "critic/advantages/min",
    "actor/grad_norm",
    "actor/pg_loss",  # with grad_norm: absent from a step that logs the rest, verl skipped the update
    "critic/score/max",
    "critic/score/min",
    "critic/rewards/max",
    "critic/rewards/min",
)
ZERO_VARIANCE = "rl_insight/group/zero_variance_share"  # plugin group_stats
GROUP_KEYS = (
    ZERO_VARIANCE,
    "rl_insight/group/solve_all_share",
    "rl_insight/group/solve_none_share",
    "rl_insight/group/reward_std/mean",
    "critic/score/max",
    "critic/score/min",
    "critic/vf_loss",  # a critic: PPO's advantages do not come from groups
)
STEP_TIME_KEYS = ("timing_s/step", "timing/step", "perf/time_per_step")

NON_FINITE_KEYS = (
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/entropy",
    "actor/entropy_loss",
    "actor/ppo_kl",
    "actor/kl_loss",
    "critic/vf_loss",
    "critic/grad_norm",
    "critic/score/mean",
    "critic/rewards/mean",
    "critic/advantages/mean",
)
