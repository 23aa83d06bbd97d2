"""The timeline without Tempo: the hub takes OTLP/HTTP spans itself (``POST /v1/traces``) and keeps
them per run under ``<data>/spans``, bounded, so ``rl-insight timeline export`` has them.

One JSON line per span in ``<run key>.jsonl`` (then ``<run key>.<n>.jsonl``: a run's segments);
``runs.json`` indexes the runs. A run keeps at most ``max_run_bytes``: its oldest steps go first, so
the newest steps of a long run are always there; all runs together ``max_total_bytes`` (the run
written to longest ago goes first).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from verl_rl_insight.contract.runs import Run
from verl_rl_insight.server.stores.files import write_atomically
from verl_rl_insight.server.stores.otlp import Record, RunSpan, SpanEncoding, SpanError, SpanTooLarge, decode, records
from verl_rl_insight.server.stores.span_index import MAX_BYTES as INDEX_BYTES
from verl_rl_insight.server.stores.span_index import Places, RunIndex, SpanIndex, index_files, read_places
from verl_rl_insight.server.stores.stats import SpanStoreStats

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

__all__ = ["SpanEncoding", "SpanError", "SpanStore", "SpanTooLarge", "decode", "records", "run_key", "span_step"]


def _whole_lines(path: Path) -> int:
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


def run_key(project: str, experiment: str | None) -> str:
    return hashlib.sha256(f"{project}\0{experiment}".encode()).hexdigest()[:24]


class Segment(TypedDict):
    """One file of a run's spans, in the order they came: segment 0 is ``<run key>.jsonl`` (the
    run's only file before runs were kept in segments), segment ``n`` ``<run key>.<n>.jsonl``."""

    n: int
    bytes: int
    low: int | None  # the oldest step of its spans
    high: int | None  # the newest
    new_steps: int  # the steps first seen in it (a step's spans may go on in the next segment)
    spans: int


def span_step(record: Mapping[str, object]) -> int | None:
    """The trainer step a span record belongs to (``verl.step``, as the trainer's spans, the
    samples and the agent loop's carry it; ``step`` where a span names it so)."""
    attributes = record.get("attributes")
    if not isinstance(attributes, dict):
        return None
    step = attributes.get("verl.step", attributes.get("step"))
    return step if isinstance(step, int) and not isinstance(step, bool) else None


SEGMENTS = 8  # a run's spans are kept in about this many files: the oldest goes first


def _segment(n: int) -> Segment:
    return {"n": n, "bytes": 0, "low": None, "high": None, "new_steps": 0, "spans": 0}


def _note_step(run: dict[str, Any], segment: Segment, step: int | None) -> None:
    """A span of ``step`` written to ``segment``: its steps, the run's newest step."""
    segment["spans"] += 1
    if step is None:
        return
    segment["low"] = step if segment["low"] is None else min(segment["low"], step)
    segment["high"] = step if segment["high"] is None else max(segment["high"], step)
    if run["newest_step"] is None or step > run["newest_step"]:
        run["newest_step"] = step
        segment["new_steps"] += 1


