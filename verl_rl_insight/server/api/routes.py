"""The route table of the server's HTTP API: every route, declared once.

Each line says the method, the path, the handler, who may call it (``Access``), whether it waits
for the server's start (503 with Retry-After before), the largest body it reads, and what the
OpenAPI document (``GET /openapi.json``, generated from this table) says of it. With a token set,
every route not for ``ANYONE`` needs it, as ``Authorization: Bearer <token>`` or HTTP Basic with the
token as password (else 401, before any body is read); ``RUN_CREDENTIAL`` routes also take a run
credential, for its own run (``access.RunIn``: where the request names it, and who checks it).
Every error is ``{"error": "..."}`` naming the field.

A new route: write its handler ``async def name(ctx: Context, request: Request) -> None`` in the
module of its resource, then append one ``Route(...)`` line to ``ROUTES`` below (or to a tuple of
its own folded into ``ROUTES``).
"""

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.run_card import MAX_CARD_BYTES
from verl_rl_insight.contract.run_import import MAX_IMPORT_BODY_BYTES
from verl_rl_insight.server.api import alerts, imports, info, metrics, profiles, push, runs, spans, targets
from verl_rl_insight.server.api.access import Access
from verl_rl_insight.server.api.explorer_routes import EXPLORER_ROUTES
from verl_rl_insight.server.api.openapi import JSON_OK, RUN_PARAMETERS, TEXT_OK, query, ref
from verl_rl_insight.server.api.route import CONFIGURED, Doc, Route

ANYONE, TOKEN, RUN_CREDENTIAL = Access.ANYONE, Access.TOKEN, Access.RUN_CREDENTIAL
SMALL_BODY_BYTES = 64 * 1024  # targets, profiles, silences
MARK_BODY_BYTES = 128 * 1024  # an oversized text is read, and refused naming the field (400)
RUN_CARD_BODY_BYTES = 2 * MAX_CARD_BYTES  # up to here the store answers, naming the card's size

SCRAPER = query(
    "scraper",
    {"type": "string", "pattern": r"^[a-zA-Z0-9_.:\-]{1,64}$"},
    False,
    "a named scraper also gets the history it has not been sent (needs the token when one is set)",
)
PROTOBUF = {"application/x-protobuf": {"schema": {"type": "string", "format": "binary"}}}
NDJSON_OK = {"description": "ok", "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}
PUSH_OK = {
    "description": "applied (keys left out named in dropped_keys)",
    "content": {"application/json": {"schema": ref("PushAnswer")}},
}
TARGET_PARAMETERS = (
    query("job", {"type": "string"}, True, "the target's job"),
    query("address", {"type": "string"}, True, "the target's host:port"),
)
RUN_FILTER = (
    query("project", {"type": "string"}, False, "only this project's"),
    query("experiment_name", {"type": "string"}, False, "only this experiment's"),
)
PAGE = (
    query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, False, "runs per page (100)"),
    query("offset", {"type": "integer", "minimum": 0}, False, "from this run on (0)"),
)
RUN = tuple(RUN_PARAMETERS)
STEP = query("step", {"type": "integer", "minimum": 0}, True, "the marked step")

HUB_ROUTES = (
    Route(
        "GET",
        paths.METRICS,
        metrics.get_metrics,
        ANYONE,  # a named scrape checks the token itself
        Doc("the hub's exposition for Prometheus", TEXT_OK, (SCRAPER,), (400, 401, 429)),
    ),
    Route("GET", paths.HEALTHY, info.get_healthy, ANYONE, Doc("liveness", TEXT_OK)),
    Route("GET", paths.READY, info.get_ready, ANYONE, Doc("readiness", TEXT_OK)),
    Route("GET", paths.OPENAPI, info.get_openapi, ANYONE, Doc("this document")),
    Route("GET", paths.STREAMS, metrics.get_streams, ANYONE, Doc("what the hub holds, per project / experiment")),
    Route("GET", paths.HUB, metrics.get_hub, ANYONE, Doc("the hub's own figures: memory, series, history, scrapers")),
    Route(
        "POST",
        paths.PUSH,
        push.post_push,
        RUN_CREDENTIAL,
        Doc(
            "metric batches from trainers; a key the server makes itself is dropped from its batch, the rest "
            "applied, and the answer names it",
            PUSH_OK,
            errors=(400, 401, 413, 422, 429),
            body=ref("PushBody"),
        ),
        body_limit=CONFIGURED,
        run_in="body batches",
    ),
    Route(
        "GET",
        paths.SERVICES,
        info.get_services,
        ANYONE,
        Doc("every service: pid, health, restarts, version, data size"),
    ),
    Route(
        "GET", paths.INFO, info.get_info, ANYONE, Doc("the endpoints the server announces"), needs_start=True
    ),  # where spans go is known once the server has started
)

