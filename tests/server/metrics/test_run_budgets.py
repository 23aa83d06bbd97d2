"""One run can never take what another run needs: the attacker here holds only a run credential
(what every Ray worker of its job carries) and the real API on loopback. Each run has a share of
the hub's memory bound, of the timeline's waiting spans and a cap on its scrape targets; a run at
its share is refused (or loses its own oldest), the others are untouched; a batch stamped ahead of
the server's clock cannot pin a run's live values."""

import json
import re
import time

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.helpers import http, wait_for
from verl_rl_insight.contract import run_credential
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts, Startup
from verl_rl_insight.server.metrics.hub import Bound, MetricHub
from verl_rl_insight.server.settings.memory import MemoryShares
from verl_rl_insight.server.settings.server import ServerSettings
from verl_rl_insight.server.stores.spans import SpanStore
from verl_rl_insight.server.stores.targets import TargetRegistry
from verl_rl_insight.server.timeline.live import LiveFigures
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.client.sender import BatchSender

TOKEN = "the-servers-own-token"
LIMIT = 16 * 2**20
PROTOBUF = "application/x-protobuf"


class Served:
    """The real hub, target registry, span store and timeline figures behind the real API."""

    def __init__(self, tmp_path, memory_limit_bytes=LIMIT, max_targets_per_run=None, settle_s=60.0, max_series=None):
        targets = TargetRegistry() if max_targets_per_run is None else TargetRegistry(max_per_run=max_targets_per_run)
        # wired as the server wires it (compose.py)
        shares = MemoryShares(memory_limit_bytes)
        bound = Bound(shares.hub, max_series if max_series is not None else 500_000)
        self.figures = LiveFigures(
            settle_s=settle_s,
            book=lambda nbytes: bound.book_other("timeline", nbytes),
            budget_bytes=shares.timeline,
        )
        self.hub = MetricHub(bound=bound, derived=(self.figures,))
        self.api = Api(
            ApiParts(
                self.hub,
                targets=targets,
                token=TOKEN,
                startup=Startup(spans=SpanStore(tmp_path / "spans")),
                figures=self.figures,
                memory=shares,
            )
        )
        self.http = HttpServer(self.api, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.http.port}"

    def close(self):
        self.http.stop()
        self.api.close()


@pytest.fixture
def served(tmp_path):
    made = []

    def make(**kwargs):
        made.append(Served(tmp_path, **kwargs))
        return made[-1]

    yield make
    for server in made:
        server.close()


