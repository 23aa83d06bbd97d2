"""The metric hub, measured against baselines in the same run:

1. ingest: samples per second through HTTP (the real server process, pushes of 100 batches x
   300 scalars over one kept-alive connection), against ``json.loads`` of the same bodies in this
   process (the least work any JSON push API does); again with ``training/global_step`` in every
   batch, as verl's trainers log it (``ingest_with_global_step``: the hub reads it as the step).
   Each round after the first sends the same 20 steps again: the hub takes them as resent copies
   (duplicates, skipped), so these two figures measure the HTTP path, decoding and the duplicate
   check. ``ingest_new_steps`` sends new steps every round (each applied, and walked by the
   server's health detectors by the server's thread every second: their walk is off the push path);
   ``apply_in_process`` is ``MetricHub.push_body`` of new steps in this process, no HTTP and no
   listeners; ``apply_with_listeners`` the same with the server's listeners (``compose.py``: the
   explorer's histories, which the detectors' one walk reads, the run keys, the marks, the run
   attempts), ``with_health_only`` with the history the detectors walk alone, each with the walk the
   server's thread does (``walk_s``, per round) timed apart (a push never walks: it only queues its
   steps for the history, and the walk puts them in their columns first);
2. render: ``/metrics`` of 10k / 100k / 500k series after every series changed, against
   ``prometheus_client.generate_latest`` of a registry holding the same series;
3. push latency while ``/metrics`` of 500k series is rendered over and over, against push
   latency with nothing else going on, and with 10k series rendered (p50 / p99).

    python benchmarks/bench_hub.py [--rounds 5] [--quick]
"""

import argparse
import functools
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hub_process import free_port, start_hub

from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.history.histories import Histories
from verl_rl_insight.server.metrics.hub import Bound, MetricHub
from verl_rl_insight.server.stores.marks import MarkStore
from verl_rl_insight.server.stores.run_attempts import RunAttempts
from verl_rl_insight.server.stores.run_keys import RunKeys


def push_body(streams, series, step, prefix="rl_insight_monitor_metric_", global_step=False):
    extra = {"rl_insight_monitor_training_global_step": step} if global_step else {}
    return json.dumps(
        {
            "batches": [
                {
                    "project": "bench",
                    "experiment_name": f"run-{s}",
                    "step": step,
                    "time": 1.7e9 + step,
                    "metrics": {**{f"{prefix}{i}": step + i / 7 for i in range(series)}, **extra},
                }
                for s in range(streams)
            ]
        }
    ).encode()


def ingest(rounds, global_step=False, new_steps=False):
    bodies = [push_body(100, 300, step, global_step=global_step) for step in range(1, 21)]
    samples = 100 * 301 * len(bodies)
    parse, served = [], []
    with tempfile.TemporaryDirectory() as data:
        port = free_port()
        hub = start_hub(port, data)
        session = requests.Session()
        url = f"http://127.0.0.1:{port}/api/v1/push"
        try:
            for r in range(rounds):
                if new_steps and r:
                    bodies = [push_body(100, 300, 20 * r + step, global_step=global_step) for step in range(1, 21)]
                t0 = time.perf_counter()
                for body in bodies:
                    json.loads(body)
                parse.append(samples / (time.perf_counter() - t0))
                t0 = time.perf_counter()
                for body in bodies:
                    assert session.post(url, data=body, headers={"Content-Type": "application/json"}).status_code == 200
                served.append(samples / (time.perf_counter() - t0))
        finally:
            hub.terminate()
            hub.wait()
    return {
        "hub_samples_per_s": statistics.median(served),
        "json_loads_samples_per_s": statistics.median(parse),
        "ratio_hub_to_json_loads": statistics.median(served) / statistics.median(parse),
    }


