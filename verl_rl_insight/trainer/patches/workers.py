"""verl's ``Worker`` base class: every GPU worker process starts the runtime when rl_insight is
enabled for the run, so that per-node plugins (the hardware sampler) run on every node, not
only where ``Tracking`` lives."""

import logging
import os
from collections.abc import Callable
from types import ModuleType

import wrapt

from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.patches import unwrap
from verl_rl_insight.trainer.verl_api.tracking_backend import ENV_VERL_ENABLE


def _worker_init(
    wrapped: Callable[..., object], instance: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    result = wrapped(*args, **kwargs)
    if os.environ.get(ENV_VERL_ENABLE) == "1" and runtime.get_runtime() is None:
        try:
            runtime.start()
        except Exception:  # a worker never fails to start because of monitoring
            logging.getLogger("verl_rl_insight").exception("rl-insight: could not start in this worker")
    return result


def install(module: ModuleType) -> None:
    cls = getattr(module, "Worker", None)
    if cls is None or getattr(cls, "_rl_insight_installed", False):
        return
    wrapt.wrap_function_wrapper(cls, "__init__", _worker_init)
    cls._rl_insight_installed = True


def uninstall(module: ModuleType) -> None:
    cls = getattr(module, "Worker", None)
    if cls is not None and getattr(cls, "_rl_insight_installed", False):
        unwrap(cls, "__init__")
        cls._rl_insight_installed = False