def call(method, url, credential, body=None, kind="application/json"):
    """(status, answer text, headers) of one request with ``credential``."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url, data=body, method=method, headers={"Authorization": f"Bearer {credential}", "Content-Type": kind}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def verl_step(step, total=60):
    """What verl's trainer logs at ``step`` (verl's own metric functions on a batch, plus the keys
    ``fit`` adds: ``training/global_step`` among them)."""
    from verl_rl_insight.commands.demo.verl_step import step_metrics

    metrics = step_metrics(step, total)
    assert metrics["training/global_step"] == step and len(metrics) > 40
    return metrics


def long_label_push(project, experiment, push, streams=20, step=1):
    """One push of ``streams`` streams of one run, each with 16 extra labels of 256 characters (the
    longest the schema takes): every exposition line some 4.5 kB long."""
    return json.dumps(
        {
            "batches": [
                {
                    "project": project,
                    "experiment_name": experiment,
                    "step": step,
                    "labels": {"replica": f"{push:04d}-{s:03d}", **{f"l{i}": chr(97 + i) * 256 for i in range(15)}},
                    "metrics": {f"rl_insight_monitor_metric_{i}": i / 7 for i in range(10)},
                }
                for s in range(streams)
            ]
        }
    ).encode()


STEP_LINE = re.compile(
    r'^rl_insight_monitor_training_global_step\{experiment_name="honest",project="p"\} (\S+) (\d+)$', re.M
)


def test_one_run_filling_the_hubs_memory_leaves_another_runs_steps_whole(served):
    """The attacker's run fills what it may of the bound with long label sets (a few pushes); an
    honest run then logs 40 real verl steps through the real sender: none refused, none evicted
    before the scrape, all 40 in the named scraper's body; the attacker is told 429 + Retry-After."""
    server = served()
    attacker = run_credential.mint(TOKEN, "p", "attacker")
    refused = None
    for n in range(200):
        status, answer, headers = call(
            "POST", server.url + "/api/v1/push", attacker, long_label_push("p", "attacker", n)
        )
        if status != 200:
            refused = (status, answer, headers)
            break
    assert refused is not None, "the attacker never reached a bound"  # the positive control
    attacker_held = server.hub.summary()["memory_bytes"]

    sender = BatchSender(server.url + "/api/v1/push", token=run_credential.mint(TOKEN, "p", "honest"), linger_s=0.01)
    for step in range(1, 41):
        sender.submit(MetricBatch("p", "honest", step, time.time(), verl_step(step, 40), "rl_insight_monitor_"))
        assert sender.flush(10)
        for n in range(3):  # meanwhile the attacker's streams log steps too: history to hold
            body = long_label_push("p", "attacker", n, step=1 + 3 * step + n)
            assert call("POST", server.url + "/api/v1/push", attacker, body)[0] in (200, 429)
    assert sender.flush(30)
    assert sender.stats["rejected_batches"] == 0 and sender.stats["dropped_batches"] == 0
    sender.close(1)
    [kept] = [s["batches_kept"] for s in server.hub.streams() if s["labels"]["experiment_name"] == "honest"]
    assert kept == 40, f"{40 - kept} of the honest run's 40 steps evicted before any scrape"
    status, body = http("GET", server.url + "/metrics?scraper=prometheus", headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200
    steps = [int(float(value)) for value, _ in STEP_LINE.findall(body.decode())]
    assert steps == list(range(1, 41)), f"{len(set(range(1, 41)) - set(steps))} of 40 steps lost"
    # the attacker was held to its share and told to come back later, not that its data is bad
    status, answer, headers = refused
    assert status == 429 and "memory_limit_mb" in answer and "share" in answer, (status, answer[:300])
    assert int(headers["retry-after"]) > 0
    assert attacker_held <= 0.5 * LIMIT + 2**20  # half of what is free, the rest left for others


def test_one_run_filling_the_series_limit_leaves_another_runs_new_keys_and_steps_whole(served):
    """The attacker's run pushes new metric names until refused: it gets 429 (its share of
    max_series), never the whole limit; an honest run then logs 20 real verl steps through the real
    sender, a validation's new keys every 5: none refused or dropped, every step in the scrape."""
    server = served(memory_limit_bytes=256 * 2**20, max_series=4000)
    attacker = run_credential.mint(TOKEN, "p", "attacker")
    refused = None
    for n in range(40):
        names = {f"rl_insight_monitor_junk_{n}_{i}": 1.0 for i in range(250)}
        body = json.dumps({"batches": [{"project": "p", "experiment_name": "attacker", "step": n, "metrics": names}]})
        status, answer, headers = call("POST", server.url + "/api/v1/push", attacker, body.encode())
        if status != 200:
            refused = (status, answer, headers)
            break
    assert refused is not None, "the attacker never reached a bound"  # the positive control
    status, answer, headers = refused
    assert status == 429 and "max_series" in answer and "share" in answer, (status, answer[:300])
    assert int(headers["retry-after"]) > 0
    assert server.hub.summary()["series"] <= 0.5 * 4000

    sender = BatchSender(server.url + "/api/v1/push", token=run_credential.mint(TOKEN, "p", "honest"), linger_s=0.01)
    for step in range(1, 21):
        metrics = verl_step(step, 20)
        if step % 5 == 0:  # verl's validation: keys the run did not have before
            metrics.update({f"val-core/source_{step}/reward/mean@1": 0.5, f"val-aux/source_{step}/score/mean@1": 0.5})
        sender.submit(MetricBatch("p", "honest", step, time.time(), metrics, "rl_insight_monitor_"))
        assert sender.flush(10)
    assert sender.stats["rejected_batches"] == 0 and sender.stats["dropped_batches"] == 0, sender.stats
    sender.close(1)
    status, body = http("GET", server.url + "/metrics?scraper=prometheus", headers={"Authorization": f"Bearer {TOKEN}"})
    steps = [int(float(value)) for value, _ in STEP_LINE.findall(body.decode())]
    assert steps == list(range(1, 21)), f"{len(set(range(1, 21)) - set(steps))} of 20 steps lost"
    assert 'rl_insight_monitor_val_core_source_20_reward_mean_1{experiment_name="honest"' in body.decode()


def test_a_run_at_its_share_is_told_to_retry_and_its_sender_keeps_the_batches_until_there_is_room(served):
    """The real sender of a run at its share gets 429: it drops nothing as bad data, keeps the
    batches, and delivers them once the run has room again (here: the operator deleted its old streams)."""
    server = served()
    credential = run_credential.mint(TOKEN, "p", "greedy")
    for n in range(400):  # until not even one more stream fits in its share
        body = long_label_push("p", "greedy", n, streams=20 if n < 40 else 1)
        status, _, _ = call("POST", server.url + "/api/v1/push", credential, body)
        if status != 200 and n >= 40:
            break
    for n in range(400):  # and until not even a stream of one metric fits (what the sender pushes below)
        labels = {"replica": f"one-{n}", **{f"l{i}": chr(97 + i) * 256 for i in range(15)}}
        body = json.dumps(
            {"batches": [{"project": "p", "experiment_name": "greedy", "labels": labels, "metrics": {"loss": 0.5}}]}
        )
        status, _, _ = call("POST", server.url + "/api/v1/push", credential, body.encode())
        if status != 200:
            break
    assert status == 429
    sender = BatchSender(server.url + "/api/v1/push", token=credential, linger_s=0.01, retry_max_s=0.2)
    labels = {"replica": "new", **{f"l{i}": chr(97 + i) * 256 for i in range(15)}}
    for step in range(1, 6):
        sender.submit(MetricBatch("p", "greedy", step, time.time(), {"loss": 0.5}, "rl_insight_monitor_", labels))
    wait_for(lambda: sender.stats["failed_requests"] >= 2, 10, what="refused and retried")
    assert sender.stats["rejected_batches"] == 0 and sender.pending() == 5  # kept, not dropped
    delete = "/api/v1/runs?project=p&experiment_name=greedy"
    assert call("DELETE", server.url + delete, TOKEN)[0] == 200
    assert sender.flush(10) and sender.stats["rejected_batches"] == 0
    sender.close(1)
    [stream] = server.hub.streams()
    assert stream["labels"]["replica"] == "new" and stream["step"] == 5 and stream["batches_kept"] == 5


def test_a_single_run_may_use_most_of_the_bound_for_its_history():
    hub = MetricHub(memory_limit_bytes=LIMIT)
    metrics = {f"rl_insight_monitor_m{i}": 1.0 for i in range(200)}
    for step in range(1, 3000):
        hub.push({"batches": [{"project": "p", "experiment_name": "alone", "step": step, "metrics": metrics}]})
        if hub.stats.history_evicted:
            break
    assert hub.stats.history_evicted > 0  # the positive control: it did reach its share
    assert hub.summary()["memory_bytes"] >= 0.7 * LIMIT


def test_a_run_credential_registers_at_most_its_runs_cap_of_targets_and_another_run_is_untouched(served):
    server = served(max_targets_per_run=8)
    attacker = run_credential.mint(TOKEN, "p", "attacker")

    def target(run, port, credential):
        labels = {"project": "p", "experiment_name": run}
        body = json.dumps({"address": f"127.0.0.1:{port}", "job": "vllm", "labels": labels}).encode()
        return call("POST", server.url + "/api/v1/targets", credential, body)

    assert all(target("attacker", 9000 + i, attacker)[0] == 200 for i in range(8))
    status, answer, _ = target("attacker", 9100, attacker)
    assert status == 400 and "max_targets_per_run: 8" in answer, answer
    assert target("attacker", 9000, attacker)[0] == 200  # a heartbeat of one it has is no new target
    assert target("honest", 9200, run_credential.mint(TOKEN, "p", "honest"))[0] == 200
    listed = json.loads(http("GET", server.url + "/api/v1/targets")[1])["targets"]
    assert len(listed) == 9


def test_a_run_credential_cannot_take_over_another_runs_target_or_a_persons(served):
    """Holding only its own run credential, an attacker registers the honest run's engine address
    (and a person's node exporter) under its own labels: refused, naming the field and the owner;
    Prometheus' service discovery still labels each target as its owner registered it, and the
    honest run still renews its own."""
    server = served()
    honest = run_credential.mint(TOKEN, "p", "honest")
    attacker = run_credential.mint(TOKEN, "p", "attacker")

    def target(address, job, run, credential, ttl_s=90):
        labels = {"project": "p", "experiment_name": run, "replica": "0"}
        body = json.dumps({"address": address, "job": job, "labels": labels, "ttl_s": ttl_s}).encode()
        return call("POST", server.url + "/api/v1/targets", credential, body)

    assert target("127.0.0.1:9300", "vllm", "honest", honest)[0] == 200
    node = json.dumps({"address": "127.0.0.1:9100", "job": "node", "labels": {}, "ttl_s": 0}).encode()
    assert call("POST", server.url + "/api/v1/targets", TOKEN, node)[0] == 200  # a person's, with the token
    status, answer, _ = target("127.0.0.1:9300", "vllm", "attacker", attacker)
    assert status == 403 and "address" in answer and "run p/honest" in answer, (status, answer)
    status, answer, _ = target("127.0.0.1:9100", "node", "attacker", attacker, ttl_s=1)
    assert status == 403 and "a person" in answer, (status, answer)
    for address, job in (("127.0.0.1:9300", "VLLM"), ("127.0.0.1:9300", "vllm2"), ("127.0.0.1:9100", "vllm")):
        status, answer, _ = target(address, job, "attacker", attacker)  # the same address under another job
        assert status == 403 and "address" in answer, (address, job, status, answer)
    assert target("LocalHost:9400", "vllm", "honest", honest)[0] == 200
    status, answer, _ = target("localhost:9400", "sglang", "attacker", attacker)  # DNS names know no case
    assert status == 403 and "run p/honest" in answer, (status, answer)
    for ttl_s in (0, 86400):  # a run's targets leave with it: none that stays, none for a day
        status, answer, _ = target("127.0.0.1:9302", "vllm", "attacker", attacker, ttl_s=ttl_s)
        assert status == 400 and "ttl_s" in answer, (ttl_s, status, answer)
    assert target("127.0.0.1:9300", "vllm", "honest", honest)[0] == 200  # its own heartbeat
    assert target("127.0.0.1:9301", "vllm", "attacker", attacker)[0] == 200  # an address of its own
    sd = json.loads(http("GET", server.url + "/api/v1/sd")[1])
    # a target's name as given: its ``instance`` where it was a name, else the address itself
    owners = {
        group["labels"].get("instance", group["targets"][0]): group["labels"].get("experiment_name") for group in sd
    }
    assert owners == {
        "127.0.0.1:9300": "honest",
        "127.0.0.1:9100": None,
        "127.0.0.1:9301": "attacker",
        "LocalHost:9400": "honest",  # handed to Prometheus as the address it resolved to when registered
    }
    assert {group["targets"][0] for group in sd if group["labels"].get("instance") == "LocalHost:9400"} == {
        "127.0.0.1:9400"
    }
    static = [t for t in json.loads(http("GET", server.url + "/api/v1/targets")[1])["targets"] if not t["ttl_s"]]
    assert [t["address"] for t in static] == ["127.0.0.1:9100"]  # still a static target, not one that expires


def test_the_default_target_cap_holds_the_largest_job_one_hub_holds():
    """16,384 GPUs as 2,048 nodes of 8, a rollout replica per node and the TransferQueue endpoint:
    registered whole under the default; a run never gets the registry's 10,000."""
    assert ServerSettings().max_targets_per_run == TargetRegistry().max_per_run
    registry = TargetRegistry()
    labels = {"project": "big", "experiment_name": "16k-gpus"}
    for node in range(2048):
        # loopback addresses stand for the nodes: the registry only holds them, nothing is scraped
        registry.register(f"127.{node // 256}.{node % 256}.1:8000", "vllm", {**labels, "replica": str(node)})
    registry.register("127.0.0.1:9999", "transfer_queue", labels)
    with pytest.raises(Exception, match="max_targets_per_run"):
        for port in range(10_000):
            registry.register(f"127.0.0.1:{port + 1}", "vllm", labels)
    assert 2049 < len(registry.list()) < 5000


def spans(project, experiment, spans_of):
    """OTLP of (name, lane, step, start_ns, end_ns, span id, attributes)."""
    made = []
    for name, lane, step, start, end, span_id, attributes in spans_of:
        attrs = {"project": project, "experiment_name": experiment, "state_lane_id": lane, "state_name": name}
        attrs.update(attributes)
        kv = [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()]
        if step is not None:
            kv.append(KeyValue(key="verl.step", value=AnyValue(int_value=step)))
        made.append(
            Span(
                trace_id=bytes(16 * [7]),
                span_id=span_id.to_bytes(8, "big"),
                name=name,
                start_time_unix_nano=start,
                end_time_unix_nano=end,
                attributes=kv,
            )
        )
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=made)])])


