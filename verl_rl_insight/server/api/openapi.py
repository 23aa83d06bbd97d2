"""The OpenAPI 3.1 document of the HTTP API, served at ``GET /openapi.json``.

Its paths, methods and security come from the route table (``routes.ROUTES``: a route cannot be
missing from the document, nor the document name one that is not served); the bodies' schemas are
generated from the wire schema (``contract/wire.py``), the very types the server decodes with, so
that clients, and the fuzz test that generates requests from it, see exactly what the server accepts.
"""

from collections.abc import Sequence

import msgspec

from verl_rl_insight import __version__
from verl_rl_insight.contract.marks import MarkBody
from verl_rl_insight.contract.run_card import MAX_CARD_BYTES, MAX_DEPTH
from verl_rl_insight.contract.run_import import IMPORT_SCHEMA
from verl_rl_insight.contract.wire import (
    ErrorBody,
    ProfileBody,
    ProfileReportBody,
    PushAnswer,
    PushBody,
    SilenceBody,
    TargetBody,
)
from verl_rl_insight.server.api.access import Access
from verl_rl_insight.server.api.route import JsonSchema, Route

ERROR: JsonSchema = {
    "description": "what is wrong, naming the field",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
JSON_OK: JsonSchema = {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}
TEXT_OK: JsonSchema = {"description": "ok", "content": {"text/plain": {"schema": {"type": "string"}}}}
SECURITY: list[dict[str, list[str]]] = [{"token": []}, {"basic": []}]


def ref(name: str) -> JsonSchema:
    """A schema of ``components.schemas``."""
    return {"$ref": f"#/components/schemas/{name}"}


def query(name: str, schema: JsonSchema, required: bool, description: str) -> JsonSchema:
    return {"name": name, "in": "query", "required": required, "description": description, "schema": schema}


# ?project=P&experiment_name=E: the run a request is about
RUN_PARAMETERS = [
    query("project", {"type": "string"}, True, "the run's project"),
    query("experiment_name", {"type": "string"}, True, "the run's experiment_name"),
]


_TEXT: JsonSchema = {"type": "string"}
_WHOLE: JsonSchema = {"type": ["integer", "null"], "minimum": 0}
RUN_CARD: JsonSchema = {
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


def schemas() -> dict[str, JsonSchema]:
    """The request and error bodies, generated from the wire schema's msgspec Structs."""
    _, components = msgspec.json.schema_components(
        (PushBody, PushAnswer, TargetBody, SilenceBody, ProfileBody, ProfileReportBody, MarkBody, ErrorBody),
        ref_template="#/components/schemas/{name}",
    )
    components["Error"] = components.pop("ErrorBody")
    components["RunCard"] = RUN_CARD
    components["ImportBody"] = dict(IMPORT_SCHEMA)
    return components


def operation(route: Route) -> JsonSchema:
    """The route's operation object: what its table line says of it."""
    doc = route.doc
    answer: JsonSchema = {
        "summary": doc.summary,
        "responses": {"200": doc.ok or JSON_OK, **{str(code): ERROR for code in doc.errors}},
    }
    if route.access is not Access.ANYONE:
        answer["security"] = SECURITY
    if doc.body is not None:
        answer["requestBody"] = {"required": True, "content": {"application/json": {"schema": doc.body}}}
    elif doc.raw is not None:
        answer["requestBody"] = {"required": True, "content": doc.raw}
    if doc.parameters:
        answer["parameters"] = list(doc.parameters)
    return answer


def document(routes: Sequence[Route]) -> JsonSchema:
    paths: dict[str, dict[str, JsonSchema]] = {}
    for route in (r for r in routes if not r.prefix):
        paths.setdefault(route.path, {})[route.method.lower()] = operation(route)
    return {
        "openapi": "3.1.0",
        "info": {"title": "rl-insight server", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas(),
            "securitySchemes": {
                "token": {"type": "http", "scheme": "bearer"},
                "basic": {"type": "http", "scheme": "basic"},
            },
        },
    }
