"""The hand-written HTTP layer against the libraries that could replace it, both ways in one process
(docs/http-layer.md reads these figures):

1. exposition: a named scrape's body after a round of pushes (``--runs`` runs x 300 keys, 20 steps
   each, as bench_hub.py pushes them), every pending step a sample with its own timestamp, plus
   every live value and the hub's own series. Ours: ``Exposure.render`` (``exposition.series_lines``
   / ``exposition.body``; the live lines made anew each time, as after a push). The library's: a
   ``prometheus_client`` Collector over the very same exposure yielding ``GaugeMetricFamily`` with
   per-sample timestamps, rendered by ``generate_latest``. Both bodies are parsed back
   (``prometheus_client.parser``) and must hold the same samples. Also the unnamed scrape (live
   values only) both ways. Median and p99 of the render times, and the library's over ours.
2. routing: the same uvicorn server (``HttpServer``) serving the API (``asgi.Api``), or a Starlette
   ``Router`` of ``Route``s with ``starlette.requests.Request`` serving push, /metrics, info and an
   explorer GET (the same token check, the same bounded body read, the same writer: what a partial
   replacement would keep), each over its own hub of ``--push-runs`` runs x 300 keys, driven from
   another process over one kept-alive connection, the order alternating each round: requests/s
   and latency median / p99 for a push of ``--push-runs`` batches x 300 keys (1.1 MB at 100), a
   /metrics scrape, GET /api/v1/info and an explorer curve.
3. slow clients: what a plain ``uvicorn.Config`` (uvicorn's public API) does with a client sending
   one header byte a second, and with one that asks for /metrics (7.7 MB at ``--slow-runs 300``) and
   never reads it, against ``HttpServer`` (both deadlines ``--deadline-s``): how long each is held;
   then the memory ``--readers`` such non-readers hold, ``HttpServer`` with the API's writer against
   a plain uvicorn with a Starlette ``Response``.

    python benchmarks/bench_http_layers.py [--runs 30] [--repeats 5] [--requests 30] [--rounds 3]
"""

import argparse
import dataclasses
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import uvicorn
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from starlette.requests import Request as StarletteRequest
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.routing import Router

from verl_rl_insight.contract.errors import RLInsightError
from verl_rl_insight.server.api import errors
from verl_rl_insight.server.api.access import Access
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.asgi_types import Receive, Scope, Send
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.api.run_gate import RunGate
from verl_rl_insight.server.explorer import params
from verl_rl_insight.server.explorer.curves import cached_curves_body
from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.metrics import exposition
from verl_rl_insight.server.metrics.exposure import Exposure, values_at
from verl_rl_insight.server.metrics.hub import MetricHub
from verl_rl_insight.server.metrics.positions import StreamKey

KEYS = 300
STEPS = 20  # a round: STEPS pushes, each of one step of every run
TOKEN = "bench-token"


def push_body(runs: int, step: int, now: float) -> bytes:
    """One push: a step of every run, KEYS scalars each (bench_hub.py's body)."""
    batches = [
        {
            "project": "bench",
            "experiment_name": f"run-{r}",
            "step": step,
            "time": now - STEPS + step * 0.5,
            "metrics": {f"rl_insight_monitor_metric_{i}": step + i / 7 for i in range(KEYS)},
        }
        for r in range(runs)
    ]
    return json.dumps({"batches": batches}).encode()


def figures(ours: list[float], theirs: list[float]) -> dict[str, float]:
    """Median and p99 of each (in ms), and the library's over ours."""

    def p99(times: list[float]) -> float:
        ordered = sorted(times)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]

    return {
        "ours_median_ms": round(1000 * statistics.median(ours), 2),
        "library_median_ms": round(1000 * statistics.median(theirs), 2),
        "ours_p99_ms": round(1000 * p99(ours), 2),
        "library_p99_ms": round(1000 * p99(theirs), 2),
        "ratio_median_library_over_ours": round(statistics.median(theirs) / statistics.median(ours), 3),
        "ratio_p99_library_over_ours": round(p99(theirs) / p99(ours), 3),
    }


# -- 1. exposition -------------------------------------------------------------------------------


