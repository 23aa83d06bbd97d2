"""Prometheus push exporter: sends every metric batch to the rl-insight server's metric hub
(``POST <server_url>/api/v1/push``), from a background thread, spooling while it is down."""

from __future__ import annotations

import logging

from omegaconf import DictConfig

from verl_rl_insight.contract import paths
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.client.sender import BatchSender
from verl_rl_insight.trainer.config import plugin_settings
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.services import Services

logger = logging.getLogger("verl_rl_insight")


class Plugin:
    def __init__(self) -> None:
        self.sender: BatchSender | None = None  # None when no server is configured

    @hookimpl
    def rl_insight_configure(self, config: DictConfig, services: Services) -> None:
        if services.server is None:
            logger.warning(
                "rl-insight: RL_INSIGHT_SERVER_URL is not set, so metrics are not sent anywhere; "
                "run `rl-insight server start` and export the line it prints"
            )
            return
        settings = plugin_settings(config, "metric_push")
        self.sender = BatchSender(
            services.server.at(paths.PUSH),
            token=services.server.token,
            queue_batches=settings.queue_batches,
            queue_values=settings.queue_values,
            spool_batches=settings.spool_batches,
            max_batches_per_request=settings.max_batches_per_request,
            max_request_bytes=settings.max_request_bytes,
            timeout_s=settings.timeout_s,
            retry_max_s=settings.retry_max_s,
            resend_window_s=settings.resend_window_s,
        )

    @hookimpl
    def rl_insight_export_batch(self, batch: MetricBatch) -> None:
        if self.sender is not None:
            self.sender.submit(batch)

    @hookimpl
    def rl_insight_shutdown(self, timeout_s: float) -> None:
        if self.sender is not None:
            self.sender.close(timeout_s)
            stats = dict(self.sender.stats)
            if stats.get("dropped_batches") or stats.get("rejected_batches") or stats.get("skipped_values"):
                logger.warning("rl-insight: metric push summary: %s", stats)


def sender() -> BatchSender | None:
    """The running runtime's BatchSender (None when no server is configured), once every
    ``Tracking.log`` handed over so far has reached it: for stats and tests (its ``flush`` then
    waits for those logs too)."""
    from verl_rl_insight.trainer import runtime

    rt = runtime.get_runtime()
    if rt is not None:
        rt.logs.drain()
    plugin = rt.plugin("metric_push") if rt is not None else None
    return plugin.sender if isinstance(plugin, Plugin) else None
