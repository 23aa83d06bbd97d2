"""Exact delivery under concurrency: many pushers, named scrapers at 5 Hz, and a scraper whose
response is cut off. What each scraper got is replayed the way Prometheus ingests it (a sample
not newer than the series' last one is refused), and every step of every stream must come out
exactly once, in order."""

import collections
import random
import re
import socket
import struct
import threading
import time
import urllib.request

import pytest

from tests.helpers import http, push, wait_for

LINE = re.compile(
    r'^rl_insight_monitor_training_global_step\{experiment_name="([^"]+)",project="race"\} (\S+)(?: (\d+))?$'
)


def scrape_loop(url, name, stop, record, hz=5.0):
    opener = urllib.request.build_opener()
    while True:
        started = time.time()
        with opener.open(f"{url}/metrics?scraper={name}", timeout=30) as response:
            record.append((started, response.read().decode()))
        if stop.is_set():
            return
        time.sleep(max(0.0, 1.0 / hz - (time.time() - started)))


def replay(record):
    """Per stream: the steps a Prometheus fed these scrapes would store, in order, as
    (step, timestamp ms); and the historical (timestamped) samples it would have refused."""
    last_ts, stored, refused = {}, collections.defaultdict(list), []
    for scrape_time, body in record:
        for line in body.splitlines():
            match = LINE.match(line)
            if not match:
                continue
            run, value, stamp = match.group(1), int(float(match.group(2))), match.group(3)
            ts = int(stamp) if stamp else int(scrape_time * 1000)
            if ts <= last_ts.get(run, -1):
                if stamp:
                    refused.append((run, value, ts))
                continue  # a live repeat older than the history just sent: refused, and harmless
            last_ts[run] = ts
            if not stored[run] or stored[run][-1][0] != value:
                stored[run].append((value, ts))
    return stored, refused


@pytest.mark.parametrize(
    "runs, steps_per_push", [(64, None), (40, 200)], ids=["64-pushers-small-pushes", "40-pushes-of-200-steps"]
)
def test_concurrent_pushers_and_two_named_scrapers_see_every_step_exactly_once_in_order(
    hub_server, runs, steps_per_push
):
    server = hub_server()
    steps = 200
    stop = threading.Event()
    records = {"prometheus-a": [], "prometheus-b": []}
    scrapers = [
        threading.Thread(target=scrape_loop, args=(server.url, name, stop, record)) for name, record in records.items()
    ]
    for thread in scrapers:
        thread.start()
    errors = []

    def pusher(run):
        rng = random.Random(run)
        step = 1
        while step <= steps:
            size = steps_per_push or rng.randint(1, 20)
            batches = [
                {
                    "project": "race",
                    "experiment_name": f"run-{run}",
                    "step": s,
                    "time": time.time(),
                    "metrics": {f"m{k}": float(s) for k in range(20)},
                }
                for s in range(step, min(steps, step + size - 1) + 1)
            ]
            status, body = push(server.url, {"batches": batches})
            if status != 200:
                errors.append((run, status, body[:200]))
                return
            step += len(batches)
            time.sleep(rng.random() * 0.02)

    pushers = [threading.Thread(target=pusher, args=(run,)) for run in range(runs)]
    for thread in pushers:
        thread.start()
    for thread in pushers:
        thread.join(120)
    pushed = time.time()
    # two more scrapes each, begun after the last push, take what is left (a condition, not a sleep)
    wait_for(lambda: all(sum(t > pushed for t, _ in r) >= 2 for r in records.values()), 60, what="two more scrapes")
    stop.set()
    for thread in scrapers:
        thread.join(30)
    assert not errors, errors[:3]
    for name, record in records.items():
        # the positive control: scrapes did run while the pushers pushed
        assert any(t < pushed for t, _ in record[:-2]), f"{name} never scraped while the pushers ran"
        stored, refused = replay(record)
        assert not refused, f"{name}: Prometheus would refuse {len(refused)} steps, e.g. {refused[:3]}"
        for run in range(runs):
            got = [value for value, _ in stored[f"run-{run}"]]
            assert got == list(range(1, steps + 1)), (
                f"{name}, run-{run}: {len(set(range(1, steps + 1)) - set(got))} steps missing, "
                f"{len(got) - len(set(got))} repeated, first values {got[:10]}"
            )


