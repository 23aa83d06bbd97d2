"""The contract between verl_rl_insight and its plugins: every hook, one docstring each.

Built-in subsystems (``verl_rl_insight.trainer.plugins.*``) implement these hooks exactly like
third-party plugins do. ``run`` is always a :class:`verl_rl_insight.trainer.runtime.RunInfo`.
Hooks called on the training thread must return in microseconds: hand work to a thread.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("verl_rl_insight")
hookimpl = pluggy.HookimplMarker("verl_rl_insight")


@hookspec
def rl_insight_configure(config: Any, pm: pluggy.PluginManager) -> None:
    """Called once per process, before any other hook, with the merged config (a read-only
    DictConfig) and the plugin manager (for plugins that call other hooks)."""


@hookspec
def rl_insight_log_metrics(run: Any, metrics: dict[str, Any], step: int | None, timestamp: float) -> None:
    """Trainer scalars as verl passed them to ``Tracking.log`` (a private copy; values may be non-numeric)."""


@hookspec
def rl_insight_export_batch(batch: Any) -> None:
    """A :class:`verl_rl_insight.trainer.client.metric_batch.MetricBatch` to send on; exporters must not block."""


@hookspec
def rl_insight_run_start(run: Any, trainer_config: Any) -> None:
    """A verl ``Tracking`` was created for ``run``; ``trainer_config`` is verl's config as a dict (or None)."""


@hookspec
def rl_insight_state_enter(run: Any, name: str, lane: str, start_ns: int, attributes: dict[str, Any]) -> None:
    """An RL state (a trainer phase) begins on timeline lane ``lane``; states on one lane and thread nest."""


@hookspec
def rl_insight_state_exit(run: Any, name: str, lane: str, end_ns: int, attributes: dict[str, Any]) -> None:
    """The innermost open state ``name`` on lane ``lane`` of this thread ends; ``attributes`` add to it."""


@hookspec
def rl_insight_state_span(
    run: Any, name: str, lane: str, start_ns: int, end_ns: int, attributes: dict[str, Any]
) -> None:
    """A finished RL state interval (a generate call, verl's trace_span) on timeline lane ``lane``."""


@hookspec
def rl_insight_trajectory(run: Any, trajectory: Any) -> None:
    """A finished agent-loop trajectory traced through verl's rollout_trace (backend rl_insight):
    ``{"start_ns", "end_ns", "attributes": {sample_index, step, rollout_n, validate, ...},
    "ops": [{"name", "kind", "span_name", "start_ns", "end_ns", "attributes", "error"?}],
    "ops_dropped", "error"?}``."""


@hookspec
def rl_insight_train_batch(run: Any, batch: Any, step: int | None, trainer: Any) -> None:
    """The step's batch (a verl DataProto) on its way into advantage estimation; read it, never change it.
    ``trainer``: the object whose loop it is (its ``tokenizer`` decodes the batch), or None."""


@hookspec
def rl_insight_advantage_batch(run: Any, batch: Any, step: int | None, trainer: Any) -> None:
    """The same batch as verl's ``compute_advantage`` returned it (``advantages`` and ``returns`` set);
    read it, never change it. On the training thread: a measured budget (benchmarks/)."""


@hookspec
def rl_insight_rollout_servers(run: Any, engine: str, addresses: Any, replica_ranks: Any, log_stats: Any) -> None:
    """verl started rollout replicas (``addresses[i]`` is replica ``replica_ranks[i]``); ``log_stats`` is
    ``not disable_log_stats``: whether they serve engine metrics at ``/metrics``."""


@hookspec
def rl_insight_register_target(run: Any, address: str, job: str, labels: dict[str, str]) -> None:
    """A Prometheus scrape target (``host:port``) that the monitoring server should scrape."""


@hookspec
def rl_insight_collect(run: Any) -> None:
    """Periodic sampling (every ``collect_interval_s``, off the training thread); return MetricBatches or None."""


@hookspec
def rl_insight_shutdown(timeout_s: float) -> None:
    """Flush and stop within ``timeout_s`` seconds; called once at ``finish()`` or process exit."""


@hookspec
def rl_insight_profile_point(run: Any, trainer: Any, phase: str, when: str, step: int | None) -> None:
    """verl's profiler boundaries in the training loop: ``phase`` is ``start_profile`` or
    ``stop_profile`` (the phases verl times around them), ``when`` is ``enter`` or ``exit``,
    ``trainer`` the object whose loop it is (its ``config.global_profiler`` is what verl reads)."""


@hookspec
def rl_insight_validation_generations(
    run: object,
    step: int | None,
    inputs: Sequence[str],
    outputs: Sequence[str],
    scores: Sequence[float],
    data_sources: Sequence[object] | None,
    ground_truths: Sequence[object] | None,
) -> None:
    """verl's validation made its generations (what ``_maybe_log_val_generations`` hands its loggers:
    decoded inputs and outputs, scores) with each one's data source and ground truth (or None)."""


@hookspec
def rl_insight_dapo_filtered(run: object, step: int | None, reward_counts: Mapping[float, int]) -> None:
    """DAPO dropped groups at ``step``: reward value -> how many groups had it (what verl's
    ``DapoFilteredRewardTableLogger`` gets)."""
