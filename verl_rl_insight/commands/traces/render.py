"""The step's view as a person reads it: a table per phase in the terminal, or one HTML file
(rank lanes, each rank's time split into work and waiting, the slowest rank marked)."""

from __future__ import annotations

import html

from verl_rl_insight.commands.api import print_table
from verl_rl_insight.commands.traces.analysis import BALANCED, PhaseView, StepView


def _held(phase: PhaseView) -> bool:
    """Whether the phase has a rank that held the others (not merely the largest of equals)."""
    return len(phase.ranks) > 1 and phase.spread >= BALANCED


def _s(value: float) -> str:
    return f"{value:.3f}" if value < 100 else f"{value:.0f}"


def _waiting(time_waiting: float, duration: float, ops: dict[str, float]) -> str:
    if duration <= 0:
        return "-"
    top = max(ops, key=lambda op: ops[op]) if ops and time_waiting >= duration * 0.005 else ""
    return f"{time_waiting / duration * 100:.0f} %" + (f" {top}" if top else "")


def print_view(view: StepView) -> None:
    step = f"step {view.step}" if view.step is not None else "step (not in the file names)"
    ranks = {r.who for p in view.phases for r in p.ranks}
    print(f"{step}: {view.files} trace file(s), {len(ranks)} rank(s), {', '.join(view.sources)}")
    for phase in view.phases:
        print()
        rows = [[phase.phase, "rank", "node", "took s", "work s", "waiting in collectives"]]
        for r in phase.ranks:
            mark = " <- slowest" if r is phase.slowest and _held(phase) else ""
            rows.append(
                [
                    "",
                    r.who,
                    r.node or "?",
                    _s(r.time.duration_s),
                    _s(r.time.busy_s),
                    _waiting(r.time.waiting_s, r.time.duration_s, r.time.waiting_by_op) + mark,
                ]
            )
        print_table(rows)
        spread = "inf" if phase.spread == float("inf") else f"{phase.spread:.2f}x"
        if _held(phase):
            print(f"  slowest rank {phase.slowest.who}; spread (max / median work) {spread}")
        elif len(phase.ranks) > 1:
            print(f"  balanced: spread (max / median work) {spread}")
    print()
    print(view.answer)


def _lanes(phase: PhaseView) -> str:
    longest = max(r.time.duration_s for r in phase.ranks) or 1.0
    rows = []
    for r in phase.ranks:
        work = r.time.busy_s / longest * 100
        wait = r.time.waiting_s / longest * 100
        cls = " class='slowest'" if r is phase.slowest and _held(phase) else ""
        rows.append(
            f"<tr{cls}><td>rank {html.escape(r.who)}</td><td>{html.escape(r.node or '?')}</td>"
            f"<td>{_s(r.time.duration_s)}</td><td>{_s(r.time.busy_s)}</td>"
            f"<td>{html.escape(_waiting(r.time.waiting_s, r.time.duration_s, r.time.waiting_by_op))}</td>"
            f"<td class='lane'><span class='work' style='width:{work:.1f}%'></span>"
            f"<span class='wait' style='width:{wait:.1f}%'></span></td></tr>"
        )
    head = "<tr><th>rank</th><th>node</th><th>took s</th><th>work s</th><th>waiting</th><th></th></tr>"
    return f"<h2>{html.escape(phase.phase)}</h2><table>{head}{''.join(rows)}</table>"


STYLE = (
    "body{font:14px sans-serif;margin:2em}td,th{padding:2px 8px;text-align:left}"
    ".lane{width:50%}.lane span{display:inline-block;height:12px}.work{background:#3b7dd8}"
    ".wait{background:#e0a030}.slowest td{font-weight:bold}"
)


def html_page(view: StepView) -> str:
    """A self-contained page: the answer, then each phase's rank lanes (blue work, orange waiting)."""
    title = f"step {view.step}" if view.step is not None else "profiled step"
    body = "".join(_lanes(p) for p in view.phases)
    return (
        f"<!doctype html><meta charset='utf-8'><title>rl-insight: {html.escape(title)}</title>"
        f"<style>{STYLE}</style><h1>{html.escape(title)}</h1><p><b>{html.escape(view.answer)}</b></p>"
        f"<p>blue: work, orange: waiting in collectives; each lane is the rank's time in the phase</p>{body}"
    )
