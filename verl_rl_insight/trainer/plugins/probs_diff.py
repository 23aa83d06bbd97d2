"""Train / inference log-prob mismatch: ``training/rollout_probs_diff_{valid,max,mean,std}`` and
``training/rollout_actor_probs_pearson_corr`` exactly as verl's ``calculate_debug_metrics`` defines
them (probabilities, masked by the response mask), on every verl and mode, plus:

- ``training/rollout_probs_diff_frac_gt_0_01`` / ``_frac_gt_0_1``: share of tokens whose |p_actor - p_rollout|
  exceeds 0.01 / 0.1;
- ``training/rollout_log_probs_diff_max``: max |log p_actor - log p_rollout|;
- ``training/rollout_actor_kl_k3``: the k3 estimate of KL(rollout || actor) on the rollout's tokens,
  mean of exp(d) - 1 - d with d = log p_actor - log p_rollout.

Computed from the step's batch before advantage estimation; at ``Tracking.log`` the values
verl already computed are kept and only what is missing is added. An empty mask gives
``valid = 0`` and nothing else (no NaN).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verl_rl_insight.trainer.hook_types import RunInfo
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.plugins.step_inbox import StepInbox

if TYPE_CHECKING:
    import torch
    from verl import DataProto

PREFIX = "training/"
# every key this plugin can log (the dashboards give each a panel)
KEYS = tuple(
    PREFIX + name
    for name in (
        "rollout_probs_diff_valid",
        "rollout_probs_diff_max",
        "rollout_probs_diff_mean",
        "rollout_probs_diff_std",
        "rollout_probs_diff_frac_gt_0_01",
        "rollout_probs_diff_frac_gt_0_1",
        "rollout_log_probs_diff_max",
        "rollout_actor_kl_k3",
        "rollout_actor_probs_pearson_corr",
    )
)


def mismatch_metrics(
    rollout_log_probs: torch.Tensor, actor_log_probs: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """The metrics for one batch (torch tensors of shape [batch, response_length])."""
    import torch

    with torch.no_grad():
        mask = mask[:, -actor_log_probs.shape[-1] :].bool()
        if not bool(mask.any()):
            return {PREFIX + "rollout_probs_diff_valid": 0}
        actor = actor_log_probs.float()[mask]
        rollout = rollout_log_probs.float()[mask]
        actor_p, rollout_p = torch.exp(actor), torch.exp(rollout)
        diff = torch.abs(actor_p - rollout_p)
        log_diff = actor - rollout
        metrics: dict[str, float] = {
            PREFIX + "rollout_probs_diff_valid": 1,
            PREFIX + "rollout_probs_diff_max": diff.max().item(),
            PREFIX + "rollout_probs_diff_mean": diff.mean().item(),
            PREFIX + "rollout_probs_diff_std": diff.std().item() if diff.numel() > 1 else 0.0,
            PREFIX + "rollout_probs_diff_frac_gt_0_01": (diff > 0.01).float().mean().item(),
            PREFIX + "rollout_probs_diff_frac_gt_0_1": (diff > 0.1).float().mean().item(),
            PREFIX + "rollout_log_probs_diff_max": log_diff.abs().max().item(),
            PREFIX + "rollout_actor_kl_k3": (torch.exp(log_diff) - 1 - log_diff).mean().item(),
        }
        if diff.numel() > 1 and actor_p.std() > 0 and rollout_p.std() > 0:
            metrics[PREFIX + "rollout_actor_probs_pearson_corr"] = torch.corrcoef(torch.stack([actor_p, rollout_p]))[
                0, 1
            ].item()
        return metrics


def batch_metrics(batch: DataProto) -> dict[str, float] | None:
    """Metrics for a verl DataProto, or None when it lacks rollout or actor log probs."""
    tensors = getattr(batch, "batch", None)
    if tensors is None or "rollout_log_probs" not in tensors.keys() or "old_log_probs" not in tensors.keys():
        return None
    keys = tensors.keys()
    mask = (
        tensors["response_mask"]
        if "response_mask" in keys
        else tensors["attention_mask"]
        if "attention_mask" in keys
        else None
    )
    if mask is None:
        import torch

        mask = torch.ones_like(tensors["old_log_probs"])
    return mismatch_metrics(tensors["rollout_log_probs"], tensors["old_log_probs"], mask)


class Plugin:
    def __init__(self) -> None:
        self.inbox = StepInbox()  # the step's figures until its Tracking.log takes them

    @hookimpl
    def rl_insight_train_batch(self, run: RunInfo, batch: DataProto, step: int | None) -> None:
        metrics = batch_metrics(batch)
        if metrics is not None:
            self.inbox.put(run, step, metrics)

    @hookimpl(tryfirst=True)
    def rl_insight_log_metrics(
        self, run: RunInfo, metrics: dict[str, object], step: int | None, timestamp: float
    ) -> None:
        self.inbox.merge_into(run, step, metrics)
