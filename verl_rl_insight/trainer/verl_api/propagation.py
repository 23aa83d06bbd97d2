"""What the driver hands to every Ray worker: the RL_INSIGHT_* environment and the Hydra block."""

import json
import os
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from verl_rl_insight.trainer.config import ENV_CONFIG_JSON, ENV_PREFIXES, hydra_block
from verl_rl_insight.trainer.runtime import ENV_EXPERIMENT, ENV_PROJECT
from verl_rl_insight.trainer.verl_api.tracking_backend import ENV_VERL_ENABLE


def logger_list(trainer_config: Any) -> Any:
    loggers = (trainer_config.get("trainer") or {}).get("logger") if trainer_config is not None else None
    if loggers is None:
        return []
    if isinstance(loggers, str):
        return [loggers]
    return [str(x) for x in loggers]


def prepare_driver_environment(trainer_config: Any) -> None:
    """Called before verl's ``run_ppo`` builds its runtime_env: mirror what verl 0.9 does for
    ``VERL_RL_INSIGHT_ENABLE`` and publish the Hydra ``rl_insight`` block for the workers."""
    if "rl_insight" in logger_list(trainer_config):
        os.environ[ENV_VERL_ENABLE] = "1"
    block = hydra_block(trainer_config)
    if block:
        try:
            inherited = json.loads(os.environ.get(ENV_CONFIG_JSON) or "{}")
        except ValueError:
            inherited = {}
        merged = OmegaConf.merge(OmegaConf.create(inherited), OmegaConf.create(block))  # Hydra wins
        os.environ[ENV_CONFIG_JSON] = json.dumps(OmegaConf.to_container(merged))
    trainer = trainer_config.get("trainer") if trainer_config is not None else None
    if trainer is not None:  # rollout replicas have no Tracking: they label their data with these
        if trainer.get("project_name"):
            os.environ[ENV_PROJECT] = str(trainer.get("project_name"))
        if trainer.get("experiment_name"):
            os.environ[ENV_EXPERIMENT] = str(trainer.get("experiment_name"))


def forwarded_environment(environ: Mapping[str, str] | None = None) -> Any:
    """Every RL_INSIGHT_* / VERL_RL_INSIGHT_* variable of this process."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k.startswith(ENV_PREFIXES)}
