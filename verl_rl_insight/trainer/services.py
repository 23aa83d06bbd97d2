"""What the runtime hands every plugin at ``rl_insight_configure`` (its ``services`` argument): the
parts of this process that plugins share, typed, so that no plugin reads another plugin's module or
object, nor a module-level one of its own that another plugin also uses.

The runtime builds one ``Services`` per process from the merged config, before any plugin runs, and
closes what it holds after the plugins' ``rl_insight_shutdown``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verl_rl_insight.trainer.client.target_announcer import TargetAnnouncer
from verl_rl_insight.trainer.config import ServerUrl, plugin_settings, server_of

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from opentelemetry.sdk.trace import Tracer

    from verl_rl_insight.trainer.plugins.span_export import CountingSpanProcessor


@dataclass
class Timeline:
    """The state timeline's way out, for plugins that send spans of their own (samples): the
    state_timeline plugin sets it when it configures and clears both at shutdown. ``tracer`` is None
    while that plugin is off or has no OTLP endpoint; ``processor`` counts what was sent and dropped."""

    tracer: Tracer | None = None
    processor: CountingSpanProcessor | None = None


@dataclass(frozen=True)
class Services:
    """``server``: the monitoring server (None without one); ``timeline``: the state timeline's
    tracer; ``targets``: the process's one scrape-target announcer, which the rollout engine and
    TransferQueue plugins both announce through (None without a server)."""

    server: ServerUrl | None = None
    timeline: Timeline = field(default_factory=Timeline)
    targets: TargetAnnouncer | None = None

    @classmethod
    def of(cls, config: DictConfig) -> Services:
        """The services a config of ``load_config`` gives: nothing starts a thread or a connection yet."""
        server = server_of(config)
        ttl_s = float(plugin_settings(config, "rollout_engines").get("target_ttl_s", 90.0))
        return cls(server=server, targets=TargetAnnouncer(server, ttl_s=ttl_s) if server is not None else None)

    def close(self, timeout_s: float) -> None:
        """Withdraw the announced scrape targets, within ``min(timeout_s, 2)`` seconds in all (those
        left expire on the server with their TTL)."""
        if self.targets is not None:
            self.targets.close(min(timeout_s, 2.0))
