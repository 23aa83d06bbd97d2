"""Delivery acknowledged by the store: a real Prometheus scrapes the hub through a proxy that cuts
one scrape off after the hub's kernel took every byte (the hub sees a written response; Prometheus
sees a body that ends early and stores none of it). The hub reads the scrape numbers back from
Prometheus, finds the scrape missing and sends it again with the same timestamps: every step is in
Prometheus once, in order, with the time it was first sent with."""

import json
import re
import socket
import struct
import threading
import time
import urllib.parse
import urllib.request

from tests.helpers import Prometheus, free_port, http, push, stack_prometheus, start_hub_process, stop_group, wait_for

STEP_LINE = re.compile(
    r'^rl_insight_monitor_training_global_step\{experiment_name="cut",project="acked"\} (\S+) (\d+)$'
)


class CuttingProxy:
    """Between Prometheus and the hub: reads each scrape whole from the hub, and hands it on whole,
    but for the first one that carries a step of experiment "cut" once ``arm()`` was called: of
    that one Prometheus gets the headers and 150 bytes, then a reset."""

    def __init__(self, hub_port):
        self.hub_port = hub_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.served = 0
        self.armed = False
        self.cut_body = None  # the body of the scrape cut off
        self.stopped = False
        threading.Thread(target=self._serve, daemon=True).start()

    def arm(self):
        self.armed = True

    def _serve(self):
        while not self.stopped:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    self._one(conn)
                except OSError:  # the hub gone (the test's end) or the scraper hung up: that scrape fails
                    continue

    def _one(self, conn):
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(4096)
            if not chunk:
                return
            request += chunk
        path = request.split(b" ", 2)[1].decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.hub_port}{path}", timeout=10) as response:
            body = response.read()  # the hub wrote all of it: it counts the scrape as written
        head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {len(body)}\r\n"
        head += "Connection: close\r\n\r\n"
        text = body.decode()
        if self.armed and self.cut_body is None and any(map(STEP_LINE.match, text.splitlines())):
            self.cut_body = text
            conn.sendall(head.encode() + body[:150])
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
            return
        conn.sendall(head.encode() + body)
        self.served += 1

    def stop(self):
        self.stopped = True
        self.listener.close()


def stamped_steps(body):
    """{step: timestamp ms} of the timestamped global-step lines of a body."""
    return {int(float(m.group(1))): int(m.group(2)) for m in map(STEP_LINE.match, body.splitlines()) if m}


def test_a_scrape_cut_off_after_the_kernel_took_it_is_sent_again_and_stored_once_with_its_own_times(tmp_path):
    hub_port = free_port()
    proxy = CuttingProxy(hub_port)
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{proxy.port}"], out_of_order_s=1800)
    hub = start_hub_process(hub_port, tmp_path, confirm_scrapers={"test-prometheus": prometheus.url})
    url = f"http://127.0.0.1:{hub_port}"
    try:
        wait_for(lambda: proxy.served >= 2, 30, what="Prometheus scraping through the proxy")  # positive control
        proxy.arm()
        logged = {}

        def log(step):
            logged[step] = time.time()
            batch = {"project": "acked", "experiment_name": "cut", "step": step, "time": logged[step], "metrics": {}}
            assert push(url, {"batches": [batch]})[0] == 200
            time.sleep(0.3)

        for step in range(1, 6):
            log(step)
        wait_for(lambda: proxy.cut_body is not None, 30, what="a scrape carrying steps, cut off")
        cut = stamped_steps(proxy.cut_body)
        assert cut, "the scrape cut off carried steps"
        for step in range(6, 11):
            log(step)

        def stored():
            samples = prometheus.raw_samples('rl_insight_monitor_training_global_step{experiment_name="cut"}', 600)
            return sorted((t, int(v)) for values in samples.values() for v, t in values)

        samples = wait_for(
            lambda: (s := stored()) and {v for _, v in s} >= set(range(1, 11)) and s, 30, what="every step stored"
        )
        # once each, in order (the live value repeats a step until the next: folded)
        steps = [v for i, (_, v) in enumerate(samples) if i == 0 or samples[i - 1][1] != v]
        assert steps == list(range(1, 11)), steps
        first = {}
        for t, v in samples:
            first.setdefault(v, round(t * 1000))
        # the steps of the scrape cut off: stored at the very timestamps they were first sent with
        assert {step: first[step] for step in cut} == cut
        # and every step at its own time: moved only past the scrape before it, or to 50 ms before
        # the scrape that takes it when it arrived right before that scrape (hub.LIVE_MARGIN_MS)
        for step in logged:
            assert -60 <= first[step] - logged[step] * 1000 <= 1500, (step, first[step] - logged[step] * 1000)

        status, body = http("GET", url + "/api/v1/hub")
        figures = json.loads(body)
        assert figures["scrapes_not_stored_total"] >= 1, figures
        assert figures["batches_resent_total"] >= len(cut), figures
        assert figures["batches_lost_total"] == 0
        # the store confirmed the rest: nothing waits for it any more
        wait_for(
            lambda: (
                json.loads(http("GET", url + "/api/v1/hub")[1])["scraper_names"]["test-prometheus"][
                    "scrapes_awaiting_store"
                ]
                <= 3
            ),
            15,
            what="the scrapes confirmed",
        )
    finally:
        stop_group(hub)
        prometheus.stop()
        proxy.stop()


