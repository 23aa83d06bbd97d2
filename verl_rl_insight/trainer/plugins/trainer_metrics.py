"""Trainer scalar metrics: every ``Tracking.log`` call becomes one batch named after the
RL-Insight catalogue (``rl_insight_monitor_<key with / as _>``); the hub adds the global-step
gauge (``rl_insight_monitor_training_global_step``) from the batch's step.

``rl_insight_run_finished`` is 0 from a run's first log and 1 after ``finish()``, so that alerts
can tell a finished run from a stalled one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pluggy
from omegaconf import DictConfig

from verl_rl_insight.contract.naming import METRIC_PREFIX
from verl_rl_insight.contract.runs import RUN_FINISHED
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.config import plugin_settings
from verl_rl_insight.trainer.hook_types import RunInfo
from verl_rl_insight.trainer.hookspecs import hookimpl

FINISHED = RUN_FINISHED


class Plugin:
    def __init__(self) -> None:
        self.prefix = METRIC_PREFIX
        self.export: Callable[..., object] | None = None
        self.runs: set[RunInfo] = set()

    def _send(self, batch: MetricBatch) -> None:
        if self.export is not None:
            self.export(batch=batch)

    @hookimpl
    def rl_insight_configure(self, config: DictConfig, pm: pluggy.PluginManager) -> None:
        self.prefix = plugin_settings(config, "trainer_metrics").prefix
        self.export = pm.hook.rl_insight_export_batch

    @hookimpl
    def rl_insight_log_metrics(
        self, run: RunInfo, metrics: dict[str, object], step: int | None, timestamp: float
    ) -> None:
        # Runs on the training thread: build the batch, convert nothing (the sender thread does).
        if run not in self.runs:
            self.runs.add(run)
            self._send(MetricBatch(run.project, run.experiment_name, None, timestamp, {FINISHED: 0}))
        self._send(MetricBatch(run.project, run.experiment_name, step, timestamp, metrics, self.prefix))

    @hookimpl(tryfirst=True)  # before the exporters close
    def rl_insight_shutdown(self, timeout_s: float) -> None:
        for run in list(self.runs):
            self._send(MetricBatch(run.project, run.experiment_name, None, time.time(), {FINISHED: 1}))
        self.runs.clear()
