"""RLInsightBackend: the object verl's ``Tracking`` holds under ``logger["rl_insight"]``.

``log`` runs on the training thread: it copies verl's dict and hands it to the plugins; it
never raises (a broken plugin is logged once, training goes on).
"""

import logging
import os
import time
from typing import Any

from verl_rl_insight.contract import environment
from verl_rl_insight.trainer import runtime

logger = logging.getLogger("verl_rl_insight")

ENV_VERL_ENABLE = environment.VERL_ENABLE


class RLInsightBackend:
    def __init__(self, project_name: Any, experiment_name: str, config: Any = None) -> None:
        # verl >= 0.9 guards its own call sites (rollout metrics, trace_state) with this variable.
        os.environ[ENV_VERL_ENABLE] = "1"
        self._runtime = runtime.start(trainer_config=config)
        self._run = self._runtime.run(project_name, experiment_name)
        self._log_metrics = self._runtime.hook.rl_insight_log_metrics
        self._failed = False
        self._runtime.hook.rl_insight_run_start(run=self._run, trainer_config=config)

    def log(self, data: Any, step: int | None) -> None:
        try:
            self._log_metrics(run=self._run, metrics=dict(data), step=step, timestamp=time.time())
        except Exception:
            if not self._failed:
                self._failed = True
                logger.exception("rl-insight: a plugin failed while logging metrics; training goes on")

    def finish(self) -> None:
        """Flush what is pending (bounded by ``metric_push.flush_timeout_s``) and stop."""
        try:
            runtime.shutdown()
        except Exception:  # called from Tracking.__del__ during interpreter teardown too
            pass
