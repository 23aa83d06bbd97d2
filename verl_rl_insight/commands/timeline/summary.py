"""Per-step figures of a run's timeline, from its spans: where a step's time went, which replica
held it back (the long tail), and how long each lane sat idle.

A step is the window of the trainer's ``step`` span. Within it:
- phases: seconds per trainer state (``gen``, ``reward``, ``update_actor``, ...), summed;
- long tail: the slowest generate call over the median one (1.0: no tail), and the seconds the
  step waited after the median replica had finished its last call (``tail_wait_s``); the slowest
  replica is the one whose last call ended last;
- idle: for every lane, the share of the step in which none of its spans ran (the trainer's
  ``step`` span itself is not work). In an asynchronous run the trainer's idle share is the time
  it waited for rollouts, the rollouter's the time it waited for the trainer.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

REPLICA_PREFIX = "replica_"


@dataclass(slots=True)
class StepSummary:
    step: int
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    generate_calls: int = 0
    long_tail_ratio: float | None = None
    tail_wait_s: float | None = None
    slowest_replica: str | None = None
    idle: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _lane(span: dict[str, Any]) -> str:
    return str(span["attributes"].get("state_lane_id") or "trainer")


def _state(span: dict[str, Any]) -> str:
    return str(span["attributes"].get("state_name") or span.get("name") or "?")


def _busy_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """The length of the union of ``intervals``."""
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def summarize(spans: list[dict[str, Any]], first: int | None = None, last: int | None = None) -> list[StepSummary]:
    """One StepSummary per trainer step (steps first..last, inclusive; None: open)."""
    windows: dict[int, tuple[int, int]] = {}
    for span in spans:
        step = span["attributes"].get("verl.step")
        if _state(span) == "step" and _lane(span) == "trainer" and step is not None:
            start, end = windows.get(int(step), (span["start_ns"], span["end_ns"]))
            windows[int(step)] = (min(start, span["start_ns"]), max(end, span["end_ns"]))
    lanes = sorted({_lane(s) for s in spans})
    out = []
    for step, (start, end) in sorted(windows.items()):
        if (first is not None and step < first) or (last is not None and step > last) or end <= start:
            continue
        inside = [s for s in spans if s["start_ns"] < end and s["end_ns"] > start and _state(s) != "step"]
        summary = StepSummary(step=step, seconds=(end - start) / 1e9)
        for span in inside:
            if _lane(span) == "trainer":
                phase = _state(span)
                summary.phases[phase] = summary.phases.get(phase, 0.0) + (span["end_ns"] - span["start_ns"]) / 1e9
        calls = [s for s in inside if _lane(s).startswith(REPLICA_PREFIX)]
        summary.generate_calls = len(calls)
        if calls:
            durations = [c["end_ns"] - c["start_ns"] for c in calls]
            median = statistics.median(durations)
            summary.long_tail_ratio = max(durations) / median if median > 0 else None
            finish: dict[str, int] = {}
            for call in calls:
                finish[_lane(call)] = max(finish.get(_lane(call), 0), call["end_ns"])
            summary.slowest_replica = max(finish, key=lambda lane: finish[lane])
            summary.tail_wait_s = (max(finish.values()) - statistics.median(finish.values())) / 1e9
        for lane in lanes:
            mine = [(max(s["start_ns"], start), min(s["end_ns"], end)) for s in inside if _lane(s) == lane]
            if mine or lane == "trainer":
                summary.idle[lane] = 1.0 - _busy_ns(mine) / (end - start)
        out.append(summary)
    return out


def table(summaries: list[StepSummary]) -> list[list[str]]:
    """Rows for the terminal: the header first."""
    rows = [["step", "seconds", "phases (s)", "long tail", "slowest", "idle"]]
    for s in summaries:
        phases = ", ".join(f"{name} {sec:.1f}" for name, sec in sorted(s.phases.items(), key=lambda kv: -kv[1])[:4])
        tail = f"x{s.long_tail_ratio:.1f}, +{s.tail_wait_s:.1f}s" if s.long_tail_ratio is not None else "-"
        replicas = [v for lane, v in s.idle.items() if lane.startswith(REPLICA_PREFIX)]
        idle = f"trainer {100 * s.idle.get('trainer', 0):.0f}%"
        if "rollouter" in s.idle:
            idle += f", rollouter {100 * s.idle['rollouter']:.0f}%"
        if replicas:
            idle += f", replicas {100 * statistics.mean(replicas):.0f}% (mean)"
        rows.append([str(s.step), f"{s.seconds:.1f}", phases or "-", tail, s.slowest_replica or "-", idle])
    return rows
