"""Every route of the API, each with the credential matrix: none, another run's credential, the run's
own credential, the server's token, against the real server process on loopback. What a route may be
called with is declared once, in its row of the route table (``ANYONE``, ``TOKEN``, ``RUN_CREDENTIAL``
with where the request names its run), and the router makes it so (a run gate for each request:
``run_gate.py``); this test walks the whole table, push, spans, targets, samples, cards, marks and
reports included, so a route added tomorrow is checked without anyone remembering to add it here."""

import json
import typing

import pytest

from tests.helpers import free_port, http, start_hub_process, stop_group
from tests.server.stores.test_timeline_store import STEP_SPANS, otlp
from verl_rl_insight.contract import run_credential
from verl_rl_insight.server.api.access import Access, RunIn
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.auth import MISSING
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.named_runs import BEFORE_BODY, IN_BODY, IN_PARSE
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.api.route import Doc, Route
from verl_rl_insight.server.api.routes import ROUTES
from verl_rl_insight.server.metrics.hub import MetricHub

TOKEN = "the-servers-own-token"
RUN = {"project": "p", "experiment_name": "e"}
QUERY = "?project=p&experiment_name=e&step=1&job=vllm-e&address=127.0.0.1:8000&keys=m"
TARGET = {"address": "127.0.0.1:8000", "job": "vllm-e", "labels": dict(RUN), "ttl_s": 600}

# a request naming run p/e, for each route whose body names it
BODIES = {
    ("POST", "/api/v1/push"): json.dumps({"batches": [{**RUN, "step": 1, "time": 0, "metrics": {"m": 1.0}}]}),
    ("POST", "/api/v1/targets"): json.dumps(TARGET),
    ("PUT", "/api/v1/runs/card"): json.dumps({**RUN, "config": {"trainer": {"total_epochs": 1}}}),
    ("POST", "/api/v1/runs/marks"): json.dumps({**RUN, "step": 1, "text": "a mark"}),
    ("POST", "/api/v1/profiles/report"): json.dumps(RUN),
}
# the field a run credential of another run is told of, by where its route's row says the run is named
FIELD: dict[RunIn, str] = {
    "query": "project, experiment_name",
    "body": "project, experiment_name",
    "body labels": "labels",
    "body batches": "batches[0]",
    "spans": "spans",
    "target": "target",
}
WHO = ("none", "another run's", "the run's own", "the token")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server process with a token for the whole table: what the token's calls change (a revoked
    run, a removed target) each route's test sets again (a fresh credential, the target registered)."""
    port = free_port()
    process = start_hub_process(port, tmp_path_factory.mktemp("access"), token=TOKEN)
    yield f"http://127.0.0.1:{port}"
    stop_group(process)


def credentials():
    """Minted now: a credential of run p/e minted before the table's revoke would be refused."""
    return {
        "none": None,
        "another run's": run_credential.mint(TOKEN, "p", "other"),
        "the run's own": run_credential.mint(TOKEN, "p", "e"),
        "the token": TOKEN,
    }


def request_for(route):
    """(path with query, body, content type) of a request to ``route`` naming run p/e."""
    path = route.path + ("index.html" if route.prefix and route.path.endswith("/") else "")
    if (route.method, route.path) == ("POST", "/v1/traces"):
        return path, otlp(STEP_SPANS).SerializeToString(), "application/x-protobuf"
    body = BODIES.get((route.method, route.path))
    if body is None and route.method in ("POST", "PUT"):
        body = "{}"
    return path + QUERY, None if body is None else body.encode(), "application/json"


def expected(route, who):
    """What a user sees: (the status, the start of the error) when refused; (200, None) where the
    run's own credential writes; else None: let through (its handler answers, whatever it says)."""
    if route.access is Access.ANYONE or who == "the token":
        return None
    if who == "none":
        return 401, MISSING
    if route.access is Access.TOKEN:
        return 403, f"a run credential (what trainers carry) may not {route.method} {route.path}"
    if who == "another run's":
        return 403, f"{FIELD[route.run_in]}: this run credential writes p/other only, not p/e"
    return 200, None


