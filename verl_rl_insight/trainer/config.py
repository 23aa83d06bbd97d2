"""Configuration: typed defaults < config file < the verl Hydra ``rl_insight`` block < environment.

The defaults are dataclasses read through OmegaConf's structured configs: a value of the wrong
type, or a key that no dataclass declares, is a ConfigError naming the key and the known ones.
Third-party plugins keep free-form blocks (``plugins.<their name>.<anything>``); the built-in
plugins' blocks are typed. The Hydra block is read from both ``+rl_insight.x=...`` (top level)
and verl 0.9's ``+trainer.rl_insight.x=...``; the top-level one wins where both set a key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
)

from verl_rl_insight.contract import environment, server_url
from verl_rl_insight.contract.errors import ConfigError
from verl_rl_insight.contract.naming import METRIC_PREFIX
from verl_rl_insight.contract.run_card import MAX_VALIDATION_KEY_CHARS, MAX_VALIDATION_KEYS

# kept importable from here: plugins and older code read these names from this module
ENV_PREFIXES = environment.FORWARDED_PREFIXES
ENV_SERVER_URL = environment.SERVER_URL
ENV_TOKEN = environment.TOKEN
ENV_CONFIG_FILE = environment.CONFIG_FILE
ENV_CONFIG_JSON = environment.CONFIG_JSON


@dataclass
class TrainerMetricsSettings:
    enabled: bool = True
    prefix: str = METRIC_PREFIX


@dataclass
class MetricPushSettings:
    enabled: bool = True
    # hand-off queue between training thread and sender: a burst of log calls faster than the sender's
    # poll (0.25 s) waits here. Bounded by batches and by the values they hold (~50 bytes a float: 25 MB)
    queue_batches: int = 16384
    queue_values: int = 500_000
    spool_batches: int = 20000  # kept while the server is unreachable, oldest dropped first
    max_batches_per_request: int = 200
    max_request_bytes: int = 4 * 1024 * 1024  # a request stays under the server's body limit
    timeout_s: float = 5.0
    retry_max_s: float = 5.0  # back-off cap: a server that is back gets the spool within 5 s
    resend_window_s: float = 30.0  # on an outage, batches delivered this recently are sent again
    flush_timeout_s: float = 10.0


@dataclass
class StateTimelineSettings:
    enabled: bool = True
    otlp_endpoint: str | None = None  # default: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, else the server's
    otlp_port: int = 4318
    max_queue_spans: int = 8192  # spans waiting for export; beyond, new ones are dropped and counted
    batch_spans: int = 512
    export_interval_s: float = 1.0


@dataclass
class RolloutEnginesSettings:
    enabled: bool = True
    target_ttl_s: float = 90.0


@dataclass
class SwitchSettings:
    enabled: bool = True


@dataclass
class HardwareSettings:
    enabled: bool = True
    interval_s: float = 5.0
    gpu: bool = True
    host: bool = True
    lock_dir: str | None = None
    simulate_gpus: int = 0  # the demo's simulated GPUs (refused outside `rl-insight demo`)


@dataclass
class ProfilerSettings:
    enabled: bool = True  # take `rl-insight profile` requests at step boundaries
    poll_interval_s: float = 5.0  # how often the trainer asks the server for new requests
    arm: str | None = None  # "torch": configure a dormant torch profiler at launch (no step profiled)
    arm_roles: list[str] = field(default_factory=lambda: ["actor"])  # the roles it arms
    arm_ranks: list[int] = field(default_factory=lambda: [0])  # the ranks it arms ([]: all)
    # where an armed profiler writes its traces when verl's save_path is its default (outputs/profile,
    # relative to whatever directory the job starts in); None: <RL_INSIGHT_HOME>/profiles/<project>/<experiment>
    save_path: str | None = None


@dataclass
class SamplesSettings:
    enabled: bool = False  # off by default: prompts and responses can be private
    k: int = 3  # per step: the k worst, k best and k largest-mismatch rollouts
    max_chars: int = 1000  # a prompt or response is cut to this many characters
    groups: int = 1  # per step: the full GRPO groups with the widest reward spread
    validation: int = 16  # per validation: the generations verl's own pick puts first


@dataclass
class BuiltinPlugins:
    trainer_metrics: TrainerMetricsSettings = field(default_factory=TrainerMetricsSettings)
    metric_push: MetricPushSettings = field(default_factory=MetricPushSettings)
    state_timeline: StateTimelineSettings = field(default_factory=StateTimelineSettings)
    rollout_engines: RolloutEnginesSettings = field(default_factory=RolloutEnginesSettings)
    transfer_queue: SwitchSettings = field(default_factory=SwitchSettings)
    probs_diff: SwitchSettings = field(default_factory=SwitchSettings)
    group_stats: SwitchSettings = field(default_factory=SwitchSettings)  # rl_insight/* batch statistics
    agent_loop: SwitchSettings = field(default_factory=SwitchSettings)  # rl_insight_agent_* (trace.backend)
    hardware: HardwareSettings = field(default_factory=HardwareSettings)
    profiler: ProfilerSettings = field(default_factory=ProfilerSettings)
    samples: SamplesSettings = field(default_factory=SamplesSettings)


@dataclass
class HealthSettings:
    # verl keys (or families ending in /) the run validates under beyond verl's own names; the server
    # reads them from the run's card and its detectors follow them first
    validation_keys: list[str] = field(default_factory=list)


@dataclass
class RLInsightConfig:
    server_url: str | None = None
    token: str | None = None
    collect_interval_s: float = 5.0
    health: HealthSettings = field(default_factory=HealthSettings)
    plugins: BuiltinPlugins = field(default_factory=BuiltinPlugins)


BUILTIN_PLUGINS = tuple(f.name for f in fields(BuiltinPlugins))


@dataclass(frozen=True, slots=True)
class ServerUrl:
    """The monitoring server as the trainer reaches it, parsed once (``parse``, by ``load_config``):
    ``base`` is its URL without credentials or trailing slash, ``token`` the write token (None
    without). Its repr shows no token: a ServerUrl may reach a log line."""

    base: str
    token: str | None = None

    @classmethod
    def parse(cls, url: str, token: str | None = None) -> ServerUrl:
        """``url`` as ``rl-insight server start`` prints it (the token may be its password; ``token``,
        where given, wins over it). ValueError for what is no http:// or https:// URL."""
        bare, url_token = server_url.split(url.rstrip("/"))
        if not bare.startswith(("http://", "https://")):
            raise ValueError("it must start with http:// or https://")
        return cls(bare, token or url_token)

    def at(self, path: str) -> str:
        """The URL of ``path`` (a route of contract/paths.py) on this server."""
        return self.base + path

    def __repr__(self) -> str:
        return f"ServerUrl({self.base!r}, token={'***' if self.token else None})"


