"""verl's ``compute_advantage``: the one call per step that sees the whole batch after the actor
recomputed ``old_log_probs`` (and the rollout returned ``rollout_log_probs``); the batch goes to
the plugins (probs_diff) before it and, with its advantages, after it (group_stats). Wrapped
where the trainers use it by name."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verl import DataProto

from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.patches import v1_batch

Advantage = Callable[..., "DataProto"]  # verl's compute_advantage(data, adv_estimator, ...)


def _trainer(frame: FrameType | None, depth: int = 4) -> object | None:
    """The trainer whose step this is: the nearest caller's ``self`` with an int ``global_steps``.
    verl's v1 trainer (main_ppo's default in 0.9.1) calls compute_advantage from a helper function
    (``compute_advantage_for_multi_trajectories``), so the direct caller has no ``self``: group
    statistics went to step None and the GRPO groups were never sampled."""
    for _ in range(depth):
        if frame is None:
            return None
        caller: object = frame.f_locals.get("self")
        if caller is not None and isinstance(getattr(caller, "global_steps", None), int):
            return caller
        frame = frame.f_back
    return None


def _wrap(original: Advantage) -> Advantage:
    def compute_advantage(data: DataProto, *args: object, **kwargs: object) -> DataProto:
        rt = runtime.get_runtime()
        if rt is None:
            return original(data, *args, **kwargs)
        frame = sys._getframe(1)
        caller = _trainer(frame)
        step = getattr(caller, "global_steps", None) if caller is not None else None
        step = step if isinstance(step, int) else None
        rt.logs.drain()  # a figure put for an unknown step goes to the next log, never to one still handed over
        added = None
        try:
            texts = rt.plugin("samples") is not None  # prompts and responses: only samples reads them
            added = v1_batch.extra(data, frame, caller, texts)  # v1: what it left in TransferQueue
            seen = data if added is None else added.on(data)
            rt.hook.rl_insight_train_batch(run=rt.current_run(), batch=seen, step=step, trainer=caller)
        except Exception:  # a training step never fails because of monitoring
            pass
        result = original(data, *args, **kwargs)
        try:
            seen = result if added is None else added.on(result)
            rt.hook.rl_insight_advantage_batch(run=rt.current_run(), batch=seen, step=step, trainer=caller)
        except Exception:
            pass
        return result

    compute_advantage.__wrapped__ = original  # type: ignore[attr-defined]
    compute_advantage._rl_insight_advantage = True  # type: ignore[attr-defined]
    compute_advantage.__doc__ = original.__doc__
    return compute_advantage


def install(module: ModuleType) -> None:
    original = module.__dict__.get("compute_advantage")
    if callable(original) and not getattr(original, "_rl_insight_advantage", False):
        module.__dict__["compute_advantage"] = _wrap(original)


def uninstall(module: ModuleType) -> None:
    current = module.__dict__.get("compute_advantage")
    if current is not None and getattr(current, "_rl_insight_advantage", False):
        module.__dict__["compute_advantage"] = current.__wrapped__
