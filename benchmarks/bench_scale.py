"""A SIMULATED 1,024-GPU verl job against one monitor node, everything real but the GPUs and engines.

    python benchmarks/bench_scale.py                  # 128 nodes x 8 GPUs, samplers every 5 s, 10 s steps
    python benchmarks/bench_scale.py --fast           # samplers every 1 s, 1 s steps
    python benchmarks/bench_scale.py --ceiling        # the hub alone: nodes doubled until it cannot keep up

The job: ``rl-insight server start`` (hub + Prometheus, scraping every ``--scrape-interval``);
128 nodes' hardware samplers (8 GPUs each, every DCGM field the sampler reports through the
simulated NVML, plus the host series) pushed through the real BatchSender; 64 replicas serving
vLLM's real metric names (histograms included) registered through the real target announcer
with TTL heartbeats; one trainer logging 300 scalars a step through verl's Tracking, with its
phases and every replica's generate calls as spans, exported over OTLP to a counting sink.
Each part runs in a process of its own (``--role``), its payloads made before the clock starts.

Reported: hub CPU share and RSS, Prometheus RSS, push latency at the senders (p50 / p99), the hub
job's scrape_duration_seconds against the interval, lag from Tracking.log to the step being
queryable in Prometheus (p50 / p99), spans exported and dropped, steps lost (every step of the
trainer counted through Prometheus).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hub_process import free_port, start_hub

PROJECT = "bench-scale"
GPUS_PER_NODE = 8


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def proc_figures(pid):
    """(cpu seconds, rss bytes) of a process."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    rss = int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK"), rss


def get_json(url):
    """GET a JSON document; a ``user:password@`` URL (the server's Prometheus) logs in."""
    from verl_rl_insight.contract.http_client import HttpClient

    return HttpClient(timeout_s=30).get_json(url)


def prom_query(prom, promql, at=None):
    params = {"query": promql} | ({"time": str(at)} if at else {})
    return get_json(f"{prom}/api/v1/query?{urllib.parse.urlencode(params)}")["data"]["result"]


# -- the roles, each in a process of its own ------------------------------------------------
def node_batches(node, run):
    """One node's hardware batches, as the real sampler makes them (simulated NVML, real host sampler)."""
    from verl_rl_insight.trainer.client.metric_batch import MetricBatch
    from verl_rl_insight.trainer.samplers import simulated_nvml
    from verl_rl_insight.trainer.samplers.hardware import GpuSampler, HostSampler

    gpu = GpuSampler(simulated_nvml.make_nvml(gpus=GPUS_PER_NODE, load=lambda: 0.8))
    host = HostSampler()
    host.sample()
    batches = [(dict(labels, Hostname=f"node-{node}"), values) for labels, values in gpu.sample()]
    batches.append(({"node": f"node-{node}"}, host.sample()))
    return [
        lambda now, labels=labels, values=values: MetricBatch(run[0], run[1], None, now, values, labels=labels)
        for labels, values in batches
    ]


def role_nodes(args):
    """``--nodes`` hardware samplers pushing through their own BatchSender every ``--interval``."""
    from verl_rl_insight.trainer.client.sender import BatchSender

    latencies = []

    class TimedSender(BatchSender):
        def _post(self, body):
            started = time.perf_counter()
            try:
                return super()._post(body)
            finally:
                latencies.append(time.perf_counter() - started)

    run = (PROJECT, args.experiment)
    nodes = [
        (TimedSender(args.hub + "/api/v1/push", token=args.token), node_batches(i, run)) for i in range(args.nodes)
    ]
    end = time.time() + args.duration
    tick = 0
    while time.time() < end:
        started = time.time()
        for i, (sender, makers) in enumerate(nodes):  # spread over the interval, as real nodes are
            target = started + args.interval * i / len(nodes)
            time.sleep(max(0.0, target - time.time()))
            for make in makers:
                sender.submit(make(time.time()))
        tick += 1
        time.sleep(max(0.0, started + args.interval - time.time()))
    for sender, _ in nodes:
        sender.close(10)
    stats = {
        k: sum(s.stats[k] for s, _ in nodes)
        for k in ("sent_batches", "dropped_batches", "failed_requests", "rejected_batches")
    }
    push_ms = [1000 * x for x in latencies]  # a summary: a long list would fill the pipe before it is read
    print(
        json.dumps(
            {
                "push_ms": {
                    "p50": round(percentile(push_ms, 0.5), 2),
                    "p99": round(percentile(push_ms, 0.99), 2),
                    "requests": len(push_ms),
                },
                "rounds": tick,
                **stats,
            }
        )
    )


