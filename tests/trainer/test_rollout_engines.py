"""Engine metrics end to end: verl's real LLMServerManager (0.9.1 and 0.8.0) starts SIMULATED
replicas serving real vLLM / SGLang metric names; the patched code path registers them with a
real rl-insight server; a real Prometheus scrapes them through http_sd; replicas that go away
leave the target list."""

import json
import os
import subprocess
import sys
import types

import pytest

from tests.helpers import REPO, http, old_verl, wait_for


def start_driver(engine, replicas, experiment, hub_url, disable_log_stats=False, pythonpath=None):
    env = dict(os.environ, RL_INSIGHT_SERVER_URL=hub_url)
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    process = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "tests" / "scripts" / "engine_driver.py"),
            engine,
            str(replicas),
            "engines",
            experiment,
            "1" if disable_log_stats else "0",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(REPO),
    )
    for line in process.stdout:
        if line.startswith("READY"):
            return process, line.split()
    raise AssertionError("driver failed: " + process.stderr.read()[-3000:])


def targets(hub_url):
    return json.loads(http("GET", hub_url + "/api/v1/targets")[1])["targets"]


def prom_query(prom_url, promql):
    import urllib.parse

    status, body = http("GET", prom_url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    return json.loads(body)["data"]["result"] if status == 200 else []


@pytest.mark.parametrize(
    "engine,metric,verl_version",
    [
        ("vllm", "vllm:num_requests_running", "0.9.1"),
        ("sglang", "sglang:num_running_reqs", "0.9.1"),
        ("vllm", "vllm:kv_cache_usage_perc", "0.8.0"),
    ],
)
def test_every_replica_is_scraped_with_job_replica_node_labels_and_its_own_labels(
    monitoring_server, engine, metric, verl_version
):
    hub_url, prom_url = monitoring_server
    pythonpath = old_verl(verl_version) if verl_version != "0.9.1" else None
    process, ready = start_driver(engine, 2, f"{engine}-{verl_version}", hub_url, pythonpath=pythonpath)
    try:
        assert ready[1] == verl_version
        addresses = set(ready[2:])
        registered = wait_for(
            lambda: (t := [x for x in targets(hub_url) if x["job"] == engine]) and len(t) == 2 and t,
            15,
            what="two replicas registered",
        )
        assert {t["address"] for t in registered} == addresses
        for t in registered:
            assert t["job"] == engine and t["labels"]["node"] == "127.0.0.1" and "engine" not in t["labels"]
            assert t["labels"]["project"] == "engines" and t["labels"]["experiment_name"] == f"{engine}-{verl_version}"
            assert t["expires_in_s"] is not None  # heartbeated, not static
        results = wait_for(
            lambda: (
                (r := prom_query(prom_url, f'{metric}{{experiment_name="{engine}-{verl_version}"}}'))
                and len(r) == 2
                and r
            ),
            30,
            what=f"{metric} of both replicas in Prometheus",
        )
        by_replica = {r["metric"]["replica"]: r for r in results}
        assert set(by_replica) == {"0", "1"}
        for replica, result in by_replica.items():
            labels = result["metric"]
            assert labels["job"] == engine and labels["project"] == "engines"
            assert labels["model_name"] == "/models/Qwen2.5-0.5B-Instruct" and "exported_engine" not in labels
            if engine == "vllm":
                assert labels["engine"] == "0"  # vLLM's own engine index, not shadowed
            expected = (int(replica) + 2) / 10 if "kv_cache" in metric else int(replica)
            assert float(result["value"][1]) == pytest.approx(expected)
    finally:
        process.stdin.write("\n")
        process.stdin.flush()
        assert process.wait(60) == 0, process.stderr.read()[-3000:]
    assert not [t for t in targets(hub_url) if t["job"] == engine]  # the run ended: its replicas left


def test_disable_log_stats_warns_with_the_override_and_does_not_crash(monitoring_server):
    hub_url, _ = monitoring_server
    process, ready = start_driver("vllm", 1, "no-stats", hub_url, disable_log_stats=True)
    process.stdin.write("\n")
    process.stdin.flush()
    stderr = process.stderr.read()
    assert process.wait(60) == 0, stderr[-3000:]
    assert "actor_rollout_ref.rollout.disable_log_stats=False" in stderr
    assert stderr.count("serve no engine metrics") == 1
    assert not [t for t in targets(hub_url) if t["job"] == "vllm"]


def test_agent_loop_manager_of_verl_0_6_shape_registers_replicas(hub_server, monkeypatch):
    """verl 0.6/0.7 start replicas from AgentLoopManager (a sync method). verl 0.6's agent_loop
    module does not import beside the transformers that verl 0.9 needs, so a STAND-IN module of
    the same path and shape is put in sys.modules."""
    from verl_rl_insight.trainer import runtime
    from verl_rl_insight.trainer.activation import bootstrap

    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    module = types.ModuleType("verl.experimental.agent_loop.agent_loop")

    class AgentLoopManager:
        def __init__(self, config):
            self.config = config

        def _initialize_llm_servers(self):
            self.rollout_replicas = [types.SimpleNamespace(replica_rank=r) for r in range(2)]
            self.server_addresses = ["127.0.0.1:8001", "127.0.0.1:8002"]

    module.AgentLoopManager = AgentLoopManager
    monkeypatch.setitem(sys.modules, module.__name__, module)
    bootstrap.deactivate()
    bootstrap.activate()
    runtime.start().run("p", "agent-loop")
    from omegaconf import OmegaConf

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "sglang", "disable_log_stats": False}}})
    AgentLoopManager(config)._initialize_llm_servers()
    registered = wait_for(lambda: server.api.parts.targets.list(), 10, what="targets")
    assert {(t["address"], t["labels"]["replica"], t["job"]) for t in registered} == {
        ("127.0.0.1:8001", "0", "sglang"),
        ("127.0.0.1:8002", "1", "sglang"),
    }
    runtime.shutdown()
    assert server.api.parts.targets.list() == []


