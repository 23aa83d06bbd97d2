"""RL state timeline: spans from verl's real phase timers (and verl 0.9's trace_state,
DistProfiler.annotate) received by a real OTLP/HTTP receiver that decodes the protobuf."""

import importlib
import sys
import time
import types

import pytest

from tests.helpers import old_verl, run_python, wait_for
from tests.otlp_receiver import OtlpReceiver
from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.plugins import state_timeline

TRAINER_MODULES = {
    "verl.trainer.ppo.ray_trainer": "trainer",
    "verl.trainer.ppo.v1.trainer_base": "trainer",
    "verl.trainer.ppo.v1.trainer_sync": "trainer",
    "verl.trainer.ppo.v1.trainer_colocate_async": "trainer",
    "verl.trainer.ppo.v1.trainer_separate_async": "trainer",
    "verl.experimental.fully_async_policy.fully_async_trainer": "trainer",
    "verl.experimental.fully_async_policy.fully_async_rollouter": "rollouter",
    "verl.experimental.one_step_off_policy.ray_trainer": "trainer",
    "verl.experimental.separation.ray_trainer": "trainer",
}


def one_training_step(marked_timer, step):
    """The shape of verl's fit loop: phases timed with the trainer module's own marked_timer."""

    class Trainer:
        global_steps = step

        def fit_step(self):
            timing_raw = {}
            with marked_timer("step", timing_raw):
                with marked_timer("gen", timing_raw, color="red"):
                    time.sleep(0.05)
                with marked_timer("update_actor", timing_raw, color="red"):
                    time.sleep(0.02)
            return timing_raw

    return Trainer().fit_step()


def test_trainer_phases_become_nested_spans_with_step_and_labels(receiver, hub_server, monkeypatch):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    from verl.trainer.ppo import ray_trainer
    from verl.utils.tracking import Tracking

    tracking = Tracking("proj", "timeline", default_backend=["rl_insight"])
    started = time.time_ns()
    timing = one_training_step(ray_trainer.marked_timer, step=7)
    ended = time.time_ns()
    assert set(timing) == {"step", "gen", "update_actor"} and timing["gen"] >= 0.05  # verl's timing intact
    tracking.finish()
    step = wait_for(lambda: receiver.by_state("step"), 10, what="step span")[0]
    gen = receiver.by_state("gen")[0]
    update = receiver.by_state("update_actor")[0]
    assert (step["name"], gen["name"], update["name"]) == ("trainer step", "rollout generate", "actor update")
    assert gen["parent_span_id"] == step["span_id"] and update["parent_span_id"] == step["span_id"]
    assert gen["trace_id"] == step["trace_id"] and step["parent_span_id"] == ""
    assert (
        started <= step["start_ns"] <= gen["start_ns"] < gen["end_ns"] <= update["start_ns"] < step["end_ns"] <= ended
    )
    assert gen["end_ns"] - gen["start_ns"] >= 50_000_000
    for span in (step, gen, update):
        attrs = span["attributes"]
        assert attrs["project"] == "proj" and attrs["experiment_name"] == "timeline"
        assert attrs["verl.step"] == 7 and attrs["state_lane_id"] == "trainer" and attrs["pid"] > 0
        assert attrs["node"]
    assert step["resource"]["service.name"] == "verl"
    # phase time as metrics too, per state and lane
    from tests.helpers import http

    text = http("GET", server.url + "/metrics")[1].decode()
    [line] = [x for x in text.splitlines() if x.startswith("rl_insight_state_count_total{") and 'state="gen"' in x]
    assert 'lane="trainer"' in line and 'experiment_name="timeline"' in line and line.endswith(" 1.0")


@pytest.mark.parametrize("module_name", sorted(TRAINER_MODULES))
def test_every_trainer_module_times_its_phases_through_the_patch(module_name, receiver):
    module = importlib.import_module(module_name)
    assert getattr(module.marked_timer, "_rl_insight_phase_timer", False), f"{module_name}.marked_timer not patched"
    runtime.start().run("proj", module_name)
    one_training_step(module.marked_timer, step=3)
    runtime.shutdown()
    [span] = wait_for(lambda: receiver.by_state("gen"), 10, what="gen span")
    assert span["attributes"]["state_lane_id"] == TRAINER_MODULES[module_name]
    assert span["attributes"]["experiment_name"] == module_name


def test_verl_0_9_trace_state_and_dist_profiler_roles_come_through(receiver, monkeypatch):
    monkeypatch.setenv("VERL_RL_INSIGHT_ENABLE", "1")
    from verl.utils.profiler.profile import DistProfiler
    from verl.utils.tracking import RLInsightLogger

    runtime.start().run("proj", "verl-0.9")
    with RLInsightLogger.trace_state("vllm_generate", state_lane_id="replica_1"):
        time.sleep(0.01)

    class Worker:
        profiler = types.SimpleNamespace(
            rank=2, check_enable=lambda: False, check_this_step=lambda: False, check_this_rank=lambda: False
        )

        @DistProfiler.annotate(role="actor_update")
        def update_actor(self):
            return "updated"

    assert Worker().update_actor() == "updated"
    runtime.shutdown()
    [generate] = wait_for(lambda: receiver.by_state("vllm_generate"), 10, what="generate span")
    assert generate["name"] == "rollout generate" and generate["attributes"]["state_lane_id"] == "replica_1"
    assert generate["end_ns"] - generate["start_ns"] >= 10_000_000
    [role] = wait_for(lambda: receiver.by_state("actor_update"), 10, what="annotate span")
    assert role["name"] == "actor update" and role["attributes"]["state_lane_id"] == "rank_2"


