"""Honest pushes while connections that hold nothing (no credential) ask for a big anonymous answer
and never read it (issue 39, item 1): the real server process on loopback, a run of 3,000 steps x
64 keys, then the trainer's pushes timed (p50, p99) with no attack (the baseline, same run) and
with ``--readers`` never-reading connections from 127.0.0.2 asking for the run's curves; the
server's RSS growth under the attack; the ratios attack / baseline.

    python benchmarks/bench_slow_readers.py [--readers 300] [--pushes 100]
"""

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers import free_port, http, process_figures, push, start_hub_process, stop_group
from tests.server.api.test_bounded_answers import KEYS, _log_run, _never_reading


def _pushes(url: str, count: int, first: int) -> list[float]:
    took = []
    for n in range(count):
        batch = {"project": "p", "experiment_name": "honest", "step": first + n, "metrics": {"loss": 1.0}}
        started = time.perf_counter()
        status, _ = push(url, {"batches": [batch]})
        took.append((time.perf_counter() - started) * 1000 if status == 200 else float("inf"))
    return took


def _figures(took: list[float]) -> dict[str, float]:
    ordered = sorted(took)
    return {"p50_ms": round(statistics.median(ordered), 2), "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))], 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--readers", type=int, default=300)
    parser.add_argument("--pushes", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="30 readers, 20 pushes (CI: it runs)")
    args = parser.parse_args()
    if args.quick:
        args.readers, args.pushes = 30, 20
    with tempfile.TemporaryDirectory() as folder:
        port = free_port()
        hub = start_hub_process(port, Path(folder), memory_limit_mb=256)
        url = f"http://127.0.0.1:{port}"
        readers: list[socket.socket] = []
        try:
            _log_run(url)
            query = urllib.parse.urlencode({"project": "p", "experiment_name": "long", "keys": ",".join(KEYS)})
            path = "/api/v1/explorer/curves?" + query
            answer_bytes = len(http("GET", url + path)[1])
            baseline = _figures(_pushes(url, args.pushes, 1))
            _, rss_before = process_figures(hub.pid)
            for _ in range(args.readers):
                readers.append(_never_reading(port, path))
            attacked = _figures(_pushes(url, args.pushes, 10_000))
            _, rss_after = process_figures(hub.pid)
        finally:
            for s in readers:
                s.close()
            stop_group(hub)
    print(
        json.dumps(
            {
                "readers": args.readers,
                "answer_bytes": answer_bytes,
                "push_baseline": baseline,
                "push_under_attack": attacked,
                "p50_ratio": round(attacked["p50_ms"] / baseline["p50_ms"], 2),
                "p99_ratio": round(attacked["p99_ms"] / baseline["p99_ms"], 2),
                "rss_growth_mib": round((rss_after - rss_before) / 2**20, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
