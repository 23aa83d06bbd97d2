"""Hostile input against the real HTTP API: every case is a 4xx naming the field, and afterwards
the whole /metrics body still parses (prometheus_client's text parser) with a good run in it."""

import json
import math
import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import http, push

GOOD = {"project": "p", "experiment_name": "good", "step": 1, "time": 1.7e9, "metrics": {"loss": 0.5}}


def good_run_still_scrapes(server):
    """The body parses as a whole and the good run's series is in it."""
    status, body = http("GET", server.url + "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert [s.value for s in families["loss"].samples if s.labels["experiment_name"] == "good"] == [0.5]
    return body.decode()


def batch(**overrides):
    return {**GOOD, "experiment_name": "bad", **overrides}


@pytest.mark.parametrize(
    "what, payload, field",
    [
        ("metric name ending in a newline", {"batches": [batch(metrics={"evil\n": 1})]}, "invalid metric name"),
        ("metric name with a newline inside", {"batches": [batch(metrics={"a\nb": 1})]}, "invalid metric name"),
        ("label name ending in a newline", {"batches": [batch(labels={"evil\n": "x"})]}, "invalid label name"),
        ("label value with a lone surrogate", {"batches": [batch(labels={"node": "\ud800"})]}, "labels.node"),
        ("experiment with a C1 control", {"batches": [batch(experiment_name="a\x85b")]}, "experiment_name"),
        ("a 400-digit step", {"batches": [batch(step=10**400)]}, "step"),
        ("a value too large for a float", {"batches": [batch(metrics={"loss": 10**400})]}, "metrics.loss"),
        ("a time in the far future", {"batches": [batch(time=1e300)]}, "time"),
        ("an unknown field", {"batches": [batch(metric={"loss": 1})]}, "unknown field 'metric'"),
        ("an unknown top-level field", {"batches": [], "extra": 1}, "unknown field 'extra'"),
    ],
)
def test_hostile_pushes_are_refused_naming_the_field_and_every_scrape_still_parses(hub_server, what, payload, field):
    server = hub_server()
    assert push(server.url, {"batches": [GOOD]})[0] == 200
    status, body = push(server.url, json.dumps(payload).encode())
    assert status == 400, f"{what}: {status} {body[:200]}"
    assert field in json.loads(body)["error"], f"{what}: {body[:300]}"
    assert "bad" not in good_run_still_scrapes(server)


@pytest.mark.parametrize(
    "name", ["rl_insight_hub_series", "rl_insight_health_finding", "rl_insight_timeline_idle_ratio"]
)
def test_the_servers_own_metric_names_are_dropped_from_a_push_naming_them_and_the_rest_applied(hub_server, name):
    """A name the server makes itself is not the client's to write: that key is left out (the
    answer names it), the rest of the batch applied, and the scrape still parses."""
    server = hub_server()
    assert push(server.url, {"batches": [GOOD]})[0] == 200
    status, body = push(server.url, {"batches": [batch(metrics={name: 1, "loss": 0.25})]})
    assert status == 200 and name in json.loads(body)["dropped_keys"], body[:300]
    text = good_run_still_scrapes(server)
    assert 'loss{experiment_name="bad",project="p"} 0.25' in text
    assert f"{name}{{" not in text and f"{name} 1" not in text
    # the trainer's own rl_insight_timeline_* span counters are not the server's
    counter = "rl_insight_timeline_exported_spans_total"
    assert push(server.url, {"batches": [batch(step=2, metrics={counter: 3})]})[0] == 200
    assert f'{counter}{{experiment_name="bad",project="p"}} 3.0' in good_run_still_scrapes(server)


@pytest.mark.parametrize(
    "what, raw",
    [
        ("5,000 nested brackets", b"[" * 5000 + b"]" * 5000),
        ("5,000 nested objects", b'{"a":' * 5000 + b"1" + b"}" * 5000),
        ("more containers than any valid push", b'{"batches": [' + b"[]," * 40000 + b"[]]}"),
        ("invalid UTF-8", b'{"batches": [{"project": "\xff"}]}'),
    ],
)
def test_malformed_bodies_are_400_not_500(hub_server, what, raw):
    server = hub_server()
    assert push(server.url, {"batches": [GOOD]})[0] == 200
    status, body = push(server.url, raw)
    assert status == 400, f"{what}: {status} {body[:200]}"
    good_run_still_scrapes(server)


def raw_request(port, data, timeout=5):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return s.recv(4096).decode("latin-1")


def test_a_content_length_that_is_not_a_number_is_400(hub_server):
    server = hub_server()
    for length in ("\u00b2".encode(), b"-1", b"1e3", b"99999999999999999999999"):
        answer = raw_request(
            server.port, b"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n{}"
        )
        assert answer.startswith(("HTTP/1.1 400", "HTTP/1.1 413")), (length, answer[:100])
    assert http("GET", server.url + "/-/healthy")[0] == 200


@pytest.mark.parametrize(
    "what, target, message",
    [
        ("job ending in a newline", {"address": "127.0.0.1:9100", "job": "node\n"}, "job must match"),
        ("host ending in a newline", {"address": "evil\n:9100", "job": "node"}, "host:port"),
        ("port out of range", {"address": "127.0.0.1:99999", "job": "node"}, "out of range"),
        ("port in superscript digits", {"address": "127.0.0.1:\u00b2", "job": "node"}, "host:port"),
        ("a TTL that never expires", {"address": "127.0.0.1:9100", "job": "node", "ttl_s": math.nan}, "ttl_s"),
        ("an infinite TTL", {"address": "127.0.0.1:9100", "job": "node", "ttl_s": math.inf}, "ttl_s"),
        ("label name ending in a newline", {"address": "127.0.0.1:9100", "job": "n", "labels": {"a\n": "x"}}, "label"),
        ("an unknown field", {"address": "127.0.0.1:9100", "job": "n", "ttl": 5}, "unknown field 'ttl'"),
    ],
)
def test_hostile_targets_are_refused_and_service_discovery_stays_valid(hub_server, what, target, message):
    server = hub_server()
    status, body = http("POST", server.url + "/api/v1/targets", json.dumps(target).encode())
    assert status == 400, f"{what}: {status} {body[:200]}"
    assert message in json.loads(body)["error"], f"{what}: {body[:300]}"
    assert json.loads(http("GET", server.url + "/api/v1/sd")[1]) == []


def test_a_scraper_name_that_is_not_a_name_is_400(hub_server):
    server = hub_server()
    for name in ("a%0Ab", "x" * 65, "a%20b", ""):
        status, body = http("GET", server.url + f"/metrics?scraper={name}")
        assert status == 400 and "scraper" in json.loads(body)["error"], (name, status, body[:200])
