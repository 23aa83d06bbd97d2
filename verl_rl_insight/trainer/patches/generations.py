"""verl's validation generations and DAPO's filtered groups, where verl hands them to its loggers:

- ``_maybe_log_val_generations(self, inputs, outputs, scores)`` of the trainers (``RayPPOTrainer``,
  the v1 ``PPOTrainer``), called by ``_validate`` with every validation generation, decoded; the
  data sources and ground truths are ``_validate``'s own lists beside them (``data_source_lst`` /
  ``data_sources``, ``sample_gts``), read from its frame. Our hook runs whatever
  ``trainer.log_val_generations`` says (verl logs none when it is 0);
- ``DapoFilteredRewardTableLogger.log(self, loggers, reward_counts, step)`` (verl.utils.tracking),
  called by the v1 trainer with the reward values of the groups DAPO dropped at the step.

Both go to the plugins (``rl_insight_validation_generations``, ``rl_insight_dapo_filtered``), then
to verl's own code; a failing plugin never fails verl's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from types import FrameType, ModuleType

import wrapt

from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.patches import unwrap

TRAINER_CLASSES = ("RayPPOTrainer", "PPOTrainer")  # verl.trainer.ppo.ray_trainer, verl.trainer.ppo.v1.trainer_base
VALIDATION_METHOD = "_maybe_log_val_generations"
Method = Callable[..., object]


def _sources(frame: FrameType | None) -> list[object] | None:
    """``_validate``'s data sources, one per generation: a list of arrays in RayPPOTrainer, a flat
    list in the v1 trainer."""
    found = frame.f_locals.get("data_source_lst", frame.f_locals.get("data_sources")) if frame else None
    if not isinstance(found, list):
        return None
    flat: list[object] = []
    for part in found:
        if isinstance(part, (str, bytes)) or not hasattr(part, "__iter__"):
            flat.append(part)
        else:
            flat.extend(part)
    return flat


def _validate_frame(frame: FrameType | None) -> FrameType | None:
    """``_validate``'s frame: the caller (wrapt's C wrapper adds no frame, its Python one does)."""
    for _ in range(3):
        if frame is None or "sample_gts" in frame.f_locals:
            return frame
        frame = frame.f_back
    return None


def _validation(wrapped: Method, instance: object, args: Sequence[object], kwargs: Mapping[str, object]) -> object:
    rt = runtime.get_runtime()
    if rt is not None:
        try:
            names = ("inputs", "outputs", "scores")
            inputs, outputs, scores = (kwargs[n] if n in kwargs else args[i] for i, n in enumerate(names))
            caller = _validate_frame(sys._getframe(1))
            sources, truths = _sources(caller), caller.f_locals.get("sample_gts") if caller else None
            count = len(inputs)  # type: ignore[arg-type]
            step = getattr(instance, "global_steps", None)
            rt.hook.rl_insight_validation_generations(
                run=rt.current_run(),
                step=step if isinstance(step, int) else None,
                inputs=list(inputs),  # type: ignore[call-overload]
                outputs=list(outputs),  # type: ignore[call-overload]
                scores=list(scores),  # type: ignore[call-overload]
                data_sources=sources if sources is not None and len(sources) == count else None,
                ground_truths=list(truths) if isinstance(truths, list) and len(truths) == count else None,
            )
        except Exception:  # a validation never fails because of monitoring
            pass
    return wrapped(*args, **kwargs)


def _dapo(wrapped: Method, instance: object, args: Sequence[object], kwargs: Mapping[str, object]) -> object:
    rt = runtime.get_runtime()
    if rt is not None:
        try:
            counts = kwargs["reward_counts"] if "reward_counts" in kwargs else args[1]
            step = kwargs["step"] if "step" in kwargs else args[2]
            rewards = {float(v): int(c) for v, c in dict(counts).items()}  # type: ignore[call-overload]
            rt.hook.rl_insight_dapo_filtered(
                run=rt.current_run(), step=step if isinstance(step, int) else None, reward_counts=rewards
            )
        except Exception:
            pass
    return wrapped(*args, **kwargs)


def _wrapped(owner: object, name: str) -> bool:
    return hasattr(vars(owner).get(name), "_self_wrapper")


def install(module: ModuleType) -> None:
    for name in TRAINER_CLASSES:
        cls = module.__dict__.get(name)
        if isinstance(cls, type) and VALIDATION_METHOD in vars(cls) and not _wrapped(cls, VALIDATION_METHOD):
            wrapt.wrap_function_wrapper(cls, VALIDATION_METHOD, _validation)
    table = module.__dict__.get("DapoFilteredRewardTableLogger")
    if isinstance(table, type) and "log" in vars(table) and not _wrapped(table, "log"):
        wrapt.wrap_function_wrapper(table, "log", _dapo)


def uninstall(module: ModuleType) -> None:
    for name in TRAINER_CLASSES:
        cls = module.__dict__.get(name)
        if isinstance(cls, type):
            unwrap(cls, VALIDATION_METHOD)
    table = module.__dict__.get("DapoFilteredRewardTableLogger")
    if isinstance(table, type):
        unwrap(table, "log")
