"""The call paths of verl's v1 trainer (``verl.trainer.ppo.v1.trainer_base.PPOTrainer``, what
``python -m verl.trainer.main_ppo`` runs in verl 0.9.1), taken by the simulated trainer as the real run
(docs/real-verl-run.md) showed them:

- the profiler's step boundaries are v1's own ``_start_profiling``/``_stop_profiling`` (no
  ``start_profile``/``stop_profile`` timers), called here on the simulated trainer;
- the step's rows live in TransferQueue under ``{uid}_{session}_{index}``; ``_compute_advantage``
  reads a few fields of them (no ``prompts``, ``responses``, ``attention_mask`` or ``data_source``)
  and hands them to verl's ``compute_advantage_for_multi_trajectories``, which calls
  ``compute_advantage``: the trainer is a caller further up, the prompts and responses are in
  TransferQueue only.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from verl import DataProto

    from verl_rl_insight.trainer.patches.v1_batch import BatchMeta

PARTITION = "train"
# what v1's _compute_advantage reads from TransferQueue (and the scores it names token_level_*)
ADVANTAGE_FIELDS = ("response_mask", "rollout_log_probs", "old_log_probs", "token_level_scores", "token_level_rewards")


class WorkerProfiler(Protocol):
    def start(self, role: str | None = None, profile_step: int | None = None) -> None: ...
    def stop(self, run_command: bool = ...) -> None: ...


class WorkerGroup:
    """``actor_rollout_wg`` as v1's ``_start_profiling``/``_stop_profiling`` drive it."""

    def __init__(self, profiler: WorkerProfiler) -> None:
        self.profiler = profiler

    def start_profile(self, role: str = "train", profile_step: int | None = None) -> None:
        self.profiler.start(role=role, profile_step=profile_step)

    def stop_profile(self, run_command: bool = False) -> None:
        self.profiler.stop(run_command=run_command)


class V1Steps:
    """What the simulated trainer shares with v1's PPOTrainer: the attributes its profiling methods
    read, and its advantage step."""

    config: DictConfig
    global_steps: int
    total_training_steps: int
    use_reference_policy = False
    use_critic = False

    def init_v1(self, config: DictConfig, profiler: WorkerProfiler, total: int) -> None:
        steps = config.global_profiler.steps
        self.actor_rollout_wg = WorkerGroup(profiler)
        self.total_training_steps = total
        self.prev_step_profile = False
        self.curr_step_profile = 1 in steps if steps is not None else False
        self.next_step_profile = False

    def _start_rollout_profiling(self) -> None:
        """v1 profiles its replicas' engines too; the simulated engines have no profiler."""

    def _stop_rollout_profiling(self) -> None:
        """See ``_start_rollout_profiling``."""

    def _start_profiling(self) -> None:
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

        PPOTrainer._start_profiling(self)  # verl's own method, on this trainer

    def _stop_profiling(self) -> None:
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

        PPOTrainer._stop_profiling(self)

    def _compute_advantage(self, batch: BatchMeta, data: DataProto, num_repeat: int) -> DataProto:
        """v1's advantage step: ``batch`` is TransferQueue's KVBatchMeta of the step (its local name in
        v1), ``data`` the fields v1 reads for it."""
        from verl.trainer.ppo.core_algos import AdvantageEstimator
        from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

        return compute_advantage_for_multi_trajectories(
            data,
            batch_keys=batch.keys,
            adv_estimator=AdvantageEstimator.GRPO,
            num_repeat=num_repeat,
        )

    def advantage_step(self, tq: ModuleType | None, full: DataProto, num_repeat: int) -> DataProto:
        """The step's advantages the v1 way where TransferQueue runs (the full batch keeps its
        prompts and responses for verl's step metrics), else on the full batch."""
        if tq is None:
            return _v0(full, num_repeat)
        batch = put_rollout(tq, full)
        data = full.select(batch_keys=list(ADVANTAGE_FIELDS), non_tensor_batch_keys=["uid"])
        advantaged = self._compute_advantage(batch, data, num_repeat)
        full.batch["advantages"] = advantaged.batch["advantages"]
        full.batch["returns"] = advantaged.batch["returns"]
        tq.kv_clear(keys=batch.keys, partition_id=PARTITION)  # v1 clears a step's rows after it
        return full


def _v0(full: DataProto, num_repeat: int) -> DataProto:
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    return ray_trainer.compute_advantage(full, adv_estimator=AdvantageEstimator.GRPO, num_repeat=num_repeat)


def put_rollout(tq: ModuleType, full: DataProto) -> BatchMeta:
    """The step's rows into TransferQueue as v1's agent loop puts them (``list_of_dict_to_tensordict``):
    unpadded prompts and responses, the dataset's columns, one key ``{uid}_{session}_0`` per response."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    tensors, columns = full.batch, full.non_tensor_batch
    width = tensors["responses"].shape[-1]
    prompt_mask = tensors["attention_mask"][:, :-width].bool()
    lengths = tensors["response_mask"].sum(-1).tolist()
    keys: list[str] = []
    rows: list[dict[str, object]] = []
    sessions: dict[str, int] = {}
    for i, uid in enumerate(str(u) for u in columns["uid"]):
        sessions[uid] = sessions.get(uid, -1) + 1
        keys.append(f"{uid}_{sessions[uid]}_0")
        rows.append(
            {
                "prompts": tensors["prompts"][i][prompt_mask[i]],
                "responses": tensors["responses"][i][: lengths[i]],
                "data_source": str(columns["data_source"][i]),
            }
        )
    meta: BatchMeta = tq.kv_batch_put(keys=keys, partition_id=PARTITION, fields=list_of_dict_to_tensordict(rows))
    return meta
