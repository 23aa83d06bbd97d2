"""Agent-loop counts and latencies as metrics (``rl_insight_agent_*``), from the trajectories
verl's rollout_trace reports with backend rl_insight (trainer/patches/rollout_trace.py).

Per worker process (label ``worker``) and ``validate``: trajectories, generate turns, tool calls,
tool seconds, failed ops and trajectories as totals; for the newest step a worker saw, turns and
tool calls per trajectory, the mean tool latency and the mean reward of the trajectories that
carried one (scored per trajectory: rollout_trace.outcome).
"""

from __future__ import annotations

import collections
import os
import socket
import threading
import time
from collections.abc import Mapping

from verl_rl_insight.contract.runs import Run
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.hook_types import RunInfo, Trajectory
from verl_rl_insight.trainer.hookspecs import hookimpl

Figures = collections.Counter  # figure name -> total (trajectories, turns, tool_calls, tool_seconds, ...)
WORKER = f"{socket.gethostname()}:{os.getpid()}"


class Plugin:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.totals: dict[Run, dict[bool, Figures[str]]] = {}  # run -> {validate: figures}
        self.steps: dict[Run, dict[int, Figures[str]]] = {}  # run -> {step: figures} (training only)

    @hookimpl
    def rl_insight_trajectory(self, run: RunInfo, trajectory: Trajectory) -> None:
        figures = trajectory_figures(trajectory)
        validate = bool(trajectory["attributes"].get("validate"))
        step = trajectory["attributes"].get("step")
        key = (run.project, run.experiment_name)
        with self.lock:
            self.totals.setdefault(key, collections.defaultdict(collections.Counter))[validate].update(figures)
            if not validate and isinstance(step, int) and step >= 0:
                steps = self.steps.setdefault(key, collections.defaultdict(collections.Counter))
                steps[step].update(figures)
                for old in sorted(steps)[:-4]:  # a few steps in flight at most
                    del steps[old]

    @hookimpl
    def rl_insight_collect(self, run: RunInfo) -> list[MetricBatch] | None:
        """Every run this process traced trajectories for (a rollout worker may serve another run than
        the one it logs for)."""
        now = time.time()
        with self.lock:
            runs = {
                key: ({v: dict(c) for v, c in totals.items()}, _newest(self.steps.get(key, {})))
                for key, totals in self.totals.items()
            }
        batches = []
        for (project, experiment), (totals, (newest, step)) in runs.items():
            batches += [total_batch(project, experiment, now, validate, c) for validate, c in totals.items()]
            if step and newest is not None:
                batches.append(step_batch(project, experiment, now, newest, step))
        return batches or None


def trajectory_figures(trajectory: Trajectory) -> Figures[str]:
    ops = trajectory["ops"]
    tools = [op for op in ops if op["kind"] == "tool"]
    figures: Figures[str] = collections.Counter(
        {
            "trajectories": 1,
            "turns": sum(op["kind"] == "generate" for op in ops),
            "tool_calls": len(tools),
            "tool_seconds": sum(op.get("end_ns", op["start_ns"]) - op["start_ns"] for op in tools) / 1e9,
            "failed_ops": sum("error" in op for op in ops),
            "failed_trajectories": int("error" in trajectory),
        }
    )
    reward = trajectory["attributes"].get("reward")
    if isinstance(reward, float):
        figures.update({"rewarded": 1, "reward_sum": reward})
    return figures


def total_batch(project: str, experiment: str, now: float, validate: bool, c: Mapping[str, float]) -> MetricBatch:
    return MetricBatch(
        project,
        experiment,
        None,
        now,
        {
            "rl_insight_agent_trajectories_total": c.get("trajectories", 0),
            "rl_insight_agent_turns_total": c.get("turns", 0),
            "rl_insight_agent_tool_calls_total": c.get("tool_calls", 0),
            "rl_insight_agent_tool_seconds_total": c.get("tool_seconds", 0.0),
            "rl_insight_agent_failed_ops_total": c.get("failed_ops", 0),
            "rl_insight_agent_failed_trajectories_total": c.get("failed_trajectories", 0),
        },
        labels={"worker": WORKER, "validate": str(validate).lower()},
    )


def step_batch(project: str, experiment: str, now: float, newest: int, step: Mapping[str, float]) -> MetricBatch:
    n = max(step.get("trajectories", 0), 1)
    return MetricBatch(
        project,
        experiment,
        None,
        now,
        {
            "rl_insight_agent_step": newest,
            "rl_insight_agent_step_trajectories": step.get("trajectories", 0),
            "rl_insight_agent_turns_per_trajectory": step.get("turns", 0) / n,
            "rl_insight_agent_tool_calls_per_trajectory": step.get("tool_calls", 0) / n,
            "rl_insight_agent_tool_latency_seconds": (
                step.get("tool_seconds", 0.0) / step["tool_calls"] if step.get("tool_calls") else 0.0
            ),
            **(
                {"rl_insight_agent_reward_per_trajectory": step["reward_sum"] / step["rewarded"]}
                if step.get("rewarded")
                else {}
            ),
        },
        labels={"worker": WORKER},
    )


def _newest(steps: Mapping[int, Figures[str]]) -> tuple[int | None, dict[str, int] | None]:
    newest = max(steps, default=None)
    return newest, (dict(steps[newest]) if newest is not None else None)
