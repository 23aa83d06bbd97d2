"""The timeline without Tempo: the real server process takes OTLP/HTTP spans (the protobuf
opentelemetry-proto messages Tempo takes) with the token, keeps them per run within bounds,
refuses hostile bodies with a 4xx; the trainer sends its token to the server and to nobody
else; `timeline export` reads a run from Tempo's HTTP API (a STAND-IN serving Tempo's JSON)."""

import base64
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.helpers import free_port, http, rl_insight, start_hub_process, stop_group, wait_for
from tests.otlp_receiver import OtlpReceiver
from verl_rl_insight.server.stores.spans import SpanStore

TOKEN = "timeline-token"
PROTOBUF = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}"}


def otlp(spans, project="p", experiment="e"):
    """An ExportTraceServiceRequest of (name, lane, step, start_ns, end_ns, span id, parent id)."""

    def attr(key, value):
        kind = {str: "string_value", int: "int_value"}[type(value)]
        return KeyValue(key=key, value=AnyValue(**{kind: value}))

    made = []
    for name, lane, step, start, end, span_id, parent in spans:
        attrs = [
            attr("project", project),
            attr("experiment_name", experiment),
            attr("state_lane_id", lane),
            attr("state_name", name),
        ] + ([attr("verl.step", step)] if step is not None else [])
        made.append(
            Span(
                trace_id=bytes(16 * [step or 9]),
                span_id=bytes(8 * [span_id]),
                parent_span_id=bytes(8 * [parent]) if parent else b"",
                name=name,
                start_time_unix_nano=start,
                end_time_unix_nano=end,
                attributes=attrs,
            )
        )
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=made)])])


STEP_SPANS = [
    ("step", "trainer", 1, 1_000_000_000, 2_000_000_000, 1, 0),
    ("gen", "trainer", 1, 1_100_000_000, 1_500_000_000, 2, 1),
    ("rollout generate", "replica_0", None, 1_150_000_000, 1_450_000_000, 3, 0),
    ("rollout generate", "replica_0", None, 1_200_000_000, 1_480_000_000, 4, 0),  # overlaps, not nested
    ("step", "trainer", 2, 2_100_000_000, 3_000_000_000, 5, 0),
]


@pytest.fixture
def hub(tmp_path):
    port = free_port()
    process = start_hub_process(port, tmp_path, token=TOKEN, max_body_mb=1)
    yield f"http://127.0.0.1:{port}"
    stop_group(process)


def test_spans_are_kept_per_run_and_hostile_bodies_get_a_4xx(hub):
    info = json.loads(http("GET", hub + "/api/v1/info")[1])
    assert info["otlp_traces"] == hub + "/v1/traces" and info["spans_kept_by_hub"] is True
    body = otlp(STEP_SPANS).SerializeToString()
    bomb = gzip.compress(b"\0" * (8 * 2**20))  # 8 KiB that inflate to 8 MiB: over the 1 MiB a request may be
    cases = [
        ({"Content-Type": "application/x-protobuf"}, body, 401, "token"),
        (dict(PROTOBUF, **{"Content-Type": "application/json"}), b"{}", 415, "application/x-protobuf"),
        (PROTOBUF, b"\xff\xff\xff\xff not protobuf", 400, "not an OTLP ExportTraceServiceRequest"),
        (dict(PROTOBUF, **{"Content-Encoding": "gzip"}), bomb, 413, "inflates beyond"),
        (dict(PROTOBUF, **{"Content-Encoding": "gzip"}), b"not gzip", 400, "not gzip"),
        (dict(PROTOBUF, **{"Content-Encoding": "br"}), body, 415, "Content-Encoding"),
    ]
    for headers, payload, status, words in cases:
        got, answer = http("POST", hub + "/v1/traces", payload, headers)
        assert got == status and words in answer.decode(), (headers, got, answer)
    assert (
        http("POST", hub + "/v1/traces", gzip.compress(body), dict(PROTOBUF, **{"Content-Encoding": "gzip"}))[0] == 200
    )
    assert http("GET", hub + "/api/v1/spans?project=p&experiment_name=e")[0] == 401  # prompts, with token2text
    status, kept = http("GET", hub + "/api/v1/spans?project=p&experiment_name=e", headers=PROTOBUF)
    spans = [json.loads(line) for line in kept.splitlines()]
    assert status == 200 and [s["name"] for s in spans] == [s[0] for s in STEP_SPANS]
    assert spans[1]["parent_span_id"] == spans[0]["span_id"] and spans[1]["attributes"]["verl.step"] == 1
    assert json.loads(http("GET", hub + "/api/v1/spans/runs")[1])["runs"][0]["spans"] == 5
    status, answer = http("GET", hub + "/api/v1/spans?project=p&experiment_name=other", headers=PROTOBUF)
    assert status == 404 and "no spans of 'p' / 'other'" in answer.decode()
    assert http("GET", hub + "/metrics")[0] == 200


