"""Spans -> Chrome trace-event JSON (``{"traceEvents": [...]}``, complete events ``ph: "X"``).

One process per run, one track (thread) per lane: trainer first, then replica_<n>, rank_<n>, the
rest, in number order. Events on one track must nest; spans of a lane that overlap without
nesting (two generate calls at once) go on a second track of that lane ("replica_3 #2").
Timestamps are microseconds from the run's first span; the step of each trainer step is an
argument of every span inside it.
"""

import re
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from verl_rl_insight.commands.timeline.sources import Span

LANE_ORDER = ("trainer", "replica", "rank")


class ChromeTrace(TypedDict):
    """The trace-event document: its events (metadata ``M`` and complete ``X``) and their time unit."""

    traceEvents: list[dict[str, Any]]
    displayTimeUnit: str


def _lane_key(lane: str) -> tuple[int, str, int, str]:
    match = re.fullmatch(r"([a-zA-Z_]+?)_?(\d+)", lane)
    stem, number = (match.group(1), int(match.group(2))) if match else (lane, -1)
    rank = LANE_ORDER.index(stem) if stem in LANE_ORDER else len(LANE_ORDER)
    return rank, stem, number, lane


def _step(span: Span) -> int | None:
    value = span["attributes"].get("verl.step")
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def step_windows(spans: Iterable[Span]) -> dict[int, tuple[int, int]]:
    """step -> (start_ns, end_ns) of the trainer's step spans."""
    windows: dict[int, tuple[int, int]] = {}
    for span in spans:
        step = _step(span)
        if step is not None and span["attributes"].get("state_name") == "step":
            start, end = windows.get(step, (span["start_ns"], span["end_ns"]))
            windows[step] = (min(start, span["start_ns"]), max(end, span["end_ns"]))
    return windows


def select_steps(spans: Sequence[Span], first: int | None, last: int | None) -> list[Span]:
    """The spans that overlap trainer steps first..last (inclusive, None: open)."""
    windows = [
        w
        for step, w in step_windows(spans).items()
        if (first is None or step >= first) and (last is None or step <= last)
    ]
    return [s for s in spans if any(s["start_ns"] < end and s["end_ns"] > start for start, end in windows)]


def _tracks(spans: Iterable[Span]) -> tuple[int, list[tuple[int, Span]]]:
    """Assign each span of one lane to a track on which every event nests in the one before."""
    tracks: list[list[int]] = []  # each: a stack of end times of the open events
    placed = []
    for span in sorted(spans, key=lambda s: (s["start_ns"], -s["end_ns"])):
        for index, stack in enumerate(tracks):
            while stack and stack[-1] <= span["start_ns"]:
                stack.pop()
            if not stack or span["end_ns"] <= stack[-1]:
                stack.append(span["end_ns"])
                placed.append((index, span))
                break
        else:
            tracks.append([span["end_ns"]])
            placed.append((len(tracks) - 1, span))
    return len(tracks), placed


def to_chrome_trace(spans: Iterable[Span], run_name: str) -> ChromeTrace:
    """The trace-event document of ``spans`` (dicts: name, start_ns, end_ns, trace_id, span_id,
    parent_span_id, attributes)."""
    spans = [s for s in spans if s["end_ns"] >= s["start_ns"] > 0]
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": run_name}}]
    if not spans:
        return {"traceEvents": events, "displayTimeUnit": "ms"}
    origin = min(s["start_ns"] for s in spans)
    windows = sorted(step_windows(spans).items(), key=lambda item: item[1])
    lanes: dict[str, Any] = {}
    for span in spans:
        lanes.setdefault(str(span["attributes"].get("state_lane_id") or "trainer"), []).append(span)
    tid = 0
    for lane in sorted(lanes, key=_lane_key):
        count, placed = _tracks(lanes[lane])
        for track in range(count):
            tid += 1
            name = lane if track == 0 else f"{lane} #{track + 1}"
            events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid, "args": {"sort_index": tid}})
        first_tid = tid - count + 1
        for track, span in placed:
            args = {key: value for key, value in span["attributes"].items() if key != "verl.step"}
            step = _step(span)
            if step is None:  # a replica's or rank's span: the trainer step it happened in
                step = next((s for s, (start, end) in windows if start <= span["start_ns"] < end), None)
            if step is not None:
                args["step"] = step
            args.update(trace_id=span["trace_id"], span_id=span["span_id"])
            events.append(
                {
                    "ph": "X",
                    "name": span["name"],
                    "cat": lane,
                    "pid": 1,
                    "tid": first_tid + track,
                    "ts": (span["start_ns"] - origin) / 1000,
                    "dur": (span["end_ns"] - span["start_ns"]) / 1000,
                    "args": args,
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}
