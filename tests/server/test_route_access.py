"""Every route of the API, each with the credential matrix: none, another run's credential, the run's
own credential, the server's token. What a route may be called with is declared once, in its row of
the route table (``ANYONE``, ``TOKEN``, ``RUN_CREDENTIAL`` with where the request names its run); this
test walks the whole table, samples, cards, marks and reports included, so a route added tomorrow is
checked without anyone remembering to add it here."""

import json

import pytest

from tests.helpers import http
from tests.server.test_timeline_store import STEP_SPANS, otlp
from verl_rl_insight.contract import run_credential
from verl_rl_insight.server.api.access import Access
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.named_runs import IN_BODY as RUNS_OF_BODY
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts, Startup
from verl_rl_insight.server.api.route import Doc, Route
from verl_rl_insight.server.api.routes import ROUTES
from verl_rl_insight.server.metrics.hub import MetricHub
from verl_rl_insight.server.stores.profiles import ProfileStore
from verl_rl_insight.server.stores.spans import SpanStore

TOKEN = "the-servers-own-token"
RUN = {"project": "p", "experiment_name": "e"}
QUERY = "?project=p&experiment_name=e&step=1&job=vllm-e&address=127.0.0.1:8000&keys=m"
TARGET = {"address": "127.0.0.1:8000", "job": "vllm-e", "labels": dict(RUN), "ttl_s": 600}

# a request naming run p/e, for each route that a run credential may call (where its row says)
BODIES = {
    ("POST", "/api/v1/push"): json.dumps({"batches": [{**RUN, "step": 1, "time": 0, "metrics": {"m": 1.0}}]}),
    ("POST", "/api/v1/targets"): json.dumps(TARGET),
    ("PUT", "/api/v1/runs/card"): json.dumps({**RUN, "config": {"trainer": {"total_epochs": 1}}}),
    ("POST", "/api/v1/runs/marks"): json.dumps({**RUN, "step": 1, "text": "a mark"}),
    ("POST", "/api/v1/profiles/report"): json.dumps(RUN),
}
CREDENTIALS = {
    "none": None,
    "another run's": run_credential.mint(TOKEN, "p", "other"),
    "the run's own": run_credential.mint(TOKEN, "p", "e"),
    "the token": TOKEN,
}


