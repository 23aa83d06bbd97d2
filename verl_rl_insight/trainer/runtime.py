"""The per-process runtime: merged config, plugin manager, sampler thread and the exit flush.

Started at most once per process by whichever comes first (the verl tracking backend, verl
0.9's RLInsightLogger, or ``verl_rl_insight.init``). Starting never raises inside a training
job: a bad config is logged loudly and monitoring runs with what is valid.
"""

import atexit
import logging
import os
import threading
from typing import Any, NamedTuple

import pluggy

from verl_rl_insight.contract import environment
from verl_rl_insight.contract.errors import ConfigError
from verl_rl_insight.trainer.config import ENV_SERVER_URL, ENV_TOKEN, load_config
from verl_rl_insight.trainer.manager import build_plugin_manager

logger = logging.getLogger("verl_rl_insight")

# Set by trainer/patches/main_ppo.py from the trainer config, for processes that have no Tracking.
ENV_PROJECT = environment.PROJECT
ENV_EXPERIMENT = environment.EXPERIMENT


class RunInfo(NamedTuple):
    """Who is logging: the labels every series of the run carries."""

    project: str
    experiment_name: str


class Runtime:
    def __init__(self, config: Any, pm: pluggy.PluginManager) -> None:
        self.config = config
        self.pm = pm
        self.hook = pm.hook
        self.runs: dict[tuple[str, str], RunInfo] = {}
        self._closed = False
        self._stop = threading.Event()
        self._collector = None
        self.hook.rl_insight_configure(config=config, pm=pm)
        if self.hook.rl_insight_collect.get_hookimpls():
            self._collector = threading.Thread(target=self._collect_loop, name="rl-insight-collect", daemon=True)
            self._collector.start()

    def run(self, project: str | None, experiment_name: str | None) -> Any:
        """The RunInfo for these names; the runtime remembers every run it has seen."""
        key = (str(project or "default"), str(experiment_name or "default"))
        info = self.runs.get(key)
        if info is None:
            info = self.runs[key] = RunInfo(*key)
        return info

    def current_run(self) -> Any:
        """The run this process logs for: the last one seen, else the one the driver published."""
        return next(reversed(self.runs.values()), None) or self.run(
            os.environ.get(ENV_PROJECT), os.environ.get(ENV_EXPERIMENT)
        )

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
        if timeout_s is None:
            timeout_s = self.config.plugins.metric_push.flush_timeout_s
        if self._collector is not None:
            self.collect()  # the last counters of a short run
        try:
            self.hook.rl_insight_shutdown(timeout_s=timeout_s)
        except Exception:
            logger.exception("rl-insight: shutdown of a plugin failed")


_runtime = None
_lock = threading.Lock()


def get_runtime() -> Any:
    """The running Runtime, or None."""
    return _runtime


def start(trainer_config: Any = None, config: Any = None, strict: bool = False) -> Any:
    """Start the process runtime once and return it (later calls return the same one).

    ``strict``: raise ConfigError for a bad config (the public ``init`` does); otherwise log
    the error and go on with the defaults for the parts that are wrong.
    """
    global _runtime
    if _runtime is not None:
        return _runtime
    with _lock:
        if _runtime is not None:
            return _runtime
        try:
            config = config if config is not None else load_config(trainer_config)
            pm = build_plugin_manager(config, strict=True)
        except ConfigError as exc:
            if strict:
                raise
            logger.error("rl-insight: %s. Monitoring goes on with the rest of the config.", exc)
            if config is None:  # keep at least where to send data to
                config = load_config(
                    None, environ={k: os.environ[k] for k in (ENV_SERVER_URL, ENV_TOKEN) if k in os.environ}
                )
            pm = build_plugin_manager(config, strict=False)
        _runtime = Runtime(config, pm)
        atexit.register(_shutdown_at_exit)
        return _runtime


def shutdown(timeout_s: float | None = None) -> None:
    """Flush and stop the runtime; a later ``start`` builds a fresh one."""
    global _runtime
    with _lock:
        runtime, _runtime = _runtime, None
    if runtime is not None:
        runtime.shutdown(timeout_s)


def _shutdown_at_exit() -> None:
    shutdown()
