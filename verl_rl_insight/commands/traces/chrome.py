"""Chrome-trace files (torch profiler ``*.json.gz`` / ``*.pt.trace.json``, Ascend MSTX
``trace_view.json``), read as a stream with ijson: one event in memory at a time, so a trace of
hundreds of megabytes costs what its phase ranges and collectives take, not its size."""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import ijson

from verl_rl_insight.commands.traces import phases as names
from verl_rl_insight.commands.traces.intervals import Span
from verl_rl_insight.commands.traces.summary import BadTrace, FileSummary, phase_times, window

US = 1e-6  # chrome traces count microseconds
ANNOTATION_CATS = (None, "user_annotation", "python_function")
# MSTX's overlap analysis: the device's communication that no computation hid, i.e. waiting
ASCEND_WAIT = "Communication(Not Overlapped)"
READ_ERRORS = (OSError, EOFError, zlib.error, ijson.JSONError, ValueError, UnicodeDecodeError)


def _open(path: Path) -> io.BufferedIOBase:
    if path.name.endswith(".gz"):
        return gzip.GzipFile(path, "rb")
    return path.open("rb")


def _header(path: Path) -> tuple[dict[str, object], bool]:
    """The keys before ``traceEvents`` (``distributedInfo`` ...) and whether the file is a bare
    list of events (MSTX). Stops at the events: the header is read, not the trace."""
    with _open(path) as stream:
        parser = ijson.parse(stream, use_float=True)
        header: dict[str, object] = {}
        builder: ijson.ObjectBuilder | None = None
        key = ""
        for prefix, event, value in parser:
            if prefix == "" and event == "start_array":
                return header, True
            if prefix == "" and event == "map_key":
                key = str(value)
                if key == "traceEvents":
                    return header, False
                continue
            if prefix == key and key == "distributedInfo" and event == "start_map":
                builder = ijson.ObjectBuilder()
            if builder is not None:
                builder.event(event, value)
                if prefix == key and event == "end_map":
                    header[key] = builder.value
                    builder = None
    return header, False


def _events(path: Path, bare_list: bool) -> Iterator[dict[str, object]]:
    with _open(path) as stream:
        yield from ijson.items(stream, "item" if bare_list else "traceEvents.item", use_float=True)


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):  # MSTX writes ts as a string
        try:
            return float(value)
        except ValueError:
            return None
    return None


class _Collected:
    """The spans a trace's events leave: phases, collectives, and the whole window."""

    def __init__(self) -> None:
        self.phases: dict[str, list[Span]] = {}
        self.collectives: dict[str, list[Span]] = {}
        self.first = float("inf")
        self.last = float("-inf")
        self.events = 0

    def add(self, event: dict[str, object]) -> None:
        self.events += 1
        if event.get("ph") != "X":
            return
        start, dur = _number(event.get("ts")), _number(event.get("dur"))
        if start is None or dur is None or dur < 0:
            return
        span = (start, start + dur)
        self.first, self.last = min(self.first, span[0]), max(self.last, span[1])
        name = event.get("name")
        if not isinstance(name, str):
            return
        phase = names.PHASE_OF.get(name)
        if phase is not None and event.get("cat") in ANNOTATION_CATS:
            self.phases.setdefault(phase, []).append(span)
            return
        op = "HCCL" if name == ASCEND_WAIT else names.collective(name)
        if op is not None:
            self.collectives.setdefault(op, []).append(span)


def _rank(path: Path, header: dict[str, object], bare_list: bool) -> int | None:
    info = header.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), (int, float)):
        return int(info["rank"])
    if bare_list:  # MSTX: profiler_info_<rank>.json beside ASCEND_PROFILER_OUTPUT/
        for found in sorted(path.parent.parent.glob("profiler_info*.json")):
            try:
                return int(json.loads(found.read_text())["rank_id"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return names.rank_in(path)


def read_chrome(path: Path) -> FileSummary:
    """One torch or MSTX trace: its rank, and each verl phase's time and collectives in it.

    A file without a phase range of its own (the official samples: one stage per folder) stands
    for the phase its folder or name says, from its first event to its last."""
    source = "mstx" if path.name == "trace_view.json" else "torch"
    try:
        header, bare_list = _header(path)
        collected = _Collected()
        for event in _events(path, bare_list):
            if isinstance(event, dict):
                collected.add(event)
    except READ_ERRORS as exc:
        said = (str(exc).strip().splitlines() or [""])[0][:120]  # yajl's message draws a caret below
        raise BadTrace(str(path), f"not a whole trace ({type(exc).__name__}: {said})") from None
    if collected.events == 0:
        raise BadTrace(str(path), "no trace events in it")
    rank = _rank(path, header, bare_list)
    if rank is None or rank < 0:
        raise BadTrace(str(path), "no rank in it (distributedInfo.rank) nor in its name")
    spans = collected.phases
    whole = window([(collected.first, collected.last)])
    as_whole = names.phase_of_path(path)
    if not spans and as_whole is not None and whole is not None:
        spans = {as_whole: [whole]}
    return FileSummary(
        str(path),
        source,
        rank,
        names.replica_in(path),
        names.node_in(path),
        names.step_in(path),
        phase_times(spans, collected.collectives, US),
    )
