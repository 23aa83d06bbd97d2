"""The module paths of release 0.1, kept for this release as aliases of where the code lives now.

``import verl_rl_insight.config`` (or ``VERL_USE_EXTERNAL_MODULES=verl_rl_insight.activate``,
``python -m verl_rl_insight.grafana.generate``) gives the very module object of the new path,
so a patch or a ``monkeypatch`` through either name reaches the same code. One line an alias;
the finder only answers for names listed here and costs one dict look-up per import.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

PACKAGE = "verl_rl_insight"

# old path (below verl_rl_insight) -> new path
OLD_PATHS: dict[str, str] = {
    "naming": "contract.naming",
    "client.server_url": "contract.server_url",
    "server.push_schema": "contract.wire",
    "activate": "trainer.activation.activate",
    "bootstrap": "trainer.activation.bootstrap",
    "verl_plugin": "trainer.activation.verl_plugin",
    "instrumentor": "trainer.activation.instrumentor",
    "hooks": "trainer.patches",
    "hooks.advantage": "trainer.patches.advantage",
    "hooks.main_ppo": "trainer.patches.main_ppo",
    "hooks.phase_timers": "trainer.patches.phase_timers",
    "hooks.rollout_servers": "trainer.patches.rollout_servers",
    "hooks.rollout_trace": "trainer.patches.rollout_trace",
    "hooks.server_managers": "trainer.patches.server_managers",
    "hooks.tracking": "trainer.patches.tracking",
    "hooks.workers": "trainer.patches.workers",
    "hookspecs": "trainer.hookspecs",
    "manager": "trainer.manager",
    "config": "trainer.config",
    "runtime": "trainer.runtime",
    "tracking_backend": "trainer.verl_api.tracking_backend",
    "verl_logger_api": "trainer.verl_api.logger_api",
    "propagation": "trainer.verl_api.propagation",
    "plugins": "trainer.plugins",
    "plugins.agent_loop": "trainer.plugins.agent_loop",
    "plugins.hardware": "trainer.plugins.hardware",
    "plugins.metric_push": "trainer.plugins.metric_push",
    "plugins.probs_diff": "trainer.plugins.probs_diff",
    "plugins.rollout_engines": "trainer.plugins.rollout_engines",
    "plugins.state_timeline": "trainer.plugins.state_timeline",
    "plugins.trainer_metrics": "trainer.plugins.trainer_metrics",
    "plugins.transfer_queue": "trainer.plugins.transfer_queue",
    "hardware_samplers": "trainer.samplers.hardware",
    "demo.simulated_nvml": "trainer.samplers.simulated_nvml",
    "client": "trainer.client",
    "client.metric_batch": "trainer.client.metric_batch",
    "client.sender": "trainer.client.sender",
    "client.server_client": "trainer.client.server_client",
    "client.target_announcer": "trainer.client.target_announcer",
    "server.http_api": "server.api.routes",
    "server.http_server": "server.api.http_server",
    "server.openapi": "server.api.openapi",
    "server.hub": "server.metrics.hub",
    "server.exposition": "server.metrics.exposition",
    "server.targets": "server.stores.targets",
    "server.spans": "server.stores.spans",
    "server.alerting": "server.stores.silences",
    "server.credentials": "server.stores.credentials",
    "server.files": "server.stores.files",
    "server.services": "server.managed.supervisor",
    "server.prometheus": "server.managed.prometheus",
    "server.grafana": "server.managed.grafana",
    "server.tempo": "server.managed.tempo",
    "server.alertmanager": "server.managed.alertmanager",
    "server.alert_rules": "server.managed.alert_rules",
    "server.releases": "server.managed.releases",
    "server.installer": "commands.server.installer",
    "server.control": "commands.server.control",
    "grafana": "dashboards",
    "grafana.build": "dashboards.build",
    "grafana.catalogue": "dashboards.catalogue",
    "grafana.compare": "dashboards.compare",
    "grafana.engines": "dashboards.engines",
    "grafana.generate": "dashboards.generate",
    "grafana.keys": "dashboards.keys",
    "grafana.panels": "dashboards.panels",
    "grafana.training": "dashboards.training",
    "cli": "commands",
    "cli.alerts": "commands.alerts",
    "cli.api": "commands.api",
    "cli.checks": "commands.checks",
    "cli.job": "commands.job",
    "cli.runs": "commands.runs",
    "cli.server": "commands.server.command",
    "cli.targets": "commands.targets",
    "cli.timeline": "commands.timeline.command",
    "cli.watch": "commands.watch.command",
    "doctor": "commands.doctor",
    "watch": "commands.watch",
    "watch.data": "commands.watch.data",
    "watch.view": "commands.watch.view",
    "timeline": "commands.timeline",
    "timeline.chrome_trace": "commands.timeline.chrome_trace",
    "timeline.sources": "commands.timeline.sources",
    "demo": "commands.demo",
    "demo.command": "commands.demo.command",
    "demo.simulated_engines": "commands.demo.simulated_engines",
    "demo.simulation": "commands.demo.simulation",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """The target module ran when it was imported; nothing more to do."""

    def get_code(self, fullname: str) -> object:
        """For ``python -m OLD.PATH``: runpy runs the new module's code as ``__main__``."""
        spec = importlib.util.find_spec(self.target)
        if spec is None or spec.loader is None:
            raise ImportError(f"no module {self.target}")
        return spec.loader.get_code(self.target)  # type: ignore[attr-defined]

    def is_package(self, fullname: str) -> bool:
        spec = importlib.util.find_spec(self.target)
        return bool(spec and spec.submodule_search_locations is not None)


class OldPathFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PACKAGE + "."):
            return None
        new = OLD_PATHS.get(fullname[len(PACKAGE) + 1 :])
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(f"{PACKAGE}.{new}"))


def install() -> None:
    if not any(isinstance(finder, OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, OldPathFinder())
