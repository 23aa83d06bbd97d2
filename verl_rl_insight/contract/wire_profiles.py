"""The bodies of profile requests (``rl-insight profile``) and of the trainer's reports on them:
what ``POST /api/v1/profiles`` and ``POST /api/v1/profiles/report`` accept (names importable from wire)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from verl_rl_insight.contract.naming import LABEL_VALUE_PATTERN
from verl_rl_insight.contract.profile_summary import ProfileStepSummary
from verl_rl_insight.contract.wire_limits import MAX_LABEL_VALUE, MAX_STEP

PROFILE_ROLES = ("actor", "rollout", "ref", "critic")
PROFILE_STATES = ("requested", "armed", "running", "finished", "missed", "refused")
MAX_PROFILE_STEPS = 100  # one request profiles at most this many steps
MAX_RANKS = 64
RunLabel = Annotated[str, Meta(min_length=1, max_length=MAX_LABEL_VALUE, pattern=LABEL_VALUE_PATTERN)]
Step = Annotated[int, Meta(ge=1, le=MAX_STEP)]


class ProfileBody(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST /api/v1/profiles``: have the running trainer profile steps first_step..last_step
    with verl's own profiler (``global_profiler``)."""

    project: RunLabel
    experiment_name: RunLabel
    first_step: Step
    last_step: Step | None = None
    role: Literal["actor", "rollout", "ref", "critic"] | None = None
    ranks: Annotated[list[Annotated[int, Meta(ge=0, le=2**31)]], Meta(min_length=1, max_length=MAX_RANKS)] | None = None


class ProfileUpdate(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """What the trainer says of one request: its state, and what a person should know."""

    id: Annotated[str, Meta(pattern=r"^[0-9a-f]{12}(?!\n)$")]
    state: Literal["armed", "running", "finished", "missed", "refused"]
    detail: Annotated[str, Meta(max_length=2000)] = ""
    trace_dir: Annotated[str, Meta(max_length=4096)] | None = None
    steps: Annotated[list[Step], Meta(max_length=MAX_PROFILE_STEPS)] = []
    summaries: Annotated[list[ProfileStepSummary], Meta(max_length=MAX_PROFILE_STEPS)] = []


class ProfileReportBody(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST /api/v1/profiles/report``: the trainer's word on a run's requests and what its
    profiler can do (tool, roles, ranks, where traces go)."""

    project: RunLabel
    experiment_name: RunLabel
    updates: Annotated[list[ProfileUpdate], Meta(max_length=1000)] = []
    capability: Annotated[dict[str, Any], Meta(max_length=32)] | None = None
