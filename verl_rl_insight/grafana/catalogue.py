"""Every metric name this project produces or registers a scrape target for: the dashboards'
``--check`` fails on a query naming anything else.

verl's own scalar keys are not listed: they are read from the installed verl's source (a key
the dashboards use must appear as a string literal in verl), so the check follows verl.
"""

from ..hardware_samplers import HostSampler
from ..naming import GLOBAL_STEP_METRIC

# What the hub, the trainer-side plugins and the hardware sampler push.
PRODUCED = {
    GLOBAL_STEP_METRIC, "rl_insight_run_finished",
    "rl_insight_state_seconds_total", "rl_insight_state_count_total",
    "rl_insight_timeline_dropped_spans_total", "rl_insight_timeline_exported_spans_total",
    "rl_insight_timeline_failed_spans_total",
    "rl_insight_hub_streams", "rl_insight_hub_series", "rl_insight_hub_batches_total",
    "rl_insight_hub_rejected_pushes_total",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_XID_ERRORS",
    "up",
}
# What the scrape targets registered by rollout_engines / transfer_queue serve (the engines'
# own names: vllm/v1/metrics/loggers.py, sglang/srt/metrics/collector.py, transfer_queue).
SCRAPED = {
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
    "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
    "vllm:e2e_request_latency_seconds_bucket",
    "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:gen_throughput",
    "sglang:cache_hit_rate", "sglang:prompt_tokens_total", "sglang:generation_tokens_total",
    "sglang:time_to_first_token_seconds_bucket", "sglang:inter_token_latency_seconds_bucket",
    "sglang:e2e_request_latency_seconds_bucket",
    "tq_controller_uptime_seconds", "tq_controller_memory_rss_bytes", "tq_controller_request_total",
    "tq_controller_request_errors_total", "tq_partitions_total",
}


def host_metric_names():
    """The host sampler's names, read from a real sample (two, for the rates)."""
    sampler = HostSampler()
    sampler.sample()
    return set(sampler.sample())


def known_names():
    return PRODUCED | SCRAPED | host_metric_names()
