"""The run explorer's JSON API (issue 33: "a 2,000-step curve in under 50 ms"), measured against
baselines in the same run: a run of 2,000 steps (a real public verl run's logged dicts,
tests/data/real_runs, its 211 steps cycled, each step its own number and time) pushed to the real
API over HTTP, then, over one kept-alive connection:

1. ``curves`` of one key (2,000 points) and of the 40 keys of a run page;
2. ``run`` (keys, panels, diagnose's findings, marks) and ``step``;
against the plain ``GET /api/v1/streams`` answer of the same server (the cheapest JSON answer
there) and ``json.dumps`` of the one-key curve's data in this process. Reports median and p99 in
ms, and each as a ratio of the baselines.

    python benchmarks/bench_explorer_api.py [--steps 2000] [--requests 300]
"""

import argparse
import json
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.metrics.hub import MetricHub

REAL_RUN = ROOT / "tests" / "data" / "real_runs" / "diqiu_gpg_qwen2_7b_gsm8k_math_fsdp.jsonl"


def run_steps(count: int) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in REAL_RUN.read_text().splitlines()]
    start = time.time() - 10 * count
    return [
        {
            "project": "bench",
            "experiment_name": "explorer",
            "step": step,
            "time": start + 10 * step,
            "metrics": {
                detectors.series_name(k): v
                for k, v in rows[step % len(rows)]["data"].items()
                if v is not None and k != "training/global_step"
            },
        }
        for step in range(count)
    ]


def timed(session: requests.Session, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        reply = session.get(url)
        reply.content  # noqa: B018  (read whole)
        out.append((time.perf_counter() - t) * 1000)
        assert reply.status_code == 200, reply.text[:200]
    return out


def p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(0.99 * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="200 steps, 20 requests (CI: it runs)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.requests = 200, 20
    explorer = Sources()
    hub = MetricHub(memory_limit_bytes=2 * 2**30, history_s=7 * 86400, listeners=(explorer.histories.observe,))
    api = Api(ApiParts(hub, explorer=explorer))
    server = HttpServer(api, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{server.port}"
    session = requests.Session()
    batches = run_steps(args.steps)
    for i in range(0, len(batches), 100):
        assert session.post(base + "/api/v1/push", json={"batches": batches[i : i + 100]}).status_code == 200
    run = {"project": "bench", "experiment_name": "explorer"}
    page = session.get(base + "/api/v1/explorer/run?" + urllib.parse.urlencode(run)).json()
    keys = page["keys"][:40]
    one = base + "/api/v1/explorer/curves?" + urllib.parse.urlencode({**run, "keys": "critic/score/mean"})
    forty = base + "/api/v1/explorer/curves?" + urllib.parse.urlencode({**run, "keys": ",".join(keys)})
    curve = session.get(one).json()
    assert len(curve["steps"]) == args.steps, len(curve["steps"])
    data = {"steps": curve["steps"], "times": curve["times"], "series": curve["series"]}
    dumps = []
    for _ in range(args.requests):
        t = time.perf_counter()
        json.dumps(data).encode()
        dumps.append((time.perf_counter() - t) * 1000)
    figures = {
        "streams (baseline)": timed(session, base + "/api/v1/streams", args.requests),
        "json.dumps of the 1-key curve (baseline)": dumps,
        "curves, 1 key x 2,000 steps": timed(session, one, args.requests),
        "curves, 40 keys x 2,000 steps": timed(session, forty, max(20, args.requests // 5)),
        "run (keys, panels, findings)": timed(
            session, base + "/api/v1/explorer/run?" + urllib.parse.urlencode(run), max(20, args.requests // 5)
        ),
        "step": timed(
            session,
            base + "/api/v1/explorer/step?" + urllib.parse.urlencode({**run, "step": args.steps // 2}),
            args.requests,
        ),
    }
    streams = statistics.median(figures["streams (baseline)"])
    dumped = statistics.median(dumps)
    print(f"{args.steps} steps, {len(page['keys'])} keys; {args.requests} requests each (fewer for the heavy ones)")
    print(f"{'':42} {'median ms':>10} {'p99 ms':>8} {'x streams':>10} {'x dumps':>8}")
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"{name:42} {median:10.2f} {p99(values):8.2f} {median / streams:10.1f} {median / dumped:8.1f}")
    verdict = "under" if statistics.median(figures["curves, 1 key x 2,000 steps"]) < 50 else "OVER"
    print(f"a 2,000-step curve: {verdict} 50 ms (median)")
    server.stop()
    api.close()


if __name__ == "__main__":
    main()
