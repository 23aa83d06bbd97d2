"""The step's view as a person reads it in the terminal: a table per phase (each rank's time,
waiting, and its GPU: busy, communication, host, kernels, peak memory, verdict), the slowest rank
against the others, its top kernels and what differs there, then the answer."""

from __future__ import annotations

from verl_rl_insight.commands.api import print_table
from verl_rl_insight.commands.printable import printable
from verl_rl_insight.commands.traces.gpu_time import GpuTime
from verl_rl_insight.commands.traces.snapshot import Snapshot
from verl_rl_insight.commands.traces.telling import duration, percent, size, times
from verl_rl_insight.commands.traces.views import PhaseView, RankTime, StepView

TOP_SHOWN = 3  # kernels printed per phase (--json has 30)


def waiting_cell(time_waiting: float, duration_s: float, ops: dict[str, float]) -> str:
    if duration_s <= 0:
        return "-"
    top = max(ops, key=lambda op: ops[op]) if ops and time_waiting >= duration_s * 0.005 else ""
    return f"{time_waiting / duration_s * 100:.0f} %" + (f" {top}" if top else "")


def gpu_cells(gpu: GpuTime | None) -> list[str]:
    """busy, communication, host, kernels, peak allocated, verdict; or "no GPU events"."""
    if gpu is None:
        return ["no GPU events", "", "", "", "", ""]
    return [
        percent(gpu.share(gpu.busy_s)),
        percent(gpu.share(gpu.waiting_s)),
        percent(gpu.share(gpu.host_s)),
        str(gpu.kernels),
        size(gpu.peak_allocated_bytes),
        gpu.verdict,
    ]


def _row(phase: PhaseView, r: RankTime) -> list[str]:
    mark = " <- slowest" if r is phase.slowest and phase.held else ""
    cells = ["", r.who, r.node or "?", duration(r.time.duration_s), duration(r.time.busy_s)]
    cells.append(waiting_cell(r.time.waiting_s, r.time.duration_s, r.time.waiting_by_op))
    return cells + [*gpu_cells(r.time.gpu)[:-1], gpu_cells(r.time.gpu)[-1] + mark]


def _about_slowest(phase: PhaseView) -> list[str]:
    lines = []
    judged = phase.judged
    if phase.held:
        against = (
            ""
            if judged.others_s is None
            else f", {times(judged.ratio)} the other ranks' median ({duration(judged.others_s)})"
        )
        lines.append(f"  slowest rank {phase.slowest.who}: {judged.quantity} {duration(judged.slowest_s)}{against}")
    elif len(phase.ranks) > 1:
        lines.append(f"  balanced: spread (max / the others' median work) {times(phase.spread)}")
    gpu = phase.slowest.time.gpu
    if gpu is not None and gpu.top:
        shown = [
            f"{k.name} {k.launches} x {duration(k.total_s)} ({percent(gpu.share(k.total_s))})"
            for k in gpu.top[:TOP_SHOWN]
        ]
        lines.append(f"  top kernels on rank {phase.slowest.who}: " + "; ".join(shown))
    if phase.held and phase.differs:
        told = [
            f"{d.name} {d.launches} x {duration(d.total_s)} against {'at most ' if d.others_at_most else ''}"
            f"{d.others_launches:.0f} x {duration(d.others_total_s)}"
            for d in phase.differs
        ]
        lines.append(f"  differs on rank {phase.slowest.who} (the others' median): " + "; ".join(told))
    return lines


HEADER = ["rank", "node", "took", "work", "waiting in collectives", "GPU busy", "comm", "host", "kernels"]
HEADER += ["peak mem", "verdict"]


def print_view(view: StepView) -> None:
    step = f"step {view.step}" if view.step is not None else "step (not in the file names)"
    ranks = {r.who for p in view.phases for r in p.ranks}
    print(printable(f"{step}: {view.files} file(s), {len(ranks)} rank(s), {', '.join(view.sources)}"))
    for phase in view.phases:
        print()
        # names come from the traces (kernels, ranks, hosts): a control character in one is shown, never obeyed
        print_table(printable([[phase.phase, *HEADER], *(_row(phase, r) for r in phase.ranks)]))
        for line in _about_slowest(phase):
            print(printable(line))
    for snapshot in view.snapshots:
        print()
        print(printable(snapshot_line(snapshot)))
    print()
    print(printable(view.answer))


def snapshot_line(snapshot: Snapshot) -> str:
    history = f"{snapshot.events} allocator events" if snapshot.events else "no history recorded: the dump's state"
    sites = "; ".join(f"{size(s.bytes)} {s.where} ({s.allocations} x)" for s in snapshot.sites[:TOP_SHOWN])
    during = f" in {' > '.join(snapshot.during)}" if snapshot.during else ""
    before = snapshot.before
    earlier = (
        f"; {size(before.bytes)} allocated before the history began ({before.allocations} x)" if before.bytes else ""
    )
    return (
        f"memory snapshot, rank {snapshot.who}: peak {size(snapshot.peak_bytes)} allocated{during} ({history}); "
        f"alive at the peak: {sites or 'nothing the history saw'}{earlier}"
    )
