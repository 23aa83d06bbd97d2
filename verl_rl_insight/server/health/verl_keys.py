"""The verl keys the health walk reads, grouped once: the score, entropy under both of its names, what
tells a run that learns nothing, the group statistics, the step time and the values that must stay
finite (verl's keys are named in ``contract/verl_keys.py``, where verl logs each)."""

from verl_rl_insight.contract.verl_keys import (
    ADVANTAGES_MAX,
    ADVANTAGES_MEAN,
    ADVANTAGES_MIN,
    CRITIC_GRAD_NORM,
    CRITIC_VF_LOSS,
    ENTROPY_KEYS,
    GRAD_NORM,
    KL_LOSS,
    PG_LOSS,
    PPO_KL,
    REWARDS_MAX,
    REWARDS_MEAN,
    REWARDS_MIN,
    SCORE_KEYS,
    SCORE_MAX,
    SCORE_MEAN,
    SCORE_MIN,
    STEP_TIME,
    TIME_PER_STEP,
)

SCORE = SCORE_KEYS
ENTROPY = ENTROPY_KEYS
SIGNAL_KEYS = (
    ADVANTAGES_MAX,
    ADVANTAGES_MIN,
    GRAD_NORM,
    PG_LOSS,  # with grad_norm: absent from a step that logs the rest, verl skipped the update
    SCORE_MAX,
    SCORE_MIN,
    REWARDS_MAX,
    REWARDS_MIN,
)
ZERO_VARIANCE = "rl_insight/group/zero_variance_share"  # plugin group_stats
GROUP_KEYS = (
    ZERO_VARIANCE,
    "rl_insight/group/solve_all_share",
    "rl_insight/group/solve_none_share",
    "rl_insight/group/reward_std/mean",
    SCORE_MAX,
    SCORE_MIN,
    CRITIC_VF_LOSS,  # a critic: PPO's advantages do not come from groups
)
STEP_TIME_KEYS = (STEP_TIME, "timing/step", TIME_PER_STEP)

NON_FINITE_KEYS = (
    PG_LOSS,
    GRAD_NORM,
    *ENTROPY_KEYS,
    PPO_KL,
    KL_LOSS,
    CRITIC_VF_LOSS,
    CRITIC_GRAD_NORM,
    SCORE_MEAN,
    REWARDS_MEAN,
    ADVANTAGES_MEAN,
)
