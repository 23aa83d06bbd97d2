"""Trainer scalar metrics: every ``Tracking.log`` call becomes one batch named after the
RL-Insight catalogue (``rl_insight_monitor_<key with / as _>``) plus the global-step gauge."""

from ..config import plugin_settings
from ..hookspecs import hookimpl
from ..metric_batch import MetricBatch

GLOBAL_STEP_KEY = "training/global_step"

_prefix = "rl_insight_monitor_"
_export = None


@hookimpl
def rl_insight_configure(config, pm):
    global _prefix, _export
    _prefix = plugin_settings(config, "trainer_metrics").get("prefix", _prefix)
    _export = pm.hook.rl_insight_export_batch


@hookimpl
def rl_insight_log_metrics(run, metrics, step, timestamp):
    # Runs on the training thread: build the batch, convert nothing (the sender thread does).
    if step is not None:
        metrics[GLOBAL_STEP_KEY] = step
    _export(batch=MetricBatch(run.project, run.experiment_name, step, timestamp, metrics, _prefix))