def test_a_run_over_its_bound_loses_its_oldest_spans_and_counts_them_and_the_oldest_run_goes_first(tmp_path):
    store = SpanStore(tmp_path, max_run_bytes=1500, max_total_bytes=2000)  # a batch of two: 470 bytes
    for _ in range(4):  # all of step 1: the newest step is never evicted whole, its oldest spans go
        store.add(otlp(STEP_SPANS[:2], experiment="first"))
    first = next(r for r in store.runs() if r["experiment_name"] == "first")
    assert first["bytes"] <= 1500 and first["evicted_spans"] == 2 and store.stats["evicted_spans"] == 2
    assert (first["oldest_step"], first["newest_step"], first["evicted_steps"], first["spans"]) == (1, 1, 0, 6)
    store.add(otlp(STEP_SPANS[:2], experiment="second"))
    store.add(otlp(STEP_SPANS[:2], experiment="third"))
    assert sum(r["bytes"] for r in store.runs()) <= 2000
    assert "first" not in {r["experiment_name"] for r in store.runs()} and store.read("p", "first") is None
    store.close()  # what the server does at stop (between, it saves the index at most once a second)
    assert SpanStore(tmp_path, max_run_bytes=1500).runs() == store.runs()  # the index survives a restart


def test_a_span_file_cut_mid_write_is_repaired_on_restart(tmp_path):
    store = SpanStore(tmp_path)
    store.add(otlp(STEP_SPANS))
    [path] = tmp_path.glob("*.jsonl")
    with open(path, "ab") as f:  # the process killed in the middle of appending a line
        f.write(b'{"trace_id":"0a0a","span_id":"0b')
    store = SpanStore(tmp_path)
    store.add(otlp(STEP_SPANS[:2]))
    lines = store.read("p", "e").splitlines()
    assert [json.loads(line)["name"] for line in lines] == [s[0] for s in STEP_SPANS] + ["step", "gen"]
    assert store.runs()[0]["bytes"] == path.stat().st_size


