"""SIMULATED rollout engines (vLLM and SGLang cannot run on CPU), for the demo and the tests:
HTTP servers exposing ``/metrics`` through prometheus_client, as the engines do, with the
engines' real metric names and label names (vllm/v1/metrics/loggers.py;
sglang/srt/metrics/collector.py)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


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


class MetricsEndpoint:
    """``GET /metrics`` on loopback (or ``host``), answering ``body()``."""

    def __init__(self, body, host="127.0.0.1"):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                data = body() if self.path == "/metrics" else b""
                self.send_response(200 if data else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.address = f"{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class EngineSimulator:
    """One replica. Starts with fixed values (replica_rank + i/10 for the i-th gauge: tests rely
    on them); ``simulate_generate`` then moves every series the way a busy engine would."""

    def __init__(self, engine, replica_rank, host="127.0.0.1"):
        import random

        self.spec = ENGINE_METRICS[engine]
        self.random = random.Random(replica_rank)
        self.registry = CollectorRegistry()
        names = list(self.spec["labels"])
        values = list(self.spec["labels"].values())
        self.gauges = {name: Gauge(name, name, names, registry=self.registry).labels(*values)
                       for name in self.spec["gauges"]}
        self.counters = {name: Counter(name, name, names, registry=self.registry).labels(*values)
                         for name in self.spec["counters"]}
        self.histograms = {name: Histogram(name, name, names, registry=self.registry).labels(*values)
                           for name in self.spec["histograms"]}
        for i, gauge in enumerate(self.gauges.values()):
            gauge.set(replica_rank + i / 10)
        for counter in self.counters.values():
            counter.inc(100 * (replica_rank + 1))
        for histogram in self.histograms.values():
            histogram.observe(0.05 * (replica_rank + 1))
        registry = self.registry
        self.endpoint = MetricsEndpoint(lambda: generate_latest(registry), host)
        self.address = self.endpoint.address

    def simulate_generate(self, requests, response_tokens):
        """A batch of ``requests`` generations of about ``response_tokens`` tokens each."""
        r = self.random
        for i, gauge in enumerate(self.gauges.values()):
            gauge.set(max(0.0, [requests * r.uniform(0.6, 1.0), requests * r.uniform(0, 0.3),
                                r.uniform(0.4, 0.9), r.uniform(500, 3000), r.uniform(0.2, 0.7)][i % 5]))
        for name, counter in self.counters.items():
            counter.inc(requests * (response_tokens if "generation" in name else r.randint(50, 300)))
        for name, histogram in self.histograms.items():
            scale = 0.02 if "inter_token" in name else 0.3 if "first_token" in name else 2.0
            for _ in range(requests):
                histogram.observe(r.expovariate(1 / scale))

    def close(self):
        self.endpoint.close()
