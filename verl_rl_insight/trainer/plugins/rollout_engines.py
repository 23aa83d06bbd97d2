"""Rollout engine metrics: every vLLM / SGLang replica's ``/metrics`` becomes a scrape target of the
server (job = the engine's name; labels replica, node, project, experiment_name), kept alive
by heartbeats while the run lives and removed when it ends. The engine's own labels (vLLM's
``engine`` index, ``model_name``) are kept as they are: no target label shadows them."""

import logging
from typing import Any

from verl_rl_insight.trainer.client import target_announcer
from verl_rl_insight.trainer.hookspecs import hookimpl

logger = logging.getLogger("verl_rl_insight")

ENGINES = ("vllm", "sglang", "trtllm")
OVERRIDE = "actor_rollout_ref.rollout.disable_log_stats=False"

_warned = False


def node_of(address: str) -> Any:
    return address.rpartition(":")[0].strip("[]")


@hookimpl
def rl_insight_configure(config: Any) -> None:
    global _warned
    _warned = False
    target_announcer.shared(config)


@hookimpl
def rl_insight_rollout_servers(run: Any, engine: str, addresses: Any, replica_ranks: Any, log_stats: Any) -> None:
    global _warned
    if not log_stats:
        if not _warned:
            _warned = True
            logger.warning(
                "rl-insight: %s replicas run with disable_log_stats=True, so they serve no engine "
                "metrics; add the override %s to see them",
                engine,
                OVERRIDE,
            )
        return
    for address, rank in zip(addresses, replica_ranks, strict=False):
        rl_insight_register_target(run, address, engine, {"replica": str(rank)})


@hookimpl
def rl_insight_register_target(run: Any, address: str, job: str, labels: dict[str, str]) -> None:
    announcer = target_announcer.shared()
    if job not in ENGINES or announcer is None:
        return
    announcer.announce(
        address,
        job,
        {"node": node_of(address), "project": run.project, "experiment_name": run.experiment_name, **labels},
    )


@hookimpl
def rl_insight_shutdown(timeout_s: float) -> None:
    target_announcer.close_shared(min(timeout_s, 2.0))
