"""SIMULATED rollout engines (vLLM and SGLang cannot run on CPU), for the demo and the tests:
HTTP servers exposing ``/metrics`` through prometheus_client, as the engines do, with the metrics of
the engine metric list (contract/engine_metrics.py: the engines' own names, kinds and labels, checked
against their releases) and the engines' label names."""

from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from verl_rl_insight.contract import engine_metrics
from verl_rl_insight.contract.engine_metrics import EngineMetric

# the labels each engine puts on every series (vLLM's engine: its own engine index in a replica; in
# verl's replicas vLLM's model_name is actor_rollout_ref.model.path, as a real run shows)
MODEL_PATH = "/models/Qwen2.5-0.5B-Instruct"
ENGINE_LABELS = {
    "vllm": {"model_name": MODEL_PATH, "engine": "0"},
    "sglang": {"model_name": MODEL_PATH},
}
FINISHED_REASONS = ("stop", "length", "abort")
WAITING_REASONS = ("capacity", "deferred")  # vLLM's num_requests_waiting_by_reason
TOKEN_BUCKETS = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, float("inf"))


class MetricsEndpoint:
    """``GET /metrics`` on loopback (or ``host``), answering ``body()``."""

    def __init__(self, body: Callable[[], bytes], host: str = "127.0.0.1") -> None:
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

    def __init__(self, engine: str, replica_rank: int, host: str = "127.0.0.1") -> None:
        import random

        self.engine = engine
        self.replica_rank = replica_rank
        self.random = random.Random(replica_rank)
        self.registry = CollectorRegistry()
        names = list(ENGINE_LABELS[engine])
        values = list(ENGINE_LABELS[engine].values())
        self.kinds = {metric.name: metric.kind for metric in engine_metrics.of(engine)}
        self.series: dict[str, Any] = {}
        self.finished: Counter | None = None
        self.waiting_by_reason: Gauge | None = None
        for spec in engine_metrics.of(engine):
            metric = self._register(spec, names)
            if spec.labels == ("finished_reason",) and isinstance(metric, Counter):
                self.finished = metric
                for reason in FINISHED_REASONS:
                    metric.labels(*values, reason).inc(0)
            elif spec.labels == ("reason",) and isinstance(metric, Gauge):
                self.waiting_by_reason = metric
                for reason in WAITING_REASONS:
                    metric.labels(*values, reason).set(0)
            elif spec.labels:
                raise ValueError(f"the simulator has no values for the labels {spec.labels} of {spec.name}")
            else:
                self.series[spec.name] = metric.labels(*values)
        self.label_values = values
        load = engine_metrics.LOAD[engine]
        self.series[load.running].set(replica_rank)
        self.series[load.waiting].set(0)
        self.series[load.kv_cache].set((replica_rank + 2) / 10)
        for name, series in self.series.items():
            if self.kinds[name] == "histogram":
                series.observe(0.05 * (replica_rank + 1) if name.endswith("seconds") else 256)
        registry = self.registry
        self.endpoint = MetricsEndpoint(lambda: generate_latest(registry), host)
        self.address = self.endpoint.address

    def _register(self, spec: EngineMetric, labels: list[str]) -> Gauge | Counter | Histogram:
        """The metric as the engine makes it: its own name (prometheus_client adds a counter's ``_total``
        and a histogram's ``_bucket`` / ``_sum`` / ``_count``, as in the engine) and its labels."""
        names = labels + list(spec.labels)
        if spec.kind == "gauge":
            return Gauge(spec.name, spec.name, names, registry=self.registry)
        if spec.kind == "counter":
            return Counter(spec.name, spec.name, names, registry=self.registry)
        buckets = TOKEN_BUCKETS if "_tokens" in spec.name else Histogram.DEFAULT_BUCKETS
        return Histogram(spec.name, spec.name, names, registry=self.registry, buckets=buckets)

    def simulate_generate(self, requests: int, response_tokens: int) -> None:
        """A batch of ``requests`` generations of about ``response_tokens`` tokens each."""
        r, s = self.random, self.series
        prompt = requests * r.randint(50, 300)
        generated = requests * response_tokens
        load = engine_metrics.LOAD[self.engine]
        s[load.running].set(round(requests * r.uniform(0.6, 1.0)))
        waiting = round(requests * r.uniform(0, 0.3))
        s[load.waiting].set(waiting)
        s[load.kv_cache].set(r.uniform(0.4, 0.9))
        if self.engine == "vllm":
            queries = prompt // 16
            s["vllm:prefix_cache_queries"].inc(queries)
            s["vllm:prefix_cache_hits"].inc(int(queries * r.uniform(0.2, 0.7)))
            s["vllm:num_preemptions"].inc(r.randint(0, 2))
            s["vllm:prompt_tokens_cached"].inc(int(prompt * r.uniform(0.1, 0.5)))  # never above the prompt tokens
            assert self.waiting_by_reason is not None
            self.waiting_by_reason.labels(*self.label_values, "capacity").set(waiting)  # the reasons sum to waiting
            drafted = generated // 2
            s["vllm:spec_decode_num_drafts"].inc(drafted // 4)
            s["vllm:spec_decode_num_draft_tokens"].inc(drafted)
            s["vllm:spec_decode_num_accepted_tokens"].inc(int(drafted * r.uniform(0.5, 0.8)))
            for _ in range(requests):
                assert self.finished is not None
                self.finished.labels(*self.label_values, r.choices(FINISHED_REASONS, [85, 13, 2])[0]).inc()
        else:
            s["sglang:gen_throughput"].set(r.uniform(500, 3000))
            s["sglang:cache_hit_rate"].set(r.uniform(0.2, 0.7))
            s["sglang:spec_accept_length"].set(r.uniform(1.5, 3.5))
            s["sglang:num_requests_total"].inc(requests)
        prompt_tokens, generation_tokens = (
            ("vllm:prompt_tokens", "vllm:generation_tokens")
            if self.engine == "vllm"
            else ("sglang:prompt_tokens_total", "sglang:generation_tokens_total")
        )
        s[prompt_tokens].inc(prompt)
        s[generation_tokens].inc(generated)
        for name, kind in self.kinds.items():
            if kind != "histogram":
                continue
            for _ in range(requests):
                if "_tokens" in name:
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
