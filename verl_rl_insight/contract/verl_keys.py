"""Keys verl's trainer logs, named once here, as ``verl/trainer/ppo/metric_utils.py`` writes them.

``compute_data_metrics`` logs the batch's ``prompt_length/mean`` and ``response_length/mean`` (each
sequence's attention-mask sum, averaged over the batch's sequences); ``compute_throughout_metrics``
logs ``perf/total_num_tokens``, the batch's ``global_token_num``: the same masks summed. Their
quotient is the number of sequences the step trained on.
"""

from __future__ import annotations

TOTAL_TOKENS = "perf/total_num_tokens"
PROMPT_LENGTH_MEAN = "prompt_length/mean"
RESPONSE_LENGTH_MEAN = "response_length/mean"
# the config keys of a step's sequences: prompts a step x responses a prompt
TRAIN_BATCH_SIZE = ("data", "train_batch_size")
ROLLOUT_N = ("actor_rollout_ref", "rollout", "n")