class ExposureCollector:
    """What ``Exposure.render`` writes, as prometheus_client's collectors give it: a family per
    metric name (every run's samples in it, each pending step with its timestamp), then the hub's
    own series."""

    def __init__(self, exposure: Exposure) -> None:
        self.exposure = exposure

    def collect(self) -> list[Metric]:
        families: dict[str, GaugeMetricFamily] = {}

        def add(key: StreamKey, names: Iterable[str], values: Iterable[float], ts_ms: int | None) -> None:
            label_names, label_values = [k for k, _ in key], [v for _, v in key]
            seconds = None if ts_ms is None else ts_ms / 1000
            for name, value in zip(names, values):
                family = families.get(name)
                if family is None:
                    family = families[name] = GaugeMetricFamily(name, "", labels=label_names)
                family.add_metric(label_values, value, timestamp=seconds)

        for entry in self.exposure.entries:
            for sent in entry.sent:
                add(entry.stream.key, sent.snapshot.names, sent.snapshot.values, sent.stamp.ts_ms)
            latest = entry.latest
            if entry.history is not None:
                latest = values_at(entry.latest, entry.history, entry.sent[-1].snapshot if entry.sent else None)
            add(entry.stream.key, latest.keys(), latest.values(), None)
        own: dict[str, Metric] = {}
        for stat in self.exposure.stats:
            name, _, label = stat.name.partition("{")
            family = own.setdefault(name, Metric(name.removesuffix("_total"), "", stat.kind))
            labels = dict([label.rstrip("}").replace('"', "").split("=")]) if label else {}
            family.add_sample(name, labels, float(stat.value))
        return [families[name] for name in sorted(families)] + list(own.values())


def samples_of(body: bytes) -> list[tuple[str, tuple[tuple[str, str], ...], float, float | None]]:
    """Every sample of an exposition, as Prometheus' client parser reads it, in a canonical order."""
    found = [
        (s.name, tuple(sorted(s.labels.items())), s.value, s.timestamp)
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    ]
    return sorted(found, key=lambda s: (s[0], s[1], s[3] or 0.0))


def _hub_after_a_round(runs: int) -> tuple[MetricHub, Exposure]:
    """A hub with ``runs`` x KEYS series a named scraper has seen before, after a round of pushes:
    that scraper's next scrape (not committed: rendered again and again)."""
    hub = MetricHub(memory_limit_bytes=1 << 36, max_series=2 * runs * KEYS)
    now = time.time()
    hub.push_body(push_body(runs, 0, now - 60))
    first = hub.expose("prometheus", now - 30)
    assert first is not None
    first.body()
    first.commit()
    for step in range(1, STEPS + 1):
        hub.push_body(push_body(runs, step, now))
    exposure = hub.expose("prometheus", now + 1)
    assert exposure is not None
    return hub, exposure


def _peak_mb(render: Callable[[], bytes]) -> float:
    """What a rendering allocates at its peak (MB, tracemalloc), its body included."""
    import tracemalloc

    tracemalloc.start()
    try:
        render()
        return round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
    finally:
        tracemalloc.stop()


def in_turns(ours: Callable[[], object], theirs: Callable[[], object], times: int) -> tuple[list[float], list[float]]:
    """Seconds of each of ``times`` calls of ``ours`` and ``theirs``, called in turns (the machine's load
    falls on both alike)."""
    mine, other = [], []
    for _ in range(times):
        t0 = time.perf_counter()
        ours()
        mine.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        theirs()
        other.append(time.perf_counter() - t0)
    return mine, other


def exposition_both_ways(runs: int, repeats: int, peak: bool) -> dict[str, object]:
    _hub, exposure = _hub_after_a_round(runs)  # the hub stays alive while its exposure renders
    fresh = [dataclasses.replace(e, version=None) for e in exposure.entries]  # live lines made anew
    named = Exposure(exposure.desk, fresh, exposure.stats, exposure.named)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExposureCollector(named))
    ours_body, theirs_body = named.render(), generate_latest(registry)
    ours_samples, theirs_samples = samples_of(ours_body), samples_of(theirs_body)
    same = ours_samples == theirs_samples
    stamped = sum(1 for s in ours_samples if s[3] is not None)
    ours, theirs = in_turns(named.render, lambda: generate_latest(registry), repeats)
    peaks = {}
    if peak:
        peaks = {"ours_peak_mb": _peak_mb(named.render), "library_peak_mb": _peak_mb(lambda: generate_latest(registry))}
    live = Exposure(exposure.desk, [dataclasses.replace(e, sent=[], history=None) for e in fresh], exposure.stats)
    live_registry = CollectorRegistry(auto_describe=False)
    live_registry.register(ExposureCollector(live))
    same_live = samples_of(live.render()) == samples_of(generate_latest(live_registry))
    live_ours, live_theirs = in_turns(live.render, lambda: generate_latest(live_registry), 3 * repeats)
    return {
        "named_scrape": {
            "samples": len(ours_samples),
            "with_timestamps": stamped,
            "same_samples_parsed": same,
            "ours_mb": round(len(ours_body) / 2**20, 2),
            "library_mb": round(len(theirs_body) / 2**20, 2),
            **figures(ours, theirs),
            **peaks,
        },
        "unnamed_scrape": {"series": runs * KEYS, "same_samples_parsed": same_live, **figures(live_ours, live_theirs)},
    }


