"""The agent loop rows: figures from the trajectories verl's rollout_trace reports
(``actor_rollout_ref.rollout.trace.backend=rl_insight``)."""

from verl_rl_insight.dashboards import trajectories
from verl_rl_insight.dashboards.panels import (
    RATE,
    RUN,
    Layout,
    timeseries,
)

AGENT_LOOP_ROW = "Agent loop (actor_rollout_ref.rollout.trace.backend=rl_insight)"


def agent_loop_rows(layout: Layout) -> dict[str, str]:
    """rl_insight_agent_* from the trajectories verl's rollout_trace reports; returns {row: condition}."""
    layout.row(AGENT_LOOP_ROW, collapsed=True)

    def total(name: str) -> str:
        return f"sum by (validate) (rate(rl_insight_agent_{name}_total{{{RUN}}}{RATE}))"

    layout.add(
        timeseries("Trajectories traced", [(total("trajectories"), "validate={{validate}}")], unit="ops"), w=8, h=7
    )
    layout.add(trajectories.per_trajectory(), w=8, h=7)
    layout.add(trajectories.tool_latency(), w=8, h=7)
    layout.add(
        timeseries(
            "Failed ops and trajectories",
            [
                (total("failed_ops"), "ops validate={{validate}}"),
                (total("failed_trajectories"), "trajectories validate={{validate}}"),
            ],
            unit="ops",
        ),
        w=12,
        h=7,
    )
    layout.add(
        timeseries(
            "Tool calls and turns",
            [
                (total("tool_calls"), "tool calls validate={{validate}}"),
                (total("turns"), "turns validate={{validate}}"),
            ],
            unit="ops",
        ),
        w=12,
        h=7,
    )
    return {AGENT_LOOP_ROW: "actor_rollout_ref.rollout.trace.backend=rl_insight"}