def test_many_exporters_at_once_lose_no_span(hub):
    bodies = [otlp(STEP_SPANS, experiment=f"run-{i % 4}").SerializeToString() for i in range(8)]
    failures = []

    def exporter(body):
        for _ in range(25):
            status = http("POST", hub + "/v1/traces", body, PROTOBUF)[0]
            if status != 200:
                failures.append(status)

    threads = [threading.Thread(target=exporter, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for i in range(4):  # 2 exporters x 25 requests x 5 spans a run, every line whole
        status, kept = http("GET", hub + f"/api/v1/spans?project=p&experiment_name=run-{i}", headers=PROTOBUF)
        assert status == 200 and len([json.loads(line) for line in kept.splitlines()]) == 2 * 25 * len(STEP_SPANS)


def test_the_trainer_sends_its_token_to_the_server_and_not_to_another_collector(hub, monkeypatch):
    import verl_rl_insight

    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", hub.replace("http://", f"http://rl-insight:{TOKEN}@"))
    verl_rl_insight.init("p", "to-the-hub")
    with verl_rl_insight.state("gen", lane="trainer"):
        pass
    verl_rl_insight.finish()
    wait_for(
        lambda: http("GET", hub + "/api/v1/spans?project=p&experiment_name=to-the-hub", headers=PROTOBUF)[0] == 200,
        15,
        what="spans kept by the hub (sent with the token)",
    )

    collector = OtlpReceiver()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.url)
        verl_rl_insight.init("p", "elsewhere")
        with verl_rl_insight.state("gen", lane="trainer"):
            pass
        verl_rl_insight.finish()
        wait_for(lambda: collector.by_state("gen"), 15, what="spans at the other collector")
        assert collector.authorizations == [None] * len(collector.authorizations) and collector.authorizations
    finally:
        collector.close()


class TempoStandIn:
    """STAND-IN for Tempo's HTTP API (no registry here has Tempo): /api/search by tags and
    /api/traces/<id> in Tempo 2.x JSON ("batches", base64 IDs), from the spans it is given."""

    def __init__(self, request):
        traces = {}
        for resource_spans in request.resource_spans:
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    traces.setdefault(span.trace_id.hex(), []).append(span)
        self.searches = []
        stand_in = self

        def value(v):
            kind = v.WhichOneof("value")
            return {"string_value": {"stringValue": v.string_value}, "int_value": {"intValue": str(v.int_value)}}[kind]

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.startswith("/api/search"):
                    stand_in.searches.append(self.path)
                    body = {"traces": [{"traceID": t, "rootServiceName": "verl"} for t in traces]}
                else:
                    spans = traces[self.path.rsplit("/", 1)[1]]
                    body = {
                        "batches": [
                            {
                                "resource": {"attributes": [{"key": "host.name", "value": {"stringValue": "node-1"}}]},
                                "scopeSpans": [
                                    {
                                        "spans": [
                                            {
                                                "traceId": base64.b64encode(s.trace_id).decode(),
                                                "spanId": base64.b64encode(s.span_id).decode(),
                                                "parentSpanId": base64.b64encode(s.parent_span_id).decode(),
                                                "name": s.name,
                                                "startTimeUnixNano": str(s.start_time_unix_nano),
                                                "endTimeUnixNano": str(s.end_time_unix_nano),
                                                "attributes": [
                                                    {"key": a.key, "value": value(a.value)} for a in s.attributes
                                                ],
                                            }
                                            for s in spans
                                        ]
                                    }
                                ],
                            }
                        ]
                    }
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_export_reads_the_run_from_tempo(tmp_path):
    tempo = TempoStandIn(otlp(STEP_SPANS))
    out = tmp_path / "trace.json"
    done = rl_insight("timeline", "export", "--project", "p", "--experiment", "e", "--tempo", tempo.url, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert 'project="p"' in json.loads(json.dumps(tempo.searches))[0].replace("%22", '"').replace("%3D", "=")
    events = json.loads(out.read_text())["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(tracks.values()) == ["replica_0", "replica_0 #2", "trainer"]
    spans = {e["args"]["span_id"]: e for e in events if e["ph"] == "X"}
    assert len(spans) == 5 and spans["02" * 8]["args"]["step"] == 1 and spans["03" * 8]["args"]["step"] == 1
    assert spans["03" * 8]["tid"] != spans["04" * 8]["tid"]  # overlapping generate calls: two tracks
    assert spans["01" * 8]["args"]["node"] == "node-1" and spans["01" * 8]["dur"] == 1_000_000


def test_export_into_an_existing_directory_writes_a_named_file_inside_it(tmp_path):
    tempo = TempoStandIn(otlp(STEP_SPANS))
    folder = tmp_path / "traces"
    folder.mkdir()
    args = ("timeline", "export", "--project", "p", "--experiment", "e", "--tempo", tempo.url, "-o", str(folder))
    done = rl_insight(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    written = folder / "p-e.trace.json"
    assert f"wrote {written}: 5 spans" in done.stdout
    assert [p.name for p in folder.iterdir()] == ["p-e.trace.json"]  # no .tmp left behind
    assert len([e for e in json.loads(written.read_text())["traceEvents"] if e["ph"] == "X"]) == 5
    steps = rl_insight(*args, "--steps", "2:")
    assert steps.returncode == 0 and (folder / "p-e-steps2-.trace.json").exists(), steps.stdout + steps.stderr


def test_spans_for_a_tempo_that_is_down_are_bounded_counted_and_never_waited_for():
    """The relay to Tempo (server/stores/span_relay.py) with nothing listening: bodies beyond its
    byte bound are dropped at once and counted, the ones it held are counted as failed."""
    from tests.helpers import free_port
    from verl_rl_insight.server.stores.span_relay import SpanRelay

    relay = SpanRelay(f"http://127.0.0.1:{free_port()}/v1/traces", max_bytes=1000, attempts=2, backoff_s=0.5)
    taken = [relay.send(b"x" * 300, None) for _ in range(10)]
    kept = sum(taken)
    assert 3 <= kept <= 4 and relay.stats["dropped"] == 10 - kept  # 1000 bytes: three queued, one in hand
    relay.close(timeout_s=10)
    assert relay.stats["failed"] == kept and relay.stats["relayed"] == 0
    assert relay.send(b"late", None) is False  # closed: nothing more is queued