def test_spans_that_never_settle_cannot_push_another_runs_pending_step_out(served):
    """The honest run's step 1 waits for its figures; the attacker's run sends the largest spans the
    reader takes, never with a step span, until its share of the timeline's budget is full. The
    honest run's step 1 figures are still made when its step 2 comes."""
    server = served()
    honest = run_credential.mint(TOKEN, "p", "honest")
    attacker = run_credential.mint(TOKEN, "p", "attacker")
    s = 1_000_000_000
    t0 = int(time.time()) * s
    step1 = [
        ("step", "trainer", 1, t0, t0 + 2 * s, 1, {}),
        ("gen", "trainer", 1, t0 + s // 10, t0 + s, 2, {}),
        ("vllm_generate", "replica_0", None, t0 + s // 5, t0 + s // 2, 3, {}),
        ("vllm_generate", "replica_1", None, t0 + s // 5, t0 + 9 * s // 10, 4, {}),
    ]
    assert (
        call("POST", server.url + "/v1/traces", honest, spans("p", "honest", step1).SerializeToString(), PROTOBUF)[0]
        == 200
    )
    big = {f"attribute_{k:02d}": "x" * 256 for k in range(30)}
    big.update({"sample.prompt": "p" * 4096, "sample.response": "r" * 4096})
    sent = 0
    for _ in range(40):
        flood = [
            ("vllm_generate", "replica_0", None, t0 + 10 * s + i, t0 + 11 * s + i, 100 + sent + i, big)
            for i in range(50)
        ]
        sent += len(flood)
        body = spans("p", "attacker", flood).SerializeToString()
        assert call("POST", server.url + "/v1/traces", attacker, body, PROTOBUF)[0] == 200
        if server.figures.stats["dropped_memory"]:
            break
    assert server.figures.stats["dropped_memory"] > 0, "the attacker never reached a bound"  # the positive control
    step2 = [("step", "trainer", 2, t0 + 3 * s, t0 + 5 * s, 5, {})]
    assert (
        call("POST", server.url + "/v1/traces", honest, spans("p", "honest", step2).SerializeToString(), PROTOBUF)[0]
        == 200
    )
    status, answer, _ = call("GET", server.url + "/api/v1/timeline/last_step?project=p&experiment_name=honest", TOKEN)
    assert status == 200, answer
    last = json.loads(answer)
    assert last["step"] == 1 and set(last["lanes"]) >= {"trainer", "replica_0", "replica_1"}


def test_a_batch_stamped_ahead_of_the_server_does_not_pin_the_runs_live_step(served):
    """A batch stamped 299 s ahead (inside max_future_s) and then the run's next steps: the live
    global step is the newest step, not the batch with the newest time."""
    server = served()
    credential = run_credential.mint(TOKEN, "p", "skewed")
    now = time.time()

    def batch(step, stamped):
        return {
            "project": "p",
            "experiment_name": "skewed",
            "step": step,
            "time": stamped,
            "metrics": {"loss": 1.0 / step},
        }

    body = json.dumps({"batches": [batch(5, now + 299)]}).encode()
    assert call("POST", server.url + "/api/v1/push", credential, body)[0] == 200
    for step in range(6, 11):
        body = json.dumps({"batches": [batch(step, time.time())]}).encode()
        assert call("POST", server.url + "/api/v1/push", credential, body)[0] == 200
    live = http("GET", server.url + "/metrics")[1].decode()
    line = re.search(
        r'^rl_insight_monitor_training_global_step\{experiment_name="skewed",project="p"\} (\S+)$', live, re.M
    )
    assert line and float(line.group(1)) == 10.0, line and line.group(0)
    assert re.search(r'^loss\{experiment_name="skewed",project="p"\} 0\.1$', live, re.M)
    [stream] = server.hub.streams()
    assert stream["step"] == 10 and stream["last_step_s_ago"] >= 0


def test_a_run_over_its_share_when_another_run_comes_still_logs_its_steps():
    """A run alone grows its latest values to nearly half the bound (the most it may hold alone); a
    second run arrives (the first may now hold half of what the second leaves): the first run's
    steps on its existing series are still taken, and the second run's steps too; only new series
    of the first run are refused."""
    hub = MetricHub(memory_limit_bytes=LIMIT)

    def push(run, step, streams, series=40):
        return hub.push(
            {
                "batches": [
                    {
                        "project": "p",
                        "experiment_name": run,
                        "step": step,
                        "labels": {"replica": str(s), "long": "x" * 256},
                        "metrics": {f"rl_insight_monitor_m{i}": float(step) for i in range(series)},
                    }
                    for s in range(streams)
                ]
            }
        )

    push("big", 1, 80)
    assert hub.summary()["memory_bytes"] > 0.45 * LIMIT  # nearly half the bound in latest values
    push("small", 1, 1)
    assert hub.summary()["memory_run_share_bytes"] == LIMIT // 2
    for step in range(2, 6):
        assert push("big", step, 80)["accepted"] == 80
        assert push("small", step, 1)["accepted"] == 1
    with pytest.raises(Exception, match="share"):  # growth past its share: 429, retried by its sender
        push("big", 6, 90)
