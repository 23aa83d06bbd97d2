"""verl's driver: enable rl_insight for the run and forward RL_INSIGHT_* variables (a run
credential, the run's project and experiment, the Hydra ``rl_insight`` block) to every Ray worker
through verl's runtime_env.

Two targets, because ``python -m verl.trainer.main_ppo`` (how users start verl) runs that file
as ``__main__``: no module named ``verl.trainer.main_ppo`` is ever imported, so a patch on its
``run_ppo`` never applies. What every way of starting the driver goes through is
``verl.trainer.constants_ppo.get_ppo_ray_runtime_env``: ``main_ppo`` (as ``__main__``, as a
script, imported, or under the experimental trainers' mains) does ``from
verl.trainer.constants_ppo import get_ppo_ray_runtime_env`` and calls it just before
``ray.init``. The post-import hook on ``constants_ppo`` fires before that ``from`` copies the
name, so the copy is the patched function. There the driver is prepared (environment, profiler)
and the runtime_env gets the forwarded variables.

``run_ppo`` stays patched where ``main_ppo`` is imported as a module: with Ray already started
by the caller, verl skips its runtime_env, and the driver is still prepared there.
"""

import logging
import sys
from collections.abc import Callable, Mapping
from types import FrameType, ModuleType

import wrapt
from omegaconf import DictConfig

from verl_rl_insight.trainer.patches import unwrap
from verl_rl_insight.trainer.verl_api.propagation import (
    forwarded_environment,
    prepare_driver_environment,
)

logger = logging.getLogger("verl_rl_insight")

RUNTIME_ENV = "get_ppo_ray_runtime_env"


def prepare_driver(config: object) -> None:
    """What the driver does before Ray starts: publish the run for the workers, arm the profiler.
    Idempotent (run_ppo and get_ppo_ray_runtime_env both call it in one run); never raises."""
    try:
        prepare_driver_environment(config if isinstance(config, Mapping) else None)
    except Exception:
        logger.exception("rl-insight: could not prepare the worker environment; training goes on")
    try:
        if isinstance(config, DictConfig):  # verl's run_ppo takes its Hydra config
            _arm_profiler(config)
    except Exception:
        logger.exception("rl-insight: could not arm the profiler (plugins.profiler.arm); training goes on")


def _run_ppo(
    wrapped: Callable[..., object], instance: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    prepare_driver(args[0] if args else kwargs.get("config"))
    return wrapped(*args, **kwargs)


def _arm_profiler(config: DictConfig) -> None:
    """``plugins.profiler.arm``: a dormant profiler in verl's config before the workers are built."""
    from verl_rl_insight.trainer.config import load_config, plugin_settings
    from verl_rl_insight.trainer.plugins.profiler import arm

    settings = plugin_settings(load_config(config), "profiler")
    if settings.enabled and arm(config, settings):
        logger.info("rl-insight: a dormant torch profiler is armed; `rl-insight profile` chooses the steps")


def _trainer_config(args: tuple[object, ...], kwargs: dict[str, object]) -> object:
    """The trainer config verl hands ``get_ppo_ray_runtime_env`` (verl >= 0.9: ``config``); verl
    0.6-0.8 call it with no argument from ``run_ppo``, whose local ``config`` is the config."""
    config = args[0] if args else kwargs.get("config")
    if config is not None:
        return config
    frame: FrameType | None = sys._getframe(1)
    for _ in range(8):  # wrapt's trampoline may or may not be a Python frame
        if frame is None:
            break
        if frame.f_code.co_name == "run_ppo":
            candidate = frame.f_locals.get("config")
            return candidate if isinstance(candidate, DictConfig) else None
        frame = frame.f_back
    return None


def _runtime_env(
    wrapped: Callable[..., object], instance: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    try:
        config = _trainer_config(args, kwargs)
    except Exception:
        config = None
    if config is not None:
        prepare_driver(config)
    runtime_env = wrapped(*args, **kwargs)
    try:
        assert isinstance(runtime_env, dict), type(runtime_env)  # verl's runtime_env is a dict
        runtime_env.setdefault("env_vars", {}).update(forwarded_environment())
    except Exception:
        logger.exception("rl-insight: could not add RL_INSIGHT_* to the Ray runtime_env")
    return runtime_env


def _is_ours(function: object) -> bool:
    return getattr(function, "_self_wrapper", None) is _runtime_env


def install(module: ModuleType) -> None:
    if getattr(module, "_rl_insight_installed", False):
        return
    if hasattr(module, "run_ppo"):  # verl.trainer.main_ppo, imported as a module
        wrapt.wrap_function_wrapper(module, "run_ppo", _run_ppo)
    # constants_ppo's function; main_ppo's copy of it only where main_ppo copied it before the patch
    if hasattr(module, RUNTIME_ENV) and not _is_ours(getattr(module, RUNTIME_ENV)):
        wrapt.wrap_function_wrapper(module, RUNTIME_ENV, _runtime_env)
    module.__dict__["_rl_insight_installed"] = True


def uninstall(module: ModuleType) -> None:
    if not getattr(module, "_rl_insight_installed", False):
        return
    for name in ("run_ppo", RUNTIME_ENV):
        unwrap(module, name)
    module.__dict__["_rl_insight_installed"] = False
