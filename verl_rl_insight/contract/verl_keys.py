"""Keys verl's trainer logs, named once here, each where verl writes it (verl 0.9.1).

``compute_data_metrics`` (``verl/trainer/ppo/metric_utils.py``) logs the batch's ``prompt_length/mean``
and ``response_length/mean`` (each sequence's attention-mask sum, averaged over the batch's sequences);
``compute_throughout_metrics`` logs ``perf/total_num_tokens``, the batch's ``global_token_num``: the
same masks summed. Their quotient is the number of sequences the step trained on.
"""

from __future__ import annotations

from typing import Final

from verl_rl_insight.contract.verl_phases import STEP

# compute_data_metrics: the sequences' scores (token_level_scores summed: the reward function's
# output) and rewards (token_level_rewards summed: the score less the in-reward KL penalty, where
# algorithm.use_kl_in_reward applies one), each the batch's mean, max and min
SCORE_MEAN: Final = "critic/score/mean"
SCORE_MAX: Final = "critic/score/max"
SCORE_MIN: Final = "critic/score/min"
REWARDS_MEAN: Final = "critic/rewards/mean"
REWARDS_MAX: Final = "critic/rewards/max"
REWARDS_MIN: Final = "critic/rewards/min"
# the run's score, read under the first of these it logs (a file from elsewhere may have only rewards)
SCORE_KEYS: Final = (SCORE_MEAN, REWARDS_MEAN)
# compute_data_metrics: the sequences' lengths, and the share that reached the response length limit
PROMPT_LENGTH_MEAN: Final = "prompt_length/mean"
RESPONSE_LENGTH_MEAN: Final = "response_length/mean"
RESPONSE_LENGTH_CLIP_RATIO: Final = "response_length/clip_ratio"
# compute_data_metrics: the advantages over the batch's response tokens (all 0 where every group's
# rewards were equal: GRPO learns nothing from the step)
ADVANTAGES_MEAN: Final = "critic/advantages/mean"
ADVANTAGES_MAX: Final = "critic/advantages/max"
ADVANTAGES_MIN: Final = "critic/advantages/min"

# compute_throughout_metrics: the step's tokens, its time and tokens per second per GPU
TOTAL_TOKENS: Final = "perf/total_num_tokens"
TIME_PER_STEP: Final = "perf/time_per_step"
THROUGHPUT: Final = "perf/throughput"
# compute_timing_metrics: timing_s/<phase> (contract/verl_phases.py), the whole step's among them
STEP_TIME: Final = f"timing_s/{STEP}"

# The actor's update: the fit loop logs the entropy of the batch's old log probs (ray_trainer.py,
# v1/trainer_base.py), the worker its losses (verl/workers/utils/losses.py) and its grad norm, under
# actor/ (the critic's, critic/); apply_kl_penalty (ray_trainer.py) the in-reward KL penalty
ENTROPY: Final = "actor/entropy"
ENTROPY_LOSS: Final = "actor/entropy_loss"  # older verl logs the mean entropy under this name
ENTROPY_KEYS: Final = (ENTROPY, ENTROPY_LOSS)  # the entropy, read under the first of these a run logs
PG_LOSS: Final = "actor/pg_loss"
PPO_KL: Final = "actor/ppo_kl"  # the KL between the old and the new policy of the update
KL_LOSS: Final = "actor/kl_loss"  # actor.use_kl_loss
GRAD_NORM: Final = "actor/grad_norm"
REWARD_KL_PENALTY: Final = "actor/reward_kl_penalty"  # algorithm.use_kl_in_reward
CRITIC_VF_LOSS: Final = "critic/vf_loss"
CRITIC_GRAD_NORM: Final = "critic/grad_norm"

# calculate_debug_metrics (verl/utils/debug/metrics.py): how far the rollout engine's log probs are
# from the actor's for the same tokens
ROLLOUT_PROBS_DIFF_MEAN: Final = "training/rollout_probs_diff_mean"

# the config keys of a step's sequences: prompts a step x responses a prompt
TRAIN_BATCH_SIZE: Final = ("data", "train_batch_size")
ROLLOUT_N: Final = ("actor_rollout_ref", "rollout", "n")
