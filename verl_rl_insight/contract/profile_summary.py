"""A profiled step's per-rank summary, as the trainer sends it with a profile request's report
(``ProfileUpdate.summaries`` in ``wire.py``) and the step page draws it: bounded and typed."""

from __future__ import annotations

import shlex
from typing import Annotated, Literal

from msgspec import Meta, Struct

from verl_rl_insight.contract.wire_limits import MAX_STEP

Step = Annotated[int, Meta(ge=1, le=MAX_STEP)]
MAX_SUMMARY_RANKS = 1024  # ranks of one phase a step's summary carries
Seconds = Annotated[float, Meta(ge=0, le=1e7)]
ShortName = Annotated[str, Meta(min_length=1, max_length=64)]


Verdict = Literal["GPU-bound", "communication-bound", "host-bound"]


class ProfileRankTime(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One rank's time in one phase of a profiled step, as ``rl-insight profile analyze`` reads
    it from verl's traces: in the phase, and waiting in collectives (mostly in ``waiting_op``);
    with its GPU's part when the trace has device events (CUDA traces)."""

    rank: ShortName
    duration_s: Seconds
    waiting_s: Seconds
    node: Annotated[str, Meta(max_length=256)] | None = None
    waiting_op: ShortName | None = None
    verdict: Verdict | None = None  # None: no device event in its trace
    gpu_busy_s: Seconds | None = None  # compute kernels, memcpy or memset running
    gpu_host_s: Seconds | None = None  # neither GPU work nor communication: the GPU waiting on the host
    kernels: Annotated[int, Meta(ge=0, le=2**40)] | None = None
    peak_allocated_bytes: Annotated[float, Meta(ge=0, le=1e15)] | None = None


class ProfilePhase(Struct, forbid_unknown_fields=True, omit_defaults=True):
    phase: ShortName
    ranks: Annotated[list[ProfileRankTime], Meta(max_length=MAX_SUMMARY_RANKS)]
    slowest: ShortName | None = None  # None: balanced, no rank held the others
    ranks_total: Annotated[int, Meta(ge=0, le=2**31)] | None = None  # when ``ranks`` holds only the busiest
    spread: Annotated[float, Meta(ge=0)] | None = None  # the slowest rank's work / the other ranks' median
    judged_by: Literal["GPU work", "host time", "work"] | None = None  # what the slowest rank held the phase by


class ProfileStepSummary(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A profiled step's per-rank summary (not its traces): what the step page draws under the
    trainer's lanes."""

    step: Step
    answer: Annotated[str, Meta(max_length=500)]
    phases: Annotated[list[ProfilePhase], Meta(max_length=32)] = []


def analyze_command(trace_dir: str, step: int) -> str:
    """The command that gives a profiled step's whole analysis (the table, the kernels, the
    page with the GPU lanes), from where its traces are."""
    return f"rl-insight profile analyze {shlex.quote(trace_dir)} --step {step} -o step{step}.html"
