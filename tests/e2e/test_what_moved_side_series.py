"""What moved with a slow step, among the engine and GPU series: a real hub and a real Prometheus
scraping it and a stand-in vLLM replica. The stand-in is prometheus_client exposing vLLM's own
metric names (``vllm:num_requests_waiting``, from the contract's list) with the labels the server's
scrape configuration gives a registered replica (project, experiment_name, replica), and a GPU series
under DCGM's name: no vLLM runs here. It answers in Prometheus' text format whatever the scraper asks
for (prometheus_client 0.26's OpenMetrics writer spells ``vllm:num_requests_waiting`` as
``vllm_num_requests_waiting``: not the name under test). The trainer's steps go through the hub's push API, each
once Prometheus (scraping every second) has scraped the replica's values of the step, so each step's
window holds a scrape of them."""

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from tests.helpers import Prometheus, free_port, push, start_hub_process, stop_group, wait_for
from verl_rl_insight.commands import main
from verl_rl_insight.contract.engine_metrics import LOAD
from verl_rl_insight.contract.naming import METRIC_PREFIX, metric_name

RUN = {"project": "moved", "experiment_name": "waiting"}
LEVEL_STEPS, SLOW_STEPS = 22, 5  # the run's level (moved.WINDOW is 20), then the step time jumps
WAITING = LOAD["vllm"].waiting  # vllm:num_requests_waiting


class StandInReplicas:
    """Two vLLM replicas' queue and one GPU's utilization, set by the test as the steps go."""

    def __init__(self):
        self.last_scrape = 0.0  # when the last scrape came in (time.time())
        registry = CollectorRegistry()
        replicas = self
        labels = ("project", "experiment_name", "replica")
        self.waiting = Gauge(WAITING, "requests waiting", labels, registry=registry)
        self.gpu = Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization", (*labels[:2], "Hostname", "gpu"), registry=registry)

        class Exposition(BaseHTTPRequestHandler):
            def do_GET(self):
                came = time.time()
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                replicas.last_scrape = came

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Exposition)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def scraped_since(self, since):
        """Wait for a scrape that came in 0.25 s or more after ``since``: Prometheus stamps its samples
        with the scrape's start, a moment before it comes in, so they lie after ``since``."""
        wait_for(lambda: self.last_scrape >= since + 0.25, 10, interval=0.02, what="a scrape of the replicas")

    def set(self, waiting_0, waiting_1, gpu_util):
        self.waiting.labels(replica="0", **RUN).set(waiting_0)
        self.waiting.labels(replica="1", **RUN).set(waiting_1)
        self.gpu.labels(Hostname="n1", gpu="0", **RUN).set(gpu_util)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def metrics(step, waiting, rng):
    """What the trainer logs at the step: its time follows the replica's queue (as a rollout's does),
    the rest does not."""
    keys = {
        "timing_s/step": 9.0 + 0.15 * waiting + rng.uniform(-0.05, 0.05),
        "response_length/mean": 300 + rng.uniform(-20, 20),
        "actor/pg_loss": rng.uniform(-0.1, 0.1),
        "critic/score/mean": 0.5 + 0.001 * step + rng.uniform(-0.02, 0.02),
        "training/global_step": step,
    }
    return {metric_name(METRIC_PREFIX, k): float(v) for k, v in keys.items()}


@pytest.fixture
def slow_run(tmp_path):
    """(hub URL, Prometheus): a run of LEVEL_STEPS steps at its level, then SLOW_STEPS whose time
    jumps while replica 0's queue does (replica 1's and the GPU's stay as they were)."""
    replicas = StandInReplicas()
    hub_port = free_port()
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{hub_port}", f"127.0.0.1:{replicas.port}"])
    hub = start_hub_process(hub_port, tmp_path)
    url = f"http://127.0.0.1:{hub_port}"
    rng = random.Random(7)
    try:
        for step in range(1, LEVEL_STEPS + SLOW_STEPS + 1):
            waiting = 40 + rng.uniform(-3, 3) if step > LEVEL_STEPS else 2 + rng.uniform(-1, 1)
            # what the replicas do during this step (it ends with its push)
            replicas.set(waiting, rng.uniform(1, 3), 90 + rng.uniform(-2, 2))
            replicas.scraped_since(time.time())  # the step's window (from the step before's push) holds it
            batch = {**RUN, "step": step, "time": time.time(), "metrics": metrics(step, waiting, rng)}
            assert push(url, {"batches": [batch]})[0] == 200
        last = LEVEL_STEPS + SLOW_STEPS
        step_series = 'rl_insight_monitor_training_global_step{project="moved"}'
        wait_for(
            lambda: any(float(r["value"][1]) == last for r in prometheus.query(step_series)), 30, what="the last step"
        )
        yield url, prometheus
    finally:
        stop_group(hub)
        prometheus.stop()
        replicas.stop()


def test_the_replicas_queue_that_jumped_with_the_step_time_ranks_first(slow_run, capsys):
    url, prometheus = slow_run
    main(
        [
            "diagnose",
            "--server",
            url,
            "--prometheus",
            prometheus.url,
            "--project",
            "moved",
            "--experiment",
            "waiting",
            "--json",
        ]
    )
    found = json.loads(capsys.readouterr().out)
    (slow,) = [s for s in found["slow_steps"] if s["series"] == "timing_s_step"]
    assert (slow["first_step"], slow["last_step"]) == (LEVEL_STEPS + 1, LEVEL_STEPS + SLOW_STEPS)
    first = slow["moved_with"][0]
    assert first["series"] == f"{WAITING}{{replica=0}}" and first["direction"] == "up", slow["moved_with"]
    assert first["association"] > 0.7 and first["during"] > 30, first
    named = {m["series"] for m in slow["moved_with"]}
    assert f"{WAITING}{{replica=1}}" not in named and "DCGM_FI_DEV_GPU_UTIL{Hostname=n1,gpu=0}" not in named

    main(["diagnose", "--server", url, "--prometheus", prometheus.url, "--project", "moved", "--experiment", "waiting"])
    text = capsys.readouterr().out
    print(text)
    under = text.split(f"timing_s_step steps {LEVEL_STEPS + 1}-{LEVEL_STEPS + SLOW_STEPS}: ")[1].splitlines()
    assert under[1].split() == [f"{WAITING}{{replica=0}}", "up", *under[1].split()[2:]], text

    # the step page's answer (the explorer reads the run and the replicas' series back from Prometheus)
    from verl_rl_insight.server.explorer.prometheus import PrometheusReader
    from verl_rl_insight.server.explorer.slow import moved_at
    from verl_rl_insight.server.explorer.sources import Sources

    sources = Sources()
    sources.prometheus = PrometheusReader(prometheus.url, None)
    (on_page,) = moved_at(sources, ("moved", "waiting"), LEVEL_STEPS + 2)
    assert on_page["moved_with"][0]["series"] == f"{WAITING}{{replica=0}}"
    assert moved_at(sources, ("moved", "waiting"), LEVEL_STEPS - 2) == []
