"""The metric hub's HTTP API: what a trainer (or an attacker) sends, and what Prometheus reads."""

import json
import time

from tests.helpers import http, push


def batch(**overrides):
    body = {
        "project": "p",
        "experiment_name": "e",
        "step": 1,
        "time": 1700000000.0,
        "metrics": {"rl_insight_monitor_actor_pg_loss": 0.5},
    }
    body.update(overrides)
    return body


def exposition(server, scraper_headers=None):
    status, body = http("GET", server.url + "/metrics", headers=scraper_headers or {})
    assert status == 200
    return body.decode()


def test_pushed_values_are_exposed_with_project_and_experiment_labels(hub_server):
    server = hub_server()
    assert push(server.url, {"batches": [batch()]})[0] == 200
    text = exposition(server)
    assert 'rl_insight_monitor_actor_pg_loss{experiment_name="e",project="p"} 0.5\n' in text
    assert 'rl_insight_monitor_training_global_step{experiment_name="e",project="p"} 1.0\n' in text


def test_malformed_pushes_get_4xx_with_a_message_and_the_hub_keeps_serving(hub_server):
    server = hub_server(max_series=1000, max_body_bytes=1024 * 1024)
    cases = {
        "bad json": (b"{not json", 400, "not valid JSON"),
        "not an object": (b"[1, 2]", 400, "batches"),
        "batches not a list": (json.dumps({"batches": {"a": 1}}).encode(), 400, "batches"),
        "string value": ({"batches": [batch(metrics={"m": "high"})]}, 400, "NaN"),
        "bool value": ({"batches": [batch(metrics={"m": True})]}, 400, "number"),
        "step negative": ({"batches": [batch(step=-1)]}, 400, "step"),
        "step float": ({"batches": [batch(step=1.5)]}, 400, "step"),
        "time string": ({"batches": [batch(time="now")]}, 400, "time"),
        "metric name with space": ({"batches": [batch(metrics={"actor pg loss": 1})]}, 400, "invalid metric name"),
        "metric name with brace": ({"batches": [batch(metrics={'m{x="1"}': 1})]}, 400, "invalid metric name"),
        "label injection newline": (
            {"batches": [batch(experiment_name='e"} 1\nevil_metric 666\n#')]},
            400,
            "control characters",
        ),
        "reserved label": ({"batches": [batch(labels={"job": "x"})]}, 400, "reserved"),
        "bad label name": ({"batches": [batch(labels={"bad-name": "x"})]}, 400, "invalid label name"),
        "empty project": ({"batches": [batch(project="")]}, 400, "project"),
        "huge body": (b"{" + b" " * (2 * 1024 * 1024) + b"}", 413, "over the limit"),
        "too many series": ({"batches": [batch(metrics={f"m_{i}": 1 for i in range(1001)})]}, 422, "series limit"),
    }
    for what, (payload, status, message) in cases.items():
        got_status, body = push(server.url, payload)
        assert got_status == status, f"{what}: {got_status} {body[:200]}"
        assert message in json.loads(body)["error"], f"{what}: {body[:300]}"
        assert http("GET", server.url + "/-/healthy")[0] == 200, f"hub stopped serving after: {what}"
    # nothing of the rejected pushes was applied, a good push still is
    assert "evil_metric" not in exposition(server)
    assert server.hub.streams() == []
    assert push(server.url, {"batches": [batch()]})[0] == 200
    assert len(server.hub.streams()) == 1


def test_a_push_with_one_bad_batch_applies_nothing(hub_server):
    server = hub_server()
    status, _ = push(server.url, {"batches": [batch(), batch(metrics={"bad name": 1})]})
    assert status == 400
    assert "rl_insight_monitor_actor_pg_loss" not in exposition(server)


def test_quotes_and_backslashes_in_names_are_escaped_not_injected(hub_server):
    server = hub_server()
    assert push(server.url, {"batches": [batch(experiment_name='run "a" \\ b')]})[0] == 200
    assert 'experiment_name="run \\"a\\" \\\\ b"' in exposition(server)


def test_nan_and_infinities_travel_as_prometheus_spells_them(hub_server):
    server = hub_server()
    assert push(server.url, {"batches": [batch(metrics={"a": "NaN", "b": "+Inf", "c": "-Inf"})]})[0] == 200
    text = exposition(server)
    assert 'a{experiment_name="e",project="p"} NaN\n' in text
    assert 'b{experiment_name="e",project="p"} +Inf\n' in text
    assert 'c{experiment_name="e",project="p"} -Inf\n' in text


def scrape(server, name="test-prometheus"):
    """The lines of metric ``m`` that a named scraper gets, as (value, timestamp or None)."""
    status, body = http("GET", server.url + f"/metrics?scraper={name}")
    assert status == 200, body
    out = []
    for line in body.decode().splitlines():
        if line.startswith("m{"):
            parts = line.split()
            out.append((parts[1], int(parts[2]) if len(parts) == 3 else None))
    return out


def test_steps_pushed_between_two_scrapes_reach_a_named_scraper_in_order_with_their_own_time(hub_server):
    server = hub_server()
    scrape(server)  # the first visit
    logged = [time.time() + 0.1 * s for s in (1, 2, 3)]  # three steps logged after it
    time.sleep(0.5)
    batches = [batch(step=s, time=t, metrics={"m": float(s)}) for s, t in zip((1, 2, 3), logged)]
    assert push(server.url, {"batches": batches})[0] == 200
    lines = scrape(server)
    # every step with the trainer's own time (ms), in order, then the live value (no timestamp)
    assert lines == [
        ("1.0", int(logged[0] * 1000)),
        ("2.0", int(logged[1] * 1000)),
        ("3.0", int(logged[2] * 1000)),
        ("3.0", None),
    ]
    # the next scrape repeats only the live value
    assert scrape(server) == [("3.0", None)]


