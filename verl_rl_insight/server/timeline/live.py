"""The timeline's per-step figures as Prometheus series, made by the server from the spans it
receives (kept by the hub, or on their way to Tempo), so that panels and alert rules have them.

A step's figures are made once, when its trainer ``step`` span has arrived and either a later
step's span has arrived too or ``settle_s`` has passed (replica spans come from other processes,
each exporter sending about once a second). The hub takes them every second (``collect``:
``metrics/derived.py``) as one stream per run (``source="timeline"``), one per lane (idle) and one
per replica (lag, slowest), stamped with the step's end time: exactly once per step, like any pushed
sample (without a step: only the trainer's own series carry the global step, which the stall alert
and ``runs list`` read).

Series per run; gauges hold the last step's figure, counters add every step's (a window's share is
``increase(a[w]) / increase(b[w])``, which the scrapes' repeated live values do not skew):
- ``rl_insight_timeline_step_seconds``: the step's wall time; ``..._step_seconds_total``,
  ``..._steps_total``;
- ``rl_insight_timeline_long_tail_ratio``: the slowest generate call over the median call;
- ``rl_insight_timeline_tail_wait_seconds``: how long the step waited after the median replica
  finished; ``..._tail_wait_seconds_total``;
- ``rl_insight_timeline_generate_calls``: generate calls in the step;
- ``rl_insight_timeline_idle_ratio{lane}``: the share of the step in which the lane ran nothing;
  ``..._idle_seconds_total{lane}``;
- ``rl_insight_timeline_replica_lag_seconds{replica}``: when the replica finished, after the median one;
- ``rl_insight_timeline_replica_slowest{replica}``: 1 for the replica that finished last and held the
  step back by at least ``SLOWEST_MIN_SHARE`` of it, else 0; ``..._replica_slowest_steps_total``.

Bounded: at most ``max_runs`` runs (the one heard from longest ago goes first), ``max_spans``
spans waiting per run (the oldest go first) and ``max_total_spans`` in all (beyond it the run
heard from longest ago is forgotten, so a flood of spans that never settle cannot starve a run
that has steps); what is not kept is counted in ``stats.dropped``. And in bytes: each span
waiting is booked (``span_bytes``) through ``book``, the hub's memory bound (``memory_limit_mb``)
that pushes are held to as well, and each run holds at most its share of ``budget_bytes`` (what
``book`` lends: the rule of the hub's own shares, ``metrics/budgets.py``): a run at its share loses
its own oldest waiting spans; when ``book`` has no room, the runs over their share lose their oldest;
never does one run's span push out another run under its share, its spans or its pending step. A
span that still does not fit is dropped and counted (``stats.dropped_memory``).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from verl_rl_insight.contract.counters import Counters
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.metrics.budgets import share_of
from verl_rl_insight.server.metrics.derived import derived_batch
from verl_rl_insight.server.stores.otlp import RunSpan
from verl_rl_insight.server.timeline.summary import REPLICA_PREFIX, StepSummary, summarize

SOURCE_LABEL = {"source": "timeline"}
LAST_STEP_LANES = 64  # what ``last_step`` keeps of a step: this many lanes (the trainer's first) ...
LAST_STEP_SPANS = 256  # ... and this many spans per lane
SLOWEST_MIN_SHARE = 0.05  # a replica last by less than this share of the step held nothing back
# Estimated bytes of a span record held here (its dicts, ids, numbers), checked against tracemalloc
# by tests/server/timeline/test_summary.py; attribute keys and values add their own length.
SPAN_BYTES = 1100
ATTRIBUTE_BYTES = 120  # a dict slot, and a str's or a number's object


def span_bytes(record: dict[str, Any]) -> int:
    """What a span record holds, booked while it waits here."""
    attributes = record.get("attributes") or {}
    return (
        SPAN_BYTES
        + len(record.get("name", ""))
        + sum(ATTRIBUTE_BYTES + len(k) + (len(v) if isinstance(v, str) else 0) for k, v in attributes.items())
    )


@dataclass
class _Run:
    spans: list[dict[str, Any]] = field(default_factory=list)
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)  # step -> its trainer step span
    arrived: dict[int, float] = field(default_factory=dict)  # step -> when its span arrived here
    done: int = -1  # the last step whose figures were made
    done_end_ns: int = 0
    totals: dict[tuple[str, str], float] = field(default_factory=dict)  # (metric, lane) -> counter value

    def add(self, metric: str, lane: str, amount: float) -> float:
        self.totals[(metric, lane)] = self.totals.get((metric, lane), 0.0) + amount
        return self.totals[(metric, lane)]


def _is_step_span(record: dict[str, Any]) -> bool:
    attrs = record["attributes"]
    return (
        (attrs.get("state_name") or record.get("name")) == "step"
        and (attrs.get("state_lane_id") or "trainer") == "trainer"
        and isinstance(attrs.get("verl.step"), int)
    )


def slowest(figures: StepSummary) -> str | None:
    """The replica that held the step back, if one did by at least SLOWEST_MIN_SHARE of it."""
    wait = figures.tail_wait_s or 0.0
    return figures.slowest_replica if figures.seconds > 0 and wait >= SLOWEST_MIN_SHARE * figures.seconds else None


def batches(project: str, experiment: str, figures: StepSummary, end_s: float, run: _Run) -> list[Batch]:
    """The batches of one step's figures (``run`` keeps the counters)."""

    def batch(metrics: dict[str, float], labels: dict[str, str]) -> Batch:
        # no step: the trainer's own series carry it (and the stall alert reads them)
        return derived_batch(
            {"project": project, "experiment_name": experiment, **SOURCE_LABEL, **labels}, end_s, metrics
        )

    wait = figures.tail_wait_s or 0.0
    main = {
        "rl_insight_timeline_step_seconds": figures.seconds,
        "rl_insight_timeline_steps_total": run.add("steps", "", 1),
        "rl_insight_timeline_step_seconds_total": run.add("seconds", "", figures.seconds),
        "rl_insight_timeline_tail_wait_seconds_total": run.add("tail_wait", "", wait),
    }
    if figures.generate_calls:
        main["rl_insight_timeline_generate_calls"] = float(figures.generate_calls)
    if figures.long_tail_ratio is not None:
        main["rl_insight_timeline_long_tail_ratio"] = figures.long_tail_ratio
    if figures.tail_wait_s is not None:
        main["rl_insight_timeline_tail_wait_seconds"] = figures.tail_wait_s
    out = [batch(main, {})]
    for lane, idle in sorted(figures.idle.items()):
        if not lane.startswith(REPLICA_PREFIX):
            metrics = {
                "rl_insight_timeline_idle_ratio": idle,
                "rl_insight_timeline_idle_seconds_total": run.add("idle", lane, idle * figures.seconds),
            }
            out.append(batch(metrics, {"lane": lane}))
    held_back = slowest(figures)
    for replica, lag in sorted(figures.replica_lag.items()):
        idle = figures.idle.get(replica, 1.0)
        metrics = {
            "rl_insight_timeline_replica_lag_seconds": lag,
            "rl_insight_timeline_replica_slowest": float(replica == held_back),
            "rl_insight_timeline_replica_slowest_steps_total": run.add("slowest", replica, float(replica == held_back)),
            "rl_insight_timeline_idle_ratio": idle,
            "rl_insight_timeline_idle_seconds_total": run.add("idle", replica, idle * figures.seconds),
        }
        out.append(batch(metrics, {"replica": replica, "lane": replica}))
    return out


