"""The managers that start rollout replicas: ``LLMServerManager`` (verl >= 0.8) and
``AgentLoopManager`` (0.6-0.7). After ``_initialize_llm_servers`` every replica's address and
rank go to the plugins; with ``disable_log_stats=True`` verl 0.9 would raise while rl_insight is
enabled, so the call then runs with its flag off (the plugin warns instead)."""

import asyncio
import os
from collections.abc import Callable
from types import ModuleType
from typing import Protocol

import wrapt
from omegaconf import DictConfig

from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.patches import unwrap
from verl_rl_insight.trainer.verl_api.tracking_backend import ENV_VERL_ENABLE


class ServerManager(Protocol):
    """What is read of verl's LLMServerManager / AgentLoopManager once its replicas started."""

    config: DictConfig  # the trainer's (older verl: no rollout_config of its own)
    server_addresses: list[str]
    rollout_replicas: list[object]


MANAGERS = {
    "verl.workers.rollout.llm_server": "LLMServerManager",
    "verl.experimental.agent_loop.agent_loop": "AgentLoopManager",
}


def _rollout_config(manager: ServerManager) -> DictConfig:
    config: DictConfig | None = getattr(manager, "rollout_config", None)
    if config is None:
        config = manager.config.actor_rollout_ref.rollout
    return config


def _report(manager: ServerManager, log_stats: bool) -> None:
    try:
        rt = runtime.get_runtime() or runtime.start()
        rt.hook.rl_insight_rollout_servers(
            run=rt.current_run(),
            engine=str(_rollout_config(manager).name),
            addresses=list(manager.server_addresses),
            replica_ranks=[getattr(r, "replica_rank", i) for i, r in enumerate(manager.rollout_replicas)],
            log_stats=log_stats,
        )
    except Exception:
        import logging

        logging.getLogger("verl_rl_insight").exception("rl-insight: could not register the rollout replicas")


class _VerlFlagOff:
    """verl 0.9 raises when rl_insight is on and disable_log_stats=True: hide the flag for the call."""

    def __init__(self, active: bool) -> None:
        self.active = active and os.environ.get(ENV_VERL_ENABLE) == "1"

    def __enter__(self) -> None:
        if self.active:
            os.environ[ENV_VERL_ENABLE] = "0"

    def __exit__(self, *exc: object) -> None:
        if self.active:
            os.environ[ENV_VERL_ENABLE] = "1"


def _initialize(
    wrapped: Callable[..., object], instance: ServerManager, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    try:
        config = _rollout_config(instance)
        log_stats = not bool(config.get("disable_log_stats", True))
        prometheus = bool((config.get("prometheus") or {}).get("enable", False))
    except Exception:  # a manager of a shape we do not know: verl runs as if we were not here
        return wrapped(*args, **kwargs)
    flag_off = _VerlFlagOff(not log_stats and not prometheus)
    if asyncio.iscoroutinefunction(wrapped):

        async def run() -> object:
            with flag_off:
                result = await wrapped(*args, **kwargs)
            _report(instance, log_stats)
            return result

        return run()
    with flag_off:
        result = wrapped(*args, **kwargs)
    _report(instance, log_stats)
    return result


def install(module: ModuleType) -> None:
    cls = getattr(module, MANAGERS[module.__name__], None)
    if cls is None or getattr(cls, "_rl_insight_installed", False) or "_initialize_llm_servers" not in vars(cls):
        return
    wrapt.wrap_function_wrapper(cls, "_initialize_llm_servers", _initialize)
    cls._rl_insight_installed = True


def uninstall(module: ModuleType) -> None:
    cls = getattr(module, MANAGERS[module.__name__], None)
    if cls is not None and getattr(cls, "_rl_insight_installed", False):
        unwrap(cls, "_initialize_llm_servers")
        cls._rl_insight_installed = False
