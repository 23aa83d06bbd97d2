"""verl.trainer.main_ppo: enable rl_insight for the run and forward RL_INSIGHT_* variables
(and the Hydra ``rl_insight`` block) to every Ray worker through verl's runtime_env."""

import logging
from collections.abc import Callable, Mapping
from types import ModuleType

import wrapt
from omegaconf import DictConfig

from verl_rl_insight.trainer.patches import unwrap
from verl_rl_insight.trainer.verl_api.propagation import (
    forwarded_environment,
    prepare_driver_environment,
)

logger = logging.getLogger("verl_rl_insight")


def _run_ppo(
    wrapped: Callable[..., object], instance: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    config = args[0] if args else kwargs.get("config")
    try:
        prepare_driver_environment(config if isinstance(config, Mapping) else None)
    except Exception:
        logger.exception("rl-insight: could not prepare the worker environment; training goes on")
    try:
        if isinstance(config, DictConfig):  # verl's run_ppo takes its Hydra config
            _arm_profiler(config)
    except Exception:
        logger.exception("rl-insight: could not arm the profiler (plugins.profiler.arm); training goes on")
    return wrapped(*args, **kwargs)


def _arm_profiler(config: DictConfig) -> None:
    """``plugins.profiler.arm``: a dormant profiler in verl's config before the workers are built."""
    from verl_rl_insight.trainer.config import load_config, plugin_settings
    from verl_rl_insight.trainer.plugins.profiler import arm

    settings = plugin_settings(load_config(config), "profiler")
    if settings.enabled and arm(config, settings):
        logger.info("rl-insight: a dormant torch profiler is armed; `rl-insight profile` chooses the steps")


def _runtime_env(
    wrapped: Callable[..., object], instance: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    runtime_env = wrapped(*args, **kwargs)
    try:
        assert isinstance(runtime_env, dict), type(runtime_env)  # verl's runtime_env is a dict
        runtime_env.setdefault("env_vars", {}).update(forwarded_environment())
    except Exception:
        logger.exception("rl-insight: could not add RL_INSIGHT_* to the Ray runtime_env")
    return runtime_env


def install(module: ModuleType) -> None:
    if getattr(module, "_rl_insight_installed", False):
        return
    wrapt.wrap_function_wrapper(module, "run_ppo", _run_ppo)
    wrapt.wrap_function_wrapper(module, "get_ppo_ray_runtime_env", _runtime_env)
    module.__dict__["_rl_insight_installed"] = True


def uninstall(module: ModuleType) -> None:
    if not getattr(module, "_rl_insight_installed", False):
        return
    for name in ("run_ppo", "get_ppo_ray_runtime_env"):
        unwrap(module, name)
    module.__dict__["_rl_insight_installed"] = False
