"""The timeline without Tempo: the hub takes OTLP/HTTP spans itself (``POST /v1/traces``) and keeps
them per run under ``<data>/spans``, bounded, so ``rl-insight timeline export`` has them.

One JSON line per span in ``<run key>.jsonl``; ``runs.json`` indexes the runs. A run keeps at most
``max_run_bytes`` (later spans are dropped and counted), all runs together ``max_total_bytes``
(the run written to longest ago goes first).
"""

import hashlib
import json
import os
import threading
import time
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any

from verl_rl_insight.contract.errors import BadInput, TooLarge, UnsupportedEncoding
from verl_rl_insight.server.stores.files import write_atomically

MAX_ATTRIBUTES = 32
MAX_VALUE = 256
LONG_VALUES = {"sample.prompt": 4096, "sample.response": 4096}  # the samples' text (plugin samples)


class SpanError(BadInput):
    """An OTLP body that cannot be read."""


class SpanTooLarge(SpanError, TooLarge):
    """A body that inflates beyond the limit."""


class SpanEncoding(SpanError, UnsupportedEncoding):
    """A Content-Encoding other than gzip or none."""


def decode(body: Any, encoding: Any, limit: Any) -> Any:
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


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind in ("string_value", "bool_value", "int_value", "double_value"):
        value = getattr(any_value, kind)
        return value[:MAX_VALUE] if isinstance(value, str) else value
    return None