# -- 2. routing ----------------------------------------------------------------------------------


class Written(Response):
    """A Starlette response written by the API's own writer (chunks, the answers-in-flight budget)."""

    def __init__(self, write: Callable[[Send], Awaitable[None]]) -> None:
        self.write = write
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.write(send)


def starlette_app(ctx: Context) -> Router:
    """Push, /metrics, info and an explorer curve as Starlette routes, each checked and read as the
    API does it (the token, the bounded body read), answered by the API's writer."""
    writer, hub = ctx.writer, ctx.hub

    def endpoint(access: Access, handle: object) -> object:
        async def serve(request: StarletteRequest) -> Response:
            try:
                shim = SimpleNamespace(headers=request.headers, method=request.method, path=request.url.path, run=None)
                ctx.auth.authorize(shim, access)
                return await handle(request, shim)
            except RLInsightError as exc:
                status, body, headers = errors.http_status(exc), errors.body(exc), errors.headers(exc)
                return Written(lambda send: writer.json(send, status, body, headers))

        return serve

    async def push(request: StarletteRequest, shim: SimpleNamespace) -> Response:
        gate = RunGate(shim.run, "body batches")
        async with ctx.bodies.read(request, ctx.parts.max_body_bytes) as body, ctx.parse:
            result = await ctx.in_thread(hub.push_body, body, gate)
        return Written(lambda send: writer.json(send, 200, result))

    async def metrics(request: StarletteRequest, shim: SimpleNamespace) -> Response:
        body = await ctx.in_thread(hub.live_body)
        return Written(lambda send: writer.body(send, 200, exposition.CONTENT_TYPE, body))

    async def info(request: StarletteRequest, shim: SimpleNamespace) -> Response:
        about = ctx.parts.info
        answer = await ctx.in_thread(lambda: about() if about else {})  # off the loop, as info.get_info
        return Written(lambda send: writer.json(send, 200, answer))

    async def curves(request: StarletteRequest, shim: SimpleNamespace) -> Response:
        query = {name: request.query_params.getlist(name) for name in request.query_params}
        run, keys, (first, last) = params.run_of(query), params.keys_of(query), params.steps_of(query)
        sources = ctx.parts.explorer
        assert sources is not None
        body = await ctx.in_thread(cached_curves_body, sources, run, keys, first, last)
        return Written(lambda send: writer.body(send, 200, "application/json", body))

    return Router(
        [
            StarletteRoute("/api/v1/push", endpoint(Access.RUN_CREDENTIAL, push), methods=["POST"]),
            StarletteRoute("/metrics", endpoint(Access.ANYONE, metrics), methods=["GET"]),
            StarletteRoute("/api/v1/info", endpoint(Access.ANYONE, info), methods=["GET"]),
            StarletteRoute("/api/v1/explorer/curves", endpoint(Access.ANYONE, curves), methods=["GET"]),
        ]
    )


def _parts(runs: int) -> ApiParts:
    """The API's parts over a hub holding ``runs`` x KEYS series and a few steps of history."""
    explorer = Sources()
    hub = MetricHub(memory_limit_bytes=1 << 34, listeners=(explorer.histories.observe, explorer.names.observe))
    for step in range(1, 4):
        hub.push_body(push_body(runs, step, time.time()))
    return ApiParts(hub, token=TOKEN, explorer=explorer, info=dict)


REQUESTS = {  # kind: method, path
    "push": ("POST", "/api/v1/push"),
    "metrics": ("GET", "/metrics"),
    "info": ("GET", "/api/v1/info"),
    "curves": ("GET", "/api/v1/explorer/curves?project=bench&experiment_name=run-0&keys=metric_1,metric_2"),
}


