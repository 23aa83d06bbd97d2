"""The step's answer in words a person acts on: which phase held the step, on which rank, by what
(GPU work, the host, communication), how far from the other ranks, and what differs there."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from verl_rl_insight.commands.traces.gpu_time import HOST_BOUND, GpuTime
from verl_rl_insight.commands.traces.snapshot import Snapshot
from verl_rl_insight.commands.traces.views import GPU_WORK, HOST_TIME, PhaseView

ANSWER_CHARS = 500  # the summary's answer field holds 500 characters


def duration(seconds: float) -> str:
    """1.2 us, 75.9 ms, 1.55 s, 33 s: three figures, in the unit that reads."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.0f} s"


def percent(share: float) -> str:
    return f"{share * 100:.0f} %"


def times(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return "inf" if ratio == float("inf") else f"{ratio:.1f}x"


def idle_reason(gpu: GpuTime) -> str:
    """Why the GPU sat idle, from the largest of its idle causes."""
    causes = gpu.idle_causes
    if causes.host_wait_s >= max(causes.launch_gap_s, causes.other_s):
        return "host stalls between kernels (launches, syncs, Python), not GPU work"
    if causes.launch_gap_s >= causes.other_s:
        return "launch latency between many short kernels, not GPU work"
    return "queued kernels waited on syncs or other streams, not GPU work"


def _where(view: PhaseView) -> str:
    node = view.slowest.node
    return f"rank {view.slowest.who}" + (f" (node {node})" if node else "")


def _others_waited(view: PhaseView) -> str:
    if view.others_waiting_op is None:
        return ""
    return f"; the others waited {percent(view.others_waiting_share)} of theirs in {view.others_waiting_op}"


def _kernels_differ(view: PhaseView, with_mean: bool) -> str:
    """The slow rank's launches and kernel lengths against the others', and its most different kernel."""
    mine = view.slowest.time.gpu
    theirs = [r.time.gpu for r in view.ranks if r is not view.slowest and r.time.gpu is not None]
    if mine is None or not theirs:
        return ""
    parts = []
    launched = statistics.median(g.kernels for g in theirs)
    if launched and mine.kernels >= 1.5 * launched:
        parts.append(f"{mine.kernels} kernels against {launched:.0f} ({mine.kernels / launched:.1f}x)")
    means = [m for m in (g.mean_kernel_s for g in theirs) if m]
    mean = statistics.median(means) if means else None
    if with_mean and mine.mean_kernel_s and mean and mean >= 1.5 * mine.mean_kernel_s:
        parts.append(f"its kernels {duration(mine.mean_kernel_s)} long on average against {duration(mean)}")
    if view.differs:
        top = view.differs[0]
        at_most = "at most " if top.others_at_most else ""
        parts.append(
            f"most of it in {top.name} ({top.launches} launches, {duration(top.total_s)} against "
            f"{at_most}{top.others_launches:.0f}, {duration(top.others_total_s)})"
        )
    return "; " + "; ".join(parts) if parts else ""


def _held(label: str, view: PhaseView) -> str:
    judged, gpu = view.judged, view.slowest.time.gpu
    against = f", {times(judged.ratio)} the other ranks' median" if judged.ratio not in (None, float("inf")) else ""
    if judged.quantity == GPU_WORK and gpu is not None:
        line = (
            f"{label}: {view.phase} held the step on {_where(view)}: {duration(judged.slowest_s)} of GPU work"
            f"{against} ({duration(judged.others_s or 0.0)}), {gpu.verdict} (GPU busy "
            f"{percent(gpu.share(gpu.busy_s))} of the phase)" + _kernels_differ(view, with_mean=False)
        )
    elif judged.quantity == HOST_TIME and gpu is not None:
        line = (
            f"{label}: {view.phase} held the step on {_where(view)}: its GPU sat idle "
            f"{percent(gpu.share(gpu.host_s))} of {view.phase}: {idle_reason(gpu)}; host time "
            f"{duration(judged.slowest_s)}{against} ({duration(judged.others_s or 0.0)})"
            + _kernels_differ(view, with_mean=True)
        )
    else:
        spread = "" if view.spread == float("inf") else f", {view.spread:.1f}x the other ranks' median work"
        line = f"{label}: {view.phase} took {duration(view.slowest.time.duration_s)} on {_where(view)}{spread}"
        if view.others_waiting_op is not None:
            line += (
                f"; {percent(view.others_waiting_share)} of the others' time was waiting in {view.others_waiting_op}"
            )
        return line[:ANSWER_CHARS]
    return (line + _others_waited(view))[:ANSWER_CHARS]


def _balanced(label: str, phases: Sequence[PhaseView]) -> str:
    longest = max(phases, key=lambda p: p.slowest.time.duration_s)
    took = f"the longest phase is {longest.phase}, {duration(longest.slowest.time.duration_s)}"
    gpus = [r.time.gpu for r in longest.ranks if r.time.gpu is not None]
    verdicts = {g.verdict for g in gpus}
    if gpus and len(verdicts) == 1:
        (verdict,) = verdicts
        idle = max(g.share(g.host_s) for g in gpus)
        every = "on every rank" if len(longest.ranks) > 1 else ""
        took += f", {verdict} {every}".rstrip()
        if verdict == HOST_BOUND:
            took += f" (the GPU idle up to {percent(idle)} of it: {idle_reason(gpus[0])})"
    if max(len(p.ranks) for p in phases) == 1:
        return f"{label}: one rank's trace per phase, nothing to compare; {took}"
    return f"{label}: no rank held the others (every phase within 1.1x of the other ranks' median); {took}"


def size(value: float | None) -> str:
    """Bytes as a person reads them: 61.2 GiB, 340 MiB, 12 KiB."""
    if value is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 2**10:.3g} KiB"


def memory_answer(label: str, snapshots: Sequence[Snapshot]) -> str:
    """The line for a step of memory snapshots only: the rank with the highest peak, and what held it."""
    top = max(snapshots, key=lambda s: s.peak_bytes)
    line = (
        f"{label}: memory snapshots only (no trace); rank {top.who}'s allocated memory peaked at {size(top.peak_bytes)}"
    )
    if top.before.bytes >= top.peak_bytes / 2:
        line += f", {size(top.before.bytes)} of it allocated before the snapshot's history began"
    if top.sites:
        site = top.sites[0]
        line += (
            f"; the largest site the history saw: {site.where} ({size(site.bytes)} in {site.allocations} allocations)"
        )
    return line[:ANSWER_CHARS]


def answer(label: str, phases: Sequence[PhaseView]) -> str:
    """The one line: the phase whose slowest rank cost it most, on which rank and node, by what,
    how far from the other ranks, and what the others did meanwhile."""
    uneven = [p for p in phases if p.held]
    if not uneven:
        return _balanced(label, phases)[:ANSWER_CHARS]
    return _held(label, max(uneven, key=lambda p: p.held_s))
