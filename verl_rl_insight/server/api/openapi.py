"""The OpenAPI 3.1 document of the HTTP API, served at ``GET /openapi.json``.

The bodies' schemas are generated from the wire schema (``contract/wire.py``), the very types the
server decodes with; the routes are listed here (a test checks that every route of the API is
documented and nothing else is), so that clients, and the fuzz test that generates requests from
it, see exactly what the server accepts.
"""

from typing import Any

import msgspec

from verl_rl_insight import __version__
from verl_rl_insight.contract.marks import MarkBody
from verl_rl_insight.contract.run_card import MAX_CARD_BYTES, MAX_DEPTH
from verl_rl_insight.contract.wire import (
    ErrorBody,
    ProfileBody,
    ProfileReportBody,
    PushAnswer,
    PushBody,
    SilenceBody,
    TargetBody,
)

ERROR = {
    "description": "what is wrong, naming the field",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
JSON_OK = {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}
TEXT_OK = {"description": "ok", "content": {"text/plain": {"schema": {"type": "string"}}}}


def _errors(*codes: object) -> Any:
    return {str(code): ERROR for code in codes}


def _get(summary: Any, ok: Any = JSON_OK, parameters: Any = (), errors: Any = ()) -> Any:
    operation = {"summary": summary, "responses": {"200": ok, **_errors(*errors)}}
    if parameters:
        operation["parameters"] = list(parameters)
    return operation


def _write(
    summary: Any, body_schema: Any = None, parameters: Any = (), errors: Any = (400, 401), ok: Any = JSON_OK
) -> Any:
    operation = {
        "summary": summary,
        "security": [{"token": []}, {"basic": []}],
        "responses": {"200": ok, **_errors(*errors)},
    }
    if body_schema is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body_schema}}}
    if parameters:
        operation["parameters"] = list(parameters)
    return operation


def _query(name: str, schema: Any, required: Any, description: Any) -> Any:
    return {"name": name, "in": "query", "required": required, "description": description, "schema": schema}


# ?project=P&experiment_name=E: the run a request is about
RUN_PARAMETERS = [
    _query("project", {"type": "string"}, True, "the run's project"),
    _query("experiment_name", {"type": "string"}, True, "the run's experiment_name"),
]


_TEXT = {"type": "string"}
_WHOLE = {"type": ["integer", "null"], "minimum": 0}
RUN_CARD = {
    "type": "object",
    "description": f"one run's card, at most {MAX_CARD_BYTES} bytes, its config nested at most {MAX_DEPTH} deep",
    "required": ["project", "experiment_name"],
    "additionalProperties": False,
    "properties": {
        "project": {"type": "string", "minLength": 1, "maxLength": 256, "pattern": r"^[^\x00-\x1f\x7f-\x9f]+$"},
        "experiment_name": {"type": "string", "minLength": 1, "maxLength": 256, "pattern": r"^[^\x00-\x1f\x7f-\x9f]+$"},
        "created": {"type": ["number", "null"]},
        "versions": {"type": ["object", "null"], "additionalProperties": {"type": ["string", "null"]}},
        "git": {"type": ["object", "null"]},
        "command": {"type": ["array", "null"], "items": _TEXT},
        "nodes": _WHOLE,
        "gpus_per_node": _WHOLE,
        "model": {"type": ["string", "null"]},
        "config": {"type": ["object", "null"], "description": "verl's resolved config (OmegaConf.to_container)"},
        "derived": {
            "type": ["object", "null"],
            "additionalProperties": _TEXT,
            "description": "config key -> the key verl's own config makes it a copy of",
        },
        "notes": {"type": ["array", "null"], "items": _TEXT},
    },
}


def schemas() -> dict[str, Any]:
    """The request and error bodies, generated from the wire schema's msgspec Structs."""
    _, components = msgspec.json.schema_components(
        (PushBody, PushAnswer, TargetBody, SilenceBody, ProfileBody, ProfileReportBody, MarkBody, ErrorBody),
        ref_template="#/components/schemas/{name}",
    )
    components["Error"] = components.pop("ErrorBody")
    components["RunCard"] = RUN_CARD
    return components


_RUN_TEXT = {"type": "string", "minLength": 1, "maxLength": 256, "pattern": r"^[^\x00-\x1f\x7f-\x9f]+$"}
EXPLORER_RUN = [
    _query("project", _RUN_TEXT, True, "the run's project"),
    _query("experiment_name", _RUN_TEXT, True, "the run's experiment_name"),
]
EXPLORER_STEP = _query("step", {"type": "integer", "minimum": 0, "maximum": 10**12}, True, "the trainer step")


