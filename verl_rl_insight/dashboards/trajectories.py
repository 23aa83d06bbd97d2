"""The agent-loop trajectory dashboard: each traced trajectory (a verl rollout_trace session) as a
row, its turns and tool calls, the failed ones, and the counts per step, read from the spans this
package's backend sends (``agent trajectory`` on lane ``agent_loop``, its ops as children)."""

from verl_rl_insight.dashboards.panels import RATE, RUN, TRACE_RUN, Layout, Panel, timeseries, trace_view, traceql_table

SPANS = f'resource.service.name = "verl" && {TRACE_RUN}'
PER_STEP_ROW = "Agent loops per step"
CONDITION = "with actor_rollout_ref.rollout.trace.backend=rl_insight"


def table(title: str, query: str, description: str) -> Panel:
    return traceql_table(title, query, description, limit=200, spss=100)


def per_trajectory() -> Panel:
    """Turns and tool calls per trajectory (per worker for its newest step, averaged)."""
    return timeseries(
        "Turns and tool calls per trajectory",
        [
            (f"avg(rl_insight_agent_turns_per_trajectory{{{RUN}}})", "turns"),
            (f"avg(rl_insight_agent_tool_calls_per_trajectory{{{RUN}}})", "tool calls"),
        ],
        description="per worker for the newest step it traced, averaged over workers",
    )


def reward_per_trajectory() -> Panel:
    return timeseries(
        "Reward per trajectory",
        [(f"avg(rl_insight_agent_reward_per_trajectory{{{RUN}}})", "mean")],
        description="the traced trajectories of each worker's newest step that were scored as they ended, averaged",
    )


def tool_latency() -> Panel:
    return timeseries(
        "Tool latency",
        [
            (
                f"sum(rate(rl_insight_agent_tool_seconds_total{{{RUN}}}{RATE})) / "
                f"sum(rate(rl_insight_agent_tool_calls_total{{{RUN}}}{RATE}))",
                "mean",
            )
        ],
        unit="s",
    )


def build(run_variables: list[Panel]) -> Panel:
    layout = Layout()
    layout.row("Trajectories (actor_rollout_ref.rollout.trace.backend=rl_insight)")
    layout.add(
        table(
            "Trajectories, newest first",
            f'{{ {SPANS} && name = "agent trajectory" }} '
            "| select(span.verl.step, span.sample_index, span.rollout_n, span.validate, span.reward, "
            "span.num_turns, span.ops, span.ops_dropped, status, span.node)",
            "one row per traced trajectory: its step, sample, reward, turns, how many traced ops and its "
            "status; the trace ID opens its turns below (trace_id at the top). The reward is there when verl "
            "scores each trajectory as it ends (the reward loop); otherwise see the samples table of the "
            "training dashboard",
        ),
        w=24,
        h=10,
    )
    layout.add(
        table(
            "Agent sessions (RLInsightLogger.agent_loop_session), newest first",
            f'{{ {SPANS} && name = "agent session" }} '
            "| select(span.sample, span.session, span.traj, span.verl.step, span.outcome.reward, status)",
            "sessions an agent loop of your own opened with verl's RLInsightLogger.agent_loop_session and closed "
            "with finish(reward=..., ...): each outcome is a column outcome.<name>",
        ),
        w=24,
        h=8,
    )
    layout.add(
        table(
            "Failed trajectories, turns and tool calls",
            f'{{ {SPANS} && span.state_lane_id = "agent_loop" && status = error }} '
            "| select(span.state_name, span.op, span.verl.step, span.sample_index, statusMessage)",
            "every trajectory or op whose status is error, with its message",
        ),
        w=12,
        h=10,
    )
    layout.add(
        table(
            "Turns and tool calls",
            f'{{ {SPANS} && span.state_lane_id = "agent_loop" && name != "agent trajectory" }} '
            "| select(span.state_name, span.op, span.verl.step, span.sample_index, status)",
            "generate turns and tool calls of the traced trajectories, with their duration",
        ),
        w=12,
        h=10,
    )
    layout.add(
        trace_view("Selected trajectory", "the trajectory whose trace ID is in trace_id: its turns in order"),
        w=24,
        h=12,
    )
    layout.row(PER_STEP_ROW)

    def total(name: str) -> str:
        return f"sum by (validate) (rate(rl_insight_agent_{name}_total{{{RUN}}}{RATE}))"

    layout.add(per_trajectory(), w=6)
    layout.add(reward_per_trajectory(), w=6)
    layout.add(
        timeseries(
            "Failed trajectories",
            [(total("failed_trajectories"), "validate={{validate}}")],
            unit="ops",
        ),
        w=6,
    )
    layout.add(tool_latency(), w=6)
    trace_id = {"name": "trace_id", "type": "textbox", "label": "trace ID", "query": ""}
    return {
        "uid": "rl_insight_agent_trajectories",
        "title": "RL-Insight agent trajectories",
        "tags": ["rl-insight", "verl", "agent"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "editable": False,
        "templating": {"list": [*run_variables, trace_id]},
        "panels": layout.panels,
    }