class SpanStore:
    """Spans per run, bounded in bytes per run, in bytes and in runs all together (the run written
    to longest ago goes first, counted in ``stats.evicted_runs``). A run over ``max_run_bytes``
    loses its oldest steps first: its spans are kept in segments of about an eighth of the bound,
    and the oldest segment goes, with every span of the steps it held (so the steps kept are whole,
    the newest always among them); each run says what it lost (``evicted_steps``, ``evicted_spans``,
    ``evicted_through_step``) and what it keeps (``oldest_step``, ``newest_step``, ``max_bytes``).
    The index (``runs.json``) is kept in memory, in the order runs were last written, and saved at
    most once per ``save_every_s`` (and at ``close``): a request costs the same with 10 runs or 10,000."""

    def __init__(
        self,
        folder: Path,
        max_run_bytes: int = 64 * 2**20,
        max_total_bytes: int = 1024 * 2**20,
        max_runs: int = 10_000,
        save_every_s: float = 1.0,
        index_bytes: int = INDEX_BYTES,
    ) -> None:
        self.folder = folder
        self.max_run_bytes = max_run_bytes
        self.segment_bytes = max(1, max_run_bytes // SEGMENTS)
        self.max_total_bytes = max_total_bytes
        self.max_runs = max_runs
        self.save_every_s = save_every_s
        self.stats = SpanStoreStats()
        self.index = SpanIndex(index_bytes)  # where each step's spans lie: a step page reads only those
        self.read_bytes = 0  # read back from the files for step pages (what the index saves)
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
        # moves on whenever spans leave a run's files other than at their end (its oldest steps
        # evicted, a run evicted or deleted): a reader that read on from an offset reads again whole
        self.cuts = 0
        known = set()
        for key, run in self._runs.items():
            run.setdefault("segments", [_segment(0)])  # an index written before segments
            for segment in run["segments"]:
                segment["bytes"] = _whole_lines(self._path(key, segment))
                known.add(self._path(key, segment).name)
            run["bytes"] = sum(segment["bytes"] for segment in run["segments"])
            self._bytes += run["bytes"]
        for orphan in folder.glob("*.jsonl"):  # written after the last index save, before a crash
            if orphan.name not in known:
                orphan.unlink(missing_ok=True)
        self._saved_at = 0.0
        self._dirty = False

    def _path(self, key: str, segment: Segment) -> Path:
        return self.folder / (f"{key}.jsonl" if segment["n"] == 0 else f"{key}.{segment['n']}.jsonl")

    def add(self, request: ExportTraceServiceRequest, found: list[RunSpan] | None = None) -> int:
        """Keep the spans of one OTLP request (``found``: its ``records``, where the caller has
        them already); returns how many were kept."""
        lines: dict[Run, list[tuple[int | None, str, Record]]] = {}
        total = 0
        for one in records(request) if found is None else found:
            total += 1
            line = json.dumps(one.span, separators=(",", ":")) + "\n"
            lines.setdefault((one.project, one.experiment), []).append((span_step(one.span), line, one.span))
        spans = sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
        kept = 0
        with self._lock:
            self.stats.unlabelled += spans - total  # under the lock: two requests at once both count
            for (project, experiment), run_lines in lines.items():
                kept += self._add_run(project, experiment, run_lines)
            self.stats.kept += kept
            self._evict()
            self._dirty = True
            self._save_if_due()
        return kept

    def _add_run(self, project: str, experiment: str, run_lines: list[tuple[int | None, str, Record]]) -> int:
        key = run_key(project, experiment)
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = {
                "project": project,
                "experiment_name": experiment,
                "bytes": 0,
                "spans": 0,
                "dropped": 0,
                "evicted_spans": 0,
                "evicted_steps": 0,
                "evicted_through_step": None,
                "newest_step": None,
                "segments": [_segment(0)],
            }
            self.index.start(key)  # indexed from its first span on
        self.stats.received += len(run_lines)
        self._runs.move_to_end(key)
        gone = run["evicted_through_step"]
        late = [line for step, line, _ in run_lines if gone is not None and step is not None and step <= gone]
        run_lines = [(step, line, r) for step, line, r in run_lines if gone is None or step is None or step > gone]
        self._count_evicted(run, len(late))  # a late span of a step already evicted goes with it
        data = "".join(line for _, line, _ in run_lines).encode()
        if len(data) > self.max_run_bytes:  # one request larger than the run may hold
            run["dropped"] += len(run_lines)
            self.stats.dropped += len(run_lines)
            return 0
        segment = run["segments"][-1]
        if segment["bytes"] >= self.segment_bytes:
            segment = _segment(segment["n"] + 1)
            run["segments"].append(segment)
        for step, _, _ in run_lines:
            _note_step(run, segment, step)
        self.index.written(key, segment["n"], segment["bytes"], ((r, step, len(line)) for step, line, r in run_lines))
        fd = os.open(self._path(key, segment), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "ab") as f:
            f.write(data)
        segment["bytes"] += len(data)
        run.update(bytes=run["bytes"] + len(data), spans=run["spans"] + len(run_lines), last=time.time())
        self._bytes += len(data)
        while run["bytes"] > self.max_run_bytes and len(run["segments"]) > 1:
            self._evict_oldest_steps(key, run)
        return len(run_lines)

    def _count_evicted(self, run: dict[str, Any], spans: int) -> None:
        run["evicted_spans"] += spans
        self.stats.evicted_spans += spans

    def _evict_oldest_steps(self, key: str, run: dict[str, Any]) -> None:
        """The run's oldest segment goes, and every span of the steps it held from the segments
        after it (a step whose spans went on in the next segment is not kept in part)."""
        oldest = run["segments"].pop(0)
        self.cuts += 1
        indexed = self.index.get(key)
        if indexed is not None:
            indexed.forget_segment(oldest["n"])
        self._path(key, oldest).unlink(missing_ok=True)
        spans = oldest["spans"]
        run["bytes"] -= oldest["bytes"]
        self._bytes -= oldest["bytes"]
        through, newest = oldest["high"], run["newest_step"]
        if through is not None and newest is not None and through >= newest:
            through = newest - 1  # the newest step is never evicted whole: what is left of it stays
            moved = min(1, oldest["new_steps"])  # ... and it is counted where it stays
            oldest["new_steps"] -= moved
            run["segments"][0]["new_steps"] += moved
        run["evicted_steps"] += oldest["new_steps"]
        if through is not None and (run["evicted_through_step"] is None or through > run["evicted_through_step"]):
            run["evicted_through_step"] = through
        gone = run["evicted_through_step"]
        for segment in run["segments"]:
            if gone is not None and segment["low"] is not None and segment["low"] <= gone:
                cut, spans_cut = self._cut_steps(key, segment, gone)
                run["bytes"] -= cut
                self._bytes -= cut
                spans += spans_cut
        run["spans"] -= spans
        self._count_evicted(run, spans)

    def _cut_steps(self, key: str, segment: Segment, through: int) -> tuple[int, int]:
        """Rewrite a segment without the spans of steps up to ``through``: (bytes, spans) cut."""
        path = self._path(key, segment)
        try:
            lines = path.read_bytes().splitlines(keepends=True)
        except FileNotFoundError:
            return 0, 0
        kept, steps = [], []
        indexed = self.index.get(key)
        if indexed is not None:
            indexed.forget_segment(segment["n"])
        offset = 0
        for line in lines:
            record = json.loads(line)
            step = span_step(record)
            if step is None or step > through:
                kept.append(line)
                if indexed is not None:  # its place in the segment as rewritten
                    indexed.add(record, step, segment["n"], offset, len(line))
                offset += len(line)
                if step is not None:
                    steps.append(step)
        data = b"".join(kept)
        fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(path.with_suffix(".tmp"), path)
        cut = segment["bytes"] - len(data)
        segment["bytes"], segment["low"], segment["high"] = (
            len(data),
            min(steps, default=None),
            max(steps, default=None),
        )
        segment["spans"] -= len(lines) - len(kept)
        return cut, len(lines) - len(kept)

    def _evict(self) -> None:
        while len(self._runs) > 1 and (self._bytes > self.max_total_bytes or len(self._runs) > self.max_runs):
            oldest, run = self._runs.popitem(last=False)  # the run written to longest ago
            self.cuts += 1
            for segment in run["segments"]:
                self._path(oldest, segment).unlink(missing_ok=True)
            self._bytes -= run["bytes"]
            self.index.drop(oldest)
            self.stats.evicted_runs += 1

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
            return [self._shown(self._runs[k]) for k in keys], total

    def _shown(self, run: dict[str, Any]) -> dict[str, Any]:
        """A run as the store answers for it: what it holds, its bound and what it lost to it."""
        shown = {k: v for k, v in run.items() if k != "segments"}
        lows = [segment["low"] for segment in run["segments"] if segment["low"] is not None]
        shown.update(max_bytes=self.max_run_bytes, oldest_step=min(lows, default=None))
        for name in ("evicted_spans", "evicted_steps"):
            shown.setdefault(name, 0)
        for name in ("evicted_through_step", "newest_step"):
            shown.setdefault(name, None)
        return shown

    def read(self, project: str, experiment: str | None) -> bytes | None:
        """The run's spans as JSON lines (bytes), or None for a run without spans here."""
        key = run_key(project, experiment)
        with self._lock:
            if key not in self._runs:
                return None
            parts = []
            for segment in self._runs[key]["segments"]:
                try:
                    parts.append(self._path(key, segment).read_bytes())
                except FileNotFoundError:
                    continue
            return b"".join(parts)

    def step_spans(self, project: str, experiment: str, step: int) -> list[Record]:
        """The spans of ``step`` (``verl.step``), read from where the index says they lie."""
        return self._spans_at(project, experiment, lambda indexed: indexed.places_of(step)[0])

    def spans_during(self, project: str, experiment: str, start_ns: int, end_ns: int) -> list[Record]:
        """Every span that may overlap [start_ns, end_ns] (some just outside it too: the caller cuts)."""
        return self._spans_at(project, experiment, lambda indexed: indexed.places_during(start_ns, end_ns))

    def _spans_at(self, project: str, experiment: str, where: Callable[[RunIndex], Places]) -> list[Record]:
        key = run_key(project, experiment)
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                return []
            paths = {segment["n"]: self._path(key, segment) for segment in run["segments"]}
            indexed = self.index.get(key)
            if indexed is None:  # written before this server started, or dropped for room: once
                indexed = self.index.start(key)
                self.read_bytes += index_files(indexed, sorted(paths.items()), span_step)
            places = where(indexed)
            self.index.settle(key)
            found, read = read_places(paths, places)
            self.read_bytes += read
            return found

    def delete(self, project: str, experiment: str | None) -> bool:
        key = run_key(project, experiment)
        with self._lock:
            run = self._runs.pop(key, None)
            if run is None:
                return False
            self.cuts += 1
            for segment in run["segments"]:
                self._path(key, segment).unlink(missing_ok=True)
            self._bytes -= run["bytes"]
            self.index.drop(key)
            self._dirty = True
            self._save_if_due(force=True)
        return True
