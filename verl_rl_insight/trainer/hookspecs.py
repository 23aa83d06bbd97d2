"""The contract between verl_rl_insight and its plugins: every hook, one docstring each.

Built-in subsystems (``verl_rl_insight.trainer.plugins.*``) implement these hooks exactly like
third-party plugins do (a plugin is an object whose methods are marked ``@hookimpl``). ``run`` is
always a :class:`verl_rl_insight.trainer.hook_types.RunInfo`. Hooks called on the training thread
must return in microseconds: hand work to a thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.hook_types import RunInfo, Trajectory

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from verl import DataProto

    from verl_rl_insight.trainer.services import Services

hookspec = pluggy.HookspecMarker("verl_rl_insight")
hookimpl = pluggy.HookimplMarker("verl_rl_insight")


@hookspec
def rl_insight_configure(config: DictConfig, pm: pluggy.PluginManager, services: Services) -> None:
    """Called once per process, before any other hook, with the merged config (a read-only
    DictConfig), the plugin manager (for plugins that call other hooks) and the process's shared
    parts (:class:`verl_rl_insight.trainer.services.Services`: the server URL, parsed; the state
    timeline's tracer; the scrape-target announcer)."""


@hookspec
def rl_insight_log_metrics(run: RunInfo, metrics: dict[str, object], step: int | None, timestamp: float) -> None:
    """Trainer scalars as verl passed them to ``Tracking.log`` (a private copy; values may be non-numeric)."""


@hookspec
def rl_insight_export_batch(batch: MetricBatch) -> None:
    """A :class:`verl_rl_insight.trainer.client.metric_batch.MetricBatch` to send on; exporters must not block."""


@hookspec
def rl_insight_run_start(run: RunInfo, trainer_config: Mapping[str, object] | None) -> None:
    """A verl ``Tracking`` was created for ``run``; ``trainer_config`` is verl's config as a dict (or None)."""


@hookspec
def rl_insight_state_enter(run: RunInfo, name: str, lane: str, start_ns: int, attributes: dict[str, object]) -> None:
    """An RL state (a trainer phase) begins on timeline lane ``lane``; states on one lane and thread nest."""


@hookspec
def rl_insight_state_exit(run: RunInfo, name: str, lane: str, end_ns: int, attributes: dict[str, object]) -> None:
    """The innermost open state ``name`` on lane ``lane`` of this thread ends; ``attributes`` add to it."""


@hookspec
def rl_insight_state_span(
    run: RunInfo, name: str, lane: str, start_ns: int, end_ns: int, attributes: dict[str, object]
) -> None:
    """A finished RL state interval (a generate call, verl's trace_span) on timeline lane ``lane``."""


@hookspec
def rl_insight_trajectory(run: RunInfo, trajectory: Trajectory) -> None:
    """A finished agent-loop trajectory traced through verl's rollout_trace (backend rl_insight):
    ``{"start_ns", "end_ns", "attributes": {sample_index, step, rollout_n, validate, ...},
    "ops": [{"name", "kind", "span_name", "start_ns", "end_ns", "attributes", "error"?}],
    "ops_dropped", "error"?}``."""


@hookspec
def rl_insight_train_batch(run: RunInfo, batch: DataProto, step: int | None, trainer: object | None) -> None:
    """The step's batch (a verl DataProto) on its way into advantage estimation; read it, never change it.
    ``trainer``: the object whose loop it is (its ``tokenizer`` decodes the batch), or None."""


@hookspec
def rl_insight_advantage_batch(run: RunInfo, batch: DataProto, step: int | None, trainer: object | None) -> None:
    """The same batch as verl's ``compute_advantage`` returned it (``advantages`` and ``returns`` set);
    read it, never change it. On the training thread: a measured budget (benchmarks/)."""


@hookspec
def rl_insight_rollout_servers(
    run: RunInfo, engine: str, addresses: Sequence[str], replica_ranks: Sequence[int], log_stats: bool
) -> None:
    """verl started rollout replicas (``addresses[i]`` is replica ``replica_ranks[i]``); ``log_stats`` is
    ``not disable_log_stats``: whether they serve engine metrics at ``/metrics``."""


@hookspec
def rl_insight_register_target(run: RunInfo, address: str, job: str, labels: dict[str, str]) -> None:
    """A Prometheus scrape target (``host:port``) that the monitoring server should scrape."""


@hookspec
def rl_insight_collect(run: RunInfo) -> list[MetricBatch] | None:
    """Periodic sampling (every ``collect_interval_s``, off the training thread); return MetricBatches or None."""


@hookspec
def rl_insight_shutdown(timeout_s: float) -> None:
    """Flush and stop within ``timeout_s`` seconds; called once at ``finish()`` or process exit."""


@hookspec
def rl_insight_profile_point(run: RunInfo, trainer: object, phase: str, when: str, step: int | None) -> None:
    """verl's profiler boundaries in the training loop: ``phase`` is ``start_profile`` or
    ``stop_profile`` (the phases verl times around them), ``when`` is ``enter`` or ``exit``,
    ``trainer`` the object whose loop it is (its ``config.global_profiler`` is what verl reads)."""


@hookspec
def rl_insight_validation_generations(
    run: RunInfo,
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
def rl_insight_dapo_filtered(run: RunInfo, step: int | None, reward_counts: Mapping[float, int]) -> None:
    """DAPO dropped groups at ``step``: reward value -> how many groups had it (what verl's
    ``DapoFilteredRewardTableLogger`` gets)."""
