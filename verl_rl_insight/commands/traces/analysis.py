"""One step's traces, every rank together: per phase each rank's time, the rank that held the
others (the most of its own time: time in the phase not spent waiting in a collective), judged by
the right quantity (its GPU work when the GPU was what it waited on, its host time when the GPU sat
idle), its ratio against the median of the *other* ranks, what differs on it, and the one-line
answer. Pure: summaries in, figures out."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Protocol, TypeVar

from verl_rl_insight.commands.traces.differences import kernel_differences
from verl_rl_insight.commands.traces.phases import ORDER
from verl_rl_insight.commands.traces.snapshot import Snapshot
from verl_rl_insight.commands.traces.summary import BadTrace, FileSummary
from verl_rl_insight.commands.traces.telling import answer, memory_answer
from verl_rl_insight.commands.traces.views import GPU_WORK, HOST_TIME, WORK, Judged, PhaseView, RankTime, StepView

NAMED_SHARE = 0.05  # a kernel is named as differing when it accounts for 5 % of what the slow rank held the others by
APART_S = 6 * 3600.0  # one step's traces lie within hours of each other; further apart, two jobs wrote them


class _Stepped(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def step(self) -> int | None: ...


Stepped = TypeVar("Stepped", bound=_Stepped)


def choose_step(summaries: Sequence[Stepped], step: int | None) -> list[Stepped]:
    """The files of one step: ``step`` if given, else the one step they all name (files that name
    none go with it). Traces of two steps together are refused, naming a file of each."""
    if step is not None:
        return [s for s in summaries if s.step in (step, None)]
    named = sorted({s.step for s in summaries if s.step is not None})
    if len(named) > 1:
        first = next(s for s in summaries if s.step == named[0])
        other = next(s for s in summaries if s.step == named[1])
        raise BadTrace(
            other.path,
            f"is step {named[1]} but {first.path} is step {named[0]}: traces of {len(named)} steps "
            f"({', '.join(map(str, named))}); give --step N",
        )
    return list(summaries)


def one_job(summaries: Sequence[FileSummary]) -> None:
    """Refuses traces that two jobs wrote: another world size, or hours apart on the wall clock."""
    sized = [s for s in summaries if s.origin.world_size is not None]
    for summary in sized[1:]:
        if summary.origin.world_size != sized[0].origin.world_size:
            raise BadTrace(
                summary.path,
                f"is a job of {summary.origin.world_size} ranks but {sized[0].path} of "
                f"{sized[0].origin.world_size}: traces of two jobs; analyse one job's step",
            )
    timed = sorted(
        (s for s in summaries if s.origin.wall_start_s is not None and s.origin.wall_end_s is not None),
        key=lambda s: s.origin.wall_start_s or 0.0,
    )
    latest_end, latest = None, None
    for summary in timed:
        start, end = summary.origin.wall_start_s or 0.0, summary.origin.wall_end_s or 0.0
        if latest_end is not None and latest is not None and start - latest_end > APART_S:
            hours = (start - latest_end) / 3600
            raise BadTrace(
                summary.path,
                f"starts {hours:.0f} h after {latest.path} ends: traces of two jobs (or of steps far apart); "
                "analyse one job's step",
            )
        if latest_end is None or end > latest_end:
            latest_end, latest = end, summary


def _ranks_by_phase(summaries: Sequence[FileSummary]) -> dict[str, list[RankTime]]:
    by_phase: dict[str, dict[str, RankTime]] = {}
    for summary in summaries:
        for phase, time in summary.phases.items():
            seen = by_phase.setdefault(phase, {})
            if summary.who in seen:
                raise BadTrace(
                    summary.path,
                    f"holds rank {summary.who}'s {phase} a second time (first in {seen[summary.who].path}): "
                    "traces of more than one step? analyse one step's files",
                )
            seen[summary.who] = RankTime(summary.who, summary.rank, summary.node, time, summary.path)
    order = {name: i for i, name in enumerate(ORDER)}
    return {
        phase: sorted(ranks.values(), key=lambda r: (r.who.startswith("replica"), r.who.split()[:-1], r.rank))
        for phase, ranks in sorted(by_phase.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))
    }


def _ratio(value: float, base: float | None) -> float | None:
    if base is None:
        return None
    if base > 0:
        return value / base
    return 1.0 if value == 0 else float("inf")


def _judge(slowest: RankTime, others: list[RankTime]) -> Judged:
    """The quantity the slowest rank's extra time is in: its GPU work or its host time (the GPU
    idle, the host not in a collective), whichever exceeds the other ranks' median more; its work
    (time not in collectives) when the traces have no device events."""
    gpu = slowest.time.gpu
    if gpu is None or not others or any(r.time.gpu is None for r in others):
        theirs = [r.time.busy_s for r in others]
        median = statistics.median(theirs) if theirs else None
        return Judged(WORK, slowest.time.busy_s, median, _ratio(slowest.time.busy_s, median))
    work = statistics.median(r.time.gpu.busy_s for r in others if r.time.gpu is not None)
    host = statistics.median(r.time.gpu.host_s for r in others if r.time.gpu is not None)
    if gpu.busy_s - work >= gpu.host_s - host:
        return Judged(GPU_WORK, gpu.busy_s, work, _ratio(gpu.busy_s, work))
    return Judged(HOST_TIME, gpu.host_s, host, _ratio(gpu.host_s, host))


def phase_view(phase: str, ranks: list[RankTime]) -> PhaseView:
    slowest = max(ranks, key=lambda r: (r.time.busy_s, r.time.duration_s))
    others = [r for r in ranks if r is not slowest]
    median = statistics.median(r.time.busy_s for r in others) if others else slowest.time.busy_s
    in_phase = sum(r.time.duration_s for r in others)
    waited = sum(r.time.waiting_s for r in others)
    ops: dict[str, float] = {}
    for r in others:
        for op, seconds in r.time.waiting_by_op.items():
            ops[op] = ops.get(op, 0.0) + seconds
    spread = _ratio(slowest.time.busy_s, median) or 1.0
    theirs = [r.time.gpu for r in others if r.time.gpu is not None]
    return PhaseView(
        phase,
        ranks,
        slowest,
        median,
        spread,
        waited / in_phase if in_phase > 0 else 0.0,
        max(ops, key=lambda op: ops[op]) if ops else None,
        _judge(slowest, others),
        kernel_differences(slowest.time.gpu, theirs, NAMED_SHARE * (slowest.time.busy_s - median)),
    )


def analyse(read: Sequence[FileSummary | Snapshot], step: int | None = None) -> StepView:
    """The step's view from its files' summaries and memory snapshots (refused: two steps' or two
    jobs' files, a rank twice)."""
    chosen_all = choose_step(read, step)
    chosen = [s for s in chosen_all if isinstance(s, FileSummary)]
    snapshots = sorted((s for s in chosen_all if isinstance(s, Snapshot)), key=lambda s: s.rank)
    one_job(chosen)
    by_phase = _ranks_by_phase(chosen)
    if not by_phase and not snapshots:
        raise BadTrace(chosen[0].path if chosen else "(no file)", "no verl phase in any trace of the step")
    views = [phase_view(phase, ranks) for phase, ranks in by_phase.items()]
    steps = {s.step for s in chosen_all if s.step is not None}
    the_step = step if step is not None else (steps.pop() if steps else None)
    label = f"step {the_step}" if the_step is not None else "this step"
    return StepView(
        the_step,
        len(chosen_all),
        sorted({s.source for s in chosen} | ({"torch_memory"} if snapshots else set())),
        views,
        answer(label, views) if views else memory_answer(label, snapshots),
        [(s.who, s.path, s.gpu) for s in chosen],
        snapshots,
    )