def test_a_store_that_cannot_be_asked_keeps_the_history_and_training_goes_on(hub_server):
    """The confirming scraper's Prometheus is not reachable for the read-back: the push path is not
    slowed or refused, the history stays, and nothing is sent twice meanwhile."""
    from verl_rl_insight.server.metrics.delivery import DeliveryCheck

    server = hub_server(confirming=frozenset({"mine"}))
    hub = server.hub
    check = DeliveryCheck(hub, {"mine": f"http://127.0.0.1:{free_port()}"}, settle_s=0.0)
    assert http("GET", server.url + "/metrics?scraper=mine")[0] == 200
    now = time.time()
    batches = [{"project": "p", "experiment_name": "down", "step": s, "time": now + s * 0.01} for s in (1, 2)]
    assert push(server.url, {"batches": [dict(b, metrics={"m": 1.0}) for b in batches]})[0] == 200
    time.sleep(0.1)
    first = stamped(http("GET", server.url + "/metrics?scraper=mine")[1].decode())
    assert first == [1, 2]  # the positive control: the steps were sent

    def awaiting_store() -> int:
        return hub.summary()["scraper_names"]["mine"]["scrapes_awaiting_store"]

    # the scrape waits for its store once the server has settled its write (just after the client read it)
    wait_for(lambda: awaiting_store() == 1, 10, what="the scrape awaiting its store")
    check.check()  # nobody answers: asked again next round
    assert awaiting_store() == 1
    assert stamped(http("GET", server.url + "/metrics?scraper=mine")[1].decode()) == []
    # the store answers, without the scrape: sent again, once
    numbers, _ = hub.awaiting(time.time())["mine"]
    hub.confirm("mine", numbers, stored=set())
    again = http("GET", server.url + "/metrics?scraper=mine")[1].decode()
    assert stamped(again) == [1, 2]
    assert stamped(http("GET", server.url + "/metrics?scraper=mine")[1].decode()) == []


def stamped(body):
    return [
        int(float(line.split()[1]))
        for line in body.splitlines()
        if line.startswith('rl_insight_monitor_training_global_step{experiment_name="down"') and len(line.split()) == 3
    ]


def test_a_scrape_not_yet_confirmed_when_the_hub_restarts_is_still_checked_and_sent_again(tmp_path):
    """The hub stops between writing a scrape and hearing from the store: the scrape's number and
    timestamps are on disk; the restarted hub asks about it, and when the store lacks it sends the
    steps the trainer's sender delivers again (its 409 path) with the timestamps of the first time."""
    from verl_rl_insight.server.metrics.hub import MetricHub

    state = tmp_path / "hub-state.json"
    t0 = time.time() - 100

    def batch(step):
        return {"project": "p", "experiment_name": "down", "step": step, "time": t0 + step, "metrics": {"m": 1.0}}

    def scrape(hub, at):
        exposure = hub.expose("prometheus", at)
        body = exposure.body().decode()
        exposure.commit(True)
        hub.save_state()
        return {
            int(float(line.split()[1])): int(line.split()[2])
            for line in body.splitlines()
            if "global_step{" in line and len(line.split()) == 3
        }

    first = MetricHub(state_path=state, history_s=3600, confirming=frozenset({"prometheus"}))
    for step in (1, 2, 3):
        first.push({"batches": [batch(step)]})
    sent = scrape(first, t0 + 10)
    assert sorted(sent) == [1, 2, 3]  # the positive control
    restarted = MetricHub(state_path=state, history_s=3600, confirming=frozenset({"prometheus"}))
    numbers, _ = restarted.awaiting(time.time())["prometheus"]
    restarted.push({"batches": [batch(step) for step in (1, 2, 3)]})  # the sender's resend after the 409
    restarted.confirm("prometheus", numbers, stored=set())
    assert scrape(restarted, t0 + 20) == sent  # the same steps at the same timestamps
    numbers, _ = restarted.awaiting(time.time())["prometheus"]
    restarted.confirm("prometheus", numbers, stored=set(numbers))
    assert restarted.summary()["scraper_names"]["prometheus"]["scrapes_awaiting_store"] == 0
    assert scrape(restarted, t0 + 21) == {}


