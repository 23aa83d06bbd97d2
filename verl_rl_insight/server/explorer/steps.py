"""``/api/v1/explorer/step``: one step of a run: its swimlane from the kept spans (the trainer's
phases, each replica's generate calls), the figures ``rl-insight timeline summary`` gives of it
(``timeline/summary.summarize``: the slowest replica, the long tail, the idle share), the GPUs'
faults and throttling during it (the server's Prometheus), the findings that cover it and the
``rl-insight profile`` line that profiles a coming step."""

from __future__ import annotations

import bisect
import shlex
from collections.abc import Sequence

from verl_rl_insight.contract.errors import NotFound
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.server.explorer.findings import Finding
from verl_rl_insight.server.explorer.sources import Sources, SpanRecord
from verl_rl_insight.server.timeline.live import LAST_STEP_LANES, LAST_STEP_SPANS
from verl_rl_insight.server.timeline.summary import REPLICA_PREFIX, summarize

Answer = dict[str, object]


def _attrs(span: SpanRecord) -> dict[str, object]:
    attrs = span.get("attributes")
    return attrs if isinstance(attrs, dict) else {}


def _ns(span: SpanRecord, name: str) -> int:
    value = span.get(name)
    return value if isinstance(value, int) else 0


def _window(spans: Sequence[SpanRecord], step: int) -> tuple[int, int] | None:
    """The step's trainer ``step`` span(s): (start_ns, end_ns), or None."""
    found = None
    for span in spans:
        attrs = _attrs(span)
        if (attrs.get("state_name") or span.get("name")) != "step" or (
            attrs.get("state_lane_id") or "trainer"
        ) != "trainer":
            continue
        if attrs.get("verl.step") == step:
            start, end = _ns(span, "start_ns"), _ns(span, "end_ns")
            found = (start, end) if found is None else (min(found[0], start), max(found[1], end))
    return found


def lanes(spans: Sequence[SpanRecord], start: int, end: int) -> list[dict[str, object]]:
    """The lanes of [start, end]: the trainer's first, then the rollouter's, then by name."""
    by_lane: dict[str, list[dict[str, object]]] = {}
    nodes: dict[str, str] = {}
    for span in spans:
        attrs = _attrs(span)
        lane = str(attrs.get("state_lane_id") or "trainer")
        if _ns(span, "end_ns") <= start or _ns(span, "start_ns") >= end or lane == "samples":
            continue
        name = str(attrs.get("state_name") or span.get("name") or "?")
        if name == "step" and lane == "trainer":
            continue
        by_lane.setdefault(lane, []).append(
            {"name": name, "start": _ns(span, "start_ns") / 1e9, "end": _ns(span, "end_ns") / 1e9}
        )
        if isinstance(attrs.get("node"), str):
            nodes.setdefault(lane, str(attrs["node"]))
    order = sorted(by_lane, key=lambda lane: (lane != "trainer", lane != "rollouter", len(lane), lane))
    return [
        {
            "lane": lane,
            "kind": "trainer" if lane == "trainer" else "replica" if lane.startswith(REPLICA_PREFIX) else "other",
            "node": nodes.get(lane),
            "spans": sorted(by_lane[lane], key=lambda s: float(str(s["start"])))[:LAST_STEP_SPANS],
        }
        for lane in order[:LAST_STEP_LANES]
    ]


def _node(drawn: Sequence[dict[str, object]], lane: str) -> object:
    return next((found["node"] for found in drawn if found["lane"] == lane), None)


def _from_history(sources: Sources, run: Run, step: int) -> tuple[float, float, bool, int] | None:
    """(start, end, validation, newest step) of ``step`` from the run's scalars: it ends at its time,
    starts at the step before's."""
    history = sources.history(run)
    if history is None:
        return None
    with sources.histories.lock:
        i = bisect.bisect_left(history.steps, step)
        if i == len(history.steps) or history.steps[i] != step:
            return None
        end = history.times[i]
        start = history.times[i - 1] if i > 0 else end
        validation = any(
            name.startswith(("rl_insight_monitor_val_core_", "rl_insight_monitor_val_aux_"))
            and history.value(name, i) is not None
            for name in history.columns
        )
        return start, end, validation, history.steps[-1]


def step_answer(
    sources: Sources, spans: Sequence[SpanRecord], run: Run, step: int, findings: Sequence[Finding]
) -> Answer:
    known = _from_history(sources, run, step)
    window = _window(spans, step)
    if known is None and window is None:
        raise NotFound(f"step: no step {step} of {run[0][:100]!r} / {run[1][:100]!r} here")
    inside = [s for s in spans if window and _ns(s, "end_ns") > window[0] and _ns(s, "start_ns") < window[1]]
    figures = summarize(inside, step, step) if window is not None else []
    summary = figures[0] if figures else None
    if window is not None:
        start, end = window[0] / 1e9, window[1] / 1e9
    else:
        assert known is not None
        start, end = known[0], known[1]
    slowest = summary.slowest_replica if summary is not None else None
    drawn = lanes(inside, window[0], window[1]) if window is not None else []
    newest = max(step, known[3] if known is not None else step)
    hardware = sources.prometheus.hardware(run[0], run[1], start, end) if sources.prometheus is not None else []
    with sources.histories.lock:
        held = sources.histories.get(run)
        finished = held is not None and held.finished == 1
    return {
        "step": step,
        "start": start,
        "end": end,
        "duration_s": end - start,
        "validation": bool(known and known[2]),
        "lanes": drawn,
        "slowest_replica": {
            "lane": slowest,
            "node": next((lane["node"] for lane in drawn if lane["lane"] == slowest), None),
        }
        if slowest
        else None,
        "long_tail_s": summary.tail_wait_s if summary is not None else None,
        "idle_share": summary.idle.get("trainer") if summary is not None else None,
        "hardware": hardware,
        "findings": [f for f in findings if int(str(f["first_step"])) <= step <= int(str(f["last_step"]))],
        "finished": finished,  # the run finished: no coming step to profile
        "profile_command": None
        if finished
        else f"rl-insight profile --project {shlex.quote(run[0])} --experiment {shlex.quote(run[1])} "
        f"--steps {newest + 2}",
    }
