"""The scrape-target announcer at the process's exit: withdrawing the targets a driver announced (one a
replica) is bounded as a whole, so a monitoring server that no longer answers never holds the end of a
training job for one wait per target."""

import socket
import time

from verl_rl_insight.trainer.client.target_announcer import TargetAnnouncer
from verl_rl_insight.trainer.config import ServerUrl


def test_a_server_that_never_answers_costs_the_withdrawal_its_timeout_not_one_wait_per_target():
    silent = socket.socket()  # a real listener that completes the handshake and never reads or answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(512)
    try:
        announcer = TargetAnnouncer(ServerUrl(f"http://127.0.0.1:{silent.getsockname()[1]}"), timeout_s=30)
        asked = []
        request = announcer._request

        def counted(method, body, params=None, timeout_s=None):
            asked.append(method)
            return request(method, body, params=params, timeout_s=timeout_s)

        announcer._request = counted
        for replica in range(64):
            announcer.announce(f"127.0.0.1:{8000 + replica}", "vllm", {"replica": str(replica)})
        started = time.monotonic()
        announcer.close(timeout_s=1.0)
        took = time.monotonic() - started
    finally:
        silent.close()
    # one wait per target (up to 2 s each) was 64 DELETEs, about a minute; now the first one waits out
    # what is left of the second, and the rest expire with their TTL on the server
    assert asked.count("DELETE") <= 1, asked.count("DELETE")
    assert took < 10, took
