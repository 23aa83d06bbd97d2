"""SIMULATED rollout engines (vLLM and SGLang cannot run on CPU), for the demo and the tests:
HTTP servers exposing ``/metrics`` through prometheus_client, as the engines do, with the
engines' real metric names and label names (vllm/v1/metrics/loggers.py;
sglang/srt/metrics/collector.py)."""

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

# name -> kind; counters are named without _total (prometheus_client adds it), as in the engines
ENGINE_METRICS: dict[str, dict[str, Any]] = {
    "vllm": {
        "metrics": {
            "vllm:num_requests_running": "gauge",
            "vllm:num_requests_waiting": "gauge",
            "vllm:kv_cache_usage_perc": "gauge",
            "vllm:prompt_tokens": "counter",
            "vllm:generation_tokens": "counter",
            "vllm:prefix_cache_queries": "counter",
            "vllm:prefix_cache_hits": "counter",
            "vllm:num_preemptions": "counter",
            "vllm:spec_decode_num_drafts": "counter",
            "vllm:spec_decode_num_draft_tokens": "counter",
            "vllm:spec_decode_num_accepted_tokens": "counter",
            "vllm:time_to_first_token_seconds": "histogram",
            "vllm:inter_token_latency_seconds": "histogram",
            "vllm:e2e_request_latency_seconds": "histogram",
            "vllm:request_queue_time_seconds": "histogram",
            "vllm:request_prefill_time_seconds": "histogram",
            "vllm:request_decode_time_seconds": "histogram",
            "vllm:request_prompt_tokens": "histogram",
            "vllm:request_generation_tokens": "histogram",
        },
        "finished": "vllm:request_success",  # a counter with label finished_reason
        "labels": {"model_name": "Qwen2.5-0.5B-Instruct", "engine": "0"},  # engine: vLLM's own engine index
    },
    "sglang": {
        "metrics": {
            "sglang:num_running_reqs": "gauge",
            "sglang:num_queue_reqs": "gauge",
            "sglang:token_usage": "gauge",
            "sglang:gen_throughput": "gauge",
            "sglang:cache_hit_rate": "gauge",
            "sglang:spec_accept_length": "gauge",
            "sglang:prompt_tokens": "counter",
            "sglang:generation_tokens": "counter",
            "sglang:num_requests": "counter",
            "sglang:time_to_first_token_seconds": "histogram",
            "sglang:inter_token_latency_seconds": "histogram",
            "sglang:e2e_request_latency_seconds": "histogram",
            "sglang:queue_time_seconds": "histogram",
        },
        "finished": None,
        "labels": {"model_name": "Qwen2.5-0.5B-Instruct"},
    },
}
TOKEN_BUCKETS = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, float("inf"))


