"""Where a request names its run, as a route's row declares it (``Route.run_in``), read for the
run gate (run_gate.py): every place is read by the router before the handler, or by the handler's
one parse of a body that may be MBs; no third way.

- ``BEFORE_BODY``: "query" (``?project=&experiment_name=``) and "target" (the labels of the
  registered target that ``?job=&address=`` name; none: no run, refused);
- ``IN_BODY``: a small JSON body, read and decoded once by the router and handed to the handler:
  "body" (its ``project`` and ``experiment_name``), "body labels" (the target's ``labels``); a body
  that is not an object is let through: every such route refuses it (400);
- ``IN_PARSE``: "body batches" (a push: each batch's labels, as ``MetricHub.push_body`` decodes
  them) and "spans" (each span's resource, as ``api.spans`` decodes the OTLP request).
"""

import json
from collections.abc import Callable, Iterator

from verl_rl_insight.contract.run_credential import NamedRun
from verl_rl_insight.contract.wire import PushError
from verl_rl_insight.server.api.access import RunIn
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.api.request import Request
from verl_rl_insight.server.api.run_gate import RunGate

RUN_FIELDS = "project, experiment_name"


def _query(request: Request, parts: ApiParts) -> Iterator[NamedRun]:
    yield NamedRun(request.param("project"), request.param("experiment_name"), RUN_FIELDS)


def _target(request: Request, parts: ApiParts) -> Iterator[NamedRun]:
    job, address = request.param("job"), request.param("address")
    labels = parts.targets.labels(job, address) if job and address else {}
    yield NamedRun(labels.get("project"), labels.get("experiment_name"), "target")


def _body(item: dict[str, object]) -> list[NamedRun]:
    return [NamedRun(item.get("project"), item.get("experiment_name"), RUN_FIELDS)]


def _labels(item: dict[str, object]) -> list[NamedRun]:
    given = item.get("labels")
    labels = given if isinstance(given, dict) else {}
    return [NamedRun(labels.get("project"), labels.get("experiment_name"), "labels")]


BEFORE_BODY: dict[RunIn, Callable[[Request, ApiParts], Iterator[NamedRun]]] = {"query": _query, "target": _target}
IN_BODY: dict[RunIn, Callable[[dict[str, object]], list[NamedRun]]] = {"body": _body, "body labels": _labels}
IN_PARSE: frozenset[RunIn] = frozenset({"body batches", "spans"})  # the handler hands its parser the gate


def check_body_runs(gate: RunGate, body: bytes) -> None:
    """Forbidden when the body names a run other than the gate's (400 when it is not JSON)."""
    try:
        item = json.loads(body)  # the handlers' parsers take no body that this one refuses
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise PushError(f"body is not valid JSON: {str(exc)[:200]}") from None
    gate(IN_BODY[gate.run_in](item) if isinstance(item, dict) else ())
