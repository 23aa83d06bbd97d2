"""verl.utils.tracking: accept ``rl_insight`` as a backend on every verl, and route verl
0.9's own ``RLInsightLogger`` into this package."""

import wrapt

from .. import verl_logger_api
from . import unwrap
from ..tracking_backend import RLInsightBackend

BACKEND = "rl_insight"


def _bind(project_name, experiment_name, default_backend="console", config=None):
    return project_name, experiment_name, default_backend, config


def _tracking_init(wrapped, instance, args, kwargs):
    project, experiment, backends, config = _bind(*args, **kwargs)
    backends = [backends] if isinstance(backends, str) else list(backends or ())
    if BACKEND not in backends:
        return wrapped(*args, **kwargs)
    # Built before verl's own init so that verl 0.9's RLInsightLogger finds the runtime
    # configured from the full trainer config.
    backend = RLInsightBackend(project, experiment, config)
    result = wrapped(*args, **kwargs)
    instance.logger[BACKEND] = backend
    return result


def install(module):
    if getattr(module, "_rl_insight_installed", False):
        return
    tracking = module.Tracking
    module._rl_insight_added_backend = BACKEND not in tracking.supported_backend
    if module._rl_insight_added_backend:
        tracking.supported_backend.append(BACKEND)
    wrapt.wrap_function_wrapper(tracking, "__init__", _tracking_init)
    legacy = getattr(module, "RLInsightLogger", None)
    if legacy is not None and hasattr(legacy, "_rl_insight_module"):
        module._rl_insight_previous_api = legacy._rl_insight_module
        legacy._rl_insight_module = verl_logger_api
    module._rl_insight_installed = True


def uninstall(module):
    if not getattr(module, "_rl_insight_installed", False):
        return
    tracking = module.Tracking
    unwrap(tracking, "__init__")
    if module._rl_insight_added_backend and BACKEND in tracking.supported_backend:
        tracking.supported_backend.remove(BACKEND)
    legacy = getattr(module, "RLInsightLogger", None)
    if legacy is not None and hasattr(module, "_rl_insight_previous_api"):
        legacy._rl_insight_module = module._rl_insight_previous_api
    module._rl_insight_installed = False
