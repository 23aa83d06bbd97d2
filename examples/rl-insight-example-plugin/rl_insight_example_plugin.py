"""A third-party verl-rl-insight plugin: appends every trainer log call to a JSON-lines file.

Configure with ``+rl_insight.plugins.example_jsonl.path=/tmp/metrics.jsonl``; switch off with
``+rl_insight.plugins.example_jsonl.enabled=false``.
"""

import json
import os

from verl_rl_insight import hookimpl, plugin_settings

_path = None


@hookimpl
def rl_insight_configure(config):
    global _path
    _path = plugin_settings(config, "example_jsonl").get("path") or os.environ.get("EXAMPLE_JSONL_PATH")


@hookimpl
def rl_insight_log_metrics(run, metrics, step, timestamp):
    if _path:
        with open(_path, "a") as f:
            f.write(
                json.dumps(
                    {
                        "project": run.project,
                        "experiment_name": run.experiment_name,
                        "step": step,
                        "keys": sorted(metrics),
                    }
                )
                + "\n"
            )
