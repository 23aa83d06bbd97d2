"""Trainer scalar metrics: every ``Tracking.log`` call becomes one batch named after the
RL-Insight catalogue (``rl_insight_monitor_<key with / as _>``); the hub adds the global-step
gauge (``rl_insight_monitor_training_global_step``) from the batch's step.

``rl_insight_run_finished`` is 0 from a run's first log and 1 after ``finish()``, so that alerts
can tell a finished run from a stalled one.
"""

import time
from typing import Any

import pluggy

from verl_rl_insight.contract.naming import METRIC_PREFIX
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.config import plugin_settings
from verl_rl_insight.trainer.hookspecs import hookimpl

FINISHED = "rl_insight_run_finished"

_prefix = METRIC_PREFIX
_export: Any = None
_runs: set[tuple[str, str]] = set()


@hookimpl
def rl_insight_configure(config: Any, pm: pluggy.PluginManager) -> None:
    global _prefix, _export
    _prefix = plugin_settings(config, "trainer_metrics").prefix
    _export = pm.hook.rl_insight_export_batch
    _runs.clear()


@hookimpl
def rl_insight_log_metrics(run: Any, metrics: dict[str, Any], step: int | None, timestamp: float) -> None:
    # Runs on the training thread: build the batch, convert nothing (the sender thread does).
    if run not in _runs:
        _runs.add(run)
        _export(batch=MetricBatch(run.project, run.experiment_name, None, timestamp, {FINISHED: 0}))
    _export(batch=MetricBatch(run.project, run.experiment_name, step, timestamp, metrics, _prefix))


@hookimpl(tryfirst=True)  # before the exporters close
def rl_insight_shutdown(timeout_s: float) -> None:
    for project, experiment in list(_runs):
        _export(batch=MetricBatch(project, experiment, None, time.time(), {FINISHED: 1}))
    _runs.clear()
