"""BatchSender against the real hub over HTTP: a batch that cannot be sent, a request the server
refuses in part, a hub that restarts between two pushes, a fork."""

import collections
import os
import re
import threading
import time

import numpy as np

from tests.helpers import free_port, http, wait_for
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.client.sender import BatchSender


def batch(step, run="e", labels=None):
    return MetricBatch("p", run, step, time.time(), {"loss": 0.5}, prefix="m_", labels=labels)


def steps_at(server, scraper="test"):
    """The global steps a named scraper gets, in order (history, then the live value)."""
    body = http("GET", server.url + f"/metrics?scraper={scraper}")[1].decode()
    return [
        int(float(line.split()[1]))
        for line in body.splitlines()
        if line.startswith("rl_insight_monitor_training_global_step{")
    ]


def test_a_batch_that_cannot_be_encoded_is_dropped_and_the_others_are_delivered(hub_server):
    server = hub_server()
    sender = BatchSender(server.url + "/api/v1/push", linger_s=0.01)
    sender.submit(batch(1))
    sender.submit(batch(object()))  # not an integer step: can never be sent
    sender.submit(batch(np.int64(3)))  # a numpy integer step is an integer
    sender.submit(batch(4))
    assert sender.flush(5)
    assert sender.stats["invalid_batches"] == 1 and sender.stats["sent_batches"] == 3
    assert sender.stats["failed_requests"] == 0  # never mistaken for an unreachable server
    [stream] = server.hub.streams()
    assert stream["step"] == 4 and stream["batches_kept"] == 3


def test_a_refused_batch_is_found_and_dropped_the_eleven_others_arrive_in_order(hub_server):
    server = hub_server()
    steps_at(server)
    time.sleep(0.1)
    sender = BatchSender(server.url + "/api/v1/push", linger_s=0.01)
    for step in range(1, 13):
        # step 7 carries a label the hub reserves: the server refuses that batch, and only it
        sender.submit(batch(step, labels={"job": "mine"} if step == 7 else None))
    assert sender.flush(10)
    assert sender.stats["rejected_batches"] == 1 and sender.stats["sent_batches"] == 11
    time.sleep(0.1)
    assert steps_at(server) == [1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 12]


def test_a_hub_restarted_between_two_pushes_gets_the_recent_batches_again_first(hub_server):
    first = hub_server()
    port = first.port
    sender = BatchSender(first.url + "/api/v1/push", linger_s=0.01)
    for step in (1, 2, 3):
        sender.submit(batch(step))
    assert sender.flush(5)
    first.close()  # a restart that no push noticed: no failed request
    second = hub_server(port=port)
    steps_at(second)
    time.sleep(0.1)
    sender.submit(batch(4))
    assert sender.flush(5)
    assert sender.stats["failed_requests"] == 0 and sender.stats["resent_batches"] == 3
    time.sleep(0.1)
    assert steps_at(second) == [1, 2, 3, 4, 4]


