"""What the driver hands to every Ray worker: the RL_INSIGHT_* environment and the Hydra block."""

import json
import logging
import os
import sys
from collections.abc import Mapping

from omegaconf import OmegaConf

from verl_rl_insight.contract import environment, run_credential, server_url
from verl_rl_insight.contract.redaction import secret_key
from verl_rl_insight.trainer.config import ENV_CONFIG_JSON, ENV_PREFIXES, ENV_SERVER_URL, ENV_TOKEN, hydra_block
from verl_rl_insight.trainer.runtime import ENV_EXPERIMENT, ENV_PROJECT
from verl_rl_insight.trainer.verl_api.tracking_backend import ENV_VERL_ENABLE

logger = logging.getLogger("verl_rl_insight")


def logger_list(trainer_config: Mapping[str, object] | None) -> list[str]:
    trainer = trainer_config.get("trainer") if trainer_config is not None else None
    loggers = trainer.get("logger") if isinstance(trainer, Mapping) else None
    if loggers is None:
        return []
    if isinstance(loggers, str):
        return [loggers]
    return [str(x) for x in loggers]


def prepare_driver_environment(trainer_config: Mapping[str, object] | None) -> None:
    """Called before verl's ``run_ppo`` builds its runtime_env: mirror what verl 0.9 does for
    ``VERL_RL_INSIGHT_ENABLE`` and publish the Hydra ``rl_insight`` block for the workers."""
    if {"rl_insight", "rl-insight"} & set(logger_list(trainer_config)):
        os.environ[ENV_VERL_ENABLE] = "1"
    block = hydra_block(trainer_config)
    if block:
        try:
            inherited = json.loads(os.environ.get(ENV_CONFIG_JSON) or "{}")
        except ValueError:
            inherited = {}
        merged = OmegaConf.merge(OmegaConf.create(inherited), OmegaConf.create(block))  # Hydra wins
        os.environ[ENV_CONFIG_JSON] = json.dumps(OmegaConf.to_container(merged))
    _publish_command_line()
    trainer = trainer_config.get("trainer") if trainer_config is not None else None
    if isinstance(trainer, Mapping):  # rollout replicas have no Tracking: they label their data with these
        if trainer.get("project_name"):
            os.environ[ENV_PROJECT] = str(trainer.get("project_name"))
        if trainer.get("experiment_name"):
            os.environ[ENV_EXPERIMENT] = str(trainer.get("experiment_name"))


def _publish_command_line() -> None:
    """The driver's command line (redacted) and working folder, for the run's card: verl's trainer
    runs in a Ray actor, whose own command line is Ray's."""
    from verl_rl_insight.contract.run_card import redact_argv
    from verl_rl_insight.trainer.client.run_card import secrets_known

    # the interpreter's own argv: run as `python -m verl.trainer.main_ppo`, sys.argv[0] is main_ppo.py's
    # path and the card said neither `python` nor `-m`, so it could not be run again as written
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    os.environ[environment.COMMAND] = json.dumps(redact_argv(argv, secrets_known(None, os.environ)))
    os.environ[environment.WORKDIR] = os.getcwd()


def forwarded_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every RL_INSIGHT_* / VERL_RL_INSIGHT_* variable of this process, the server's token replaced
    by a credential for this run only (verl prints what Ray workers get: ``ray init kwargs``)."""
    environ = os.environ if environ is None else environ
    return scoped_to_run({k: v for k, v in environ.items() if k.startswith(ENV_PREFIXES)})


def scoped_to_run(env: dict[str, str]) -> dict[str, str]:
    """``env`` with no server token in it: not in the URL, not in RL_INSIGHT_TOKEN, not in the
    config JSON; a run credential for the run's project and experiment in RL_INSIGHT_TOKEN instead."""
    token = env.pop(ENV_TOKEN, None)
    if env.get(ENV_SERVER_URL):
        env[ENV_SERVER_URL], from_url = _split(env[ENV_SERVER_URL])
        token = token or from_url
    if env.get(ENV_CONFIG_JSON):
        try:
            block = json.loads(env[ENV_CONFIG_JSON])
        except ValueError:
            block = None
        if not isinstance(block, dict):  # the workers could not read it either; it may hold a token
            del env[ENV_CONFIG_JSON]
            logger.warning(
                "rl-insight: %s is not a JSON object; not handed to the Ray workers (they use their defaults)",
                ENV_CONFIG_JSON,
            )
        else:
            from_block = block.pop("token", None)
            token = token or from_block
            if isinstance(block.get("server_url"), str):
                block["server_url"], from_url = _split(block["server_url"])
                token = token or from_url
            left_out = _drop_secrets(block)
            if left_out:
                logger.warning(
                    "rl-insight: setting(s) %s name a secret: not handed to the Ray workers (secrets never travel "
                    "in config; the workers get a credential for this run in %s)",
                    ", ".join(left_out[:10]),
                    ENV_TOKEN,
                )
            env[ENV_CONFIG_JSON] = json.dumps(block)
    if not token:
        return env
    if run_credential.is_run_credential(token):
        env[ENV_TOKEN] = token  # already one run's: handed on as it is
    elif env.get(ENV_PROJECT) and env.get(ENV_EXPERIMENT):
        env[ENV_TOKEN] = run_credential.mint(token, env[ENV_PROJECT], env[ENV_EXPERIMENT])
    else:
        logger.warning(
            "rl-insight: no project / experiment known for the run; Ray workers get no push credential "
            "(the server's token never goes to them)"
        )
    return env


def _drop_secrets(block: dict[str, object], where: str = "") -> list[str]:
    """Take out of ``block`` (in place) every setting whose name names a secret (``token``,
    ``api_key``, ``password``... at any depth: an unknown ``plugins.metric_push.token`` too) and
    whose value is text or a block; returns their dotted names."""
    dropped: list[str] = []
    for key in list(block):
        value = block[key]
        name = f"{where}.{key}" if where else str(key)
        if secret_key(str(key)) and isinstance(value, (str, list, dict)) and value not in ("", [], {}):
            del block[key]
            dropped.append(name)
        elif isinstance(value, dict):
            dropped.extend(_drop_secrets(value, name))
    return dropped


def _split(url: str) -> tuple[str, str | None]:
    try:
        return server_url.split(url)
    except ValueError:
        return url, None
