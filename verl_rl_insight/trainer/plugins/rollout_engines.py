"""Rollout engine metrics: every vLLM / SGLang replica's ``/metrics`` becomes a scrape target of the
server (job = the engine's name; labels replica, node, project, experiment_name), kept alive
by heartbeats while the run lives and removed when it ends. The engine's own labels (vLLM's
``engine`` index, ``model_name``) are kept as they are: no target label shadows them."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from verl_rl_insight.trainer.client.target_announcer import TargetAnnouncer
from verl_rl_insight.trainer.hook_types import RunInfo
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.services import Services

logger = logging.getLogger("verl_rl_insight")

ENGINES = ("vllm", "sglang", "trtllm")
OVERRIDE = "actor_rollout_ref.rollout.disable_log_stats=False"


def node_of(address: str) -> str:
    return address.rpartition(":")[0].strip("[]")


class Plugin:
    def __init__(self) -> None:
        self.warned = False  # said once per process: the replicas serve no metrics
        self.announcer: TargetAnnouncer | None = None  # the process's (the runtime closes it); None without a server

    @hookimpl
    def rl_insight_configure(self, services: Services) -> None:
        self.announcer = services.targets

    @hookimpl
    def rl_insight_rollout_servers(
        self, run: RunInfo, engine: str, addresses: Sequence[str], replica_ranks: Sequence[int], log_stats: bool
    ) -> None:
        if not log_stats:
            if not self.warned:
                self.warned = True
                logger.warning(
                    "rl-insight: %s replicas run with disable_log_stats=True, so they serve no engine "
                    "metrics; add the override %s to see them",
                    engine,
                    OVERRIDE,
                )
            return
        for address, rank in zip(addresses, replica_ranks, strict=False):
            self.rl_insight_register_target(run, address, engine, {"replica": str(rank)})

    @hookimpl
    def rl_insight_register_target(self, run: RunInfo, address: str, job: str, labels: dict[str, str]) -> None:
        announcer = self.announcer
        if job not in ENGINES or announcer is None:
            return
        announcer.announce(
            address,
            job,
            {"node": node_of(address), "project": run.project, "experiment_name": run.experiment_name, **labels},
        )
