"""Activation: registers wrapt post-import hooks on the verl modules this package patches.

Cheap on purpose (it runs in every Python process of the environment through the ``.pth``
file): it imports only wrapt; the verl modules are patched when, and if, they are imported.
Ways in: the ``.pth`` file (``autoload``; ``VERL_RL_INSIGHT_AUTOLOAD=0`` turns it off),
verl >= 0.9's ``verl.plugins`` entry point, ``VERL_USE_EXTERNAL_MODULES=verl_rl_insight.trainer.activation.activate``,
``rl-insight run -- CMD`` and the OpenTelemetry instrumentor.
"""

import importlib
import os
from collections.abc import Callable
from types import ModuleType

from verl_rl_insight.contract import environment

ENV_AUTOLOAD = environment.AUTOLOAD

# (verl module, the hooks module that patches it)
TARGETS = [
    ("verl.utils.tracking", "verl_rl_insight.trainer.patches.tracking"),
    ("verl.utils.rollout_trace", "verl_rl_insight.trainer.patches.rollout_trace"),
    ("verl.trainer.ppo.ray_trainer", "verl_rl_insight.trainer.patches.generations"),
    ("verl.trainer.ppo.v1.trainer_base", "verl_rl_insight.trainer.patches.generations"),
    # constants_ppo before main_ppo: the driver's runtime_env, also when main_ppo runs as __main__
    ("verl.trainer.constants_ppo", "verl_rl_insight.trainer.patches.main_ppo"),
    ("verl.trainer.main_ppo", "verl_rl_insight.trainer.patches.main_ppo"),
    ("verl.single_controller.base.worker", "verl_rl_insight.trainer.patches.workers"),
    ("verl.workers.rollout.llm_server", "verl_rl_insight.trainer.patches.server_managers"),
    ("verl.experimental.agent_loop.agent_loop", "verl_rl_insight.trainer.patches.server_managers"),
    ("verl.workers.rollout.vllm_rollout.vllm_async_server", "verl_rl_insight.trainer.patches.rollout_servers"),
    ("verl.workers.rollout.sglang_rollout.async_sglang_server", "verl_rl_insight.trainer.patches.rollout_servers"),
    *(
        (module, "verl_rl_insight.trainer.patches.advantage")
        for module in (
            "verl.trainer.ppo.ray_trainer",
            "verl.experimental.separation.ray_trainer",
            "verl.experimental.one_step_off_policy.ray_trainer",
            "verl.experimental.fully_async_policy.fully_async_trainer",
            "verl.trainer.ppo.v1.utils",
        )
    ),
    *(
        (module, "verl_rl_insight.trainer.patches.phase_timers")
        for module in (
            "verl.utils.profiler",
            "verl.utils.debug",
            "verl.trainer.ppo.ray_trainer",
            "verl.trainer.main_ppo_sync",
            "verl.trainer.ppo.v1.trainer_base",
            "verl.trainer.ppo.v1.trainer_sync",
            "verl.trainer.ppo.v1.trainer_colocate_async",
            "verl.trainer.ppo.v1.trainer_separate_async",
            "verl.experimental.fully_async_policy.fully_async_trainer",
            "verl.experimental.fully_async_policy.fully_async_rollouter",
            "verl.experimental.one_step_off_policy.ray_trainer",
            "verl.experimental.separation.ray_trainer",
            "recipe.fully_async_policy.fully_async_trainer",
            "recipe.fully_async_policy.fully_async_rollouter",
            "recipe.one_step_off_policy.ray_trainer",
        )
    ),
]

_registered = False
_hooks_registered = False


def _installer(hooks_module: str) -> Callable[[ModuleType], None]:
    def install(module: ModuleType) -> None:
        if not _registered:
            return
        try:
            importlib.import_module(hooks_module).install(module)
        except Exception:  # never break the user's import of verl
            import logging

            logging.getLogger("verl_rl_insight").exception("rl-insight: patching %s failed", module.__name__)

    return install


def activate() -> None:
    """Register the post-import hooks (idempotent). Already imported targets are patched now."""
    global _registered, _hooks_registered
    if _registered:
        return
    import sys

    import wrapt

    _registered = True
    if not _hooks_registered:
        _hooks_registered = True
        for target, hooks_module in TARGETS:
            wrapt.register_post_import_hook(_installer(hooks_module), target)
    else:  # re-activation after deactivate(): the hooks exist, patch what is imported already
        for target, hooks_module in TARGETS:
            if target in sys.modules:
                _installer(hooks_module)(sys.modules[target])


def autoload() -> None:
    """Entry from the ``.pth`` file: activate unless ``VERL_RL_INSIGHT_AUTOLOAD=0``."""
    if os.environ.get(ENV_AUTOLOAD, "1").strip().lower() in ("0", "false", "no", "off"):
        return
    try:
        activate()
    except Exception:  # a broken install must not break every Python start-up
        pass


def active() -> bool:
    """True when the post-import hooks are registered in this process."""
    return _registered


def deactivate() -> None:
    """Undo every patch applied so far (used by the instrumentor and the tests).

    wrapt keeps registered post-import hooks; they do nothing while deactivated.
    """
    global _registered
    import sys

    _registered = False
    for target, hooks_module in TARGETS:
        module = sys.modules.get(target)
        if module is not None:
            importlib.import_module(hooks_module).uninstall(module)
