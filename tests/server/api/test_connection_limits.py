"""One client's connection flood against the real server process: the attacker holds nothing (no
credential), only a second loopback address (127.0.0.2). Each source address holds at most a share
of the server's connection cap; past it the flooder gets 503 and its connection closed, while the
trainer (127.0.0.1 here) keeps pushing."""

import resource
import socket
import time

from tests.helpers import free_port, push, start_hub_process, stop_group

PUSH = {"batches": [{"project": "p", "experiment_name": "e", "step": 1, "metrics": {"loss": 1.0}}]}
FLOOD = 4200  # past the whole default cap (4096), from one address


def _connect_from(source, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def _answer(s, wait_s=0.5):
    s.settimeout(wait_s)
    try:
        return s.recv(4096)
    except TimeoutError:
        return None  # held open, unanswered: an idle connection the server keeps
    except ConnectionError:
        return b""


def test_a_flood_from_one_address_gets_503_and_the_trainer_keeps_pushing(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, FLOOD + 512), hard))
    port = free_port()
    hub = start_hub_process(port, tmp_path)
    url = f"http://127.0.0.1:{port}"
    flood = []
    try:
        for step in range(FLOOD):
            flood.append(_connect_from("127.0.0.2", port))
            if step % 200 == 0:  # the trainer pushes all through the flood
                assert push(url, PUSH | {"batches": [PUSH["batches"][0] | {"step": step + 1}]})[0] == 200
        time.sleep(1.0)
        served, statuses = 0, []
        for n in range(30):  # the trainer, after the flood: every push answered, none waits past the client timeout
            started = time.monotonic()
            status, _ = push(url, PUSH | {"batches": [PUSH["batches"][0] | {"step": 10_000 + n}]})
            statuses.append(status)
            served += status == 200 and time.monotonic() - started < 5
        assert served == 30, statuses
        # the flooder: its first connections held (idle), those past its share answered 503 and closed
        last = [_answer(s, 0.05) for s in flood[-50:]]
        assert all(a is not None and (a == b"" or a.startswith(b"HTTP/1.1 503")) for a in last), last[:3]
        assert any(a and b"too many connections from 127.0.0.2" in a for a in last), last[:3]
        assert _answer(flood[0], 0.05) is None  # within its share: a connection like any other
    finally:
        for s in flood:
            s.close()
        stop_group(hub)