def test_after_fork_the_child_sends_its_own_batches_once(hub_server):
    server = hub_server()
    sender = BatchSender(server.url + "/api/v1/push", linger_s=0.01)
    sender.submit(batch(1, run="parent"))
    assert sender.flush(5)
    sender.submit(batch(2, run="parent"))  # pending in the parent at the fork
    pid = os.fork()
    if pid == 0:  # the child: a sender of its own, started afresh
        try:
            sender.submit(batch(1, run="child"))
            os._exit(0 if sender.flush(5) and sender.stats["sent_batches"] == 1 else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert sender.flush(5)
    streams = {s["labels"]["experiment_name"]: s for s in server.hub.streams()}
    assert streams["child"]["batches_kept"] == 1 and streams["parent"]["batches_kept"] == 2
    # both senders have delivered all they had (the child flushed before it exited): a copy of the
    # parent's pending batch sent by the child would be counted by now
    assert server.hub.stats.duplicates == 0 and streams["parent"]["step"] == 2


def test_the_sender_keeps_no_reference_to_what_verl_logged():
    """The spool holds encoded batches: a large object in verl's dict is freed once converted,
    also while the batch waits for a server that does not answer."""
    import gc
    import weakref

    from tests.helpers import free_port

    sender = BatchSender(f"http://127.0.0.1:{free_port()}/api/v1/push", linger_s=0.01)  # nobody listens
    big = np.zeros(1_000_000)  # not a scalar: skipped, and must not be kept alive
    alive = weakref.ref(big)
    sender.submit(MetricBatch("p", "e", 1, time.time(), {"loss": 0.5, "logits": big}, prefix="m_"))
    del big
    wait_for(lambda: sender.stats["failed_requests"] >= 1, 5, what="a first attempt")
    gc.collect()
    assert alive() is None and sender.pending() == 1 and sender.stats["skipped_values"] == 1


class ClosesKeptAliveConnections:
    """STAND-IN for a server whose keep-alive timeout fires just as the next request arrives: real
    HTTP/1.1 on loopback, each connection answers its first request (keep-alive, not announcing a
    close) and closes on the second without answering, the way uvicorn's idle timer races a client."""

    def __init__(self):
        import socket
        import threading

        self.answered = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/api/v1/push"
        threading.Thread(target=self._serve, daemon=True).start()

    @staticmethod
    def _read_request(conn):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += conn.recv(65536)
        return body

    def _serve(self):
        while True:
            conn, _ = self.listener.accept()
            with conn:
                body = self._read_request(conn)
                if body is None:
                    continue
                self.answered.append(body)
                answer = b'{"hub": "stand-in"}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(answer)).encode()
                    + b"\r\n\r\n"
                    + answer
                )
                self._read_request(conn)  # the next request on this connection: closed, unanswered


def test_a_connection_the_server_closed_while_idle_is_not_an_outage(caplog):
    server = ClosesKeptAliveConnections()
    sender = BatchSender(server.url, linger_s=0.01)
    with caplog.at_level("WARNING", logger="verl_rl_insight"):
        for step in (1, 2, 3):
            sender.submit(batch(step))
            assert sender.flush(5)
    assert len(server.answered) == 3 and sender.stats["sent_batches"] == 3
    assert sender.stats["failed_requests"] == 0 and sender.stats["resent_batches"] == 0
    assert not [r for r in caplog.records if "cannot reach" in r.getMessage()]


def test_a_host_clock_far_from_the_servers_is_named_once_and_the_steps_still_arrive(hub_server, caplog):
    server = hub_server()
    skewed = BatchSender(server.url + "/api/v1/push", linger_s=0.01)
    skewed.clock = lambda: time.time() - 600  # this host's clock ten minutes behind the server's
    in_sync = BatchSender(server.url + "/api/v1/push", linger_s=0.01)
    with caplog.at_level("WARNING", logger="verl_rl_insight"):
        for step in (1, 2, 3):
            skewed.submit(MetricBatch("p", "behind", step, skewed.clock(), {"loss": 0.5}, prefix="m_"))
            in_sync.submit(batch(step, run="on-time"))
        assert skewed.flush(5) and in_sync.flush(5)
    warnings = [r.getMessage() for r in caplog.records if "clock" in r.getMessage()]
    assert len(warnings) == 1 and re.search(r"clock is -(599|600|601) s from the server's", warnings[0]), warnings
    assert skewed.stats["clock_offset_s"] in range(-602, -597) and "clock_offset_s" not in in_sync.stats
    assert {s["labels"]["experiment_name"]: s["step"] for s in server.hub.streams()} == {"behind": 3, "on-time": 3}


def test_a_wrong_token_is_named_as_refused_not_as_an_outage_and_no_replay_is_promised(hub_server, caplog):
    server = hub_server(token="the-right-one")
    sender = BatchSender(server.url + "/api/v1/push", token="a-wrong-one", linger_s=0.01)
    with caplog.at_level("WARNING", logger="verl_rl_insight"):
        sender.submit(batch(1))
        said = wait_for(
            lambda: [r.getMessage() for r in caplog.records if "rl-insight" in r.getMessage()], 10, 0.05, "the warning"
        )
    assert len(said) == 1, said
    assert f"the server at {server.url}/api/v1/push refused the token (HTTP 401: " in said[0]
    assert "rl-insight server url" in said[0]
    assert "cannot reach" not in said[0] and "replayed" not in said[0]
    assert server.hub.streams() == []
    sender.close(0.5)


