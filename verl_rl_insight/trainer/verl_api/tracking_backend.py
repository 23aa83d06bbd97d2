"""RLInsightBackend: the object verl's ``Tracking`` holds under ``logger["rl_insight"]``.

``log`` runs on the training thread: it copies verl's dict, stamps it and hands it over
(``runtime.logs``, trainer/log_handoff.py); the plugins see it on another thread. It never raises
(a broken plugin is logged once there, training goes on).
"""

import logging
import os
import time
from collections.abc import Mapping

from verl_rl_insight.contract import environment
from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.client.run_card import RunCardSender
from verl_rl_insight.trainer.config import ServerUrl

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
        self._hand_over = self._runtime.logs.put
        self._runtime.hook.rl_insight_run_start(run=self._run, trainer_config=config)
        self._card = _card_sender(self._runtime.services.server, self._run, config)
        self._card_waits = self._card is not None

    def log(self, data: Mapping[str, object], step: int | None) -> None:
        if self._card_waits and self._card is not None:  # the run's card goes out with its first logged step
            self._card_waits = False
            self._card.first_log()
        try:
            self._hand_over(self._run, dict(data), step, time.time())
        except Exception:  # verl passes a dict; anything else is not worth a training step
            logger.debug("rl-insight: a log that is not a mapping is not sent", exc_info=True)

    def finish(self) -> None:
        """Flush what is pending (bounded by ``metric_push.flush_timeout_s``) and stop."""
        try:
            if self._card is not None:
                self._card.close(timeout_s=1.0)  # a send under way may end; no new try starts
        except Exception:
            pass
        try:
            runtime.shutdown(only=self._runtime)
        except Exception:  # called from Tracking.__del__ during interpreter teardown too
            pass


def _card_sender(server: ServerUrl | None, run: runtime.RunInfo, config: object) -> RunCardSender | None:
    """The sender of the run's card (None without a server, or when it cannot start)."""
    if server is None:
        return None
    try:
        return RunCardSender(server, run.project, run.experiment_name, config)
    except Exception:
        logger.exception("rl-insight: the run's card is not sent; training goes on")
        return None
