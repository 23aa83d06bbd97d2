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

import bisect
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

REPLICA_PREFIX = "replica_"
NOT_WORK = frozenset({"samples", "profiler"})  # lanes that mark a step (its samples, a profile), not work in it


@dataclass(slots=True)
class StepSummary:
    step: int
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    generate_calls: int = 0
    long_tail_ratio: float | None = None
    tail_wait_s: float | None = None
    slowest_replica: str | None = None
    replica_lag: dict[str, float] = field(default_factory=dict)  # replica -> its finish after the median one (s)
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


def _by_step(spans: list[dict[str, Any]], windows: list[tuple[int, int, int]]) -> dict[int, list[dict[str, Any]]]:
    """step -> the spans (other than the step spans) that overlap its window; the windows sorted by
    start, each span placed by binary search: a run of many steps and spans costs O(spans log steps)."""
    starts = [start for start, _, _ in windows]
    inside: dict[int, list[dict[str, Any]]] = {step: [] for _, _, step in windows}
    for span in spans:
        if _state(span) == "step":
            continue
        i = bisect.bisect_left(starts, span["end_ns"]) - 1  # the last window starting before the span ends
        while i >= 0 and windows[i][1] > span["start_ns"]:
            inside[windows[i][2]].append(span)
            i -= 1
    return inside


def summarize(spans: list[dict[str, Any]], first: int | None = None, last: int | None = None) -> list[StepSummary]:
    """One StepSummary per trainer step (steps first..last, inclusive; None: open)."""
    bounds: dict[int, tuple[int, int]] = {}
    for span in spans:
        step = span["attributes"].get("verl.step")
        if _state(span) == "step" and _lane(span) == "trainer" and step is not None:
            start, end = bounds.get(int(step), (span["start_ns"], span["end_ns"]))
            bounds[int(step)] = (min(start, span["start_ns"]), max(end, span["end_ns"]))
    windows = sorted(
        (start, end, step)
        for step, (start, end) in bounds.items()
        if end > start and (first is None or step >= first) and (last is None or step <= last)
    )
    inside = _by_step(spans, windows)
    lanes = sorted({_lane(s) for s in spans} - NOT_WORK)
    out = []
    for start, end, step in sorted(windows, key=lambda w: w[2]):
        summary = StepSummary(step=step, seconds=(end - start) / 1e9)
        per_lane: dict[str, list[dict[str, Any]]] = {}
        for span in inside[step]:
            per_lane.setdefault(_lane(span), []).append(span)
        for span in per_lane.get("trainer", ()):
            phase = _state(span)
            summary.phases[phase] = summary.phases.get(phase, 0.0) + (span["end_ns"] - span["start_ns"]) / 1e9
        calls = [s for lane, mine in per_lane.items() if lane.startswith(REPLICA_PREFIX) for s in mine]
        summary.generate_calls = len(calls)
        if calls:
            durations = [c["end_ns"] - c["start_ns"] for c in calls]
            median = statistics.median(durations)
            summary.long_tail_ratio = max(durations) / median if median > 0 else None
            finish = {
                lane: max(s["end_ns"] for s in mine)
                for lane, mine in per_lane.items()
                if lane.startswith(REPLICA_PREFIX)
            }
            summary.slowest_replica = max(finish, key=lambda lane: finish[lane])
            middle = statistics.median(finish.values())
            summary.tail_wait_s = (max(finish.values()) - middle) / 1e9
            summary.replica_lag = {lane: (end_ns - middle) / 1e9 for lane, end_ns in sorted(finish.items())}
        for lane in lanes:
            mine = per_lane.get(lane, [])
            if mine or lane == "trainer":
                busy = _busy_ns((max(s["start_ns"], start), min(s["end_ns"], end)) for s in mine)
                summary.idle[lane] = 1.0 - busy / (end - start)
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