def test_a_burst_of_2000_log_calls_with_a_healthy_server_loses_none(hub_server, monkeypatch):
    """verl's real Tracking, logging a step dict made by verl's own metric functions 2,000 times
    back to back (faster than the sender's 0.25 s poll): every batch reaches the hub."""
    from verl.utils.tracking import Tracking

    from verl_rl_insight.commands.demo.verl_step import step_metrics
    from verl_rl_insight.trainer.plugins import metric_push

    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    tracking = Tracking("p", "burst", default_backend=["rl_insight"])
    logged = [step_metrics(step, 2000) for step in range(1, 2001)]  # made first: then logged back to back
    for step, metrics in enumerate(logged, start=1):
        tracking.log(metrics, step=step)
    sender = metric_push.sender()
    assert sender is not None and sender.flush(60)
    assert sender.stats["dropped_batches"] == 0, dict(sender.stats)
    assert sender.stats["sent_batches"] >= 2000
    [stream] = [s for s in server.hub.streams() if s["labels"]["experiment_name"] == "burst"]
    assert stream["step"] == 2000
    tracking.finish()


def test_the_hand_off_queue_is_bounded_by_the_values_it_holds_not_only_by_batches(hub_server, caplog):
    server = hub_server()
    sender = BatchSender(server.url + "/api/v1/push", queue_values=1000, linger_s=5.0)  # takes the queue in 5 s
    wide = {f"actor/key_{i}": float(i) for i in range(100)}
    with caplog.at_level("WARNING", logger="verl_rl_insight"):
        for step in range(1, 21):
            sender.submit(MetricBatch("p", "wide", step, time.time(), dict(wide), prefix="m_"))
    assert sender.stats["dropped_batches"] == 10 and sender.pending() == 10  # 1,000 values held, not 2,000
    said = [r.getMessage() for r in caplog.records if "queue full" in r.getMessage()]
    assert said == [
        "rl-insight: sender queue full (16384 batches or 1000 values); dropping metrics. "
        "Raise plugins.metric_push.queue_batches / queue_values?"
    ]
    assert sender.flush(20) and sender.stats["sent_batches"] == 10
    sender.close(1)


def test_a_server_busy_for_a_moment_at_exit_still_gets_the_runs_last_batch(hub_server):
    """The end of a run on a loaded machine: when ``finish()`` flushes the last step and the run's
    end, the real server refuses the connection for a moment (503: its share of connections for one
    address is full, held open here from loopback, where the trainer also pushes from). The share
    frees 1.5 s later: the flush tries again until it delivers (its first 503 had ended the flush,
    and the run's last batches and its end were lost)."""
    import socket
    import threading

    server = hub_server()
    share = server.server.config.http.max_per_client  # what one address may hold at once (512)
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(share)]
    try:
        wait_for(lambda: http("GET", server.url + "/api/v1/info")[0] == 503, 10, 0.05, "the share full")
        threading.Timer(1.5, lambda: [conn.close() for conn in held]).start()
        sender = BatchSender(server.url + "/api/v1/push", linger_s=0.01)
        sender.submit(MetricBatch("p", "ending", None, time.time(), {"rl_insight_run_finished": 1.0}))
        assert sender.flush(10), dict(sender.stats)
    finally:
        for conn in held:
            conn.close()
    assert sender.stats["failed_requests"] >= 1  # it was refused first: what the flush had to outlast
    [stream] = [s for s in server.hub.streams() if s["labels"]["experiment_name"] == "ending"]
    assert stream is not None
    sender.close(1)


def gives_up_early(sender, waited):
    """One batch submitted, then ``flush(30)``: it fails within 10 s (not at its timeout), the batch
    still held, after at least one failed request; ``waited`` says what a longer flush waited for."""
    sender.submit(batch(1))
    began = time.monotonic()
    assert not sender.flush(30)
    assert time.monotonic() - began < 10, waited
    assert sender.pending() == 1 and sender.stats["failed_requests"] >= 1
    sender.close(0.1)