def explorer_paths() -> dict[str, Any]:
    """The run explorer's JSON API (server/explorer; the shapes: EXPLORER_API.md)."""
    keys = _query(
        "keys",
        {"type": "string", "minLength": 1, "maxLength": 64 * 257, "pattern": r"^[^\x00-\x1f\x7f-\x9f]+$"},
        True,
        "verl's keys, comma-separated (critic/score/mean,actor/entropy), at most 64",
    )
    steps = _query("steps", {"type": "string", "pattern": r"^[0-9]*:[0-9]*$"}, False, "only steps A:B (both included)")
    return {
        "/api/v1/explorer/runs": {"get": _get("the runs, newest first: step, age, state, findings, a sparkline")},
        "/api/v1/explorer/run": {
            "get": _get(
                "one run: its keys, the key curves' panels, its findings (diagnose's), marks, the other runs of "
                "its project, its card (with the token only)",
                JSON_OK,
                EXPLORER_RUN,
                (400, 404),
            )
        },
        "/api/v1/explorer/curves": {
            "get": _get(
                "a run's curves by step, aligned on its steps", JSON_OK, [*EXPLORER_RUN, keys, steps], (400, 404)
            )
        },
        "/api/v1/explorer/step": {
            "get": _get(
                "one step: its swimlane, the slowest replica, the long tail, its GPUs' faults, the findings over it",
                JSON_OK,
                [*EXPLORER_RUN, EXPLORER_STEP],
                (400, 404),
            )
        },
        "/api/v1/explorer/samples": {
            "get": {
                **_get(
                    "a step's samples: prompts and responses (the token, or a run credential of that run)",
                    JSON_OK,
                    [*EXPLORER_RUN, EXPLORER_STEP],
                    (400, 401, 403),
                ),
                "security": [{"token": []}, {"basic": []}],
            }
        },
    }