def seen(status, answer, want):
    """``expected``'s terms for an answer. A 5xx is none of them: the test fails on it."""
    assert status is not None and status < 500, (status, answer[:300])
    if status in (401, 403):
        error = json.loads(answer)["error"]
        return status, error[: len(want[1])] if want is not None and want[1] else error
    return None if want is None else (status, None)


def the_runs_own_things(server):
    """A step, a target and a mark (unless there: marks change a few times a second) of run p/e, by
    the token: what the routes that read or remove them find, whichever ran before."""
    status, marks = http("GET", server + "/api/v1/runs/marks?project=p&experiment_name=e")
    needed = [("POST", "/api/v1/push"), ("POST", "/api/v1/targets")]
    for method, path in needed + ([] if b'"step": 1,' in marks else [("POST", "/api/v1/runs/marks")]):
        status, answer = http(method, server + path, body=BODIES[method, path].encode(), headers=_auth(TOKEN))
        assert status == 200, answer


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_each_route_with_each_credential_is_let_through_or_refused_as_its_row_declares(server, route):
    the_runs_own_things(server)
    path, body, kind = request_for(route)
    outcomes, statuses = {}, {}
    for who, credential in credentials().items():
        status, answer = http(
            route.method, server + path, body=body, headers={**_auth(credential), "Content-Type": kind}
        )
        outcomes[who], statuses[who] = seen(status, answer, expected(route, who)), status
    assert outcomes == {who: expected(route, who) for who in WHO}, statuses


# for the routes whose body names the run: the same body naming another run, and what reads it back
OTHER_RUN = {"project": "p", "experiment_name": "other"}
OTHER_BODIES = {
    ("POST", "/api/v1/push"): (
        {"batches": [{**OTHER_RUN, "step": 1, "metrics": {"m": 1.0}}]},
        "batches[0]",
        "/api/v1/streams",
    ),
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


def test_every_route_declares_who_may_call_it_and_where_a_run_credential_names_its_run():
    for route in ROUTES:
        assert isinstance(route.access, Access), (route.method, route.path)
        if route.access is Access.RUN_CREDENTIAL:
            assert route.run_in in FIELD, (route.method, route.path)
            assert route.run_in not in IN_BODY or (route.method, route.path) in BODIES, "a body this test sends"


def test_every_place_a_run_is_named_in_is_read_by_the_router_or_by_the_handlers_one_parse_and_no_other_way():
    places = [*BEFORE_BODY, *IN_BODY, *IN_PARSE]
    assert sorted(places) == sorted(typing.get_args(RunIn)) == sorted(FIELD)


def test_a_route_for_run_credentials_that_does_not_say_where_its_run_is_named_is_refused_at_declaration():
    for run_in in (None, "query"):
        access = Access.RUN_CREDENTIAL if run_in is None else Access.TOKEN
        with pytest.raises(ValueError, match="says where its run is"):
            Route("POST", "/api/v1/new", ROUTES[0].handler, access, Doc("a route"), run_in=run_in)


async def _writes_without_checking(ctx, request):
    async with ctx.body(request) as body:
        await ctx.json(request, {"kept": len(body)})  # a handler that forgot its run gate


@pytest.mark.parametrize("who", ["the run's own", "the token"])
def test_a_handler_that_answers_without_consulting_the_run_gate_is_refused_not_let_through(who):
    route = Route(
        "POST",
        "/api/v1/new",
        _writes_without_checking,
        Access.RUN_CREDENTIAL,
        Doc("new"),
        body_limit=1024,
        run_in="spans",
    )
    api = Api(ApiParts(MetricHub(), token=TOKEN), routes=[route])
    http_server = HttpServer(api, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{http_server.port}/api/v1/new"
        status, answer = http("POST", url, body=b"{}", headers=_auth(credentials()[who]))
    finally:
        http_server.stop()
        api.close()
    assert (status, json.loads(answer)) == (500, {"error": "internal error, see the server log"})


def _auth(credential):
    return {"Authorization": f"Bearer {credential}"} if credential else {}
