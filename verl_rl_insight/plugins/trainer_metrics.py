"""Trainer scalar metrics: every ``Tracking.log`` call becomes one batch named after the
RL-Insight catalogue (``rl_insight_monitor_<key with / as _>``); the hub adds the global-step
gauge (``rl_insight_monitor_training_global_step``) from the batch's step."""

from ..config import plugin_settings
from ..hookspecs import hookimpl
from ..metric_batch import MetricBatch

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
    _export(batch=MetricBatch(run.project, run.experiment_name, step, timestamp, metrics, _prefix))