TARGET_ROUTES = (
    Route("GET", paths.TARGETS, targets.get_targets, ANYONE, Doc("registered scrape targets")),
    Route(
        "POST",
        paths.TARGETS,
        targets.post_target,
        RUN_CREDENTIAL,
        Doc("register a scrape target, or renew its TTL", errors=(400, 401, 413), body=ref("TargetBody")),
        body_limit=SMALL_BODY_BYTES,
        run_in="body labels",
    ),
    Route(
        "DELETE",
        paths.TARGETS,
        targets.delete_target,
        RUN_CREDENTIAL,
        Doc("remove a scrape target", parameters=TARGET_PARAMETERS, errors=(400, 401, 404)),
        run_in="target",
    ),
    Route("GET", paths.SERVICE_DISCOVERY, targets.get_sd, ANYONE, Doc("the targets in Prometheus http_sd format")),
)

RUN_ROUTES = (
    Route(
        "DELETE",
        paths.RUNS,
        runs.delete_run,
        TOKEN,
        Doc(
            "forget a run: its hub streams, its spans, its series in Prometheus (where Prometheus listens on loopback)",
            parameters=RUN,
            errors=(400, 401),
        ),
        needs_start=True,
    ),
    Route(
        "POST",
        paths.RUN_REVOKE,
        runs.revoke_run,
        TOKEN,
        Doc(
            "refuse the run credentials of a run minted until now (what its trainers and Ray workers carry; "
            "a job started afterwards writes again); the token only",
            parameters=RUN,
            errors=(400, 401, 403, 422),
        ),
    ),
    Route(
        "PUT",
        paths.RUN_CARD,
        runs.put_run_card,
        RUN_CREDENTIAL,
        Doc(
            "the run's card: verl's resolved config, versions, git commit, command line, nodes x GPUs, "
            "model (what the trainer sends with its first step; a run credential writes its own run's)",
            errors=(400, 401, 403, 413),
            body=ref("RunCard"),
        ),
        body_limit=RUN_CARD_BODY_BYTES,
        run_in="body",
    ),
    Route(
        "GET",
        paths.RUN_CARD,
        runs.get_run_card,
        TOKEN,  # paths, the command line: the token's
        Doc(
            "the run's card, as kept (needs the token when one is set: it holds paths and the command line)",
            JSON_OK,
            RUN,
            (400, 401, 404),
        ),
    ),
    Route(
        "POST",
        paths.RUN_MARKS,
        runs.post_mark,
        RUN_CREDENTIAL,
        Doc(
            "mark a step of a run (drawn on the dashboards, listed by diagnose; reset_baseline: the detectors "
            "start their baselines again there); the token, or a run credential of that run",
            errors=(400, 401, 403, 413, 422),
            body=ref("MarkBody"),
        ),
        body_limit=MARK_BODY_BYTES,
        run_in="body",
    ),
    Route("GET", paths.RUN_MARKS, runs.get_marks, ANYONE, Doc("a run's marks, by step", JSON_OK, RUN, (400,))),
    Route(
        "GET",
        paths.RUN_KEYS,
        runs.get_keys,
        ANYONE,
        Doc(
            "the run's keys as its trainer logged them: {series name: logged key}, kept across restarts",
            JSON_OK,
            RUN,
            (400,),
        ),
    ),
    Route(
        "DELETE",
        paths.RUN_MARKS,
        runs.delete_mark,
        RUN_CREDENTIAL,
        Doc("remove the mark of a step", parameters=(*RUN, STEP), errors=(400, 401, 403, 404)),
        run_in="query",
    ),
)

