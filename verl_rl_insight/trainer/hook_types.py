"""The types the hooks carry (hookspecs.py) besides verl's own objects: who is logging and what a
traced agent-loop trajectory holds."""

from __future__ import annotations

from typing import NamedTuple, TypedDict


class RunInfo(NamedTuple):
    """Who is logging: the labels every series of the run carries."""

    project: str
    experiment_name: str


class _TracedOpBase(TypedDict):
    name: str
    kind: str
    span_name: str
    start_ns: int
    attributes: dict[str, object]


class TracedOp(_TracedOpBase, total=False):
    """One traced call inside an agent-loop trajectory (a generate turn, a tool call, ...)."""

    end_ns: int
    error: str


class _TrajectoryBase(TypedDict):
    start_ns: int
    attributes: dict[str, object]
    ops: list[TracedOp]
    ops_dropped: int


class Trajectory(_TrajectoryBase, total=False):
    """A finished agent-loop trajectory (``rl_insight_trajectory``); ``output`` is the agent loop's
    result while the trajectory runs (read for the reward at its end, then removed)."""

    end_ns: int
    error: str
    output: object