def role_replicas(args):
    """``--replicas`` simulated vLLM replicas: registered with TTL heartbeats, generating, their generate
    calls reported as spans on lanes replica_<n>."""
    import verl_rl_insight as rli
    from verl_rl_insight.commands.demo.simulated_engines import EngineSimulator
    from verl_rl_insight.trainer.client.target_announcer import TargetAnnouncer
    from verl_rl_insight.trainer.config import ServerUrl

    rli.init(PROJECT, args.experiment, config={"plugins": {"hardware": {"enabled": False}}})
    engines = [EngineSimulator("vllm", rank) for rank in range(args.replicas)]
    announcer = TargetAnnouncer(ServerUrl.parse(args.hub, args.token), ttl_s=15)  # a heartbeat every 5 s
    for engine in engines:
        announcer.announce(
            engine.address,
            "vllm",
            {
                "replica": str(engine.replica_rank),
                "project": PROJECT,
                "experiment_name": args.experiment,
                "node": "127.0.0.1",
            },
        )
    end = time.time() + args.duration

    def replica(engine):
        while time.time() < end:
            with rli.state("vllm_generate", lane=f"replica_{engine.replica_rank}"):
                engine.simulate_generate(requests=8, response_tokens=200)
                time.sleep(0.5)
            time.sleep(0.5)

    threads = [threading.Thread(target=replica, args=(e,)) for e in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rli.finish()
    announcer.close()
    for engine in engines:
        engine.close()
    print(json.dumps({"announced": announcer.stats["announced"], "failed": announcer.stats["failed"]}))


def role_trainer(args):
    """One trainer: phases as spans, then ``Tracking.log`` of 300 scalars, every ``--step-seconds``."""
    from verl.utils.tracking import Tracking

    import verl_rl_insight as rli

    tracking = Tracking(
        PROJECT,
        args.experiment,
        default_backend=["rl_insight"],
        config={"rl_insight": {"plugins": {"hardware": {"enabled": False}}}},
    )
    keys = [
        f"{group}/metric_{i}"
        for group in ("actor", "critic", "perf", "timing_s", "response_length", "training")
        for i in range(50)
    ]
    logged = {}
    phases = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights")
    step = 0
    end = time.time() + args.duration
    while time.time() < end:
        step += 1
        started = time.time()
        with rli.state("step", lane="trainer"):
            for phase in phases:
                with rli.state(phase, lane="trainer"):
                    time.sleep(args.step_seconds * 0.8 / len(phases))
        values = {key: step + i / 1000 for i, key in enumerate(keys)}
        logged[step] = time.time()
        tracking.log(values, step=step)
        time.sleep(max(0.0, started + args.step_seconds - time.time()))
    tracking.finish()
    print(json.dumps({"logged": logged}))  # a few hundred steps at most: fits the pipe


ROLES = {"nodes": role_nodes, "replicas": role_replicas, "trainer": role_trainer}


def spawn(role, args, **extra):
    argv = [
        sys.executable,
        __file__,
        "--role",
        role,
        "--hub",
        args.hub,
        "--experiment",
        args.experiment,
        "--duration",
        str(args.duration),
        "--nodes",
        str(args.nodes),
        "--interval",
        str(args.interval),
        "--replicas",
        str(args.replicas),
        "--step-seconds",
        str(args.step_seconds),
    ]
    env = dict(
        os.environ,
        RL_INSIGHT_SERVER_URL=args.hub,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=args.otlp,
        **({"RL_INSIGHT_TOKEN": args.token} if args.token else {}),
        **extra,
    )
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


class SpanSink:
    """An OTLP/HTTP receiver that counts the spans it is sent (decoding the protobuf)."""

    def __init__(self):
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.spans = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                request = ExportTraceServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                sink.spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def simulate(args):
    """The whole job against ``rl-insight server start``; returns the report."""
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        ports = {
            name: free_port()
            for name in (
                "port",
                "prometheus_port",
                "tempo_port",
                "tempo_grpc_port",
                "otlp_http_port",
                "otlp_grpc_port",
                "grafana_port",
                "alertmanager_port",
            )
        }
        config = Path(tmp) / "server.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "bind": "127.0.0.1",
                    **ports,
                    "scrape_interval_s": args.scrape_interval,
                    "data_dir": str(Path(tmp) / "data"),
                    "services": {"tempo": {"enabled": False}, "grafana": {"enabled": False}},
                }
            )
        )
        env = dict(os.environ, RL_INSIGHT_HOME=str(home))
        cli = [sys.executable, "-m", "verl_rl_insight"]
        started = subprocess.run(
            cli + ["server", "start", "--detach", "--config", str(config)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if started.returncode != 0:
            raise SystemExit(f"the server did not start:\n{started.stdout}{started.stderr}")
        state = json.loads((home / "server.json").read_text())
        password = (Path(tmp) / "data" / "secrets" / "prometheus-password").read_text().strip()
        hub = state["local_hub_url"]
        prom = state["public_urls"]["prometheus"].replace("http://", f"http://rl-insight:{password}@")
        prom_pid = state["services"]["prometheus"]["pid"]
        sink = SpanSink()
        args.hub, args.otlp, args.token = hub, sink.url, None
        args.experiment = f"scale-{args.nodes}n-{args.interval:g}s-{int(time.time())}"
        try:
            cpu0, _ = proc_figures(state["pid"])
            t0 = time.time()
            seen, stop = {}, threading.Event()

            def watch():  # when each step becomes queryable in Prometheus (every stored sample, not the latest)
                selector = f'rl_insight_monitor_training_global_step{{experiment_name="{args.experiment}"}}[2m]'
                while not stop.is_set():
                    for result in prom_query(prom, selector):
                        for _, value in result["values"]:
                            seen.setdefault(int(float(value)), time.time())
                    time.sleep(0.1)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            roles = {name: spawn(name, args) for name in ROLES}
            rss_hub = rss_prom = 0
            while any(p.poll() is None for p in roles.values()):
                rss_hub = max(rss_hub, proc_figures(state["pid"])[1])
                rss_prom = max(rss_prom, proc_figures(prom_pid)[1])
                time.sleep(1)
            cpu1, _ = proc_figures(state["pid"])
            elapsed = time.time() - t0
            results = {name: json.loads(p.stdout.read().strip().splitlines()[-1]) for name, p in roles.items()}
            time.sleep(3 * args.scrape_interval)
            stop.set()
            logged = {int(k): v for k, v in results["trainer"]["logged"].items()}
            window = int(time.time() - t0 + 60)
            samples = prom_query(
                prom, f'rl_insight_monitor_training_global_step{{experiment_name="{args.experiment}"}}[{window}s]'
            )
            stored = {int(float(v)) for r in samples for _, v in r["values"]}
            lags = [seen[s] - logged[s] for s in logged if s in seen]
            scrape = prom_query(prom, f'max_over_time(scrape_duration_seconds{{job="rl_insight_hub"}}[{window}s])')
            scrape_avg = prom_query(prom, f'avg_over_time(scrape_duration_seconds{{job="rl_insight_hub"}}[{window}s])')
            spans = {
                name: sum(float(r["value"][1]) for r in prom_query(prom, f'{name}{{project="{PROJECT}"}}'))
                for name in ("rl_insight_timeline_exported_spans_total", "rl_insight_timeline_dropped_spans_total")
            }
            hub_figures = get_json(hub + "/api/v1/hub")
            return {
                "job": {
                    "nodes": args.nodes,
                    "gpus": args.nodes * GPUS_PER_NODE,
                    "sampler_interval_s": args.interval,
                    "replicas": args.replicas,
                    "trainer_step_s": args.step_seconds,
                    "scrape_interval_s": args.scrape_interval,
                    "seconds": round(elapsed, 1),
                    "series_at_hub": hub_figures["series"],
                },
                "hub_cpu_share_of_one_core": round((cpu1 - cpu0) / elapsed, 3),
                "hub_rss_mb": round(rss_hub / 2**20, 1),
                "prometheus_rss_mb": round(rss_prom / 2**20, 1),
                "push_ms": results["nodes"]["push_ms"],
                "hub_scrape_s": {
                    "max": float(scrape[0]["value"][1]) if scrape else None,
                    "avg": round(float(scrape_avg[0]["value"][1]), 4) if scrape_avg else None,
                },
                "lag_log_to_queryable_s": {
                    "p50": round(statistics.median(lags), 2) if lags else None,
                    "p99": round(percentile(lags, 0.99), 2) if lags else None,
                },
                "spans": {
                    "exported": spans["rl_insight_timeline_exported_spans_total"],
                    "dropped": spans["rl_insight_timeline_dropped_spans_total"],
                    "received": sink.spans,
                },
                "steps": {
                    "logged": len(logged),
                    "in_prometheus": len(stored & set(logged)),
                    "lost": len(set(logged) - stored),
                },
                "senders": {k: v for k, v in results["nodes"].items() if k != "push_ms"},
                "targets": results["replicas"],
            }
        finally:
            subprocess.run(cli + ["server", "stop"], env=env, capture_output=True, timeout=60)


# -- the ceiling: the hub alone ------------------------------------------------------------
def ceiling(args):
    """Double the nodes (raw HTTP, bodies made in advance, 8 connections) until the hub no longer
    takes every due push, answers within a second or renders a named scrape within half the
    interval; the hub alone, no Prometheus. The load generator shares the machine's cores."""
    import http.client

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        hub = start_hub(port, tmp, max_series=5_000_000, memory_limit_mb=8192)
        try:
            run = (PROJECT, "ceiling")
            template = {}
            nodes = args.start_nodes
            while nodes <= args.max_nodes:
                for node in range(nodes):
                    if node not in template:
                        batches = [make(0.0).to_json() for make in node_batches(node, run)]
                        template[node] = (
                            json.dumps({"batches": batches})
                            .replace('"time":0.0', '"time":TIME')
                            .replace('"time": 0.0', '"time": TIME')
                            .encode()
                        )
                push_s, scrape_s, stop = [], [], threading.Event()
                window_started = time.time()

                def pusher(part, parts, nodes=nodes, stop=stop, push_s=push_s):  # this level's
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    mine = [n for n in range(nodes) if n % parts == part]
                    while not stop.is_set():
                        tick = time.time()
                        for i, node in enumerate(mine):
                            time.sleep(max(0.0, tick + args.interval * i / len(mine) - time.time()))
                            if stop.is_set():
                                return
                            body = template[node].replace(b"TIME", repr(time.time()).encode())
                            started = time.perf_counter()
                            try:
                                conn.request("POST", "/api/v1/push", body, {"Content-Type": "application/json"})
                                conn.getresponse().read()
                            except (OSError, http.client.HTTPException):  # a kept-alive connection closed
                                conn.close()
                                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                                continue
                            push_s.append(time.perf_counter() - started)
                        time.sleep(max(0.0, tick + args.interval - time.time()))

                def scraper(stop=stop, scrape_s=scrape_s):
                    while not stop.is_set():
                        tick = time.time()
                        with urllib.request.urlopen(
                            f"http://127.0.0.1:{port}/metrics?scraper=ceiling", timeout=120
                        ) as response:
                            response.read()
                        scrape_s.append(time.time() - tick)
                        time.sleep(max(0.0, tick + args.interval - time.time()))

                threads = [threading.Thread(target=pusher, args=(i, 8)) for i in range(8)]
                threads.append(threading.Thread(target=scraper))
                for thread in threads:
                    thread.start()
                cpu0 = proc_figures(hub.pid)[0]
                time.sleep(4 * args.interval)
                stop.set()
                elapsed = time.time() - window_started  # the pushes due in this window; a pusher may sleep on
                for thread in threads:
                    thread.join()
                figures = get_json(f"http://127.0.0.1:{port}/api/v1/hub")
                due = nodes * elapsed / args.interval
                row = {
                    "nodes": nodes,
                    "gpus": nodes * GPUS_PER_NODE,
                    "series": figures["series"],
                    "pushes_done_share": round(len(push_s) / due, 3),
                    "push_p50_ms": round(1000 * percentile(push_s, 0.5), 1),
                    "push_p99_ms": round(1000 * percentile(push_s, 0.99), 1),
                    "scrape_max_s": round(max(scrape_s), 3) if scrape_s else None,
                    "hub_cpu_share": round((proc_figures(hub.pid)[0] - cpu0) / elapsed, 2),
                    "hub_rss_mb": round(proc_figures(hub.pid)[1] / 2**20),
                }
                # held: every due push made (99 %), pushes answered within a second, and a scrape
                # within half the interval (headroom under Prometheus' scrape timeout)
                row["holds"] = (
                    row["pushes_done_share"] >= 0.99
                    and row["push_p99_ms"] < 1000
                    and (row["scrape_max_s"] or 0) < args.interval / 2
                )
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                if not row["holds"]:
                    break
                nodes *= 2
        finally:
            hub.terminate()
            hub.wait()
    held = [r for r in rows if r["holds"]]
    return {"interval_s": args.interval, "levels": rows, "largest_job_held_gpus": held[-1]["gpus"] if held else 0}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=sorted(ROLES))
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between two samples of a node")
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--step-seconds", type=float, default=10.0)
    parser.add_argument("--scrape-interval", type=float, default=5.0)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--fast", action="store_true", help="samplers every 1 s and 1 s steps")
    parser.add_argument("--quick", action="store_true", help="4 nodes, 2 replicas, 1 s steps for 10 s (CI: it runs)")
    parser.add_argument("--ceiling", action="store_true", help="the hub alone, nodes doubled until it breaks")
    parser.add_argument("--max-nodes", type=int, default=8192)
    parser.add_argument("--start-nodes", type=int, default=128, help="--ceiling: the first level")
    parser.add_argument("--hub")
    parser.add_argument("--experiment")
    args = parser.parse_args()
    if args.role:
        args.token = os.environ.get("RL_INSIGHT_TOKEN")
        ROLES[args.role](args)
        return
    if args.quick:
        args.nodes, args.replicas, args.duration, args.scrape_interval, args.fast = 4, 2, 10.0, 1.0, True
        args.start_nodes, args.max_nodes = 4, 8
    if args.fast:
        args.interval, args.step_seconds = 1.0, 1.0
    report = ceiling(args) if args.ceiling else simulate(args)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