def test_with_nothing_listening_a_flush_gives_up_after_one_more_try_not_at_its_timeout():
    """Promise 1: ``finish()`` with the server down does not hold the trainer's exit for the whole
    flush timeout: a refused connection says nothing is there to wait for."""
    from tests.helpers import free_port

    sender = BatchSender(f"http://127.0.0.1:{free_port()}/api/v1/push", linger_s=0.01)  # nobody listens
    gives_up_early(sender, "the flush waited for a server that is not there")


def test_a_batch_of_another_run_is_dropped_once_named_and_the_runs_own_steps_all_arrive(hub_server, caplog):
    """Under a run credential, one batch labelled with another run (the demo's first hardware sample
    came out as default/default on a loaded machine): the real server refuses it with a 403 naming
    that batch. That batch is found, dropped and named once; every step of the run arrives, the
    run's end too (the 403 had been taken for a refused credential and retried forever: the whole
    spool stuck behind it, 290 batches and the run's end lost, a warning every half second)."""
    from verl_rl_insight.contract import run_credential

    server = hub_server(token="the-servers-token")
    credential = run_credential.mint("the-servers-token", "p", "mine")
    sender = BatchSender(server.url + "/api/v1/push", token=credential, linger_s=0.01)
    with caplog.at_level("WARNING", logger="verl_rl_insight"):
        sender.submit(batch(1, run="mine"))
        sender.submit(MetricBatch("default", "default", None, time.time(), {"host_cpu": 0.5}, prefix="m_"))
        for step in range(2, 11):
            sender.submit(batch(step, run="mine"))
        sender.submit(MetricBatch("p", "mine", None, time.time(), {"rl_insight_run_finished": 1.0}))
        assert sender.flush(10), dict(sender.stats)
    assert sender.stats["rejected_batches"] == 1 and sender.stats["sent_batches"] == 11
    [stream] = [s for s in server.hub.streams() if s["labels"] == {"project": "p", "experiment_name": "mine"}]
    assert stream["step"] == 10
    assert not [s for s in server.hub.streams() if s["labels"].get("project") == "default"]
    said = [r.getMessage() for r in caplog.records if "rl-insight" in r.getMessage()]
    assert len(said) == 1 and "HTTP 403" in said[0] and "not default/default" in said[0], said
    sender.close(1)


def test_with_a_refused_token_a_flush_gives_up_after_one_more_try_not_at_its_timeout(hub_server):
    """Promise 1: a misconfigured token costs the trainer's exit no wait: a 401 will not turn into a
    200 while ``finish()`` waits (a busy server's 429 or 503 may, and is waited for)."""
    server = hub_server(token="the-right-one")
    sender = BatchSender(server.url + "/api/v1/push", token="a-wrong-one", linger_s=0.01)
    gives_up_early(sender, "the flush waited out a refused token")


class WatchedStats(collections.Counter):
    """The sender's stats, noting every write made without the sender's count lock held."""

    def __init__(self, lock):
        super().__init__()
        self.lock, self.unlocked_writes = lock, []

    def __setitem__(self, key, value):
        if not self.lock.locked():
            self.unlocked_writes.append((key, threading.current_thread().name))
        super().__setitem__(key, value)


def test_the_senders_counts_are_written_under_its_lock_from_either_thread(hub_server):
    """The training thread (a full queue) and the sender thread (sent, refused, failed) both count:
    each write holds the lock, so no count is lost between them (a free-threaded Python has no GIL)."""
    server = hub_server()
    sender = BatchSender(server.url + "/api/v1/push", queue_values=3, linger_s=0.01)
    sender.stats = stats = WatchedStats(sender._count_lock)
    sender.submit(MetricBatch("p", "e", 1, time.time(), {"a": 1.0, "b": 2.0}))
    sender.submit(MetricBatch("p", "e", 2, time.time(), {"a": 1.0, "b": 2.0}))  # over queue_values: dropped
    assert sender.flush(10)
    sender.url = f"http://127.0.0.1:{free_port()}/api/v1/push"  # the server goes away
    sender.submit(MetricBatch("p", "e", 3, time.time(), {"a": 1.0}))
    assert not sender.flush(2)
    assert stats["dropped_batches"] == 1 and stats["sent_batches"] == 1 and stats["failed_requests"] >= 1
    assert stats.unlocked_writes == []
    sender.close(0.1)