def lanes_of(step_span: dict[str, Any], spans: list[dict[str, Any]], figures: StepSummary) -> dict[str, Any]:
    """One step as lanes: {lane: [[state, start_s, end_s], ...]}, times from the step's start."""
    start, end = step_span["start_ns"], step_span["end_ns"]
    lanes: dict[str, list[list[Any]]] = {}
    for span in spans:
        if span["end_ns"] <= start or span["start_ns"] >= end:
            continue
        attrs = span["attributes"]
        lane = str(attrs.get("state_lane_id") or "trainer")
        if lane == "samples":
            continue
        state = str(attrs.get("state_name") or span.get("name") or "?")
        lanes.setdefault(lane, []).append(
            [state, max(0, span["start_ns"] - start) / 1e9, (min(span["end_ns"], end) - start) / 1e9]
        )
    order = sorted(lanes, key=lambda lane: (lane != "trainer", lane != "rollouter", len(lane), lane))
    return {
        "step": figures.step,
        "seconds": figures.seconds,
        "end": end / 1e9,
        "figures": figures.as_json(),
        "lanes": {lane: sorted(lanes[lane], key=lambda s: s[1])[:LAST_STEP_SPANS] for lane in order[:LAST_STEP_LANES]},
        "lanes_left_out": max(0, len(order) - LAST_STEP_LANES),
    }