def test_a_registered_target_cannot_confirm_a_scrape_for_the_hub(tmp_path):
    """A scrape target registered with the server (any run credential may register one) exposes
    the hub's scrape-number series with the hub's job label and a number of its choosing: the
    server's own Prometheus stores it under `exported_job` (the targets' job keeps its own labels),
    and the server's read-back, which asks for job rl_insight_hub, sees only the hub's numbers."""
    import os
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.helpers import rl_insight
    from verl_rl_insight.server.metrics.delivery import DeliveryCheck
    from verl_rl_insight.server.metrics.hub import MetricHub

    hub_port, prom_port = free_port(), free_port()
    scraper = f"prometheus-{prom_port}"
    fake = f'rl_insight_hub_scrape_number{{scraper="{scraper}",job="rl_insight_hub"}} 12345\n'.encode()

    class Target(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(fake)))
            self.end_headers()
            self.wfile.write(fake)

        def log_message(self, *args):
            pass

    target = ThreadingHTTPServer(("127.0.0.1", 0), Target)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    start = ("server", "start", "--detach", "--local-trust", "--bind", "127.0.0.1", "--port", str(hub_port),
             "--prometheus-port", str(prom_port), "--scrape-interval", "1", "--data-dir", str(tmp_path / "data"),
             "--no-tempo", "--no-grafana", "--no-alertmanager")  # fmt: skip
    env = dict(os.environ)
    assert rl_insight(*start, env=env).returncode == 0
    prom = stack_prometheus(tmp_path / "data", prom_port)
    try:
        registration = {
            "address": f"127.0.0.1:{target.server_address[1]}",
            "job": "vllm",
            "labels": {"project": "p", "experiment_name": "e"},
            "ttl_s": 600,
        }
        assert http("POST", f"http://127.0.0.1:{hub_port}/api/v1/targets", json.dumps(registration).encode())[0] == 200
        batch = {"project": "p", "experiment_name": "e", "step": 1, "time": time.time(), "metrics": {"m": 1.0}}
        assert push(f"http://127.0.0.1:{hub_port}", {"batches": [batch]})[0] == 200

        def stored_fake():
            query = urllib.parse.urlencode({"query": "rl_insight_hub_scrape_number == 12345"})
            status, body = http("GET", f"{prom}/api/v1/query?{query}")
            return status == 200 and json.loads(body)["data"]["result"]

        [faked] = wait_for(stored_fake, 30, what="the target's fake number in Prometheus")  # it did land
        assert faked["metric"]["exported_job"] == "rl_insight_hub" and faked["metric"]["job"] != "rl_insight_hub"
        check = DeliveryCheck(MetricHub(), {scraper: prom}, settle_s=0, jobs={scraper: "rl_insight_hub"})
        numbers = wait_for(lambda: check.stored(prom, scraper, 120), 20, what="the hub's own scrape numbers")
        assert 12345 not in numbers and all(n > 10**12 for n in numbers)  # milliseconds: the hub's
        unfiltered = DeliveryCheck(MetricHub(), {scraper: prom}, settle_s=0)  # the negative control
        assert 12345 in unfiltered.stored(prom, scraper, 120)
    finally:
        rl_insight("server", "stop", env=env)
        target.shutdown()


def test_a_run_credential_cannot_register_a_target_under_a_job_the_server_scrapes_itself(tmp_path):
    """A target registered as job rl_insight_hub would have its series stored with the hub's job,
    fake scrape numbers included, and the read-back would count scrapes the store never got: every
    job of the managed prometheus.yml is refused (400 naming it), whoever registers; another job is taken."""
    import yaml

    from verl_rl_insight.contract import run_credential
    from verl_rl_insight.server.api.asgi import Api
    from verl_rl_insight.server.api.http_server import HttpServer
    from verl_rl_insight.server.api.parts import ApiParts
    from verl_rl_insight.server.managed import prometheus
    from verl_rl_insight.server.metrics.hub import MetricHub
    from verl_rl_insight.server.settings.server import ServerSettings

    token = "the-servers-own-token"
    api = Api(ApiParts(MetricHub(), token=token))
    server = HttpServer(api, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{server.port}/api/v1/targets"
    settings = ServerSettings(data_dir=str(tmp_path), remote_write=[{"url": "http://127.0.0.1:1/write"}])
    jobs = [job["job_name"] for job in yaml.safe_load(prometheus.render_config(settings))["scrape_configs"]]
    assert "rl_insight_hub" in jobs and len(jobs) == 3
    credential = run_credential.mint(token, "p", "e")
    try:
        for job, who in [(j, credential) for j in jobs] + [("rl_insight_hub", token)]:
            body = {"address": "127.0.0.1:8000", "job": job, "labels": {"project": "p", "experiment_name": "e"}}
            headers = {"Authorization": f"Bearer {who}", "Content-Type": "application/json"}
            status, answer = http("POST", url, json.dumps(body).encode(), headers)
            assert status == 400 and f"job {job!r} is reserved" in answer.decode(), (job, status, answer)
        body = {"address": "127.0.0.1:8000", "job": "vllm", "labels": {"project": "p", "experiment_name": "e"}}
        headers = {"Authorization": f"Bearer {credential}", "Content-Type": "application/json"}
        assert http("POST", url, json.dumps(body).encode(), headers)[0] == 200  # the positive control
        assert [t["job"] for t in api.parts.targets.list()] == ["vllm"]
    finally:
        server.stop()
        api.close()
