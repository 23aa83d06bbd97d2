"""``rl-insight profile analyze --json``: the step's view as one JSON object (seconds, bytes,
shares 0-1). Its fields are documented in docs/profile-analyze.md ("The JSON"), and the test there
reads both."""

from __future__ import annotations

from verl_rl_insight.commands.traces.differences import KernelDiff
from verl_rl_insight.commands.traces.gpu_time import GpuTime
from verl_rl_insight.commands.traces.views import PhaseView, RankTime, StepView

JsonObject = dict[str, object]


def _finite(value: float | None) -> float | None:
    return None if value is None or value == float("inf") else value


def gpu_json(gpu: GpuTime | None) -> JsonObject | None:
    """One window's GPU figures, or None when the trace has no device events."""
    if gpu is None:
        return None
    causes = gpu.idle_causes
    return {
        "verdict": gpu.verdict,
        "window_s": gpu.window_s,
        "device_window_s": gpu.device_window_s,
        "events": gpu.events,
        "kernels": gpu.kernels,
        "kernel_time_s": {
            "compute": gpu.compute_s,
            "communication": gpu.communication_s,
            "memcpy": gpu.memcpy_s,
            "memset": gpu.memset_s,
        },
        "busy_s": gpu.busy_s,
        "compute_busy_s": gpu.compute_busy_s,
        "communication_busy_s": gpu.communication_busy_s,
        "overlap_s": gpu.overlap_s,
        "exposed_communication_s": gpu.communication_busy_s - gpu.overlap_s,
        "waiting_s": gpu.waiting_s,
        "host_s": gpu.host_s,
        "idle_s": gpu.idle_s,
        "idle_causes_s": {"host_wait": causes.host_wait_s, "launch_gap": causes.launch_gap_s, "other": causes.other_s},
        "shares": {
            "gpu": gpu.share(gpu.busy_s),
            "communication": gpu.share(gpu.waiting_s),
            "host": gpu.share(gpu.host_s),
            "idle": gpu.share(gpu.idle_s),
        },
        "mean_kernel_s": gpu.mean_kernel_s,
        "top_kernels": [
            {
                "name": k.name,
                "kind": k.kind,
                "launches": k.launches,
                "total_s": k.total_s,
                "share": gpu.share(k.total_s),
            }
            for k in gpu.top
        ],
        "memory": None
        if gpu.peak_allocated_bytes is None
        else {"peak_allocated_bytes": gpu.peak_allocated_bytes, "peak_reserved_bytes": gpu.peak_reserved_bytes},
        "lanes": gpu.lanes._asdict(),
    }


def _rank(r: RankTime) -> JsonObject:
    return {
        "rank": r.who,
        "node": r.node,
        "duration_s": r.time.duration_s,
        "waiting_s": r.time.waiting_s,
        "work_s": r.time.busy_s,
        "waiting_by_op": r.time.waiting_by_op,
        "file": r.path,
        "gpu": gpu_json(r.time.gpu),
    }


def _diff(d: KernelDiff) -> JsonObject:
    return {
        "name": d.name,
        "kind": d.kind,
        "launches": d.launches,
        "total_s": d.total_s,
        "others_launches": d.others_launches,
        "others_total_s": d.others_total_s,
        "others_at_most": d.others_at_most,
    }


def _phase(p: PhaseView) -> JsonObject:
    return {
        "phase": p.phase,
        "slowest": {"rank": p.slowest.who, "node": p.slowest.node},
        "held": p.held,
        "median_work_s": p.median_busy_s,
        "spread": _finite(p.spread),
        "judged_by": p.judged.quantity,
        "slowest_s": p.judged.slowest_s,
        "others_median_s": p.judged.others_s,
        "ratio": _finite(p.judged.ratio),
        "others_waiting_share": p.others_waiting_share,
        "others_waiting_op": p.others_waiting_op,
        "differs": [_diff(d) for d in p.differs],
        "ranks": [_rank(r) for r in p.ranks],
    }


def as_json(view: StepView) -> JsonObject:
    """The view as ``--json`` prints it."""
    return {
        "step": view.step,
        "files": view.files,
        "sources": view.sources,
        "answer": view.answer,
        "phases": [_phase(p) for p in view.phases],
        "traces": [{"rank": who, "file": path, "gpu": gpu_json(gpu)} for who, path, gpu in view.files_gpu],
        "snapshots": [
            {
                "rank": s.who,
                "file": s.path,
                "peak_allocated_bytes": s.peak_bytes,
                "peak_unix_s": s.peak_unix_s,
                "events": s.events,
                "during": list(s.during),
                "sites": [site._asdict() for site in s.sites],
                "before_history": {"bytes": s.before.bytes, "allocations": s.before.allocations},
            }
            for s in view.snapshots
        ],
    }
