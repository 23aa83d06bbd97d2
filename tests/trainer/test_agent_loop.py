"""Agent loops on the timeline: verl 0.9.1's real rollout_trace with backend rl_insight. A traced
trajectory (rollout_trace_attr) and the ops decorated with rollout_trace_op inside it reach a real
OTLP receiver as a trajectory span and its children; the counts reach the hub as
rl_insight_agent_*; verl's own sampling (trace=False) is respected; the Hydra override is
accepted by verl's config; RLInsightLogger.agent_loop_session returns a working session."""

import asyncio

import pytest

from tests.helpers import http, wait_for


@pytest.fixture
def rollout_trace():
    from verl.utils import rollout_trace

    rollout_trace.RolloutTraceConfig.reset()
    yield rollout_trace
    rollout_trace.RolloutTraceConfig.reset()


class Tokenizer:
    def decode(self, ids):
        return " ".join(f"tok{i}" for i in ids)


def agent_classes(rollout_trace_op):
    """The shapes of verl's traced ops: the LLM client's generate, a tool parser, a tool."""

    class LLMClient:
        tokenizer = Tokenizer()

        @rollout_trace_op
        async def generate(self, request_id, prompt_ids, sampling_params=None):
            await asyncio.sleep(0.03)
            return {"token_ids": list(range(600))}

    class ToolParser:
        @rollout_trace_op
        async def extract_tool_calls(self, responses_ids, tools=None):
            await asyncio.sleep(0.01)
            return "text", [{"name": "search"}]

    class SearchTool:
        @rollout_trace_op
        async def execute(self, instance_id, parameters, **kwargs):
            await asyncio.sleep(0.02)
            if parameters.get("fail"):
                raise TimeoutError("search backend timed out")
            return {"text": "result"}, 0.0, {}

    return LLMClient(), ToolParser(), SearchTool()


