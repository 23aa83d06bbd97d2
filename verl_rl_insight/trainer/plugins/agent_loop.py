"""Agent-loop counts and latencies as metrics (``rl_insight_agent_*``), from the trajectories
verl's rollout_trace reports with backend rl_insight (trainer/patches/rollout_trace.py).

Per worker process (label ``worker``) and ``validate``: trajectories, generate turns, tool calls,
tool seconds, failed ops and trajectories as totals; for the newest step a worker saw, turns and
tool calls per trajectory, the mean tool latency and the mean reward of the trajectories that
carried one (scored per trajectory: rollout_trace.outcome).
"""

import collections
import os
import socket
import threading
import time
from typing import Any

from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.hookspecs import hookimpl

_lock = threading.Lock()
_totals: dict[tuple[str, str], dict[Any, Any]] = {}  # (project, experiment) -> {validate: counter}
_steps: dict[
    tuple[str, str], dict[Any, Any]
] = {}  # (project, experiment) -> {step: counter} (training trajectories only)
_worker = f"{socket.gethostname()}:{os.getpid()}"


@hookimpl
def rl_insight_configure(config: Any) -> None:
    with _lock:
        _totals.clear()
        _steps.clear()


@hookimpl
def rl_insight_trajectory(run: Any, trajectory: Any) -> None:
    ops = trajectory["ops"]
    tools = [op for op in ops if op["kind"] == "tool"]
    figures: collections.Counter[str] = collections.Counter(
        trajectories=1,
        turns=sum(op["kind"] == "generate" for op in ops),
        tool_calls=len(tools),
        tool_seconds=sum(op["end_ns"] - op["start_ns"] for op in tools) / 1e9,
        failed_ops=sum("error" in op for op in ops),
        failed_trajectories=int("error" in trajectory),
    )
    reward = trajectory["attributes"].get("reward")
    if isinstance(reward, float):
        figures.update({"rewarded": 1, "reward_sum": reward})
    validate = bool(trajectory["attributes"].get("validate"))
    step = trajectory["attributes"].get("step")
    key = (run.project, run.experiment_name)
    with _lock:
        _totals.setdefault(key, collections.defaultdict(collections.Counter))[validate].update(figures)
        if not validate and isinstance(step, int) and step >= 0:
            steps = _steps.setdefault(key, collections.defaultdict(collections.Counter))
            steps[step].update(figures)
            for old in sorted(steps)[:-4]:  # a few steps in flight at most
                del steps[old]


@hookimpl
def rl_insight_collect(run: Any) -> Any:
    """Every run this process traced trajectories for (a rollout worker may serve another run than
    the one it logs for)."""
    now = time.time()
    with _lock:
        runs = {
            key: ({v: dict(c) for v, c in totals.items()}, _newest(_steps.get(key, {})))
            for key, totals in _totals.items()
        }
    batches = []
    for (project, experiment), (totals, (newest, step)) in runs.items():
        batches += [
            MetricBatch(
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
                labels={"worker": _worker, "validate": str(validate).lower()},
            )
            for validate, c in totals.items()
        ]
        if step:
            n = max(step.get("trajectories", 0), 1)
            batches.append(
                MetricBatch(
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
                    labels={"worker": _worker},
                )
            )
    return batches or None


def _newest(steps: Any) -> Any:
    newest = max(steps, default=None)
    return newest, (dict(steps[newest]) if newest is not None else None)
