"""Slow and idle clients against the real server process: they cost neither threads nor the
service of everybody else, and the server closes them itself."""

import json
import resource
import socket
import time

from tests.helpers import cpu_seconds, free_port, http, process_figures, push, start_hub_process, stop_group, wait_for

PUSH = {"batches": [{"project": "p", "experiment_name": "e", "step": 1, "metrics": {"loss": 1.0}}]}


def test_500_idle_and_half_sent_connections_leave_push_and_scrape_working(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    port = free_port()
    hub = start_hub_process(port, tmp_path)
    clients = []
    try:
        assert push(f"http://127.0.0.1:{port}", PUSH)[0] == 200
        threads_before, rss_before = process_figures(hub.pid)
        for i in range(500):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 3 == 1:  # headers, then half of the promised body
                s.sendall(
                    b"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 100000\r\n\r\n" + b'{"batches": [' + b" " * 50000
                )
            elif i % 3 == 2:  # half of the headers
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            clients.append(s)  # i % 3 == 0: connected, silent
        time.sleep(0.5)
        started = time.monotonic()
        assert push(f"http://127.0.0.1:{port}", PUSH)[0] == 200
        push_s = time.monotonic() - started
        started = time.monotonic()
        status, body = http("GET", f"http://127.0.0.1:{port}/metrics")
        scrape_s = time.monotonic() - started
        assert status == 200 and b'loss{experiment_name="e",project="p"} 1.0' in body
        assert push_s < 1.0 and scrape_s < 1.0, (push_s, scrape_s)
        threads, rss = process_figures(hub.pid)
        assert threads <= threads_before + 4, (threads_before, threads)  # no thread per connection
        assert rss - rss_before < 64 * 2**20, (rss_before, rss)

        # the server answers every one of them itself, with 408, and closes them
        got = {}

        def answers():
            for i, s in enumerate(clients):
                if i not in got:
                    s.settimeout(0.01)
                    try:
                        got[i] = s.recv(4096)
                    except TimeoutError:
                        pass
                    except ConnectionError:
                        got[i] = b""
            return len(got) == len(clients)

        wait_for(answers, 30, interval=1.0, what="the server to answer the slow connections")
        assert sum(a.startswith(b"HTTP/1.1 408") for a in got.values()) == 500
        assert json.loads(http("GET", f"http://127.0.0.1:{port}/api/v1/hub")[1])["streams"] == 1
    finally:
        for s in clients:
            s.close()
        stop_group(hub)


def read_response(s):
    """One HTTP response (status line, headers, a Content-Length body) from socket ``s``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_an_oversized_body_is_refused_before_it_is_sent(tmp_path):
    port = free_port()
    hub = start_hub_process(port, tmp_path, max_body_mb=1)
    try:
        threads_before, rss_before = process_figures(hub.pid)
        for _ in range(20):  # each announces 32 MiB and sends none of it
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n")
                answer = read_response(s)
                assert answer.startswith(b"HTTP/1.1 413") and b"over the limit" in answer, answer[:200]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # chunked: counted as it comes
            s.sendall(b"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b" " * 65536
            try:
                for _ in range(40):
                    s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except ConnectionError:
                pass
            assert read_response(s).startswith(b"HTTP/1.1 413")
        assert process_figures(hub.pid)[1] - rss_before < 32 * 2**20
        assert push(f"http://127.0.0.1:{port}", PUSH)[0] == 200
    finally:
        stop_group(hub)


def test_out_of_descriptors_the_server_idles_and_serves_again_once_they_are_back(tmp_path):
    port = free_port()
    hub = start_hub_process(port, tmp_path, open_files=64)
    clients = []
    try:
        for _ in range(120):  # more connections than the server has descriptors for
            try:
                clients.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            except OSError:
                break
        time.sleep(0.5)
        before = cpu_seconds(hub.pid)
        time.sleep(2.0)
        assert cpu_seconds(hub.pid) - before < 0.5, "accept() spins while out of descriptors"
        for s in clients:
            s.close()
        clients.clear()
        assert wait_for(
            lambda: http("GET", f"http://127.0.0.1:{port}/-/healthy", timeout=2)[0] == 200,
            15,
            what="service once descriptors are free",
        )
        assert push(f"http://127.0.0.1:{port}", PUSH)[0] == 200
    finally:
        for s in clients:
            s.close()
        stop_group(hub)
