"""OTLP/HTTP trace bodies as span records: the protobuf ``ExportTraceServiceRequest`` Tempo's
receiver takes, decoded within a size limit, each span a plain record of the run it names."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from verl_rl_insight.contract.errors import BadInput, TooLarge, UnsupportedEncoding

MAX_ATTRIBUTES = 32
MAX_VALUE = 256
LONG_VALUES = {"sample.prompt": 4096, "sample.response": 4096}  # the samples' text (plugin samples)


class SpanError(BadInput):
    """An OTLP body that cannot be read."""


class SpanTooLarge(SpanError, TooLarge):
    """A body that inflates beyond the limit."""


class SpanEncoding(SpanError, UnsupportedEncoding):
    """A Content-Encoding other than gzip or none."""


Scalar = str | bool | int | float  # an attribute's value as a record keeps it
Record = dict[str, Any]  # a span as the store keeps it (ids, name, times, its attributes: Scalar values)


class RunSpan(NamedTuple):
    """A span of a request with the run it names."""

    project: str
    experiment: str  # its experiment_name
    span: Record


def decode(body: bytes, encoding: str | None, limit: int) -> ExportTraceServiceRequest:
    """ExportTraceServiceRequest from an OTLP/HTTP protobuf body (gzip allowed, inflated to at most
    ``limit`` bytes: a small bomb cannot become a large body)."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    if encoding == "gzip":
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            body = inflate.decompress(body, limit + 1)
        except zlib.error as exc:
            raise SpanError(f"Content-Encoding gzip: the body is not gzip ({exc})") from None
        if len(body) > limit or inflate.unconsumed_tail:
            raise SpanTooLarge(f"the body inflates beyond {limit} bytes")
    elif encoding not in (None, "", "identity"):
        raise SpanEncoding(f"Content-Encoding {encoding[:40]!r} is not supported (gzip or none)")
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise SpanError(f"body is not an OTLP ExportTraceServiceRequest (protobuf): {exc}") from None
    return request


def _value(any_value: AnyValue) -> Scalar | None:
    kind = any_value.WhichOneof("value")
    if kind in ("string_value", "bool_value", "int_value", "double_value"):
        value = getattr(any_value, kind)
        return value[:MAX_VALUE] if isinstance(value, str) else value
    return None


def records(request: ExportTraceServiceRequest) -> Iterator[RunSpan]:
    """Each span of a request with its run; spans without a run are skipped."""
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs: dict[str, Scalar] = {}
                for a in span.attributes[: MAX_ATTRIBUTES + 2]:
                    value = _value(a.value)
                    if isinstance(value, str) and a.key in LONG_VALUES:
                        value = a.value.string_value[: LONG_VALUES[a.key]]
                    if value is not None:
                        attrs[a.key[:MAX_VALUE]] = value
                project, experiment = attrs.pop("project", None), attrs.pop("experiment_name", None)
                if not isinstance(project, str) or not isinstance(experiment, str):
                    continue
                host = resource.get("host.name")
                if host is not None:
                    attrs.setdefault("node", host)
                yield RunSpan(
                    project,
                    experiment,
                    {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name[:MAX_VALUE],
                        "start_ns": span.start_time_unix_nano,
                        "end_ns": span.end_time_unix_nano,
                        "attributes": dict(list(attrs.items())[:MAX_ATTRIBUTES]),
                    },
                )