def records(request: Any) -> Any:
    """(project, experiment_name, record) for each span of a request; spans without a run are skipped."""
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs = {}
                for a in span.attributes[: MAX_ATTRIBUTES + 2]:
                    value = _value(a.value)
                    if isinstance(value, str) and a.key in LONG_VALUES:
                        value = a.value.string_value[: LONG_VALUES[a.key]]
                    if value is not None:
                        attrs[a.key[:MAX_VALUE]] = value
                project, experiment = attrs.pop("project", None), attrs.pop("experiment_name", None)
                if not isinstance(project, str) or not isinstance(experiment, str):
                    continue
                if "host.name" in resource:
                    attrs.setdefault("node", resource["host.name"])
                yield (
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


def _whole_lines(path: Path) -> Any:
    """Cut a span file back to its last whole line (a process killed mid-append leaves a part of
    one, which later appends would glue to a whole line); returns its size."""
    try:
        with open(path, "r+b") as f:
            size = f.seek(0, 2)
            end = size
            while end > 0:
                start = max(0, end - 65536)
                f.seek(start)
                cut = f.read(end - start).rfind(b"\n")
                if cut >= 0:
                    end = start + cut + 1
                    break
                end = start
            if end != size:
                f.truncate(end)
            return end
    except FileNotFoundError:
        return 0


def run_key(project: str, experiment: str | None) -> Any:
    return hashlib.sha256(f"{project}\0{experiment}".encode()).hexdigest()[:24]


class SpanStore:
    """Spans per run, bounded in bytes per run, in bytes and in runs all together (the run written
    to longest ago goes first, counted in ``stats["evicted_runs"]``). The index (``runs.json``) is
    kept in memory, in the order runs were last written, and saved at most once per
    ``save_every_s`` (and at ``close``): a request costs the same with 10 runs or 10,000."""

    def __init__(
        self,
        folder: Path,
        max_run_bytes: Any = 64 * 2**20,
        max_total_bytes: Any = 1024 * 2**20,
        max_runs: int = 10_000,
        save_every_s: float = 1.0,
    ) -> None:
        self.folder = folder
        self.max_run_bytes = max_run_bytes
        self.max_total_bytes = max_total_bytes
        self.max_runs = max_runs
        self.save_every_s = save_every_s
        self.stats = {"received": 0, "kept": 0, "dropped": 0, "unlabelled": 0, "evicted_runs": 0}
        self._lock = threading.Lock()
        folder.mkdir(parents=True, exist_ok=True)
        try:
            saved = json.loads((folder / "runs.json").read_text())
        except (OSError, ValueError):
            saved = {}
        runs = saved if isinstance(saved, dict) else {}
        self._runs: OrderedDict[str, dict[str, Any]] = OrderedDict(
            sorted(runs.items(), key=lambda kv: kv[1].get("last", 0) if isinstance(kv[1], dict) else 0)
        )
        self._bytes = 0
        for key, run in self._runs.items():
            run["bytes"] = _whole_lines(folder / f"{key}.jsonl")
            self._bytes += run["bytes"]
        known = {f"{key}.jsonl" for key in self._runs}
        for orphan in folder.glob("*.jsonl"):  # written after the last index save, before a crash
            if orphan.name not in known:
                orphan.unlink(missing_ok=True)
        self._saved_at = 0.0
        self._dirty = False

    def add(self, request: Any, found: list[tuple[str, str, dict[str, Any]]] | None = None) -> Any:
        """Keep the spans of one OTLP request (``found``: its ``records``, where the caller has
        them already); returns how many were kept."""
        lines: dict[Any, Any] = {}
        total = 0
        for project, experiment, record in records(request) if found is None else found:
            total += 1
            lines.setdefault((project, experiment), []).append(json.dumps(record, separators=(",", ":")) + "\n")
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.stats["unlabelled"] += len(scope_spans.spans)
        self.stats["unlabelled"] -= total
        kept = 0
        with self._lock:
            for (project, experiment), run_lines in lines.items():
                key = run_key(project, experiment)
                run = self._runs.get(key)
                if run is None:
                    run = self._runs[key] = {
                        "project": project,
                        "experiment_name": experiment,
                        "bytes": 0,
                        "spans": 0,
                        "dropped": 0,
                    }
                data = "".join(run_lines).encode()
                self.stats["received"] += len(run_lines)
                if run["bytes"] + len(data) > self.max_run_bytes:
                    run["dropped"] += len(run_lines)
                    self.stats["dropped"] += len(run_lines)
                    self._runs.move_to_end(key)
                    continue
                fd = os.open(self.folder / f"{key}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with os.fdopen(fd, "ab") as f:
                    f.write(data)
                run.update(bytes=run["bytes"] + len(data), spans=run["spans"] + len(run_lines), last=time.time())
                self._bytes += len(data)
                self._runs.move_to_end(key)
                kept += len(run_lines)
            self.stats["kept"] += kept
            self._evict()
            self._dirty = True
            self._save_if_due()
        return kept

    def _evict(self) -> None:
        while len(self._runs) > 1 and (self._bytes > self.max_total_bytes or len(self._runs) > self.max_runs):
            oldest, run = self._runs.popitem(last=False)  # the run written to longest ago
            (self.folder / f"{oldest}.jsonl").unlink(missing_ok=True)
            self._bytes -= run["bytes"]
            self.stats["evicted_runs"] += 1

    def _save_if_due(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._dirty and (force or now - self._saved_at >= self.save_every_s):
            write_atomically(self.folder / "runs.json", json.dumps(self._runs))
            self._saved_at, self._dirty = now, False

    def close(self) -> None:
        with self._lock:
            self._save_if_due(force=True)

    def runs(self) -> list[dict[str, Any]]:
        """Every run, the one written to most recently first."""
        return self.page(None, 0)[0]

    def page(self, limit: int | None, offset: int) -> tuple[list[dict[str, Any]], int]:
        """(``limit`` runs from ``offset``, newest first; how many there are)."""
        with self._lock:
            total = len(self._runs)
            end = total if limit is None else min(total, offset + limit)
            keys = list(reversed(self._runs))[offset:end] if offset < total else []
            return [dict(self._runs[k]) for k in keys], total

    def read(self, project: str, experiment: str | None) -> Any:
        """The run's spans as JSON lines (bytes), or None for a run without spans here."""
        key = run_key(project, experiment)
        with self._lock:
            if key not in self._runs:
                return None
            try:
                return (self.folder / f"{key}.jsonl").read_bytes()
            except FileNotFoundError:
                return b""

    def delete(self, project: str, experiment: str | None) -> bool:
        key = run_key(project, experiment)
        with self._lock:
            run = self._runs.pop(key, None)
            if run is None:
                return False
            (self.folder / f"{key}.jsonl").unlink(missing_ok=True)
            self._bytes -= run["bytes"]
            self._dirty = True
            self._save_if_due(force=True)
        return True
