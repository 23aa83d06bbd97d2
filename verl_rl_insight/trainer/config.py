"""Configuration: OmegaConf defaults < config file < the verl Hydra ``rl_insight`` block < environment.

The Hydra block is read from both ``+rl_insight.x=...`` (top level) and verl 0.9's
``+trainer.rl_insight.x=...``; the top-level one wins where both set a key.
"""

import json
import os

from omegaconf import DictConfig, OmegaConf

from verl_rl_insight.contract import server_url

# Environment variables that configure this package. Everything starting with one of the
# prefixes is forwarded to Ray workers (see hooks/main_ppo.py).
ENV_PREFIXES = ("RL_INSIGHT_", "VERL_RL_INSIGHT_")
ENV_SERVER_URL = "RL_INSIGHT_SERVER_URL"
ENV_TOKEN = "RL_INSIGHT_TOKEN"
ENV_CONFIG_FILE = "RL_INSIGHT_CONFIG_FILE"
# The Hydra block as JSON, set by hooks/main_ppo.py so that workers see the same config.
ENV_CONFIG_JSON = "VERL_RL_INSIGHT_CONFIG"

DEFAULTS = {
    "server_url": None,
    "token": None,
    "collect_interval_s": 5.0,
    "plugins": {
        "trainer_metrics": {"enabled": True, "prefix": "rl_insight_monitor_"},
        "metric_push": {
            "enabled": True,
            "queue_batches": 1024,     # hand-off queue between training thread and sender
            "spool_batches": 20000,    # kept while the server is unreachable, oldest dropped first
            "max_batches_per_request": 200,
            "timeout_s": 5.0,
            "retry_max_s": 5.0,        # back-off cap: a server that is back gets the spool within 5 s
            "resend_window_s": 30.0,   # on an outage, batches delivered this recently are sent again
            "flush_timeout_s": 10.0,
        },
        "state_timeline": {
            "enabled": True,
            "otlp_endpoint": None,     # default: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, else server host:otlp_port
            "otlp_port": 4318,
            "max_queue_spans": 8192,   # spans waiting for export; beyond, new ones are dropped and counted
            "batch_spans": 512,
            "export_interval_s": 1.0,
        },
        "rollout_engines": {"enabled": True, "target_ttl_s": 90.0},
        "transfer_queue": {"enabled": True},
        "probs_diff": {"enabled": True},
        "agent_loop": {"enabled": True},   # rl_insight_agent_* from rollout_trace (trace.backend=rl_insight)
        "hardware": {"enabled": True, "interval_s": 5.0, "gpu": True, "host": True, "lock_dir": None,
                     "simulate_gpus": 0},   # the demo's simulated GPUs, only where there is none
    },
}


class ConfigError(ValueError):
    """A configuration the user must fix; the message says how."""


def hydra_block(trainer_config):
    """The ``rl_insight`` settings inside a verl trainer config (dict or DictConfig), merged."""
    if not isinstance(trainer_config, (dict, DictConfig)):
        return {}
    trainer = trainer_config.get("trainer")
    blocks = [trainer.get("rl_insight") if isinstance(trainer, (dict, DictConfig)) else None,
              trainer_config.get("rl_insight")]
    blocks = [OmegaConf.create(b) for b in blocks if isinstance(b, (dict, DictConfig))]
    return OmegaConf.to_container(OmegaConf.merge(*blocks), resolve=True) if blocks else {}


def _env_layer(environ):
    layer = {}
    if environ.get(ENV_CONFIG_JSON):
        try:
            layer = json.loads(environ[ENV_CONFIG_JSON])
        except ValueError as exc:
            raise ConfigError(f"{ENV_CONFIG_JSON} is not valid JSON: {exc}") from None
    if environ.get(ENV_SERVER_URL):
        layer["server_url"] = environ[ENV_SERVER_URL]
    if environ.get(ENV_TOKEN):
        layer["token"] = environ[ENV_TOKEN]
    return layer


def load_config(trainer_config=None, config_file=None, environ=None):
    """Merge every layer and return a read-only DictConfig. Raises ConfigError on bad input."""
    environ = os.environ if environ is None else environ
    layers = [OmegaConf.create(DEFAULTS)]
    config_file = config_file or environ.get(ENV_CONFIG_FILE)
    if config_file:
        try:
            layers.append(OmegaConf.load(config_file))
        except Exception as exc:  # OmegaConf raises several types for a bad file
            raise ConfigError(f"cannot read rl-insight config file {config_file}: {exc}") from None
    layers.append(OmegaConf.create(hydra_block(trainer_config)))
    layers.append(OmegaConf.create(_env_layer(environ)))
    try:
        config = OmegaConf.merge(*layers)
    except Exception as exc:
        raise ConfigError(f"invalid rl-insight config: {exc}") from None
    if config.server_url:
        # the URL `rl-insight server start` prints carries the token: split it off, so that no
        # URL with a secret in it travels further (into requests, log lines, reports)
        try:
            bare, url_token = server_url.split(str(config.server_url).rstrip("/"))
        except ValueError as exc:
            raise ConfigError(f"server_url is not a URL ({exc}): {server_url.redact(config.server_url)}") from None
        config.server_url = bare
        if url_token and not config.token:
            config.token = url_token
    OmegaConf.set_readonly(config, True)
    return config


def plugin_settings(config, name):
    """The settings of plugin ``name`` (an empty DictConfig when the config has none)."""
    plugins = config.get("plugins") or {}
    return plugins.get(name) or OmegaConf.create({})


def check_plugin_names(config, known):
    """Raise ConfigError naming every configured plugin that is not registered."""
    unknown = sorted(set((config.get("plugins") or {}).keys()) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown rl-insight plugin(s) in config: {', '.join(unknown)}; "
            f"known plugins: {', '.join(sorted(known))}"
        )