def client(ports: list[int], kind: str, count: int, runs: int) -> list[list[float]]:
    """``count`` requests of ``kind`` to each port, each over one kept-alive connection, the ports
    taking turns request by request (ABBA: both see the same load of the machine), after one not
    timed each (the connection's first, a first rendering): the latencies (s) by port, each a 200."""
    import http.client

    method, path = REQUESTS[kind]
    body = push_body(runs, 2, time.time()) if kind == "push" else None  # the same each time: duplicates after the first
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=60) for port in ports]
    took: list[list[float]] = [[] for _ in ports]
    for n in range(count + 1):
        for i in range(len(ports)) if n % 2 == 0 else reversed(range(len(ports))):
            t0 = time.perf_counter()
            connections[i].request(method, path, body=body, headers=headers)
            answer = connections[i].getresponse()
            data = answer.read()
            took[i].append(time.perf_counter() - t0)
            assert answer.status == 200, (kind, answer.status, data[:200])
    for connection in connections:
        connection.close()
    return [times[1:] for times in took]


def _spawn(ports: list[int], kind: str, count: int, runs: int) -> list[list[float]]:
    """The client in another process (its own GIL): what it measured."""
    done = subprocess.run(
        [sys.executable, __file__, "--client", ",".join(map(str, ports)), kind, str(count), str(runs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout)


def routing_both_ways(runs: int, count: int, rounds: int) -> dict[str, object]:
    ours_parts, theirs_parts = _parts(runs), _parts(runs)
    api = Api(ours_parts)
    theirs_ctx = Context(theirs_parts, b"{}")
    ours = HttpServer(api, "127.0.0.1", 0).start()
    theirs = HttpServer(starlette_app(theirs_ctx), "127.0.0.1", 0).start()
    took: dict[str, tuple[list[float], list[float]]] = {kind: ([], []) for kind in REQUESTS}
    try:
        for _ in range(rounds):
            for kind in REQUESTS:
                many = count * (1 if kind == "push" else 5)  # the small requests, five times as many
                ours_took, theirs_took = _spawn([ours.port, theirs.port], kind, many, runs)
                took[kind][0].extend(ours_took)
                took[kind][1].extend(theirs_took)
    finally:
        ours.stop()
        theirs.stop()
        api.close()
        theirs_ctx.close()
    out: dict[str, object] = {}
    for kind, (ours_times, theirs_times) in took.items():
        found = figures(ours_times, theirs_times)
        found["requests"] = len(ours_times)
        found["ours_requests_per_s"] = round(len(ours_times) / sum(ours_times), 1)  # one connection's, one at a time
        found["library_requests_per_s"] = round(len(theirs_times) / sum(theirs_times), 1)
        out[kind] = found
    return out


# -- 3. slow clients -----------------------------------------------------------------------------


def _plain_uvicorn(app: object) -> tuple[uvicorn.Server, int, threading.Thread]:
    """``app`` on uvicorn as its public API serves it: a Config, a Server, a socket of ours."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, sock.getsockname()[1], thread


def _slow_loris(port: int, hold_s: float, out: dict[str, object]) -> None:
    """One header byte a second: how long until the server closes it (or ``hold_s``, still open)."""
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 10_000
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(1.0)
        t0 = time.monotonic()
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
                answer = sock.recv(4096)
            except TimeoutError:
                answer = None
            except OSError:
                answer = b""
            if answer is not None:  # an answer, or the connection closed
                out["closed_after_s"] = round(time.monotonic() - t0, 1)
                out["answer"] = answer.split(b"\r\n", 1)[0].decode(errors="replace")
                return
            if time.monotonic() - t0 > hold_s:
                out["still_open_after_s"] = round(time.monotonic() - t0, 1)
                return


def _non_reader(server: uvicorn.Server, port: int, hold_s: float, out: dict[str, object]) -> None:
    """Asks for a large answer and never reads it: how long until the server lets the connection go
    (its protocol gone from the server's connections: what the kernel still holds of an aborted
    connection's answer is sent on, or dropped, by the kernel alone)."""
    with _asking(port) as sock:
        me = sock.getsockname()[:2]
        t0 = time.monotonic()
        while time.monotonic() - t0 < hold_s:
            time.sleep(0.25)
            if not any(tuple(c.client or ()) == me for c in list(server.server_state.connections)):
                out["let_go_after_s"] = round(time.monotonic() - t0, 1)
                return
        out["still_open_after_s"] = round(time.monotonic() - t0, 1)


def _asking(port: int) -> socket.socket:
    """A connection with a small receive window that has asked for /metrics (and reads nothing)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.setblocking(False)
    return sock


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _held_by_non_readers(port: int, count: int) -> float:
    """The growth of this process' RSS (MB) while ``count`` connections ask for /metrics, unread."""
    before = _rss_mb()
    sockets = [_asking(port) for _ in range(count)]
    time.sleep(2.0)
    grown = _rss_mb() - before
    for sock in sockets:
        sock.close()
    time.sleep(0.5)
    return round(grown, 1)


def starlette_metrics(hub: MetricHub) -> Router:
    """/metrics the Starlette way: the body handed to uvicorn in one ``Response``."""

    async def metrics(request: StarletteRequest) -> Response:
        return Response(hub.live_body(), media_type=exposition.CONTENT_TYPE)

    return Router([StarletteRoute("/metrics", metrics, methods=["GET"])])


def slow_clients_both_ways(runs: int, hold_s: float, readers: int, deadline_s: float) -> dict[str, object]:
    """The API on ``HttpServer`` (both its deadlines ``deadline_s``) and on a plain uvicorn, at once, one hub
    of ``runs`` x KEYS series (no token); then ``readers`` non-readers of /metrics on ``HttpServer``
    and the API's writer, and on a plain uvicorn with a Starlette ``Response``: the memory held."""
    parts = dataclasses.replace(_parts(runs), token=None)
    answer_mb = round(len(parts.hub.live_body()) / 2**20, 2)
    api = Api(parts)
    ours = HttpServer(api, "127.0.0.1", 0, receive_timeout_s=deadline_s, send_timeout_s=deadline_s).start()
    plain, plain_port, plain_thread = _plain_uvicorn(api)
    found: dict[str, object] = {"answer_mb": answer_mb}
    watched: dict[str, dict[str, object]] = {f"{w}_{s}": {} for w in ("loris", "non_reader") for s in ("ours", "plain")}
    watchers = [
        threading.Thread(target=_slow_loris, args=(ours.port, hold_s, watched["loris_ours"])),
        threading.Thread(target=_slow_loris, args=(plain_port, hold_s, watched["loris_plain"])),
        threading.Thread(target=_non_reader, args=(ours.server, ours.port, hold_s, watched["non_reader_ours"])),
        threading.Thread(target=_non_reader, args=(plain, plain_port, hold_s, watched["non_reader_plain"])),
    ]
    try:
        for watcher in watchers:
            watcher.start()
        for watcher in watchers:
            watcher.join()
        found.update(watched)
        found[f"rss_growth_mb_{readers}_non_readers_ours"] = _held_by_non_readers(ours.port, readers)
    finally:
        ours.stop()
        plain.should_exit = True
        plain_thread.join(5)
    single, single_port, single_thread = _plain_uvicorn(starlette_metrics(parts.hub))
    try:
        found[f"rss_growth_mb_{readers}_non_readers_starlette_response"] = _held_by_non_readers(single_port, readers)
    finally:
        single.should_exit = True
        single_thread.join(5)
        api.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30, help="runs of 300 keys in the scraped hub")
    parser.add_argument("--push-runs", type=int, default=100, help="batches in a push (bench_hub.py's 100)")
    parser.add_argument("--repeats", type=int, default=5, help="renderings of the named scrape's body, each way")
    parser.add_argument("--requests", type=int, default=30, help="requests of each kind a round, each way")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the order of the two ways alternating")
    parser.add_argument("--hold-s", type=float, default=8.0, help="how long a slow client is watched")
    parser.add_argument("--deadline-s", type=float, default=5.0, help="HttpServer's receive and send deadlines here")
    parser.add_argument("--slow-runs", type=int, default=300, help="runs in the hub the slow clients read (8 MB)")
    parser.add_argument("--readers", type=int, default=20, help="non-reading connections whose memory is measured")
    parser.add_argument("--peak-memory", action="store_true", help="also what each rendering allocates")
    parser.add_argument("--no-slow-clients", action="store_true", help="leave out part 3")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: that it runs (the tests), not a figure")
    parser.add_argument("--client", nargs=4, metavar=("PORTS", "KIND", "COUNT", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        ports, kind, count, runs = args.client
        print(json.dumps(client([int(p) for p in ports.split(",")], kind, int(count), int(runs))))
        return
    if args.quick:
        args.runs, args.push_runs, args.repeats, args.requests, args.rounds = 2, 2, 2, 3, 1
        args.hold_s, args.deadline_s, args.slow_runs, args.readers = 3, 1.5, 2, 2
    started = time.perf_counter()
    result: dict[str, object] = {"exposition": exposition_both_ways(args.runs, args.repeats, args.peak_memory)}
    result["routing"] = routing_both_ways(args.push_runs, args.requests, args.rounds)
    if not args.no_slow_clients:
        result["slow_clients"] = slow_clients_both_ways(args.slow_runs, args.hold_s, args.readers, args.deadline_s)
    result["took_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
