"""Every metric name this project produces or registers a scrape target for: the dashboards'
``--check`` fails on a query naming anything else.

verl's own scalar keys are not listed: they are read from the installed verl's source (a key
the dashboards use must appear as a string literal in verl), so the check follows verl.
"""

from verl_rl_insight.contract import engine_metrics
from verl_rl_insight.contract.attempts import ATTEMPT_METRIC
from verl_rl_insight.contract.marks import MARK_METRIC
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, STEP_TIME_METRIC, TIMELINE_SERIES
from verl_rl_insight.contract.runs import RUN_FINISHED
from verl_rl_insight.trainer.samplers.hardware import HostSampler

# What the hub, the trainer-side plugins and the hardware sampler push.
PRODUCED = {
    GLOBAL_STEP_METRIC,
    STEP_TIME_METRIC,
    *TIMELINE_SERIES,
    RUN_FINISHED,
    "rl_insight_profiled_steps_total",
    "ALERTS",  # Prometheus' own series of the alerts that fire
    "rl_insight_health_finding",
    "rl_insight_health_findings_total",
    "rl_insight_health_value",
    "rl_insight_health_baseline",
    "rl_insight_state_seconds_total",
    "rl_insight_state_count_total",
    "rl_insight_timeline_dropped_spans_total",
    "rl_insight_timeline_exported_spans_total",
    "rl_insight_timeline_failed_spans_total",
    "rl_insight_hub_streams",
    "rl_insight_hub_series",
    "rl_insight_hub_batches_total",
    "rl_insight_hub_rejected_pushes_total",
    "rl_insight_hub_duplicate_batches_total",
    "rl_insight_hub_memory_bytes",
    "rl_insight_hub_memory_limit_bytes",
    "rl_insight_hub_history_snapshots",
    "rl_insight_hub_scrapers",
    "rl_insight_hub_history_evicted_total",
    "rl_insight_hub_history_evicted_unsent_total",
    "rl_insight_hub_scrapes_not_stored_total",
    "rl_insight_hub_batches_resent_total",
    "rl_insight_hub_scrapes_unconfirmed_total",
    "rl_insight_hub_batches_lost_total",
    "rl_insight_hub_scrape_number",
    ATTEMPT_METRIC,  # each trainer step's attempt of its run (server/stores/run_attempts.py)
    MARK_METRIC,  # the marks of runs' steps (rl-insight runs mark)
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_TOTAL",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_XID_ERRORS",
    "up",
    "rl_insight_agent_trajectories_total",
    "rl_insight_agent_turns_total",
    "rl_insight_agent_tool_calls_total",
    "rl_insight_agent_tool_seconds_total",
    "rl_insight_agent_failed_ops_total",
    "rl_insight_agent_failed_trajectories_total",
    "rl_insight_agent_step",
    "rl_insight_agent_step_trajectories",
    "rl_insight_agent_turns_per_trajectory",
    "rl_insight_agent_tool_calls_per_trajectory",
    "rl_insight_agent_tool_latency_seconds",
    "rl_insight_agent_reward_per_trajectory",
}


def _histogram(name: str) -> set[str]:
    return {f"{name}_bucket", f"{name}_sum", f"{name}_count"}


# What the scrape targets registered by rollout_engines / transfer_queue serve: the engines' own
# names (the one list, contract/engine_metrics.py, checked against the engines' releases) and
# TransferQueue's (transfer_queue/metrics.py).
SCRAPED = {
    *engine_metrics.all_series(),
    "tq_controller_uptime_seconds",
    "tq_controller_memory_rss_bytes",
    "tq_controller_request_total",
    "tq_controller_request_errors_total",
    "tq_controller_request_samples_total",
    *_histogram("tq_controller_request_duration_seconds"),
    "tq_partitions_total",
    "tq_partition_samples_total",
    "tq_partition_production_progress",
    "tq_partition_consumption_progress",
    "tq_global_index_allocated_total",
    "tq_global_index_reusable_total",
    "tq_storage_capacity_total",
    "tq_storage_active_keys_total",
    "tq_storage_utilization_ratio",
    "tq_storage_memory_rss_bytes",
    "tq_storage_ssd_offload_enabled",
    "tq_storage_ssd_active_values",
    "tq_storage_ssd_active_bytes",
    "tq_storage_ssd_fallback_values_total",
    "tq_storage_requests_arrived",
    "tq_storage_arrivals_by_op",
    "tq_storage_accept_queue_backlog",
    "tq_storage_accept_queue_peak",
    "tq_storage_accept_queue_peak_utilization_ratio",
    "tq_storage_socket_drops",
    "tq_storage_listen_overflows",
    "tq_storage_listen_other_drops",
    "tq_storage_request_ops",
    "tq_storage_request_latency_avg",
    "tq_storage_request_latency_p50",
    "tq_storage_request_latency_p99",
}
# Metrics whose values lie in 0-1 by their definition (what percentunit panels may show as they are).
FRACTIONS = {
    engine_metrics.exposed("vllm:kv_cache_usage_perc"),
    engine_metrics.exposed("sglang:token_usage"),
    engine_metrics.exposed("sglang:cache_hit_rate"),
    "tq_storage_utilization_ratio",
    "tq_storage_accept_queue_peak_utilization_ratio",
    "tq_partition_production_progress",
    "tq_partition_consumption_progress",
    "rl_insight_timeline_idle_ratio",
}
# ... and in 0-100 (percent panels).
PERCENTS = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "rl_insight_host_cpu_utilization_percent"}


def host_metric_names() -> set[str]:
    """The host sampler's names, read from a real sample (two, for the rates)."""
    sampler = HostSampler()
    sampler.sample()
    return set(sampler.sample())


def known_names() -> set[str]:
    return PRODUCED | SCRAPED | host_metric_names()
