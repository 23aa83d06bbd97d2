"""A profiled step's per-rank summary for the server: ``rl-insight profile analyze`` run on the
step's traces in a process of its own (niced, with a time limit), its JSON cut to what the step
page draws. The trace stays where verl wrote it; only the summary travels.

A process, not a thread: reading hundreds of megabytes of trace in the trainer's process would
hold its interpreter lock while the next step runs (promise 1)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from typing import Any

from verl_rl_insight.contract.profile_summary import MAX_SUMMARY_RANKS

logger = logging.getLogger(__name__)
TIMEOUT_S = 900.0
# rank entries in one summary to start from: 200-330 bytes each with their GPU's part; a phase of more
# ranks keeps its busiest (the slowest first) and says how many, and fewer are kept until the summary
# fits SUMMARY_BYTES, inside the report route's 64 KB body beside the report's other fields
RANK_ENTRIES = 240
SUMMARY_BYTES = 48 * 1024


def _nice() -> None:  # in the child, before it runs
    os.nice(19)


def analyze(trace_dir: str, step: int, timeout_s: float = TIMEOUT_S) -> dict[str, Any] | str:
    """The summary of ``step`` (the shape of ``contract.wire.ProfileStepSummary``), or the one
    line that says why there is none."""
    command = [sys.executable, "-m", "verl_rl_insight", "profile", "analyze", trace_dir, "--step", str(step)]
    try:
        done = subprocess.run(
            [*command, "--json", "--jobs", "1"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=_nice if os.name == "posix" else None,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"the traces' analysis took over {timeout_s:.0f} s"
    except OSError as exc:
        return f"the traces' analysis could not start: {exc}"
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["the traces' analysis failed"])[0].removeprefix("rl-insight: ")
    try:
        return compact(json.loads(done.stdout), step)
    except (ValueError, KeyError, TypeError) as exc:
        return f"the traces' analysis said something else than expected: {exc}"


JUDGED_BY = ("GPU work", "host time", "work")
VERDICTS = ("GPU-bound", "communication-bound", "host-bound")


def _gpu(gpu: object) -> dict[str, Any]:
    """A rank's GPU part of ``profile analyze --json`` as the summary carries it (nothing for a
    trace without device events)."""
    if not isinstance(gpu, dict) or gpu.get("verdict") not in VERDICTS:
        return {}
    row: dict[str, Any] = {
        "verdict": gpu["verdict"],
        "gpu_busy_s": max(0.0, float(gpu["busy_s"])),
        "gpu_host_s": max(0.0, float(gpu["host_s"])),
        "kernels": max(0, int(gpu["kernels"])),
    }
    memory = gpu.get("memory")
    if isinstance(memory, dict) and memory.get("peak_allocated_bytes") is not None:
        row["peak_allocated_bytes"] = max(0.0, float(memory["peak_allocated_bytes"]))
    return row


def compact(view: dict[str, Any], step: int) -> dict[str, Any]:
    """``profile analyze --json`` as the step page draws it, in ``SUMMARY_BYTES`` of JSON."""
    chosen = view["phases"][:32]
    per_phase = max(8, min(MAX_SUMMARY_RANKS, RANK_ENTRIES // max(len(chosen), 1)))
    while True:
        found = _compact(view, step, chosen, per_phase)
        if per_phase <= 1 or len(json.dumps(found)) <= SUMMARY_BYTES:
            return found
        per_phase = max(1, per_phase * 3 // 4)


def _compact(view: dict[str, Any], step: int, chosen: list[dict[str, Any]], per_phase: int) -> dict[str, Any]:
    phases = []
    for phase in chosen:
        spread = phase.get("spread")
        held = len(phase["ranks"]) > 1 and spread is not None and spread >= 1.1
        ranks = []
        kept = phase["ranks"]
        if len(kept) > per_phase:
            busiest = sorted(kept, key=lambda r: -float(r["work_s"]))[:per_phase]
            kept = [r for r in kept if any(r is b for b in busiest)]
        for rank in kept:
            ops = rank.get("waiting_by_op") or {}
            row: dict[str, Any] = {
                "rank": str(rank["rank"])[:64],
                "duration_s": max(0.0, float(rank["duration_s"])),
                "waiting_s": max(0.0, float(rank["waiting_s"])),
            }
            if rank.get("node"):
                row["node"] = str(rank["node"])[:256]
            if ops:
                row["waiting_op"] = str(max(ops, key=lambda op: ops[op]))[:64]
            row.update(_gpu(rank.get("gpu")))
            ranks.append(row)
        entry: dict[str, Any] = {"phase": str(phase["phase"])[:64], "ranks": ranks}
        if len(ranks) < len(phase["ranks"]):
            entry["ranks_total"] = len(phase["ranks"])
        if held:
            entry["slowest"] = str(phase["slowest"]["rank"])[:64]
        if spread is not None:
            entry["spread"] = float(spread)
        if held and phase.get("judged_by") in JUDGED_BY:
            entry["judged_by"] = phase["judged_by"]
        phases.append(entry)
    return {"step": step, "answer": str(view["answer"])[:500], "phases": phases}