@pytest.fixture
def server(tmp_path):
    """A server of its own for each route: the token's calls change what the next route would see
    (``POST /api/v1/runs/revoke`` revokes the run's credential)."""
    folder = tmp_path
    hub = MetricHub()
    parts = ApiParts(hub, token=TOKEN, startup=Startup(spans=SpanStore(folder / "spans")), profiles=ProfileStore())
    api = Api(parts)
    http_server = HttpServer(api, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{http_server.port}"
    http_server.stop()
    api.close()


def request_for(route):
    """(path with query, body, content type) of a request to ``route`` naming run p/e."""
    path = route.path + ("index.html" if route.prefix and route.path.endswith("/") else "")
    if (route.method, route.path) == ("POST", "/v1/traces"):
        return path, otlp(STEP_SPANS).SerializeToString(), "application/x-protobuf"
    body = BODIES.get((route.method, route.path))
    if body is None and route.method in ("POST", "PUT"):
        body = "{}"
    return path + QUERY, None if body is None else body.encode(), "application/json"


def expected(access, who):
    """'refused 401', 'refused 403' or 'let through' (whatever the handler then answers)."""
    if access is Access.ANYONE or who == "the token":
        return "let through"
    if who == "none":
        return "refused 401"
    if access is Access.RUN_CREDENTIAL and who == "the run's own":
        return "let through"
    return "refused 403"


def seen(status):
    return {401: "refused 401", 403: "refused 403"}.get(status, "let through")


def test_every_route_declares_who_may_call_it_and_where_a_run_credential_names_its_run():
    for route in ROUTES:
        assert isinstance(route.access, Access), (route.method, route.path)
        if route.access is Access.RUN_CREDENTIAL:
            assert route.run_in is not None, (route.method, route.path)
            assert route.run_in != "body" or (route.method, route.path) in BODIES, "a body this test sends"


# RUN_CREDENTIAL routes whose handler checks the run as it decodes a body parsed once (a push may be
# MBs; spans are protobuf) or as it looks up a registered target; every other kind the router checks
HANDLER_CHECKED = {"body batches", "spans", "target"}
# for the routes whose body names the run: the same body naming another run, and what reads it back
OTHER_RUN = {"project": "p", "experiment_name": "other"}
OTHER_BODIES = {
    ("POST", "/api/v1/targets"): ({**TARGET, "labels": OTHER_RUN}, "labels", "/api/v1/targets"),
    ("PUT", "/api/v1/runs/card"): (
        {**OTHER_RUN, "config": {}},
        "project, experiment_name",
        "/api/v1/runs/card?project=p&experiment_name=other",
    ),
    ("POST", "/api/v1/runs/marks"): (
        {**OTHER_RUN, "step": 1, "text": "a mark"},
        "project, experiment_name",
        "/api/v1/runs/marks?project=p&experiment_name=other",
    ),
    ("POST", "/api/v1/profiles/report"): (
        {**OTHER_RUN, "capability": {"tool": "nsys"}},
        "project, experiment_name",
        "/api/v1/profiles?project=p&experiment_name=other",
    ),
}


def test_a_route_for_run_credentials_that_does_not_say_where_its_run_is_named_is_refused_at_declaration():
    for run_in in (None, "query"):
        access = Access.RUN_CREDENTIAL if run_in is None else Access.TOKEN
        with pytest.raises(ValueError, match="says where its run is"):
            Route("POST", "/api/v1/new", ROUTES[0].handler, access, Doc("a route"), run_in=run_in)


def test_every_place_a_run_is_named_in_is_checked_by_the_router_or_by_its_named_handler():
    for route in ROUTES:
        if route.access is Access.RUN_CREDENTIAL:
            assert route.run_in == "query" or route.run_in in RUNS_OF_BODY or route.run_in in HANDLER_CHECKED, (
                route.method,
                route.path,
            )
    assert (
        {("POST", "/api/v1/targets"), ("PUT", "/api/v1/runs/card"), ("POST", "/api/v1/runs/marks")}
        | {("POST", "/api/v1/profiles/report")}
        == {(r.method, r.path) for r in ROUTES if r.run_in in RUNS_OF_BODY}
        == set(OTHER_BODIES)
    )


@pytest.mark.parametrize("key", sorted(OTHER_BODIES), ids=" ".join)
def test_a_run_credential_writing_another_runs_body_is_refused_naming_the_field_and_nothing_is_kept(server, key):
    body, field, read_back = OTHER_BODIES[key]
    own = run_credential.mint(TOKEN, "p", "e")
    status, answer = http(
        key[0],
        server + key[1],
        body=json.dumps(body).encode(),
        headers={**_auth(own), "Content-Type": "application/json"},
    )
    assert status == 403, answer
    assert json.loads(answer)["error"].startswith(f"{field}: this run credential writes p/e only, not p/other")
    status, kept = http("GET", server + read_back, headers=_auth(TOKEN))
    assert b"other" not in kept or status == 404, kept


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_each_route_with_each_credential_is_let_through_or_refused_as_its_row_declares(server, route):
    status, _ = http(
        "POST", server + "/api/v1/targets", body=json.dumps(TARGET).encode(), headers=_auth(TOKEN)
    )  # the run's own target exists, for DELETE /api/v1/targets
    assert status == 200
    path, body, kind = request_for(route)
    outcomes = {}
    for who, credential in CREDENTIALS.items():
        status, answer = http(
            route.method, server + path, body=body, headers={**_auth(credential), "Content-Type": kind}
        )
        outcomes[who] = (seen(status), status, answer[:200])
    wanted = {who: expected(route.access, who) for who in CREDENTIALS}
    assert {who: got[0] for who, got in outcomes.items()} == wanted, outcomes


def _auth(credential):
    return {"Authorization": f"Bearer {credential}"} if credential else {}