def _against_json_loads(hub, rounds, after_round=None):
    """Rounds of 20 pushes of new steps (100 streams x 300 series) into ``hub``, timed against
    ``json.loads`` of the same bodies; ``after_round`` (timed apart) after each round."""
    hub.push_body(push_body(100, 300, 0))
    if after_round is not None:
        after_round()
    parse, applied, after = [], [], []
    for r in range(rounds):
        bodies = [push_body(100, 300, 1 + 20 * r + step) for step in range(20)]
        samples = 100 * 300 * len(bodies)
        t0 = time.perf_counter()
        for body in bodies:
            json.loads(body)
        parse.append(samples / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for body in bodies:
            hub.push_body(body)
        applied.append(samples / (time.perf_counter() - t0))
        if after_round is not None:
            t0 = time.perf_counter()
            after_round()
            after.append(time.perf_counter() - t0)
    found = {
        "hub_samples_per_s": statistics.median(applied),
        "json_loads_samples_per_s": statistics.median(parse),
        "ratio_hub_to_json_loads": statistics.median(applied) / statistics.median(parse),
    }
    return found | ({"walk_s": statistics.median(after)} if after else {})


def apply_in_process(rounds):
    """``MetricHub.push_body`` of new steps (every series there already) against ``json.loads`` of
    the same bodies: the hub's own share of a push."""
    return _against_json_loads(MetricHub(memory_limit_bytes=1 << 36), rounds)


def apply_with_listeners(rounds, explorer=True):
    """``apply_in_process`` with the listeners the server gives its hub (compose.py), against
    ``json.loads`` of the same bodies; then the detectors' walk the server's thread does, timed apart."""
    bound = Bound(1 << 36, 500_000)  # the detectors book the series they make under the hub's bound (compose.py)
    health = HealthMonitor(book=functools.partial(bound.book_other, "health"), histories=Histories())
    folder = Path(tempfile.mkdtemp(prefix="bench-hub-"))
    names, attempts = RunKeys(folder / "run-keys"), RunAttempts(folder / "run-attempts.json")
    sources, marks = Sources(health=health, names=names), MarkStore()
    # the server's listeners, as compose.build gives them; the detectors alone: the history they walk
    # filled (the explorer's, in the server)
    listeners = (sources.histories.observe, names.observe, marks.observe, attempts.saved)
    if explorer:
        hub = MetricHub(bound=bound, listeners=listeners, derived=(health,), attempts=attempts)
    else:
        hub = MetricHub(bound=bound, listeners=(sources.histories.observe,), derived=(health,))

    def walk():  # what the server's thread does every second (app.Server._tick)
        health.walk()
        hub.take_derived()

    return _against_json_loads(hub, rounds, walk)


def render(series_counts, rounds):
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    out = {}
    for total in series_counts:
        streams = max(1, total // 1000)
        per_stream = total // streams
        hub = MetricHub(memory_limit_bytes=1 << 40, max_series=2 * total)
        registry = CollectorRegistry()
        gauges = [
            Gauge(f"rl_insight_monitor_metric_{i}", "", ["project", "experiment_name"], registry=registry)
            for i in range(per_stream)
        ]
        for s in range(streams):
            for i, gauge in enumerate(gauges):
                gauge.labels("bench", f"run-{s}").set(1 + i / 7)
        ours, theirs, unchanged = [], [], []
        for r in range(rounds):
            hub.push(json.loads(push_body(streams, per_stream, r + 1)))  # every series changes
            t0 = time.perf_counter()
            body = hub.live_body()
            ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            hub.changed()  # a new rendering with nothing changed: the per-stream lines are reused
            hub.live_body()
            unchanged.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            reference = generate_latest(registry)
            theirs.append(time.perf_counter() - t0)
        out[total] = {
            "hub_s": statistics.median(ours),
            "hub_nothing_changed_s": statistics.median(unchanged),
            "generate_latest_s": statistics.median(theirs),
            "ratio_hub_to_generate_latest": statistics.median(ours) / statistics.median(theirs),
            "body_mb": len(body) / 2**20,
            "generate_latest_mb": len(reference) / 2**20,
        }
    return out


def push_latency(series, seconds):
    """Small pushes for ``seconds`` while /metrics of ``series`` series is fetched back to back."""
    with tempfile.TemporaryDirectory() as data:
        port = free_port()
        hub = start_hub(port, data, max_series=2 * series + 1000, memory_limit_mb=8192)
        base = f"http://127.0.0.1:{port}"
        session = requests.Session()
        try:
            streams = max(1, series // 1000)
            if series:
                for start in range(0, streams, 50):
                    body = json.loads(push_body(min(50, streams - start), 1000, 1))
                    for i, b in enumerate(body["batches"]):
                        b["experiment_name"] = f"run-{start + i}"
                    assert session.post(base + "/api/v1/push", json=body).status_code == 200
            stop = threading.Event()
            renders = []

            def scrape():
                scraper = requests.Session()
                while not stop.is_set():
                    t0 = time.perf_counter()
                    _ = scraper.get(base + "/metrics").content
                    renders.append(time.perf_counter() - t0)

            thread = threading.Thread(target=scrape) if series else None
            if thread:
                thread.start()
                time.sleep(0.5)
            latencies = []
            small = {
                "batches": [{"project": "bench", "experiment_name": "trainer", "step": 1, "metrics": {"loss": 1.0}}]
            }
            end = time.monotonic() + seconds
            step = 0
            while time.monotonic() < end:
                step += 1
                small["batches"][0]["step"] = step  # every push changes the hub: each scrape renders anew
                t0 = time.perf_counter()
                assert session.post(base + "/api/v1/push", json=small).status_code == 200
                latencies.append(time.perf_counter() - t0)
                time.sleep(0.01)
            stop.set()
            if thread:
                thread.join()
        finally:
            hub.terminate()
            hub.wait()
    latencies.sort()
    return {
        "pushes": len(latencies),
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
        "render_median_s": statistics.median(renders) if renders else None,
        "renders": len(renders),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--short", action="store_true", help="10k and 100k series only, shorter latency runs")
    parser.add_argument("--quick", action="store_true", help="one round, 10k series, 1 s latency runs (CI: it runs)")
    parser.add_argument("--ingest-only", action="store_true", help="the ingest figures only")
    args = parser.parse_args()
    sizes = (10_000,) if args.quick else (10_000, 100_000) if args.short else (10_000, 100_000, 500_000)
    seconds = 1 if args.quick else 5 if args.short else 15
    args.rounds = 1 if args.quick else args.rounds
    result = {
        "ingest": ingest(args.rounds),
        "ingest_with_global_step": ingest(args.rounds, global_step=True),
        "ingest_new_steps": ingest(args.rounds, new_steps=True),
        "apply_in_process": apply_in_process(args.rounds),
        "apply_with_listeners": apply_with_listeners(args.rounds),
        "with_health_only": apply_with_listeners(args.rounds, explorer=False),
    }
    if args.ingest_only:
        print(json.dumps(result, indent=2))
        return
    result["render"] = render(sizes, args.rounds)
    idle = push_latency(0, seconds)
    result["push_latency"] = {"idle": idle, **{f"rendering_{n}": push_latency(n, seconds) for n in (10_000, sizes[-1])}}
    for figures in result["push_latency"].values():
        figures["p99_ratio_to_idle"] = figures["p99_ms"] / idle["p99_ms"]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