class Settled(NamedTuple):
    """A step whose spans have all come (``LiveFigures._ready``), with the spans it is summarized from."""

    project: str
    experiment: str
    run: _Run
    step_span: dict[str, Any]
    spans: list[dict[str, Any]]


@dataclass(slots=True)
class FigureStats(Counters):
    steps: int = 0  # steps whose figures were made
    dropped: int = 0  # spans not kept or let go (beyond a run's or the whole's bounds, in count or in bytes)
    failed: int = 0  # steps whose figures could not be made (the next ones are)
    dropped_memory: int = 0  # of the dropped, those the memory booked had no room for


class LiveFigures:
    """Spans in, per-step figures out (``collect``, which the hub calls: ``derived.Derived``)."""

    def __init__(
        self,
        settle_s: float = 15.0,
        max_runs: int = 256,
        max_spans: int = 20_000,
        max_total_spans: int = 100_000,
        clock: Callable[[], float] = time.time,
        book: Callable[[int], bool] = lambda nbytes: True,
        budget_bytes: int | None = None,
    ) -> None:
        self.book = book  # books bytes (negative: gives them back) under the server's memory bound; False: no room
        self.budget_bytes = budget_bytes  # what ``book`` lends at most: each run's share is of this
        self._held: dict[Run, int] = {}  # the bytes of each run's waiting spans
        self.max_total_spans = max_total_spans
        self._total = 0  # spans waiting, all runs together
        self._made: list[Batch] = []  # the figures made, not collected yet, in order
        self.settle_s = settle_s
        self.max_runs = max_runs
        self.max_spans = max_spans
        self.clock = clock
        self.stats = FigureStats()
        self._runs: OrderedDict[Run, _Run] = OrderedDict()
        self._last: dict[Run, dict[str, Any]] = {}  # the newest step made, per run, as lanes
        self._lock = threading.Lock()

    def observe(self, records: Iterable[RunSpan]) -> None:
        now = self.clock()
        with self._lock:
            for one in records:
                key, record = (one.project, one.experiment), one.span
                run = self._runs.get(key)
                if run is None:
                    run = self._runs[key] = _Run()
                    while len(self._runs) > self.max_runs:
                        gone_key, gone = self._runs.popitem(last=False)
                        self._last.pop(gone_key, None)
                        self._let_go(gone_key, gone.spans)
                self._runs.move_to_end(key)
                if _is_step_span(record):
                    step = record["attributes"]["verl.step"]
                    if step > run.done and step not in run.steps:
                        run.steps[step] = record
                        run.arrived[step] = now
                elif record["end_ns"] > run.done_end_ns:
                    if self._total >= self.max_total_spans:
                        self._make_room(key)
                    if self._total >= self.max_total_spans:
                        self.stats.dropped += 1
                        continue
                    cost = span_bytes(record)
                    if not self._room_for(key, run, cost):
                        self.stats.dropped += 1
                        self.stats.dropped_memory += 1
                        continue
                    run.spans.append(record)
                    self._held[key] = self._held.get(key, 0) + cost
                    self._total += 1
                    if len(run.spans) > self.max_spans:
                        cut = len(run.spans) - self.max_spans
                        self._let_go(key, run.spans[:cut])
                        del run.spans[:cut]
                        self.stats.dropped += cut
            self._make(self._ready(now))  # under the lock: a run's steps are pushed in order

    def _let_go(self, key: Run, spans: list[dict[str, Any]]) -> None:
        """Spans of run ``key`` no longer waiting: their count and bytes given back."""
        if spans:
            freed = sum(map(span_bytes, spans))
            self._total -= len(spans)
            self.book(-freed)
            held = self._held.get(key, 0) - freed
            if held > 0:
                self._held[key] = held
            else:
                self._held.pop(key, None)

    def _room_for(self, key: Run, run: _Run, nbytes: int) -> bool:
        """Book ``nbytes`` for a span of run ``key``: at its share, its own oldest spans go; when the
        bound has no room, the oldest of the runs over their share; never another run's under it."""
        share = None if self.budget_bytes is None else share_of(self.budget_bytes, len(self._held.keys() | {key}))
        if share is not None:
            if nbytes > share:
                return False
            while run.spans and self._held.get(key, 0) + nbytes > share:
                self._drop_oldest(key, run)
        if self.book(nbytes):
            return True
        for other_key, other in self._runs.items():
            while other_key != key and other.spans and share is not None and self._held.get(other_key, 0) > share:
                self._drop_oldest(other_key, other)
                if self.book(nbytes):
                    return True
        return False

    def _drop_oldest(self, key: Run, run: _Run) -> None:
        self._let_go(key, run.spans[:1])
        del run.spans[:1]
        self.stats.dropped += 1
        self.stats.dropped_memory += 1

    def _make_room(self, keep: Run) -> None:
        """Forget runs, the one heard from longest ago first, until the spans fit (never ``keep``)."""
        for key in list(self._runs):
            if self._total < self.max_total_spans:
                return
            if key != keep:
                self._forget(key)

    def _forget(self, key: Run) -> None:
        gone = self._runs.pop(key)
        self._last.pop(key, None)
        self._let_go(key, gone.spans)
        self.stats.dropped += len(gone.spans)

    def last_step(self, project: str, experiment: str) -> dict[str, Any] | None:
        """The newest step made of the run, as lanes of (state, start, end) seconds from its start."""
        with self._lock:
            return self._last.get((project, experiment))

    def backlog(self) -> int:
        return len(self._made)

    def collect(self) -> list[Batch]:
        """The figures made since the last call, in the order made."""
        with self._lock:
            made, self._made = self._made, []
        return made

    def tick(self) -> None:
        """Make the figures of steps that have settled (called now and then by the server)."""
        with self._lock:
            self._make(self._ready(self.clock()))

    def _ready(self, now: float) -> list[Settled]:
        """Take the settled steps out (under the lock)."""
        out = []
        for (project, experiment), run in self._runs.items():
            key = (project, experiment)
            newest, made = max(run.steps, default=None), False
            for step in sorted(run.steps):
                if step != newest or now - run.arrived[step] >= self.settle_s:
                    span = run.steps.pop(step)
                    run.arrived.pop(step)
                    run.done, run.done_end_ns = step, max(run.done_end_ns, span["end_ns"])
                    out.append(Settled(project, experiment, run, span, list(run.spans)))
                    made = True
                else:
                    break
            if made:
                self._let_go(key, [s for s in run.spans if s["end_ns"] <= run.done_end_ns])
                run.spans = [s for s in run.spans if s["end_ns"] > run.done_end_ns]
        return out

    def _make(self, ready: list[Settled]) -> None:
        for project, experiment, run, step_span, spans in ready:
            try:
                for figures in summarize([step_span, *spans]):
                    end_s = step_span["end_ns"] / 1e9
                    self._made.extend(batches(project, experiment, figures, end_s, run))
                    self._last[(project, experiment)] = lanes_of(step_span, spans, figures)
                    self.stats.steps += 1
            except Exception:  # one bad step never stops the next ones
                self.stats.failed += 1