def test_a_scrape_cut_off_mid_response_loses_nothing(hub_server):
    server = hub_server()
    assert http("GET", server.url + "/metrics?scraper=cut")[0] == 200
    time.sleep(0.2)
    now = time.time()
    batches = [
        {
            "project": "race",
            "experiment_name": "cut",
            "step": s,
            "time": now + s * 0.001,
            "metrics": {f"m{k}": float(s) for k in range(2000)},
        }
        for s in range(1, 51)
    ]
    assert push(server.url, {"batches": batches})[0] == 200
    time.sleep(0.2)
    # A client that reads the status line, then resets the connection: the body was not written.
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", server.port))
    client.sendall(b"GET /metrics?scraper=cut HTTP/1.1\r\nHost: x\r\n\r\n")
    assert client.recv(64).startswith(b"HTTP/1.1 200")
    time.sleep(0.5)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    time.sleep(0.5)
    stored, refused = replay([(time.time(), http("GET", server.url + "/metrics?scraper=cut")[1].decode())])
    assert not refused
    assert [value for value, _ in stored["cut"]] == list(range(1, 51))


def test_after_a_hub_restart_a_step_stamped_by_a_slower_clock_is_sent_once_and_resent_copies_are_not(tmp_path):
    """Sent positions survive a restart per batch, not per time: step 11, pushed by a second pusher
    whose clock is 2 s behind, is stamped before the step 10 the scraper already has; it must still
    reach the scraper, once, and the re-sent copies of steps 6-10 must not reach it again."""
    from verl_rl_insight.server.metrics.hub import MetricHub

    state = tmp_path / "hub-state.json"
    t0 = time.time() - 100

    def batch(step, stamped):
        return {"project": "race", "experiment_name": "skew", "step": step, "time": stamped, "metrics": {"m": step}}

    def scrape(hub, at):
        exposure = hub.expose("prometheus", at)
        body = exposure.body().decode()
        exposure.commit(True)
        hub.save_state()
        return [int(float(m.group(2))) for m in map(LINE.match, body.splitlines()) if m and m.group(3)]

    first = MetricHub(state_path=state, history_s=3600)
    for step in range(1, 11):
        first.push({"batches": [batch(step, t0 + step)]})
    assert scrape(first, t0 + 20) == list(range(1, 11))  # the positive control: history is sent in order

    restarted = MetricHub(state_path=state, history_s=3600)  # the same state file: a restart
    # the sender's 409 path: the batches it delivered recently come again, then the new step from
    # the pusher whose clock is 2 s slow
    restarted.push({"batches": [batch(step, t0 + step) for step in range(6, 11)]})
    restarted.push({"batches": [batch(11, t0 + 10 - 2)]})
    assert scrape(restarted, t0 + 30) == [11]
    restarted.push({"batches": [batch(12, t0 + 12)]})
    assert scrape(restarted, t0 + 31) == [12]