OLD_VERL_TIMELINE = """
import time
from verl.trainer.ppo import ray_trainer
from verl.utils.tracking import Tracking
tracking = Tracking("proj", "old-timeline", default_backend=["rl_insight"])
class Trainer:
    global_steps = 4
    def fit_step(self):
        timing_raw = {}
        with ray_trainer.marked_timer("step", timing_raw):
            with ray_trainer.marked_timer("reward", timing_raw):
                time.sleep(0.01)
        return timing_raw
print(sorted(Trainer().fit_step()))
tracking.logger["rl_insight"].finish()
"""


def test_verl_0_8_legacy_trainer_phases_become_spans(receiver):
    result = run_python(
        OLD_VERL_TIMELINE,
        pythonpath=old_verl("0.8.0"),
        env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "['reward', 'step']" in result.stdout
    reward = wait_for(lambda: receiver.by_state("reward"), 10, what="reward span")[0]
    step = receiver.by_state("step")[0]
    assert reward["parent_span_id"] == step["span_id"] and reward["attributes"]["verl.step"] == 4


def vllm_server_module_of_0_8_shape():
    """STAND-IN for verl 0.8's vllm_async_server (which imports vllm, absent on CPU): the same
    module path, class name, replica_rank attribute and async generate."""
    module = types.ModuleType("verl.workers.rollout.vllm_rollout.vllm_async_server")

    class vLLMHttpServer:
        def __init__(self, replica_rank):
            self.replica_rank = replica_rank

        async def generate(self, prompt_ids, sampling_params, request_id):
            import asyncio

            await asyncio.sleep(0.02)
            return {"token_ids": [1, 2, 3]}

    module.vLLMHttpServer = vLLMHttpServer
    return module


def test_generate_calls_on_verl_before_0_9_become_replica_lane_spans(receiver, monkeypatch):
    import asyncio

    from verl_rl_insight.trainer.activation import bootstrap

    module = vllm_server_module_of_0_8_shape()
    monkeypatch.setitem(sys.modules, module.__name__, module)
    bootstrap.deactivate()
    bootstrap.activate()  # patches what is imported already, as on a real import
    runtime.start().run("proj", "generate")
    server = module.vLLMHttpServer(replica_rank=3)
    assert asyncio.run(server.generate([1], {}, "r1")) == {"token_ids": [1, 2, 3]}
    runtime.shutdown()
    [span] = wait_for(lambda: receiver.by_state("vllm_generate"), 10, what="generate span")
    assert span["name"] == "rollout generate" and span["attributes"]["state_lane_id"] == "replica_3"
    assert span["end_ns"] - span["start_ns"] >= 20_000_000


def test_a_full_span_queue_drops_and_counts_never_blocks(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    import verl_rl_insight

    verl_rl_insight.init(
        "proj",
        "overload",
        config={"plugins": {"state_timeline": {"max_queue_spans": 3, "export_interval_s": 600, "batch_spans": 100}}},
    )
    for _ in range(10):
        with verl_rl_insight.state("gen", lane="trainer"):
            pass
    processor = runtime.get_runtime().services.timeline.processor
    assert processor.stats["dropped"] == 7
    [counters] = [
        b
        for b in runtime.get_runtime().hook.rl_insight_collect(run=runtime.get_runtime().current_run())
        for b in b
        if "rl_insight_timeline_dropped_spans_total" in b.raw
    ]
    assert counters.raw["rl_insight_timeline_dropped_spans_total"] == 7
    durations = [
        b
        for batches in runtime.get_runtime().hook.rl_insight_collect(run=runtime.get_runtime().current_run())
        for b in batches
        if b.labels.get("state") == "gen"
    ]
    assert durations[0].raw["rl_insight_state_count_total"] == 10


def test_otlp_endpoint_resolution_order(monkeypatch):
    from verl_rl_insight.trainer.config import load_config, server_of

    config = load_config({"rl_insight": {"server_url": "http://127.0.0.1:18080"}}, environ={})
    assert state_timeline.otlp_endpoint(config, server_of(config), environ={}) == "http://127.0.0.1:4318/v1/traces"
    assert (
        state_timeline.otlp_endpoint(
            config, server_of(config), environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4319/"}
        )
        == "http://127.0.0.1:4319/v1/traces"
    )
    assert (
        state_timeline.otlp_endpoint(
            config,
            server_of(config),
            environ={
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4320/v1/traces",
            },
        )
        == "http://127.0.0.1:4320/v1/traces"
    )
    config = load_config(
        {"rl_insight": {"plugins": {"state_timeline": {"otlp_endpoint": "http://127.0.0.1:4321/v1/traces"}}}},
        environ={},
    )
    assert (
        state_timeline.otlp_endpoint(
            config, server_of(config), environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}
        )
        == "http://127.0.0.1:4321/v1/traces"
    )


def test_spans_go_to_the_otlp_endpoint_the_server_announces(hub_server, monkeypatch):
    receiver = OtlpReceiver()
    try:
        server = hub_server(info=lambda: {"otlp_traces": receiver.url})
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)  # no OTEL_* variable, no otlp_endpoint
        import verl_rl_insight

        verl_rl_insight.init("proj", "announced")
        with verl_rl_insight.state("gen", lane="trainer"):
            pass
        verl_rl_insight.finish()
        [span] = wait_for(lambda: receiver.by_state("gen"), 10, what="span at the announced endpoint")
        assert span["attributes"]["experiment_name"] == "announced"
    finally:
        receiver.close()