def test_sglang_metrics_are_switched_on_where_verl_before_0_9_would_not(monkeypatch):
    """STAND-IN for verl 0.8's async_sglang_server (it imports sglang, absent on CPU): the same
    module path with a ServerArgs dataclass used by name, as the real module does."""
    import dataclasses

    from verl_rl_insight.trainer.activation import bootstrap

    module = types.ModuleType("verl.workers.rollout.sglang_rollout.async_sglang_server")

    @dataclasses.dataclass
    class ServerArgs:
        model_path: str
        enable_metrics: bool = False

    module.ServerArgs = ServerArgs
    module.SGLangHttpServer = type("SGLangHttpServer", (), {})
    monkeypatch.setitem(sys.modules, module.__name__, module)
    bootstrap.deactivate()
    bootstrap.activate()
    monkeypatch.setenv("VERL_RL_INSIGHT_ENABLE", "1")
    assert module.ServerArgs(model_path="m").enable_metrics is True
    assert "enable_metrics" in [f.name for f in dataclasses.fields(module.ServerArgs)]
    monkeypatch.setenv("VERL_RL_INSIGHT_ENABLE", "0")
    assert module.ServerArgs(model_path="m").enable_metrics is False


def test_monitoring_that_fails_inside_verl_calls_never_changes_their_result(monkeypatch):
    """The replica hooks run inside verl's own calls (a ``finally`` of generate, the manager's
    start-up): when monitoring itself fails there, verl's result is returned untouched."""
    import asyncio

    from verl_rl_insight.trainer import runtime
    from verl_rl_insight.trainer.patches import rollout_servers, server_managers

    def broken_start(*args, **kwargs):
        raise RuntimeError("monitoring is broken")

    monkeypatch.setattr(runtime, "start", broken_start)
    monkeypatch.setattr(runtime, "get_runtime", lambda: None)
    monkeypatch.setenv("VERL_RL_INSIGHT_ENABLE", "1")

    async def generate():
        return "tokens"

    assert asyncio.run(rollout_servers._timed(generate(), object(), "vllm_generate")) == "tokens"

    class ManagerOfAnUnknownShape:  # no rollout_config, no config
        pass

    assert server_managers._initialize(lambda: "servers", ManagerOfAnUnknownShape(), (), {}) == "servers"

    class Manager:
        rollout_config = {"disable_log_stats": False, "name": "vllm"}
        server_addresses = ["127.0.0.1:1"]
        rollout_replicas = [object()]

    assert server_managers._initialize(lambda: "servers", Manager(), (), {}) == "servers"
