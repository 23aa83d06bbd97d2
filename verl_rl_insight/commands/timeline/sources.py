"""Where a run's spans are read from: the rl-insight server that kept them (no Tempo), or Tempo's
HTTP API (``/api/search`` by the run's attributes, then ``/api/traces/<id>``, OTLP JSON)."""

import base64
import json
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any, TypedDict

from verl_rl_insight.commands.http_fetch import NoAnswer, fetch_ok
from verl_rl_insight.commands.printable import printable
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.errors import RLInsightError

MAX_TRACES = 100_000


Attribute = str | bool | int | float | None


class Span(TypedDict):
    """One span as the server keeps it and Tempo gives it back: IDs in hex, times in ns since the epoch."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Attribute]


class SourceError(RLInsightError):
    """Spans that cannot be read from the server or Tempo; the message says why (``status``: the
    HTTP status that refused them, None when none came)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _get(url: str, token: str | None = None) -> bytes:
    try:
        return fetch_ok(url, token=token, timeout_s=30).body
    except NoAnswer as exc:
        raise SourceError(str(exc), exc.status) from None


def from_server(base: str, project: str, experiment: str | None, token: str | None = None) -> list[Span]:
    """The spans the server kept for the run (JSON lines)."""
    query = urllib.parse.urlencode({"project": project, "experiment_name": experiment})
    body = _get(f"{base}{paths.SPANS}?{query}", token)
    return [printable(json.loads(line)) for line in body.splitlines() if line.strip()]


def _hex(value: str | None) -> str:
    """Tempo writes IDs in base64 (its JSON) or hex (OTLP JSON); both -> hex."""
    if not value:
        return ""
    if len(value) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    return base64.b64decode(value).hex()


def _otlp_value(value: Mapping[str, Attribute]) -> Attribute:
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:
        return int(str(value["intValue"]))
    return None


def _spans_of(trace: Any) -> Iterator[Span]:
    """Spans of one trace in Tempo's JSON (``batches`` in Tempo 2.x, ``resourceSpans`` in OTLP JSON)."""
    for batch in trace.get("batches") or trace.get("resourceSpans") or []:
        resource = {a["key"]: _otlp_value(a.get("value", {})) for a in batch.get("resource", {}).get("attributes", [])}
        for scope in batch.get("scopeSpans") or batch.get("instrumentationLibrarySpans") or []:
            for span in scope.get("spans", []):
                attrs = {a["key"]: _otlp_value(a.get("value", {})) for a in span.get("attributes", [])}
                if "host.name" in resource:
                    attrs.setdefault("node", resource["host.name"])
                yield {
                    "trace_id": _hex(span.get("traceId")),
                    "span_id": _hex(span.get("spanId")),
                    "parent_span_id": _hex(span.get("parentSpanId")),
                    "name": span.get("name", ""),
                    "start_ns": int(span.get("startTimeUnixNano", 0)),
                    "end_ns": int(span.get("endTimeUnixNano", 0)),
                    "attributes": attrs,
                }


def from_tempo(
    tempo: str, project: str, experiment: str | None, start_s: float | None = None, end_s: float | None = None
) -> list[Span]:
    """The run's spans from Tempo: traces found by the spans' project / experiment_name attributes."""
    params = {"tags": f'project="{project}" experiment_name="{experiment}"', "limit": str(MAX_TRACES)}
    if start_s and end_s:
        params.update(start=str(int(start_s)), end=str(int(end_s) + 1))
    found = json.loads(_get(f"{tempo}/api/search?{urllib.parse.urlencode(params)}"))
    spans = []
    for trace in found.get("traces") or []:
        body = json.loads(_get(f"{tempo}/api/traces/{trace['traceID']}"))
        spans += [
            s
            for s in _spans_of(body)
            if s["attributes"].pop("project", project) == project
            and s["attributes"].pop("experiment_name", experiment) == experiment
        ]
    return printable(spans)
