"""verl.utils.tracking: accept ``rl_insight`` as a backend on every verl, and route verl
0.9's own ``RLInsightLogger`` into this package."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING

import wrapt

from verl_rl_insight.trainer.patches import unwrap
from verl_rl_insight.trainer.verl_api import logger_api as verl_logger_api
from verl_rl_insight.trainer.verl_api.tracking_backend import RLInsightBackend

if TYPE_CHECKING:
    from verl.utils.tracking import Tracking

logger = logging.getLogger("verl_rl_insight")

BACKEND = "rl_insight"
ALIAS = "rl-insight"  # the package's own spelling: trainer.logger=[console,rl-insight] is the same backend


def _bind(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[str | None, str | None, list[object], Mapping[str, object] | None]:
    """(project, experiment, backends, config) as ``Tracking(project_name, experiment_name,
    default_backend, config, ...)`` takes them; keywords a newer verl adds are verl's business."""
    names = ("project_name", "experiment_name", "default_backend", "config")
    bound = dict(zip(names, args))
    bound.update((k, v) for k, v in kwargs.items() if k in names)
    given = bound.get("default_backend", "console")
    backends: list[object] = [given] if isinstance(given, str) else list(given) if isinstance(given, Iterable) else []
    project, experiment, config = (bound.get(k) for k in ("project_name", "experiment_name", "config"))
    return (
        None if project is None else str(project),
        None if experiment is None else str(experiment),
        backends,
        config if isinstance(config, Mapping) else None,
    )


def _tracking_init(
    wrapped: Callable[..., object], instance: Tracking, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    try:
        project, experiment, backends, config = _bind(args, kwargs)
    except TypeError:  # an argument shape verl will judge itself
        return wrapped(*args, **kwargs)
    if BACKEND not in backends and ALIAS not in backends:
        return wrapped(*args, **kwargs)
    # Built before verl's own init so that verl 0.9's RLInsightLogger finds the runtime
    # configured from the full trainer config.
    try:
        backend = RLInsightBackend(project, experiment, config)
    except Exception:  # monitoring must never stop the training job
        logger.exception("rl-insight: monitoring could not start; training goes on without it")
        backend = None
    result = wrapped(*args, **kwargs)
    if backend is not None:
        instance.logger[BACKEND] = backend
    else:
        instance.logger.pop(BACKEND, None)
    return result


def _agent_loop_session(
    wrapped: Callable[..., object], instance: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    """verl 0.9 imports ``rl_insight.agent_loop`` (the separate package) and falls back to an
    inert object without it: this package answers instead, unless that package is installed."""
    try:
        official = importlib.util.find_spec("rl_insight.agent_loop") is not None
    except (ImportError, ValueError):
        official = False
    if official:
        return wrapped(*args, **kwargs)
    try:
        from verl.utils.rollout_trace import RolloutTraceConfig

        config = RolloutTraceConfig.get_instance()
        names = ("sample", "session", "traj", "uid", "global_steps", "session_id")
        return verl_logger_api.agent_loop_session(
            project=config.project_name,
            experiment_name=str(kwargs.get("experiment_name") or config.experiment_name or "default"),
            **{k: kwargs[k] for k in names if k in kwargs},
        )
    except Exception:  # verl's own fallback rather than a broken rollout
        logger.exception("rl-insight: agent_loop_session failed; verl's fallback is used")
        return wrapped(*args, **kwargs)


def install(module: ModuleType) -> None:
    if getattr(module, "_rl_insight_installed", False):
        return
    tracking = module.Tracking
    module.__dict__["_rl_insight_added_backend"] = BACKEND not in tracking.supported_backend
    if module._rl_insight_added_backend:
        tracking.supported_backend.append(BACKEND)
    module.__dict__["_rl_insight_added_alias"] = ALIAS not in tracking.supported_backend
    if module._rl_insight_added_alias:
        tracking.supported_backend.append(ALIAS)
    wrapt.wrap_function_wrapper(tracking, "__init__", _tracking_init)
    legacy = getattr(module, "RLInsightLogger", None)
    if legacy is not None and hasattr(legacy, "_rl_insight_module"):
        module.__dict__["_rl_insight_previous_api"] = legacy._rl_insight_module
        legacy._rl_insight_module = verl_logger_api
        if "agent_loop_session" in vars(legacy):
            wrapt.wrap_function_wrapper(legacy, "agent_loop_session", _agent_loop_session)
    module.__dict__["_rl_insight_installed"] = True


def uninstall(module: ModuleType) -> None:
    if not getattr(module, "_rl_insight_installed", False):
        return
    tracking = module.Tracking
    unwrap(tracking, "__init__")
    if module._rl_insight_added_backend and BACKEND in tracking.supported_backend:
        tracking.supported_backend.remove(BACKEND)
    if getattr(module, "_rl_insight_added_alias", False) and ALIAS in tracking.supported_backend:
        tracking.supported_backend.remove(ALIAS)
    legacy = getattr(module, "RLInsightLogger", None)
    if legacy is not None and hasattr(module, "_rl_insight_previous_api"):
        legacy._rl_insight_module = module._rl_insight_previous_api
        unwrap(legacy, "agent_loop_session")
    module.__dict__["_rl_insight_installed"] = False
