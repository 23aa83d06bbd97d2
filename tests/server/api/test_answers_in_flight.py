"""Answers in flight are booked: the attacker holds nothing (no credential) and asks, from 127.0.0.2,
for the hub's anonymous live exposition (larger than the kernel's socket buffers) on many
connections, never reading. The server holds one such answer at a time past its budget (1/16 of
memory_limit_mb); the others are told 503 with Retry-After, and a trainer's push is served. The
server's log says why it answered 503, once a second, not once an answer."""

import json
import socket

from tests.helpers import push

LIMIT = 64 * 2**20


def test_big_answers_past_the_budget_get_503_and_pushes_go_through(hub_server, caplog):
    server = hub_server(memory_limit_bytes=LIMIT)
    url = f"http://127.0.0.1:{server.server.port}"
    for chunk in range(3):  # 30,000 series of one run: a live exposition of 4.4 MB, past the budget (4 MiB)
        names = {f"rl_insight_monitor_wide_metric_number_{chunk}_{i}": float(i) for i in range(10_000)}
        assert push(url, {"batches": [{"project": "p", "experiment_name": "wide", "metrics": names}]})[0] == 200
    readers = []
    for _ in range(12):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", server.server.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        readers.append(s)
    try:
        answers = []
        for s in readers:
            s.settimeout(2.0)
            got = b""
            try:
                got = s.recv(4096)
                if got.startswith(b"HTTP/1.1 503") and not got.endswith(b"}"):
                    got += s.recv(4096)  # its body: the second write
            except TimeoutError:
                pass
            answers.append(got)
        busy = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        assert len(busy) >= 10, [a[:40] for a in answers]  # all but the one (or two) in flight
        assert b"retry-after: 1" in busy[0].lower() and b"memory_limit_mb" in busy[0], busy[0]
        batch = {"project": "p", "experiment_name": "honest", "step": 1, "metrics": {"loss": 1.0}}
        assert push(url, {"batches": [batch]})[0] == 200
        assert json.loads(busy[0].split(b"\r\n\r\n", 1)[1])["error"].startswith("busy")
        said = [r.getMessage() for r in caplog.records if r.name == "verl_rl_insight.server.api.writer"]
        assert said and said[0].startswith('answered 503: {"error": "busy') and len(said) < len(busy), said
    finally:
        for s in readers:
            s.close()