def test_an_unnamed_client_gets_live_values_only(hub_server):
    server = hub_server()
    batches = [batch(step=s, time=time.time() + s, metrics={"m": float(s)}) for s in (1, 2, 3)]
    assert push(server.url, {"batches": batches})[0] == 200
    lines = [line for line in exposition(server, {"User-Agent": "curl"}).splitlines() if line.startswith("m{")]
    assert lines == ['m{experiment_name="e",project="p"} 3.0']


def test_batches_sent_twice_after_an_outage_are_kept_once(hub_server):
    server = hub_server()
    now = time.time()
    scrape(server)
    time.sleep(0.1)
    first = [batch(step=s, time=now - 5 + s, metrics={"m": float(s)}) for s in (1, 2)]
    assert push(server.url, {"batches": first})[0] == 200
    status, body = push(server.url, {"batches": first + [batch(step=3, time=now - 2, metrics={"m": 3.0})]})
    assert status == 200 and json.loads(body)["accepted"] == 1 and json.loads(body)["duplicates"] == 2
    assert [value for value, _ in scrape(server)] == ["1.0", "2.0", "3.0", "3.0"]


def test_two_step_less_batches_of_one_stream_in_one_push_are_both_applied(hub_server):
    server = hub_server()
    untimed = [
        {"project": "p", "experiment_name": "e", "metrics": {"a": 1.0}},
        {"project": "p", "experiment_name": "e", "metrics": {"b": 2.0}},
    ]
    status, body = push(server.url, {"batches": untimed})
    assert status == 200 and json.loads(body)["accepted"] == 2
    text = exposition(server)
    assert 'a{experiment_name="e",project="p"} 1.0\n' in text and 'b{experiment_name="e",project="p"} 2.0\n' in text


def test_token_set_writes_need_it_reads_do_not(hub_server):
    server = hub_server(token="s3cret")
    assert push(server.url, {"batches": [batch()]})[0] == 401
    assert push(server.url, {"batches": [batch()]}, token="wrong")[0] == 401
    assert push(server.url, {"batches": [batch()]}, token="s3cret")[0] == 200
    assert http("GET", server.url + "/metrics")[0] == 200
    assert http("GET", server.url + "/api/v1/streams")[0] == 200


def test_unknown_endpoint_and_wrong_method_are_named(hub_server):
    server = hub_server()
    status, body = http("GET", server.url + "/nope")
    assert status == 404 and "/metrics" in json.loads(body)["endpoints"]
    assert http("GET", server.url + "/api/v1/push")[0] == 405


def test_every_endpoint_is_in_the_openapi_document_and_nothing_else(hub_server):
    import schemathesis

    server = hub_server()
    status, body = http("GET", server.url + "/openapi.json")
    assert status == 200
    document = json.loads(body)
    documented = {(method.upper(), path) for path, operations in document["paths"].items() for method in operations}
    assert documented == set(server.api.router.routes)
    assert len(list(schemathesis.openapi.from_dict(document).get_all_operations())) == len(documented)


def test_no_route_that_changes_anything_is_open_to_anyone_when_a_token_is_set(hub_server):
    """Every POST, PUT and DELETE of the route table (and those a later table line adds) answers 401
    without the token, naming how to send it, before it reads a byte; its document says it needs it."""
    server = hub_server(token="s3cret")
    document = json.loads(http("GET", server.url + "/openapi.json")[1])
    writes = [(method, path) for method, path in server.api.router.routes if method != "GET"]
    assert len(writes) >= 13
    for method, path in writes:
        status, body = http(method, server.url + path + "?project=p&experiment_name=e", body=b"{}")
        assert status == 401, (method, path, status)
        assert "Authorization: Bearer" in json.loads(body)["error"], (method, path)
        assert document["paths"][path][method.lower()]["security"], (method, path)


def test_a_prefix_route_serves_the_paths_below_it_and_leaves_the_rest_to_the_table():
    """A page route (``prefix=True``: the explorer's static files) takes every path below it, a
    method it does not take there is 405 naming GET, and an unknown path is still 404."""
    from verl_rl_insight.contract.errors import NoSuchEndpoint, NotAllowed
    from verl_rl_insight.server.api import info
    from verl_rl_insight.server.api.access import Access
    from verl_rl_insight.server.api.route import Doc, Route
    from verl_rl_insight.server.api.router import Router
    from verl_rl_insight.server.api.routes import ROUTES

    static = Route("GET", "/static/x/", info.get_healthy, Access.ANYONE, Doc("files"), prefix=True)
    router = Router((*ROUTES, static))
    assert router.find("GET", "/static/x/app.js") is static
    assert router.find("HEAD", "/static/x/css/a.css") is static
    assert router.find("GET", "/metrics").path == "/metrics"
    try:
        router.find("POST", "/static/x/app.js")
        raise AssertionError("POST under a GET prefix route was served")
    except NotAllowed as exc:
        assert exc.allowed == ["GET"]
    try:
        router.find("GET", "/static/xy")
        raise AssertionError("a path beside the prefix was served")
    except NoSuchEndpoint as exc:
        assert "/metrics" in exc.endpoints and "/static/x/" not in exc.endpoints