IMPORT_ROUTES = (
    Route(
        "POST",
        paths.RUN_IMPORT,
        imports.post_import,
        TOKEN,
        Doc(
            "a finished run from a file (rl-insight runs import): written into the server's Prometheus with "
            "its own steps and times, marked imported, never taken for a live run; the same file again adds "
            "nothing; the token only",
            JSON_OK,
            errors=(400, 401, 409, 413, 422, 429, 503),
            body=ref("ImportBody"),
        ),
        body_limit=MAX_IMPORT_BODY_BYTES,
        needs_start=True,
    ),
    Route(
        "GET",
        paths.RUN_IMPORTS,
        imports.get_imports,
        ANYONE,
        Doc(
            "the imported runs: where each came from, its steps and times (for one run: whether Prometheus "
            "has loaded it yet)",
            JSON_OK,
            RUN_FILTER,
            (400,),
        ),
    ),
)

SPAN_ROUTES = (
    Route(
        "POST",
        paths.OTLP_TRACES,
        spans.post_traces,
        RUN_CREDENTIAL,
        Doc(
            "OTLP/HTTP spans (protobuf ExportTraceServiceRequest), kept per run when Tempo is not running",
            {"description": "ExportTraceServiceResponse", "content": PROTOBUF},
            errors=(400, 401, 404, 413, 415),
            raw=PROTOBUF,
        ),
        needs_start=True,
        body_limit=CONFIGURED,
        run_in="spans",
    ),
    Route(
        "GET",
        paths.SPANS,
        spans.get_spans,
        TOKEN,  # token2text spans carry prompts: the token's
        Doc(
            "a run's kept spans, one JSON object a line (needs the token when one is "
            "set: with token2text they carry prompts)",
            NDJSON_OK,
            RUN,
            (400, 401, 404),
        ),
        needs_start=True,
    ),
    Route(
        "GET",
        paths.SPAN_RUNS,
        spans.get_span_runs,
        ANYONE,
        Doc("the runs whose spans this server keeps, newest first, a page at a time", JSON_OK, PAGE, (400, 404)),
        needs_start=True,
    ),
    Route(
        "GET",
        paths.TIMELINE_LAST_STEP,
        spans.get_last_step,
        TOKEN,
        Doc(
            "the newest step the server made timeline figures of: its lanes (state, start and end "
            "seconds from the step's start) and figures (long tail, slowest replica, idle shares)",
            JSON_OK,
            RUN,
            (400, 401, 404),
        ),
        needs_start=True,
    ),
)

PROFILE_ROUTES = (
    Route(
        "POST",
        paths.PROFILES,
        profiles.post_profile,
        TOKEN,
        Doc(
            "ask the running trainer to profile future steps with verl's profiler",
            errors=(400, 401, 404, 413),
            body=ref("ProfileBody"),
        ),
        body_limit=SMALL_BODY_BYTES,
    ),
    Route(
        "GET",
        paths.PROFILES,
        profiles.get_profiles,
        RUN_CREDENTIAL,
        Doc(
            "profile requests, newest first, and (for one run) what its profiler can do",
            JSON_OK,
            RUN_FILTER,
            (401, 404),
        ),
        run_in="query",
    ),
    Route(
        "POST",
        paths.PROFILE_REPORT,
        profiles.post_profile_report,
        RUN_CREDENTIAL,
        Doc("the trainer's word on its profile requests", errors=(400, 401, 404, 413), body=ref("ProfileReportBody")),
        body_limit=SMALL_BODY_BYTES,
        run_in="body",
    ),
)

ALERT_ROUTES = (
    Route(
        "GET",
        paths.ALERTS,
        alerts.get_alerts,
        ANYONE,
        Doc("alerts firing now (from the server's Alertmanager)", errors=(404, 503)),
    ),
    Route("GET", paths.SILENCES, alerts.get_silences, ANYONE, Doc("silences not yet expired", errors=(404, 503))),
    Route(
        "POST",
        paths.SILENCES,
        alerts.post_silence,
        TOKEN,
        Doc("silence a run's alerts for a while", errors=(400, 401, 404, 413, 503), body=ref("SilenceBody")),
        body_limit=SMALL_BODY_BYTES,
    ),
    Route(
        "DELETE",
        paths.SILENCES,
        alerts.delete_silence,
        TOKEN,
        Doc(
            "end a silence",
            parameters=(query("id", {"type": "string"}, True, "the silence's ID"),),
            errors=(400, 401, 404, 503),
        ),
    ),
)

ROUTES: tuple[Route, ...] = (
    *HUB_ROUTES,
    *TARGET_ROUTES,
    *RUN_ROUTES,
    *IMPORT_ROUTES,
    *SPAN_ROUTES,
    *PROFILE_ROUTES,
    *ALERT_ROUTES,
    *EXPLORER_ROUTES,
)
