"""The per-process runtime: merged config, plugin manager, sampler thread and the exit flush.

Started at most once per process by whichever comes first (the verl tracking backend, verl
0.9's RLInsightLogger, or ``verl_rl_insight.init``). Starting never raises inside a training
job: a bad config is logged loudly and monitoring runs with what is valid.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Mapping

import pluggy
from omegaconf import DictConfig

from verl_rl_insight.contract import environment
from verl_rl_insight.contract.errors import ConfigError
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.trainer.config import ENV_SERVER_URL, ENV_TOKEN, check_simulated_gpus, load_config
from verl_rl_insight.trainer.hook_types import RunInfo
from verl_rl_insight.trainer.log_handoff import LogHandOff
from verl_rl_insight.trainer.manager import build_plugin_manager, registered
from verl_rl_insight.trainer.services import Services

logger = logging.getLogger("verl_rl_insight")

# Set by trainer/patches/main_ppo.py from the trainer config, for processes that have no Tracking.
ENV_PROJECT = environment.PROJECT
ENV_EXPERIMENT = environment.EXPERIMENT

__all__ = ["RunInfo", "Runtime", "get_runtime", "shutdown", "start"]


class Runtime:
    def __init__(self, config: DictConfig, pm: pluggy.PluginManager) -> None:
        self.config = config
        self.pm = pm
        self.hook = pm.hook
        self.runs: dict[Run, RunInfo] = {}
        self._closed = False
        self._stop = threading.Event()
        self._collector: threading.Thread | None = None
        # Tracking.log hands its dict here and returns; the plugins' rl_insight_log_metrics run off its thread
        self.logs = LogHandOff(self._log_metrics)
        self.services = Services.of(config)  # what the plugins share, handed to each at configure
        self.hook.rl_insight_configure(config=config, pm=pm, services=self.services)
        if self.hook.rl_insight_collect.get_hookimpls():
            self._collector = threading.Thread(target=self._collect_loop, name="rl-insight-collect", daemon=True)
            self._collector.start()

    def run(self, project: str | None, experiment_name: str | None) -> RunInfo:
        """The RunInfo for these names; the runtime remembers every run it has seen."""
        key = (str(project or "default"), str(experiment_name or "default"))
        info = self.runs.get(key)
        if info is None:
            info = self.runs[key] = RunInfo(*key)
        return info

    def current_run(self) -> RunInfo:
        """The run this process logs for: the last one seen, else the one the driver published."""
        return next(reversed(self.runs.values()), None) or self.run(
            os.environ.get(ENV_PROJECT), os.environ.get(ENV_EXPERIMENT)
        )

    def plugin(self, name: str) -> object | None:
        """The plugin object registered as ``name`` (None when it is off or failed to load)."""
        return registered(self.pm, name)

    def _log_metrics(self, run: RunInfo, metrics: dict[str, object], step: int | None, timestamp: float) -> None:
        self.hook.rl_insight_log_metrics(run=run, metrics=metrics, step=step, timestamp=timestamp)

    def _collect_loop(self) -> None:
        interval = float(self.config.collect_interval_s)
        while not self._stop.wait(interval):
            self.collect()

    def collect(self) -> None:
        """One round of the samplers, exported; also run once more at shutdown."""
        try:
            for batches in self.hook.rl_insight_collect(run=self.current_run()):
                for batch in batches or ():
                    self.hook.rl_insight_export_batch(batch=batch)
        except Exception:
            logger.exception("rl-insight: a sampler failed; sampling goes on")

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Flush every plugin (at most ``timeout_s``, default ``metric_push.flush_timeout_s``), once."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self.logs.close()  # every log handed over reaches the plugins before they flush
        if timeout_s is None:
            timeout_s = float(self.config.plugins.metric_push.flush_timeout_s)
        if self._collector is not None:
            self.collect()  # the last counters of a short run
        try:
            self.hook.rl_insight_shutdown(timeout_s=timeout_s)
        except Exception:
            logger.exception("rl-insight: shutdown of a plugin failed")
        try:
            self.services.close(timeout_s)
        except Exception:
            logger.exception("rl-insight: withdrawing the scrape targets failed")


_runtime: Runtime | None = None
_lock = threading.Lock()


def get_runtime() -> Runtime | None:
    """The running Runtime, or None."""
    return _runtime


def start(
    trainer_config: Mapping[str, object] | DictConfig | None = None,
    config: DictConfig | None = None,
    strict: bool = False,
    plugins: Mapping[str, object] | None = None,
) -> Runtime:
    """Start the process runtime once and return it (later calls return the same one).

    ``strict``: raise ConfigError for a bad config (the public ``init`` does); otherwise log
    the error and go on with the defaults for the parts that are wrong. ``plugins``: plugin
    objects registered in place of the built-ins of the same name (the demo hands its hardware
    plugin with the simulated GPU load this way).
    """
    global _runtime
    if _runtime is not None:
        return _already_running(_runtime, plugins)
    with _lock:
        if _runtime is not None:
            return _already_running(_runtime, plugins)
        try:
            config = config if config is not None else load_config(trainer_config)
            hardware = (plugins or {}).get("hardware")
            check_simulated_gpus(config, simulating=getattr(hardware, "simulated_load", None) is not None)
            pm = build_plugin_manager(config, strict=True, plugins=plugins)
        except ConfigError as exc:
            if strict:
                raise
            logger.error("rl-insight: %s. Monitoring goes on with the rest of the config.", exc)
            if config is None:  # the rest of the config, else at least where to send data to
                config = _rest_of_config(trainer_config)
            pm = build_plugin_manager(config, strict=False, plugins=plugins)
        _runtime = Runtime(config, pm)
        atexit.register(_shutdown_at_exit)
        return _runtime


def _rest_of_config(trainer_config: Mapping[str, object] | DictConfig | None) -> DictConfig:
    """The config without its bad server URL (no server), where that was what was wrong; else the
    server's URL and token alone (``_server_only_config``)."""
    try:
        return load_config(trainer_config, drop_bad_server_url=True)
    except ConfigError:
        return _server_only_config()


def _server_only_config() -> DictConfig:
    """The defaults with the server's URL and token from the environment; the defaults alone where
    those are wrong too (a ConfigError raised here would stop the training job)."""
    try:
        return load_config(None, environ={k: os.environ[k] for k in (ENV_SERVER_URL, ENV_TOKEN) if k in os.environ})
    except ConfigError:
        return load_config(None, environ={})


def _already_running(rt: Runtime, plugins: Mapping[str, object] | None) -> Runtime:
    for name, plugin in (plugins or {}).items():
        if rt.plugin(name) is not plugin:
            logger.warning("rl-insight: the runtime already runs; the %s plugin handed to start() is not used", name)
    return rt


def shutdown(timeout_s: float | None = None, only: Runtime | None = None) -> None:
    """Flush and stop the runtime; a later ``start`` builds a fresh one. ``only``: stop that runtime
    and no other (a ``Tracking`` collected late must not stop the runtime a newer one started)."""
    global _runtime
    with _lock:
        if only is not None and only is not _runtime:
            runtime: Runtime | None = only
        else:
            runtime, _runtime = _runtime, None
    if runtime is not None:
        runtime.shutdown(timeout_s)


def _shutdown_at_exit() -> None:
    shutdown()
