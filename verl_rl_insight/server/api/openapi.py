"""The OpenAPI 3.0 document of the HTTP API, served at ``GET /openapi.json``.

Written by hand from the rules in push_schema.py and targets.py (a test checks that every
route of the API is documented here and nothing else is), so that clients, and the fuzz test
that generates requests from it, see exactly what the server accepts.
"""

from verl_rl_insight import __version__
from verl_rl_insight.contract.wire import (
    MAX_BATCHES,
    MAX_EXTRA_LABELS,
    MAX_LABEL_VALUE,
    MAX_METRICS_PER_BATCH,
    MAX_NAME,
    MAX_TIME,
    RESERVED_PREFIX,
)
from verl_rl_insight.server.stores.silences import MAX_SILENCE_S

LABEL_VALUE = {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_VALUE, "pattern": r"^[^\x00-\x1f\x7f-\x9f]*$"}
ERROR = {"description": "what is wrong, naming the field",
         "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
JSON_OK = {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}
TEXT_OK = {"description": "ok", "content": {"text/plain": {"schema": {"type": "string"}}}}


def _errors(*codes):
    return {str(code): ERROR for code in codes}


def _get(summary, ok=JSON_OK, parameters=(), errors=()):
    operation = {"summary": summary, "responses": {"200": ok, **_errors(*errors)}}
    if parameters:
        operation["parameters"] = list(parameters)
    return operation


def _write(summary, body_schema=None, parameters=(), errors=(400, 401)):
    operation = {"summary": summary, "security": [{"token": []}, {"basic": []}],
                 "responses": {"200": JSON_OK, **_errors(*errors)}}
    if body_schema is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body_schema}}}
    if parameters:
        operation["parameters"] = list(parameters)
    return operation


def _query(name, schema, required, description):
    return {"name": name, "in": "query", "required": required, "description": description, "schema": schema}