def test_values_read_back_after_a_clean_stop_reach_only_the_scrapers_that_had_the_history(tmp_path):
    """The latest values written at a clean stop are exposed at once after the restart, to unnamed
    scrapes and to the named scraper that had been sent every step; a scraper that had not (it
    began scraping only now) gets no value newer than the history it lacks: the steps the trainer's
    sender sends again reach it first, in order."""
    from verl_rl_insight.server.metrics.hub import MetricHub

    paths = {"state_path": tmp_path / "hub-state.json", "latest_path": tmp_path / "hub-latest.json"}
    t0 = time.time() - 100

    def batch(step):
        return {"project": "race", "experiment_name": "clean", "step": step, "time": t0 + step, "metrics": {"m": step}}

    def scrape(hub, name, at):
        exposure = hub.expose(name, at)
        body = exposure.body().decode()
        exposure.commit(True)
        return [(int(float(m.group(2))), bool(m.group(3))) for m in map(LINE.match, body.splitlines()) if m]

    first = MetricHub(history_s=3600, **paths)
    for step in (1, 2, 3):
        first.push({"batches": [batch(step)]})
    assert scrape(first, "had-it", t0 + 10) == [(1, True), (2, True), (3, True), (3, False)]
    first.save_state()
    assert first.save_latest() == 1
    restarted = MetricHub(history_s=3600, **paths)
    assert 'experiment_name="clean",project="race"} 3.0' in restarted.live_body().decode()
    assert scrape(restarted, "had-it", t0 + 20) == [(3, False)]  # the value, at once
    assert scrape(restarted, "new-one", t0 + 20) == []  # not before the history it lacks
    restarted.push({"batches": [batch(step) for step in (1, 2, 3)]})  # the sender's resend after a 409
    assert scrape(restarted, "new-one", t0 + 21) == [(1, True), (2, True), (3, True), (3, False)]
    assert scrape(restarted, "had-it", t0 + 21) == [(3, False)]  # and nothing twice


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_hub_stopped_or_killed_mid_run_sends_no_step_again_with_a_new_timestamp(tmp_path, how):
    """The real server process, a named scraper at 5 Hz and a run's real sender: the hub is stopped
    (or killed) at step 31 and started again at once on the same data dir. The positions of the last
    scrapes were not saved before a SIGKILL (they are saved at most once a second), so the sender's
    resent steps go out again: each with the timestamp it was first sent with, never a new one (a
    store keeps a sample per timestamp: two timestamps would store the step twice)."""
    import os
    import signal

    from tests.helpers import free_port, start_hub_process, stop_group
    from tests.server.metrics.test_run_budgets import verl_step
    from verl_rl_insight.trainer.client.metric_batch import MetricBatch
    from verl_rl_insight.trainer.client.sender import BatchSender

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    hub = start_hub_process(port, tmp_path)
    record, stop = [], threading.Event()

    def scraper():
        opener = urllib.request.build_opener()
        while not stop.is_set():
            try:
                with opener.open(f"{url}/metrics?scraper=prometheus-a", timeout=10) as response:
                    record.append((time.time(), response.read().decode()))
            except OSError:  # the hub is away
                pass
            time.sleep(0.2)

    thread = threading.Thread(target=scraper)
    thread.start()
    sender = BatchSender(url + "/api/v1/push", linger_s=0.1)
    try:
        for step in range(1, 61):
            if step == 31:
                if how == "SIGKILL":
                    os.killpg(hub.pid, signal.SIGKILL)
                    hub.wait(10)
                else:
                    stop_group(hub)
                hub = start_hub_process(port, tmp_path)
            sender.submit(MetricBatch("p", "crash", step, time.time(), verl_step(step), "rl_insight_monitor_"))
            time.sleep(0.05)
        assert sender.flush(30)
        flushed = time.time()
        wait_for(lambda: sum(t > flushed for t, _ in record) >= 3, 30, what="three more scrapes")
    finally:
        stop.set()
        thread.join(30)
        sender.close(1)
        stop_group(hub)
    assert sender.stats["resent_batches"] > 0  # the positive control: the sender sent steps again
    line = re.compile(
        r'^rl_insight_monitor_training_global_step\{experiment_name="crash",project="p"\} (\S+) (\d+)$', re.M
    )
    stamps = collections.defaultdict(set)
    for _, body in record:
        for value, ts in line.findall(body):
            stamps[int(float(value))].add(int(ts))
    assert sorted(stamps) == list(range(1, 61)), sorted(set(range(1, 61)) - set(stamps))
    twice = {step: sorted(ts) for step, ts in stamps.items() if len(ts) > 1}
    assert not twice, f"{len(twice)} of 60 steps sent again with a new timestamp: {twice}"


def test_a_scrape_whose_positions_a_crash_lost_gives_its_batches_the_same_timestamps_again(tmp_path):
    """The deterministic core of the test above: a scrape is written and its positions are not saved
    (the crash comes first); the restarted hub gets the sender's resent batches after the scraper's
    next visit and sends them with the timestamps of the first body, not new ones."""
    from verl_rl_insight.server.metrics.hub import MetricHub

    state = tmp_path / "hub-state.json"
    t0 = time.time() - 100

    def batch(step, stamped=None):
        stamped = t0 + step if stamped is None else stamped
        return {"project": "race", "experiment_name": "crash", "step": step, "time": stamped, "metrics": {"m": step}}

    def scrape(hub, at):
        exposure = hub.expose("prometheus", at)
        body = exposure.body().decode()
        exposure.commit(True)  # written; hub-state.json is saved later, at most once a second
        return {int(float(m.group(2))): int(m.group(3)) for m in map(LINE.match, body.splitlines()) if m and m.group(3)}

    first = MetricHub(state_path=state, history_s=3600)
    first.push({"batches": [batch(step) for step in range(1, 4)]})
    scrape(first, t0 + 5)
    first.save_state()  # steps 1-3: positions on disk
    first.push({"batches": [batch(step) for step in range(4, 7)]})
    first.push({"batches": [batch(7, t0 + 4.5)]})  # a slow pusher's step, stamped before the last visit
    sent = scrape(first, t0 + 8)  # written, then the crash: its positions never saved
    assert sorted(sent) == [4, 5, 6, 7] and sent[7] > (t0 + 5) * 1000  # the positive control: 7 was moved

    restarted = MetricHub(state_path=state, history_s=3600)
    assert scrape(restarted, t0 + 9) == {}  # its first visit comes before the sender's resend
    restarted.push({"batches": [*(batch(step) for step in range(1, 7)), batch(7, t0 + 4.5)]})  # the sender's 409 path
    again = scrape(restarted, t0 + 10)
    assert again == sent, f"sent again with new timestamps: {again} (first sent {sent})"
