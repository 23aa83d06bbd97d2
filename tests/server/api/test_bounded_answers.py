"""Slow readers against the real server process: the attacker holds nothing (no credential), only a
second loopback address (127.0.0.2). Hundreds of connections ask for a run's curves (an anonymous
answer) and never read it: the server holds at most its budget of bytes in flight (past it: 503 and
Retry-After), the answer itself is bounded (every ``stride``-th step past 100,000 values) and made
once for all of them, its memory stays bounded, and the trainer's pushes are served all along."""

import json
import socket
import time
import urllib.parse

from tests.helpers import free_port, http, process_figures, push, start_hub_process, stop_group

KEYS = [f"actor/metric_{k}" for k in range(64)]
STEPS = 3000
READERS = 300


def _log_run(url):
    for first in range(1, STEPS + 1, 500):
        batches = [
            {
                "project": "p",
                "experiment_name": "long",
                "step": step,
                "metrics": {f"rl_insight_monitor_actor_metric_{k}": step / (k + 1.7) for k in range(64)},
            }
            for step in range(first, first + 500)
        ]
        assert push(url, {"batches": batches})[0] == 200


def _never_reading(port, path):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.bind(("127.0.0.2", 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return s


def test_slow_readers_of_a_big_answer_hold_bounded_memory_and_pushes_go_through(tmp_path):
    port = free_port()
    hub = start_hub_process(port, tmp_path, memory_limit_mb=256)
    url = f"http://127.0.0.1:{port}"
    readers = []
    try:
        _log_run(url)
        query = urllib.parse.urlencode({"project": "p", "experiment_name": "long", "keys": ",".join(KEYS)})
        path = "/api/v1/explorer/curves?" + query
        status, body = http("GET", url + path)
        assert status == 200
        answer = json.loads(body)
        assert len(answer["steps"]) * len(KEYS) <= 100_000 and answer["steps"][-1] == STEPS  # bounded, to the end
        assert answer["stride"] > 1
        _, rss_before = process_figures(hub.pid)
        for _ in range(READERS):
            readers.append(_never_reading(port, path))
        time.sleep(2.0)
        _, rss_after = process_figures(hub.pid)
        print(f"RSS grew by {(rss_after - rss_before) / 2**20:.1f} MiB for {READERS} readers")
        statuses = [
            push(
                url, {"batches": [{"project": "p", "experiment_name": "honest", "step": n, "metrics": {"loss": 1.0}}]}
            )[0]
            for n in range(1, 21)
        ]
        assert statuses == [200] * 20
        # what the server holds for them: its budget of answers in flight (1/16 of 256 MiB), not one copy each
        assert rss_after - rss_before < 96 * 2**20, f"RSS grew by {(rss_after - rss_before) / 2**20:.0f} MiB"
    finally:
        for s in readers:
            s.close()
        stop_group(hub)
