"""Prometheus push exporter: sends every metric batch to the rl-insight server's metric hub
(``POST <server_url>/api/v1/push``), from a background thread, spooling while it is down."""

import logging
from typing import Any

from verl_rl_insight.trainer.client.sender import BatchSender
from verl_rl_insight.trainer.config import plugin_settings
from verl_rl_insight.trainer.hookspecs import hookimpl

logger = logging.getLogger("verl_rl_insight")

PUSH_PATH = "/api/v1/push"

_sender = None


@hookimpl
def rl_insight_configure(config: Any) -> None:
    global _sender
    _sender = None
    url = config.get("server_url")
    if not url:
        logger.warning(
            "rl-insight: RL_INSIGHT_SERVER_URL is not set, so metrics are not sent anywhere; "
            "run `rl-insight server start` and export the line it prints"
        )
        return
    if not str(url).startswith(("http://", "https://")):
        logger.error("rl-insight: server_url %r must start with http:// or https://; metrics are not sent", url)
        return
    settings = plugin_settings(config, "metric_push")
    _sender = BatchSender(
        str(url) + PUSH_PATH,
        token=config.get("token"),
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
def rl_insight_export_batch(batch: Any) -> None:
    if _sender is not None:
        _sender.submit(batch)


@hookimpl
def rl_insight_shutdown(timeout_s: float) -> None:
    if _sender is not None:
        _sender.close(timeout_s)
        stats = dict(_sender.stats)
        if stats.get("dropped_batches") or stats.get("rejected_batches") or stats.get("skipped_values"):
            logger.warning("rl-insight: metric push summary: %s", stats)


def sender() -> Any:
    """The active BatchSender (None when no server is configured): for stats and tests."""
    return _sender