def agent_loop(rollout_trace_op):
    """An agent loop whose ``run`` is traced (as verl's single-turn and tool agent loops are),
    returning verl's own AgentLoopOutput."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    class ToolAgentLoop:
        @rollout_trace_op
        async def run(self, sampling_params, **kwargs):
            await asyncio.sleep(0.01)
            return AgentLoopOutput(
                prompt_ids=[1, 2], response_ids=[3, 4], response_mask=[1, 1], num_turns=4, metrics=AgentLoopMetrics()
            )

    return ToolAgentLoop()


async def one_trajectory(rollout_trace, sample_index, trace=True, fail_tool=False, reward=None):
    llm, parser, tool = agent_classes(rollout_trace.rollout_trace_op)
    with rollout_trace.rollout_trace_attr(
        sample_index=sample_index, step=7, rollout_n=1, validate=False, name="agent_loop", trace=trace
    ):
        if reward is not None:  # as verl's _run_agent_loop: run, then _compute_score sets the reward on the output
            output = await agent_loop(rollout_trace.rollout_trace_op).run({})
            output.reward_score = reward
        for turn in range(2):
            await llm.generate(f"r{turn}", prompt_ids=[1, 2, 3])
            await parser.extract_tool_calls([4, 5])
            try:
                await tool.execute("i", {"q": "x", "fail": fail_tool and turn == 1})
            except TimeoutError:
                pass


def test_a_traced_trajectory_becomes_a_span_with_its_ops_and_metrics(receiver, rollout_trace, hub_server, monkeypatch):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    import verl_rl_insight

    verl_rl_insight.init("agents", "agent-run")
    rollout_trace.RolloutTraceConfig.init(
        "agents", "agent-run", backend="rl_insight", token2text=True, max_samples_per_step_per_worker=1
    )

    async def step():  # as verl's AgentLoopWorker: one task per sample, only the sampled one traced
        await asyncio.gather(
            one_trajectory(rollout_trace, 3, fail_tool=True, reward=0.75),
            one_trajectory(rollout_trace, 4, trace=False, reward=0.25),
        )

    asyncio.run(step())
    verl_rl_insight.finish()

    [trajectory] = wait_for(
        lambda: [s for s in receiver.spans if s["name"] == "agent trajectory"], 10, what="the trajectory span"
    )
    attrs = trajectory["attributes"]
    assert (attrs["sample_index"], attrs["verl.step"], attrs["rollout_n"], attrs["validate"]) == (3, 7, 1, False)
    assert attrs["experiment_name"] == "agent-run" and attrs["state_lane_id"] == "agent_loop"
    # the reward scored on the output after the loop ran, and its turns: on the trajectory's span
    assert attrs["reward"] == 0.75 and attrs["num_turns"] == 4
    children = [s for s in receiver.spans if s["parent_span_id"] == trajectory["span_id"]]
    assert [s["name"] for s in sorted(children, key=lambda s: s["start_ns"])] == ["agent loop run"] + [
        "agent generate turn",
        "agent tool parsing",
        "agent tool call",
    ] * 2
    assert all(trajectory["start_ns"] <= c["start_ns"] <= c["end_ns"] <= trajectory["end_ns"] for c in children)
    generate = next(c for c in children if c["name"] == "agent generate turn")
    assert generate["end_ns"] - generate["start_ns"] >= 30_000_000
    assert generate["attributes"]["verl.step"] == 7 and generate["attributes"]["op"].endswith("LLMClient.generate")
    assert "tok599" not in generate["attributes"]["output"] and len(generate["attributes"]["output"]) < 1100
    assert generate["attributes"]["response_text"].startswith("tok0 tok1")  # token2text: decoded, bounded
    assert (
        len(generate["attributes"]["response_text"]) < 1100
        and generate["attributes"]["prompt_text"] == "tok1 tok2 tok3"
    )
    assert [s for s in receiver.spans if s["attributes"].get("sample_index") == 4] == []  # not sampled

    text = wait_for(
        lambda: (lambda t: t if "rl_insight_agent_trajectories_total" in t else None)(
            http("GET", server.url + "/metrics")[1].decode()
        ),
        10,
        what="agent metrics at the hub",
    )
    values = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rl_insight_agent_") and 'experiment_name="agent-run"' in line
    }
    assert values["rl_insight_agent_trajectories_total"] == 1 and values["rl_insight_agent_turns_total"] == 2
    assert values["rl_insight_agent_tool_calls_total"] == 2 and values["rl_insight_agent_failed_ops_total"] == 1
    assert values["rl_insight_agent_turns_per_trajectory"] == 2 and values["rl_insight_agent_step"] == 7
    assert values["rl_insight_agent_tool_latency_seconds"] >= 0.02
    assert values["rl_insight_agent_reward_per_trajectory"] == 0.75  # the traced one only


def test_other_backends_and_no_backend_are_untouched(rollout_trace, receiver, hub_server, monkeypatch):
    rollout_trace.RolloutTraceConfig.init("agents", "none", backend=None)
    asyncio.run(one_trajectory(rollout_trace, 1))
    # the positive control: the same process, then traced with rl_insight, does send its span;
    # once it has arrived, the untraced one (sent first, if at all) would have arrived too
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", hub_server().url)
    import verl_rl_insight

    verl_rl_insight.init("agents", "traced")
    rollout_trace.RolloutTraceConfig.reset()
    rollout_trace.RolloutTraceConfig.init("agents", "traced", backend="rl_insight", max_samples_per_step_per_worker=1)
    asyncio.run(one_trajectory(rollout_trace, 2))
    verl_rl_insight.finish()
    trajectories = wait_for(
        lambda: [s for s in receiver.spans if s["name"] == "agent trajectory"], 10, what="the traced trajectory"
    )
    assert [s["attributes"]["sample_index"] for s in trajectories] == [2]


def test_the_hydra_override_is_accepted_by_verls_config():
    import os

    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from verl.utils.config import omega_conf_to_dataclass

    GlobalHydra.instance().clear()
    with initialize_config_dir(
        config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"), version_base=None
    ):
        config = compose(
            "ppo_trainer",
            overrides=[
                "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.rollout.trace.backend=rl_insight",
                "actor_rollout_ref.rollout.trace.token2text=True",
            ],
        )
    GlobalHydra.instance().clear()
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    assert rollout.trace.backend == "rl_insight" and rollout.trace.token2text is True


def test_verls_agent_loop_session_gets_a_working_session(receiver, rollout_trace):
    from verl.utils.tracking import RLInsightLogger

    rollout_trace.RolloutTraceConfig.init("agents", "sessions", backend="rl_insight")
    import verl_rl_insight

    verl_rl_insight.init("agents", "sessions")
    session = RLInsightLogger.agent_loop_session(sample=5, session="s-1", traj=2, global_steps=9)
    assert session.identity["sample"] == "5" and session.identity["experiment_name"] == "sessions"
    session.finish(reward=1.0, turns=3)
    verl_rl_insight.finish()
    [span] = wait_for(lambda: [s for s in receiver.spans if s["name"] == "agent session"], 10, what="session span")
    attrs = span["attributes"]
    assert attrs["session"] == "s-1" and attrs["outcome.reward"] == 1.0 and attrs["verl.step"] == 9