def server_of(config: DictConfig) -> ServerUrl | None:
    """The server a config of ``load_config`` names (its ``server_url`` parsed there: no credentials,
    no trailing slash), or None without one."""
    url = config.get("server_url")
    return ServerUrl(str(url), config.get("token") or None) if url else None


def _defaults() -> DictConfig:
    """The typed defaults: closed at the top and in each built-in plugin's block, open for other
    plugins' names under ``plugins``."""
    config = OmegaConf.structured(RLInsightConfig)
    OmegaConf.set_struct(config, True)
    OmegaConf.set_struct(config.plugins, False)
    for name in BUILTIN_PLUGINS:
        OmegaConf.set_struct(config.plugins[name], True)
    assert isinstance(config, DictConfig)
    return config


def _known_keys(config: DictConfig, full_key: str) -> list[str]:
    """The keys of the block that ``full_key`` (``plugins.metric_push.x``) points into."""
    node: Any = config
    for part in full_key.split(".")[:-1]:
        if not isinstance(node, DictConfig) or part not in node:
            break
        node = node[part]
    return sorted(str(k) for k in node.keys()) if isinstance(node, DictConfig) else []


def hydra_block(trainer_config: object) -> dict[str, Any]:
    """The ``rl_insight`` settings inside a verl trainer config (dict or DictConfig), merged."""
    if not isinstance(trainer_config, (dict, DictConfig)):
        return {}
    trainer = trainer_config.get("trainer")
    found = [
        trainer.get("rl_insight") if isinstance(trainer, (dict, DictConfig)) else None,
        trainer_config.get("rl_insight"),
    ]
    blocks = [OmegaConf.create(b) for b in found if isinstance(b, (dict, DictConfig))]
    if not blocks:
        return {}
    merged = OmegaConf.to_container(OmegaConf.merge(*blocks), resolve=True)
    return {str(k): v for k, v in merged.items()} if isinstance(merged, dict) else {}


def _env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    if environ.get(ENV_CONFIG_JSON):
        try:
            layer = json.loads(environ[ENV_CONFIG_JSON])
        except ValueError as exc:
            raise ConfigError(
                f"{ENV_CONFIG_JSON} is not valid JSON ({exc}); set it to a JSON object like "
                f'\'{{"plugins": {{"hardware": {{"enabled": false}}}}}}\' or unset it'
            ) from None
        if not isinstance(layer, dict):
            raise ConfigError(f"{ENV_CONFIG_JSON} must be a JSON object like the rl_insight block, or unset")
    if environ.get(ENV_SERVER_URL):
        layer["server_url"] = environ[ENV_SERVER_URL]
    if environ.get(ENV_TOKEN):
        layer["token"] = environ[ENV_TOKEN]
    return layer


