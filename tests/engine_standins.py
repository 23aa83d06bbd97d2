"""STAND-IN rollout engines (vLLM and SGLang cannot run on CPU): HTTP servers exposing
``/metrics`` through prometheus_client, as the engines do, with the engines' real metric names
and label names (vllm/v1/metrics/loggers.py; sglang/srt/metrics/collector.py)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tests.helpers import MetricsEndpoint

ENGINE_METRICS = {
    "vllm": {
        "gauges": ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"],
        "counters": ["vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache_queries",
                     "vllm:prefix_cache_hits", "vllm:num_preemptions"],
        "histograms": ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                       "vllm:e2e_request_latency_seconds"],
        "labels": {"model_name": "Qwen2.5-0.5B-Instruct", "engine": "0"},
    },
    "sglang": {
        "gauges": ["sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                   "sglang:gen_throughput", "sglang:cache_hit_rate"],
        "counters": ["sglang:prompt_tokens", "sglang:generation_tokens"],
        "histograms": ["sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                       "sglang:e2e_request_latency_seconds"],
        "labels": {"model_name": "Qwen2.5-0.5B-Instruct"},
    },
}


class EngineStandIn:
    def __init__(self, engine, replica_rank):
        spec = ENGINE_METRICS[engine]
        self.registry = CollectorRegistry()
        names = list(spec["labels"])
        values = list(spec["labels"].values())
        for i, name in enumerate(spec["gauges"]):
            Gauge(name, name, names, registry=self.registry).labels(*values).set(replica_rank + i / 10)
        for name in spec["counters"]:
            Counter(name, name, names, registry=self.registry).labels(*values).inc(100 * (replica_rank + 1))
        for name in spec["histograms"]:
            Histogram(name, name, names, registry=self.registry).labels(*values).observe(0.05 * (replica_rank + 1))
        registry = self.registry
        self.endpoint = MetricsEndpoint(lambda: generate_latest(registry))
        self.address = self.endpoint.address