def document():
    schemas = {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
        "LabelValue": LABEL_VALUE,
        "Batch": {
            "type": "object", "additionalProperties": False, "required": ["project", "experiment_name", "metrics"],
            "properties": {
                "project": {"$ref": "#/components/schemas/LabelValue"},
                "experiment_name": {"$ref": "#/components/schemas/LabelValue"},
                "step": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                "time": {"type": "number", "minimum": 0, "maximum": MAX_TIME,
                         "description": "the trainer's time, seconds since the epoch"},
                "metrics": {
                    "type": "object", "maxProperties": MAX_METRICS_PER_BATCH, "additionalProperties": False,
                    "description": f"metric name: value; names starting with {RESERVED_PREFIX} are the hub's own",
                    "patternProperties": {f"^[a-zA-Z_:][a-zA-Z0-9_:]{{0,{MAX_NAME - 1}}}$": {
                        "oneOf": [{"type": "number"}, {"type": "string", "enum": ["NaN", "+Inf", "-Inf"]}]}}},
                "labels": {
                    "type": "object", "maxProperties": MAX_EXTRA_LABELS, "additionalProperties": False,
                    "description": "extra labels; project, experiment_name, job and instance are reserved",
                    "patternProperties": {r"^[a-zA-Z_][a-zA-Z0-9_]*$": {"$ref": "#/components/schemas/LabelValue"}}},
            },
        },
        "Push": {"type": "object", "additionalProperties": False, "required": ["batches"],
                 "properties": {"batches": {"type": "array", "maxItems": MAX_BATCHES,
                                            "items": {"$ref": "#/components/schemas/Batch"}}}},
        "Target": {
            "type": "object", "additionalProperties": False, "required": ["address", "job"],
            "properties": {
                "address": {"type": "string", "pattern": r"^[a-zA-Z0-9.\-]{1,253}:[1-9][0-9]{0,4}$",
                            "description": "host:port, port 1 to 65535"},
                "job": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_.\-]{0,63}$"},
                "labels": {"type": "object", "maxProperties": 16, "additionalProperties": False,
                           "patternProperties": {r"^[a-zA-Z_][a-zA-Z0-9_]*$": {"$ref": "#/components/schemas/LabelValue"}}},
                "ttl_s": {"type": "number", "minimum": 0, "maximum": 604800},
            },
        },
        "Silence": {
            "type": "object", "additionalProperties": False, "required": ["project", "experiment_name", "duration_s"],
            "properties": {
                "project": {"type": "string", "minLength": 1, "maxLength": 256},
                "experiment_name": {"type": "string", "minLength": 1, "maxLength": 256},
                "alertname": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]{0,127}$",
                              "description": "only this alert (default: every alert of the run)"},
                "duration_s": {"type": "number", "minimum": 60, "maximum": MAX_SILENCE_S},
                "comment": {"type": "string", "minLength": 1, "maxLength": 500},
                "created_by": {"type": "string", "minLength": 1, "maxLength": 100},
            },
        },
    }
    scraper = _query("scraper", {"type": "string", "pattern": r"^[a-zA-Z0-9_.:\-]{1,64}$"}, False,
                     "a named scraper also gets the history it has not been sent (needs the token when one is set)")
    paths = {
        "/metrics": {"get": _get("the hub's exposition for Prometheus", TEXT_OK, [scraper], (400, 401, 429))},
        "/-/healthy": {"get": _get("liveness", TEXT_OK)},
        "/-/ready": {"get": _get("readiness", TEXT_OK)},
        "/openapi.json": {"get": _get("this document")},
        "/api/v1/streams": {"get": _get("what the hub holds, per project / experiment")},
        "/api/v1/hub": {"get": _get("the hub's own figures: memory, series, history, scrapers")},
        "/api/v1/push": {"post": _write("metric batches from trainers", {"$ref": "#/components/schemas/Push"},
                                        errors=(400, 401, 413, 422))},
        "/api/v1/targets": {
            "get": _get("registered scrape targets"),
            "post": _write("register a scrape target, or renew its TTL", {"$ref": "#/components/schemas/Target"},
                           errors=(400, 401, 413)),
            "delete": _write("remove a scrape target", parameters=[
                _query("job", {"type": "string"}, True, "the target's job"),
                _query("address", {"type": "string"}, True, "the target's host:port")], errors=(400, 401, 404)),
        },
        "/api/v1/sd": {"get": _get("the targets in Prometheus http_sd format")},
        "/api/v1/services": {"get": _get("every service: pid, health, restarts, version, data size")},
        "/api/v1/info": {"get": _get("the endpoints the server announces")},
        "/api/v1/runs": {"delete": _write("forget a run: its hub streams, its spans, its series in Prometheus "
                                          "(where Prometheus listens on loopback)", parameters=[
            _query("project", {"type": "string"}, True, "the run's project"),
            _query("experiment_name", {"type": "string"}, True, "the run's experiment_name")], errors=(400, 401))},
        "/v1/traces": {"post": {
            "summary": "OTLP/HTTP spans (protobuf ExportTraceServiceRequest), kept per run when Tempo is not running",
            "security": [{"token": []}, {"basic": []}],
            "requestBody": {"required": True, "content": {"application/x-protobuf": {
                "schema": {"type": "string", "format": "binary"}}}},
            "responses": {"200": {"description": "ExportTraceServiceResponse", "content": {
                "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}}}},
                **_errors(400, 401, 404, 413, 415)}}},
        "/api/v1/spans": {"get": {**_get("a run's kept spans, one JSON object a line (needs the token when one is "
                                         "set: with token2text they carry prompts)", {
            "description": "ok", "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}, [
                _query("project", {"type": "string"}, True, "the run's project"),
                _query("experiment_name", {"type": "string"}, True, "the run's experiment_name")], (400, 401, 404)),
            "security": [{"token": []}, {"basic": []}]}},
        "/api/v1/spans/runs": {"get": _get("the runs whose spans this server keeps", errors=(404,))},
        "/api/v1/alerts": {"get": _get("alerts firing now (from the server's Alertmanager)", errors=(404, 503))},
        "/api/v1/silences": {
            "get": _get("silences not yet expired", errors=(404, 503)),
            "post": _write("silence a run's alerts for a while", {"$ref": "#/components/schemas/Silence"},
                           errors=(400, 401, 404, 413, 503)),
            "delete": _write("end a silence", parameters=[
                _query("id", {"type": "string"}, True, "the silence's ID")], errors=(400, 401, 404, 503)),
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "rl-insight server", "version": __version__},
        "paths": paths,
        "components": {"schemas": schemas,
                       "securitySchemes": {"token": {"type": "http", "scheme": "bearer"},
                                           "basic": {"type": "http", "scheme": "basic"}}},
    }