def _merge(layers: list[tuple[str, object]]) -> DictConfig:
    config = _defaults()
    for source, layer in layers:
        try:
            merged = OmegaConf.merge(config, layer)
            assert isinstance(merged, DictConfig)
            config = merged
        except (ConfigKeyError, ConfigAttributeError) as exc:
            key = exc.full_key or str(exc.key)
            raise ConfigError(
                f"unknown rl-insight setting {key!r} (from {source}); known here: {', '.join(_known_keys(config, key))}"
            ) from None
        except OmegaConfBaseException as exc:
            key = getattr(exc, "full_key", None) or "?"
            raise ConfigError(
                f"rl-insight setting {key!r} (from {source}): {exc.msg if hasattr(exc, 'msg') else exc}".splitlines()[0]
            ) from None
    assert isinstance(config, DictConfig)
    return config


def load_config(
    trainer_config: Mapping[str, object] | None = None,
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    drop_bad_server_url: bool = False,
) -> DictConfig:
    """Merge every layer and return a read-only DictConfig. Raises ConfigError on bad input; a
    ``server_url`` that is no http(s) URL is dropped instead (no server: nothing is sent) where
    ``drop_bad_server_url``, which the runtime asks for after it has said the error once, so that
    the rest of the config still holds."""
    environ = os.environ if environ is None else environ
    layers: list[tuple[str, object]] = []
    config_file = config_file or environ.get(ENV_CONFIG_FILE)
    if config_file:
        try:
            layers.append((str(config_file), OmegaConf.load(config_file)))
        except FileNotFoundError:
            raise ConfigError(
                f"config file {config_file} does not exist (from {ENV_CONFIG_FILE}); "
                f"fix the path or unset {ENV_CONFIG_FILE}"
            ) from None
        except Exception as exc:  # OmegaConf raises several types for a bad file
            problem = " ".join(str(exc).split())[:200]
            raise ConfigError(
                f"config file {config_file} is not valid YAML ({problem}); fix it or unset {ENV_CONFIG_FILE}"
            ) from None
    layers.append(("the rl_insight block of the trainer config", OmegaConf.create(hydra_block(trainer_config))))
    layers.append(("the environment", OmegaConf.create(_env_layer(environ))))
    config = _merge(layers)
    if config.server_url:
        # the URL `rl-insight server start` prints carries the token: split it off, so that no
        # URL with a secret in it travels further (into requests, log lines, reports)
        server: ServerUrl | None = None
        try:
            server = ServerUrl.parse(str(config.server_url), config.token)
        except ValueError as exc:
            if not drop_bad_server_url:
                raise ConfigError(f"server_url is not a URL ({exc}): {server_url.redact(config.server_url)}") from None
        config.server_url, config.token = (server.base, server.token) if server is not None else (None, None)
    check_validation_keys(list(config.health.validation_keys))
    OmegaConf.set_readonly(config, True)
    return config


def check_validation_keys(keys: list[str]) -> None:
    """Raise ConfigError naming ``health.validation_keys`` unless it is at most
    ``MAX_VALIDATION_KEYS`` short non-empty keys (the server ignores anything else)."""
    where = "rl-insight setting 'health.validation_keys'"
    if len(keys) > MAX_VALIDATION_KEYS:
        raise ConfigError(f"{where}: {len(keys)} keys, at most {MAX_VALIDATION_KEYS} are taken")
    for key in keys:
        if not key.strip() or len(key) > MAX_VALIDATION_KEY_CHARS:
            raise ConfigError(
                f"{where}: {key[:60]!r} is not a verl key (non-empty, at most {MAX_VALIDATION_KEY_CHARS} characters; "
                "a family ends in /: val/my_task/)"
            )


def plugin_settings(config: DictConfig, name: str) -> DictConfig:
    """The settings of plugin ``name`` (an empty DictConfig when the config has none); for the
    built-in plugins a typed block with every key present."""
    plugins = config.get("plugins") or {}
    return plugins.get(name) or OmegaConf.create({})


def check_plugin_names(config: DictConfig, known: Iterable[str]) -> None:
    """Raise ConfigError naming every configured plugin that is not registered."""
    unknown = sorted(set((config.get("plugins") or {}).keys()) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown rl-insight plugin(s) in config: {', '.join(unknown)}; known plugins: {', '.join(sorted(known))}"
        )


def check_simulated_gpus(config: DictConfig, simulating: bool) -> None:
    """Raise ConfigError when ``plugins.hardware.simulate_gpus`` is set outside ``rl-insight demo``
    (``simulating``: the demo handed its simulated load over): made-up GPUs under the DCGM names
    and a real run's labels would pass for the run's own."""
    gpus = plugin_settings(config, "hardware").get("simulate_gpus") or 0
    if gpus and not simulating:
        raise ConfigError(
            f"plugins.hardware.simulate_gpus={gpus} is refused: simulated GPUs are only for `rl-insight demo`; "
            "a training run reports its real GPUs (remove plugins.hardware.simulate_gpus)"
        )
