"""TransferQueue metrics: with ``transfer_queue.metrics.enabled=True``, the endpoint that
``transfer_queue.get_metrics_endpoint()`` returns becomes a scrape target (job ``transfer_queue``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from verl_rl_insight.trainer.client.target_announcer import TargetAnnouncer
from verl_rl_insight.trainer.hook_types import RunInfo
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.services import Services

logger = logging.getLogger("verl_rl_insight")

JOB = "transfer_queue"


def metrics_enabled(trainer_config: Mapping[str, object] | None) -> bool:
    queue = (trainer_config or {}).get("transfer_queue")
    metrics = queue.get("metrics") if isinstance(queue, Mapping) else None
    return bool(metrics.get("enabled", False)) if isinstance(metrics, Mapping) else False


class Plugin:
    def __init__(self) -> None:
        self.announcer: TargetAnnouncer | None = None  # the process's (the runtime closes it); None without a server

    @hookimpl
    def rl_insight_configure(self, services: Services) -> None:
        self.announcer = services.targets

    @hookimpl
    def rl_insight_run_start(self, run: RunInfo, trainer_config: Mapping[str, object] | None) -> None:
        if metrics_enabled(trainer_config):
            # get_metrics_endpoint() asks a Ray actor: not on the training thread.
            threading.Thread(target=self._register, args=(run,), name="rl-insight-tq", daemon=True).start()

    def _register(self, run: RunInfo) -> None:
        try:
            import transfer_queue

            endpoint = transfer_queue.get_metrics_endpoint()
        except Exception as exc:
            logger.warning(
                "rl-insight: transfer_queue.metrics.enabled=True but its metrics endpoint is unknown (%s)", exc
            )
            return
        if endpoint:
            self.rl_insight_register_target(run, endpoint, JOB, {})

    @hookimpl
    def rl_insight_register_target(self, run: RunInfo, address: str, job: str, labels: dict[str, str]) -> None:
        announcer = self.announcer
        if job != JOB or announcer is None:
            return
        announcer.announce(address, JOB, {"project": run.project, "experiment_name": run.experiment_name, **labels})
