"""RLInsightBackend: the object verl's ``Tracking`` holds under ``logger["rl_insight"]``.

``log`` runs on the training thread: it copies verl's dict and hands it to the plugins; it
never raises (a broken plugin is logged once, training goes on).
"""

import logging
import os
import time
from collections.abc import Mapping

from omegaconf import DictConfig

from verl_rl_insight.contract import environment
from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.client.run_card import RunCardSender

logger = logging.getLogger("verl_rl_insight")

ENV_VERL_ENABLE = environment.VERL_ENABLE


class RLInsightBackend:
    def __init__(
        self, project_name: str | None, experiment_name: str | None, config: Mapping[str, object] | None = None
    ) -> None:
        # verl >= 0.9 guards its own call sites (rollout metrics, trace_state) with this variable.
        os.environ[ENV_VERL_ENABLE] = "1"
        self._runtime = runtime.start(trainer_config=config)
        self._run = self._runtime.run(project_name, experiment_name)
        self._log_metrics = self._runtime.hook.rl_insight_log_metrics
        self._failed = False
        self._runtime.hook.rl_insight_run_start(run=self._run, trainer_config=config)
        self._card = _card_sender(self._runtime.config, self._run, config)
        self._card_waits = self._card is not None

    def log(self, data: Mapping[str, object], step: int | None) -> None:
        if self._card_waits and self._card is not None:  # the run's card goes out with its first logged step
            self._card_waits = False
            self._card.first_log()
        try:
            self._log_metrics(run=self._run, metrics=dict(data), step=step, timestamp=time.time())
        except Exception:
            if not self._failed:
                self._failed = True
                logger.exception("rl-insight: a plugin failed while logging metrics; training goes on")

    def finish(self) -> None:
        """Flush what is pending (bounded by ``metric_push.flush_timeout_s``) and stop."""
        try:
            if self._card is not None:
                self._card.close(timeout_s=1.0)  # a send under way may end; no new try starts
        except Exception:
            pass
        try:
            runtime.shutdown()
        except Exception:  # called from Tracking.__del__ during interpreter teardown too
            pass


def _card_sender(settings: DictConfig, run: runtime.RunInfo, config: object) -> RunCardSender | None:
    """The sender of the run's card (None without a server, or when it cannot start)."""
    url = settings.get("server_url")
    if not url or not str(url).startswith(("http://", "https://")):
        return None
    try:
        return RunCardSender(str(url), settings.get("token"), run.project, run.experiment_name, config)
    except Exception:
        logger.exception("rl-insight: the run's card is not sent; training goes on")
        return None