class MetricsEndpoint:
    """``GET /metrics`` on loopback (or ``host``), answering ``body()``."""

    def __init__(self, body: Any, host: str = "127.0.0.1") -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = body() if self.path == "/metrics" else b""
                self.send_response(200 if data else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.address = f"{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        import threading

        stopper = threading.Thread(target=self.server.shutdown, daemon=True)  # bounded: never hangs a caller
        stopper.start()
        stopper.join(2)
        self.server.server_close()


class EngineSimulator:
    """One replica. Starts with fixed values (num running = replica_rank, KV cache usage =
    (replica_rank + 2) / 10: tests rely on them); ``simulate_generate`` then moves every series the
    way a busy engine would, never past what a real one can report (usage and hit rates within
    0-1, hits never above queries, accepted draft tokens never above drafted ones)."""

    def __init__(self, engine: str, replica_rank: Any, host: str = "127.0.0.1") -> None:
        import random

        self.engine = engine
        self.replica_rank = replica_rank
        self.spec: dict[str, Any] = ENGINE_METRICS[engine]
        self.random = random.Random(replica_rank)
        self.registry = CollectorRegistry()
        names = list(self.spec["labels"])
        values = list(self.spec["labels"].values())
        self.series = {}
        for name, kind in self.spec["metrics"].items():
            if kind == "gauge":
                metric: Any = Gauge(name, name, names, registry=self.registry)
            elif kind == "counter":
                metric = Counter(name, name, names, registry=self.registry)
            else:
                buckets = TOKEN_BUCKETS if name.endswith("_tokens") else Histogram.DEFAULT_BUCKETS
                metric = Histogram(name, name, names, registry=self.registry, buckets=buckets)
            self.series[name] = metric.labels(*values)
        self.finished: Counter | None = None
        if self.spec["finished"]:
            self.finished = Counter(
                self.spec["finished"], "finished requests", names + ["finished_reason"], registry=self.registry
            )
            for reason in ("stop", "length", "abort"):
                self.finished.labels(*values, reason).inc(0)
        self.label_values = values
        prefix = f"{engine}:"
        running, waiting = (
            ("num_requests_running", "num_requests_waiting")
            if engine == "vllm"
            else ("num_running_reqs", "num_queue_reqs")
        )
        self.series[prefix + running].set(replica_rank)
        self.series[prefix + waiting].set(0)
        self.series[prefix + ("kv_cache_usage_perc" if engine == "vllm" else "token_usage")].set(
            (replica_rank + 2) / 10
        )
        for name, series in self.series.items():
            if self.spec["metrics"][name] == "histogram":
                series.observe(0.05 * (replica_rank + 1) if name.endswith("seconds") else 256)
        registry = self.registry
        self.endpoint = MetricsEndpoint(lambda: generate_latest(registry), host)
        self.address = self.endpoint.address

    def simulate_generate(self, requests: Any, response_tokens: Any) -> None:
        """A batch of ``requests`` generations of about ``response_tokens`` tokens each."""
        r, s, p = self.random, self.series, f"{self.engine}:"
        prompt = requests * r.randint(50, 300)
        generated = requests * response_tokens
        if self.engine == "vllm":
            s["vllm:num_requests_running"].set(round(requests * r.uniform(0.6, 1.0)))
            s["vllm:num_requests_waiting"].set(round(requests * r.uniform(0, 0.3)))
            s["vllm:kv_cache_usage_perc"].set(r.uniform(0.4, 0.9))
            queries = prompt // 16
            s["vllm:prefix_cache_queries"].inc(queries)
            s["vllm:prefix_cache_hits"].inc(int(queries * r.uniform(0.2, 0.7)))
            s["vllm:num_preemptions"].inc(r.randint(0, 2))
            drafted = generated // 2
            s["vllm:spec_decode_num_drafts"].inc(drafted // 4)
            s["vllm:spec_decode_num_draft_tokens"].inc(drafted)
            s["vllm:spec_decode_num_accepted_tokens"].inc(int(drafted * r.uniform(0.5, 0.8)))
            for _ in range(requests):
                assert self.finished is not None
                self.finished.labels(*self.label_values, r.choices(["stop", "length", "abort"], [85, 13, 2])[0]).inc()
        else:
            s["sglang:num_running_reqs"].set(round(requests * r.uniform(0.6, 1.0)))
            s["sglang:num_queue_reqs"].set(round(requests * r.uniform(0, 0.3)))
            s["sglang:token_usage"].set(r.uniform(0.4, 0.9))
            s["sglang:gen_throughput"].set(r.uniform(500, 3000))
            s["sglang:cache_hit_rate"].set(r.uniform(0.2, 0.7))
            s["sglang:spec_accept_length"].set(r.uniform(1.5, 3.5))
            s["sglang:num_requests"].inc(requests)
        s[p + "prompt_tokens"].inc(prompt)
        s[p + "generation_tokens"].inc(generated)
        for name, kind in self.spec["metrics"].items():
            if kind != "histogram":
                continue
            for _ in range(requests):
                if name.endswith("_tokens"):
                    s[name].observe(r.randint(50, 300) if "prompt" in name else r.expovariate(1 / response_tokens))
                else:
                    scale = (
                        0.02
                        if "inter_token" in name
                        else 0.3
                        if ("first_token" in name or "prefill" in name)
                        else 0.1
                        if "queue" in name
                        else 2.0
                    )
                    s[name].observe(r.expovariate(1 / scale))

    def close(self) -> None:
        self.endpoint.close()