def document() -> dict[str, Any]:
    schemas_ = schemas()
    scraper = _query(
        "scraper",
        {"type": "string", "pattern": r"^[a-zA-Z0-9_.:\-]{1,64}$"},
        False,
        "a named scraper also gets the history it has not been sent (needs the token when one is set)",
    )
    paths = {
        "/metrics": {"get": _get("the hub's exposition for Prometheus", TEXT_OK, [scraper], (400, 401, 429))},
        "/-/healthy": {"get": _get("liveness", TEXT_OK)},
        "/-/ready": {"get": _get("readiness", TEXT_OK)},
        "/openapi.json": {"get": _get("this document")},
        "/api/v1/streams": {"get": _get("what the hub holds, per project / experiment")},
        "/api/v1/hub": {"get": _get("the hub's own figures: memory, series, history, scrapers")},
        "/api/v1/push": {
            "post": _write(
                "metric batches from trainers; a key the server makes itself is dropped from its batch, the rest "
                "applied, and the answer names it",
                {"$ref": "#/components/schemas/PushBody"},
                errors=(400, 401, 413, 422, 429),
                ok={
                    "description": "applied (keys left out named in dropped_keys)",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PushAnswer"}}},
                },
            )
        },
        "/api/v1/targets": {
            "get": _get("registered scrape targets"),
            "post": _write(
                "register a scrape target, or renew its TTL",
                {"$ref": "#/components/schemas/TargetBody"},
                errors=(400, 401, 413),
            ),
            "delete": _write(
                "remove a scrape target",
                parameters=[
                    _query("job", {"type": "string"}, True, "the target's job"),
                    _query("address", {"type": "string"}, True, "the target's host:port"),
                ],
                errors=(400, 401, 404),
            ),
        },
        "/api/v1/sd": {"get": _get("the targets in Prometheus http_sd format")},
        "/api/v1/services": {"get": _get("every service: pid, health, restarts, version, data size")},
        "/api/v1/info": {"get": _get("the endpoints the server announces")},
        "/api/v1/runs": {
            "delete": _write(
                "forget a run: its hub streams, its spans, its series in Prometheus "
                "(where Prometheus listens on loopback)",
                parameters=RUN_PARAMETERS,
                errors=(400, 401),
            )
        },
        "/api/v1/runs/revoke": {
            "post": _write(
                "refuse the run credentials of a run minted until now (what its trainers and Ray workers carry; "
                "a job started afterwards writes again); the token only",
                parameters=RUN_PARAMETERS,
                errors=(400, 401, 403, 422),
            )
        },
        "/api/v1/runs/card": {
            "put": _write(
                "the run's card: verl's resolved config, versions, git commit, command line, nodes x GPUs, "
                "model (what the trainer sends with its first step; a run credential writes its own run's)",
                {"$ref": "#/components/schemas/RunCard"},
                errors=(400, 401, 403, 413),
            ),
            "get": {
                **_get(
                    "the run's card, as kept (needs the token when one is set: it holds paths and the command line)",
                    JSON_OK,
                    RUN_PARAMETERS,
                    (400, 401, 404),
                ),
                "security": [{"token": []}, {"basic": []}],
            },
        },
        "/api/v1/runs/marks": {
            "post": _write(
                "mark a step of a run (drawn on the dashboards, listed by diagnose; reset_baseline: the detectors "
                "start their baselines again there); the token, or a run credential of that run",
                {"$ref": "#/components/schemas/MarkBody"},
                errors=(400, 401, 403, 413, 422),
            ),
            "get": _get("a run's marks, by step", JSON_OK, RUN_PARAMETERS, (400,)),
            "delete": _write(
                "remove the mark of a step",
                parameters=[
                    *RUN_PARAMETERS,
                    _query("step", {"type": "integer", "minimum": 0}, True, "the marked step"),
                ],
                errors=(400, 401, 403, 404),
            ),
        },
        "/v1/traces": {
            "post": {
                "summary": "OTLP/HTTP spans (protobuf ExportTraceServiceRequest), kept per run when Tempo "
                "is not running",
                "security": [{"token": []}, {"basic": []}],
                "requestBody": {
                    "required": True,
                    "content": {"application/x-protobuf": {"schema": {"type": "string", "format": "binary"}}},
                },
                "responses": {
                    "200": {
                        "description": "ExportTraceServiceResponse",
                        "content": {"application/x-protobuf": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    **_errors(400, 401, 404, 413, 415),
                },
            }
        },
        "/api/v1/spans": {
            "get": {
                **_get(
                    "a run's kept spans, one JSON object a line (needs the token when one is "
                    "set: with token2text they carry prompts)",
                    {"description": "ok", "content": {"application/x-ndjson": {"schema": {"type": "string"}}}},
                    RUN_PARAMETERS,
                    (400, 401, 404),
                ),
                "security": [{"token": []}, {"basic": []}],
            }
        },
        "/api/v1/spans/runs": {
            "get": _get(
                "the runs whose spans this server keeps, newest first, a page at a time",
                JSON_OK,
                [
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, False, "runs per page (100)"),
                    _query("offset", {"type": "integer", "minimum": 0}, False, "from this run on (0)"),
                ],
                (400, 404),
            )
        },
        "/api/v1/profiles": {
            "get": {
                **_get(
                    "profile requests, newest first, and (for one run) what its profiler can do",
                    JSON_OK,
                    [
                        _query("project", {"type": "string"}, False, "only this project's"),
                        _query("experiment_name", {"type": "string"}, False, "only this experiment's"),
                    ],
                    (401, 404),
                ),
                "security": [{"token": []}, {"basic": []}],
            },
            "post": _write(
                "ask the running trainer to profile future steps with verl's profiler",
                {"$ref": "#/components/schemas/ProfileBody"},
                errors=(400, 401, 404, 413),
            ),
        },
        "/api/v1/profiles/report": {
            "post": _write(
                "the trainer's word on its profile requests",
                {"$ref": "#/components/schemas/ProfileReportBody"},
                errors=(400, 401, 404, 413),
            )
        },
        "/api/v1/timeline/last_step": {
            "get": {
                **_get(
                    "the newest step the server made timeline figures of: its lanes (state, start and end "
                    "seconds from the step's start) and figures (long tail, slowest replica, idle shares)",
                    JSON_OK,
                    RUN_PARAMETERS,
                    (400, 401, 404),
                ),
                "security": [{"token": []}, {"basic": []}],
            }
        },
        **explorer_paths(),
        "/api/v1/alerts": {"get": _get("alerts firing now (from the server's Alertmanager)", errors=(404, 503))},
        "/api/v1/silences": {
            "get": _get("silences not yet expired", errors=(404, 503)),
            "post": _write(
                "silence a run's alerts for a while",
                {"$ref": "#/components/schemas/SilenceBody"},
                errors=(400, 401, 404, 413, 503),
            ),
            "delete": _write(
                "end a silence",
                parameters=[_query("id", {"type": "string"}, True, "the silence's ID")],
                errors=(400, 401, 404, 503),
            ),
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "rl-insight server", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas_,
            "securitySchemes": {
                "token": {"type": "http", "scheme": "bearer"},
                "basic": {"type": "http", "scheme": "basic"},
            },
        },
    }
