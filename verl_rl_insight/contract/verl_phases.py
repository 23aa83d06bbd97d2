"""verl's phases, named once here: the parts of a training step verl times and marks, as verl 0.9.1
spells them, and the name this project shows each under.

verl's fit loop wraps each part of a step in ``marked_timer(name, timing_raw)``
(``verl/utils/profiler``): the seconds land in ``timing_raw[name]``, and ``compute_timing_metrics``
(``verl/trainer/ppo/metric_utils.py``) logs each as ``timing_s/<name>``; with a profiler on, the
same name is an NVTX / MSTX range on the driver. The workers mark their own methods with
``DistProfiler.annotate(role=...)``: ranges on each rank, under other names, for the same phases.
"""

from __future__ import annotations

from typing import Final

# the whole step, around the rest: ``marked_timer("step", timing_raw)``, logged as timing_s/step
STEP: Final = "step"

# The fit loop's phases (verl/trainer/ppo/ray_trainer.py RayPPOTrainer.fit, and the v1 trainer's
# verl/trainer/ppo/v1/trainer_base.py and trainer_sync.py / trainer_colocate_async.py for update_weights),
# each a marked_timer and a timing_s/<name> key
GEN: Final = "gen"
REWARD: Final = "reward"
OLD_LOG_PROB: Final = "old_log_prob"
REF: Final = "ref"  # ray_trainer.py spells it str(Role.RefPolicy) (verl/trainer/ppo/utils.py Role)
VALUES: Final = "values"
ADV: Final = "adv"
UPDATE_CRITIC: Final = "update_critic"
UPDATE_ACTOR: Final = "update_actor"
SAVE_CHECKPOINT: Final = "save_checkpoint"  # on the steps trainer.save_freq names
UPDATE_WEIGHTS: Final = "update_weights"  # the actor's weights to the rollout replicas
TESTING: Final = "testing"  # validation, on the steps trainer.test_freq names
# in the order a step runs them
FIT_LOOP: Final = (
    GEN,
    REWARD,
    OLD_LOG_PROB,
    REF,
    VALUES,
    ADV,
    UPDATE_CRITIC,
    UPDATE_ACTOR,
    SAVE_CHECKPOINT,
    UPDATE_WEIGHTS,
    TESTING,
)

# Older verl's rollout worker (fsdp_workers.generate_sequences before the agent loop) timed its
# generation and its weight resharding inside gen and handed them back in meta_info["timing"], which
# the fit loop merges into timing_raw: timing_s/generate_sequences, timing_s/reshard (the public runs
# in tests/data/real_runs log both). verl 0.9.1's agent loop hands back timing_s/agent_loop/*
# instead: per-sample statistics (some of them lengths), not phases of the step.
GENERATE_SEQUENCES: Final = "generate_sequences"
RESHARD: Final = "reshard"
ROLLOUT_WORKER: Final = (GENERATE_SEQUENCES, RESHARD)
# every timing_s/<name> a step's time is made of
TIMED: Final = FIT_LOOP + ROLLOUT_WORKER

# verl's separate_async trainer (verl/trainer/ppo/v1/trainer_separate_async.py): the GPUs handed
# from training to rollout and back, each a marked_timer
SWITCH_TO_ROLLOUT: Final = "switch_to_rollout"
SWITCH_WAIT: Final = "switch_wait"
SWITCH_TO_TRAINER: Final = "switch_to_trainer"
HANDOVER: Final = (SWITCH_TO_ROLLOUT, SWITCH_WAIT, SWITCH_TO_TRAINER)
# verl's one_step_off_policy trainer (verl/experimental/one_step_off_policy/ray_trainer.py): its gen
GENERATE_ASYNC: Final = "generate_async"

# The workers' ranges: DistProfiler.annotate(role=...) in verl/workers/engine_workers.py (train_batch,
# ref_compute_log_prob, actor_compute_log_prob, actor_update) and engine_workers_tinker.py
# (forward_backward); SkipManager.annotate(role=...) on the agent loop's generate_sequences
# (verl/experimental/agent_loop/agent_loop.py: rollout) and the fully async rollouter's
# (verl/experimental/fully_async_policy/fully_async_rollouter.py: async_rollout)
ACTOR_COMPUTE_LOG_PROB: Final = "actor_compute_log_prob"
REF_COMPUTE_LOG_PROB: Final = "ref_compute_log_prob"
ACTOR_UPDATE: Final = "actor_update"
TRAIN_BATCH: Final = "train_batch"  # a training worker's batch: a phase of its own on the ranks
FORWARD_BACKWARD: Final = "forward_backward"  # the tinker worker's: a phase of its own on the ranks
ROLLOUT: Final = "rollout"
ASYNC_ROLLOUT: Final = "async_rollout"

# Every name verl marks a range or a timer under -> the phase of the fit loop it is (the name
# timing_s/<phase> has), or its own where the fit loop has none (train_batch, forward_backward).
# Older workers marked their methods under the methods' own names: compute_log_prob,
# compute_ref_log_prob, compute_values, update_actor, update_critic, generate_sequences and the
# reward model's compute_rm_score (verl 0.9.1's reward loop keeps that name:
# verl/experimental/reward_loop/reward_loop.py).
PHASE_OF: Final[dict[str, str]] = {
    **{phase: phase for phase in FIT_LOOP},
    GENERATE_SEQUENCES: GEN,
    GENERATE_ASYNC: GEN,
    ROLLOUT: GEN,
    ASYNC_ROLLOUT: GEN,
    "compute_rm_score": REWARD,
    "compute_log_prob": OLD_LOG_PROB,
    ACTOR_COMPUTE_LOG_PROB: OLD_LOG_PROB,
    "compute_ref_log_prob": REF,
    REF_COMPUTE_LOG_PROB: REF,
    "compute_values": VALUES,
    TRAIN_BATCH: TRAIN_BATCH,
    ACTOR_UPDATE: UPDATE_ACTOR,
    FORWARD_BACKWARD: FORWARD_BACKWARD,
}

# the state timeline's span name of each (few names: Tempo's span-name index stays small; the raw
# name stays in the span's attribute state_name). vllm_generate and sglang_generate are this
# project's own states: a rollout server's generate call (trainer/patches/rollout_servers.py).
SPAN_NAMES: Final[dict[str, str]] = {
    STEP: "trainer step",
    GEN: "rollout generate",
    GENERATE_SEQUENCES: "rollout generate",
    "vllm_generate": "rollout generate",
    "sglang_generate": "rollout generate",
    REWARD: "reward compute",
    OLD_LOG_PROB: "actor old_log_prob",
    REF: "ref log_prob",
    VALUES: "critic values",
    ADV: "advantage compute",
    UPDATE_CRITIC: "critic update",
    UPDATE_ACTOR: "actor update",
    UPDATE_WEIGHTS: "weights sync",
    SAVE_CHECKPOINT: "checkpoint save",
    TESTING: "validation",
    SWITCH_TO_ROLLOUT: "switch to rollout",
    SWITCH_WAIT: "switch wait",
    SWITCH_TO_TRAINER: "switch to trainer",
    ACTOR_UPDATE: "actor update",
    ACTOR_COMPUTE_LOG_PROB: "actor log_prob",
    REF_COMPUTE_LOG_PROB: "ref log_prob",
    ROLLOUT: "rollout generate",
    ASYNC_ROLLOUT: "rollout generate",
    TRAIN_BATCH: "train batch",
    FORWARD_BACKWARD: "forward backward",
}
