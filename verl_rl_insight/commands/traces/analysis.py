"""One step's traces, every rank together: per phase each rank's time, the rank that held the
others (the most work: time in the phase not spent waiting in a collective), the spread, and the
one-line answer. Pure: summaries in, figures out."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import NamedTuple

from verl_rl_insight.commands.traces.phases import ORDER
from verl_rl_insight.commands.traces.summary import BadTrace, FileSummary, PhaseTime

BALANCED = 1.1  # a phase whose slowest rank works under 1.1x the median rank's is not one rank's doing


class RankTime(NamedTuple):
    who: str
    rank: int
    node: str | None
    time: PhaseTime
    path: str


class PhaseView(NamedTuple):
    phase: str
    ranks: list[RankTime]
    slowest: RankTime
    median_busy_s: float
    spread: float  # the slowest rank's work / the median rank's work
    others_waiting_share: float  # of the other ranks' time in the phase, the part spent waiting
    others_waiting_op: str | None  # the collective they waited in most

    @property
    def held_s(self) -> float:
        """What the slowest rank's extra work cost the phase: its work past the median rank's."""
        return self.slowest.time.busy_s - self.median_busy_s


class StepView(NamedTuple):
    step: int | None
    files: int
    sources: list[str]
    phases: list[PhaseView]
    answer: str


def choose_step(summaries: Sequence[FileSummary], step: int | None) -> list[FileSummary]:
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


def phase_view(phase: str, ranks: list[RankTime]) -> PhaseView:
    slowest = max(ranks, key=lambda r: (r.time.busy_s, r.time.duration_s))
    median = statistics.median(r.time.busy_s for r in ranks)
    others = [r for r in ranks if r is not slowest]
    in_phase = sum(r.time.duration_s for r in others)
    waited = sum(r.time.waiting_s for r in others)
    ops: dict[str, float] = {}
    for r in others:
        for op, seconds in r.time.waiting_by_op.items():
            ops[op] = ops.get(op, 0.0) + seconds
    spread = slowest.time.busy_s / median if median > 0 else (1.0 if slowest.time.busy_s == 0 else float("inf"))
    return PhaseView(
        phase,
        ranks,
        slowest,
        median,
        spread,
        waited / in_phase if in_phase > 0 else 0.0,
        max(ops, key=lambda op: ops[op]) if ops else None,
    )


def _seconds(value: float) -> str:
    return f"{value:.3g} s" if value < 10 else f"{value:.0f} s"


def answer(step: int | None, phases: Sequence[PhaseView]) -> str:
    """The one line: the phase whose slowest rank cost it most, on which rank and node, how far
    from the median rank, and what the others did meanwhile."""
    label = f"step {step}" if step is not None else "this step"
    uneven = [p for p in phases if len(p.ranks) > 1 and p.spread >= BALANCED]
    if not uneven:
        longest = max(phases, key=lambda p: p.slowest.time.duration_s)
        took = f"the longest phase is {longest.phase}, {_seconds(longest.slowest.time.duration_s)}"
        if max(len(p.ranks) for p in phases) == 1:
            return f"{label}: one rank's trace per phase, nothing to compare; {took}"
        return f"{label}: no rank held the others (every phase within {BALANCED:.1f}x of its median rank); {took}"
    worst = max(uneven, key=lambda p: p.held_s)
    where = f"rank {worst.slowest.who}" + (f" (node {worst.slowest.node})" if worst.slowest.node else "")
    spread = "" if worst.spread == float("inf") else f", {worst.spread:.1f}x the median rank's work"
    line = f"{label}: {worst.phase} took {_seconds(worst.slowest.time.duration_s)} on {where}{spread}"
    if worst.others_waiting_op is not None:
        line += (
            f"; {worst.others_waiting_share * 100:.0f} % of the others' time was waiting in {worst.others_waiting_op}"
        )
    return line


def analyse(summaries: Sequence[FileSummary], step: int | None = None) -> StepView:
    """The step's view from its files' summaries (refused: two steps' files, a rank twice)."""
    chosen = choose_step(summaries, step)
    by_phase = _ranks_by_phase(chosen)
    if not by_phase:
        raise BadTrace(chosen[0].path if chosen else "(no file)", "no verl phase in any trace of the step")
    views = [phase_view(phase, ranks) for phase, ranks in by_phase.items()]
    steps = {s.step for s in chosen if s.step is not None}
    the_step = step if step is not None else (steps.pop() if steps else None)
    return StepView(the_step, len(chosen), sorted({s.source for s in chosen}), views, answer(the_step, views))


def as_json(view: StepView) -> dict[str, object]:
    """The view as ``--json`` prints it (seconds, shares 0-1)."""
    return {
        "step": view.step,
        "files": view.files,
        "sources": view.sources,
        "answer": view.answer,
        "phases": [
            {
                "phase": p.phase,
                "slowest": {"rank": p.slowest.who, "node": p.slowest.node},
                "median_work_s": p.median_busy_s,
                "spread": p.spread if p.spread != float("inf") else None,
                "others_waiting_share": p.others_waiting_share,
                "others_waiting_op": p.others_waiting_op,
                "ranks": [
                    {
                        "rank": r.who,
                        "node": r.node,
                        "duration_s": r.time.duration_s,
                        "waiting_s": r.time.waiting_s,
                        "work_s": r.time.busy_s,
                        "waiting_by_op": r.time.waiting_by_op,
                        "file": r.path,
                    }
                    for r in p.ranks
                ],
            }
            for p in view.phases
        ],
    }
