"""verl's real ``Tracking`` with ``rl_insight`` among its backends, on verl 0.9.1 and older verl."""

import importlib.util
import json
import math

import pytest

from tests.helpers import http, old_verl, run_python, wait_for
from verl_rl_insight.commands.demo.verl_step import step_metrics
from verl_rl_insight.trainer.plugins import metric_push


def series(server):
    return http("GET", server.url + "/metrics")[1].decode()


def test_verl_0_9_tracking_sends_every_scalar_with_project_and_experiment(hub_server, monkeypatch):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    from verl.utils.tracking import Tracking

    tracking = Tracking("proj", "exp-0.9", default_backend=["console", "rl_insight"])
    for step in (1, 2, 3):  # what verl's trainer logs at a step, three of its values pinned
        metrics = {**step_metrics(step, 3), "actor/pg_loss": 0.1 * step, "critic/score/mean": step, "timing_s/gen": 1.5}
        tracking.log(metrics, step=step)
    tracking.finish()
    [stream] = server.hub.streams()
    assert stream["labels"] == {"project": "proj", "experiment_name": "exp-0.9"}
    assert stream["step"] == 3
    text = series(server)
    for line in (
        'rl_insight_monitor_actor_pg_loss{experiment_name="exp-0.9",project="proj"} 0.30000000000000004',
        'rl_insight_monitor_critic_score_mean{experiment_name="exp-0.9",project="proj"} 3.0',
        'rl_insight_monitor_timing_s_gen{experiment_name="exp-0.9",project="proj"} 1.5',
        'rl_insight_monitor_training_global_step{experiment_name="exp-0.9",project="proj"} 3.0',
    ):
        assert line + "\n" in text


def test_non_numeric_values_are_skipped_and_counted_nan_and_inf_are_kept(hub_server, monkeypatch):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    import numpy as np
    import torch
    from verl.utils.tracking import Tracking

    tracking = Tracking("proj", "types", default_backend=["rl_insight"])
    tracking.log(
        {
            "a/np": np.float32(2.5),
            "a/tensor": torch.tensor(4.0),
            "a/int": 7,
            "a/nan": math.nan,
            "a/inf": math.inf,
            "a/text": "hello",
            "a/list": [1, 2],
            "a/vector": torch.ones(3),
        },
        step=1,
    )
    sender = metric_push.sender()
    assert sender.flush(5)
    assert sender.stats["skipped_values"] == 3
    text = series(server)
    assert 'rl_insight_monitor_a_np{experiment_name="types",project="proj"} 2.5\n' in text
    assert 'rl_insight_monitor_a_tensor{experiment_name="types",project="proj"} 4.0\n' in text
    assert 'rl_insight_monitor_a_int{experiment_name="types",project="proj"} 7.0\n' in text
    assert 'rl_insight_monitor_a_nan{experiment_name="types",project="proj"} NaN\n' in text
    assert 'rl_insight_monitor_a_inf{experiment_name="types",project="proj"} +Inf\n' in text
    assert "a_text" not in text and "a_list" not in text and "a_vector" not in text
    tracking.finish()


def test_verl_0_9_rl_insight_logger_is_routed_here_without_the_rl_insight_package(monkeypatch):
    assert importlib.util.find_spec("rl_insight") is None, "this test needs the separate rl_insight package absent"
    monkeypatch.setenv("VERL_RL_INSIGHT_ENABLE", "1")
    from verl.utils.tracking import RLInsightLogger

    from verl_rl_insight.trainer import runtime
    from verl_rl_insight.trainer.hookspecs import hookimpl

    seen = []

    class Recorder:
        @hookimpl
        def rl_insight_register_target(self, run, address, job, labels):
            seen.append(("target", address, job, labels))

        @hookimpl
        def rl_insight_state_span(self, run, name, lane, start_ns, end_ns, attributes):
            seen.append(("span", name, lane, end_ns >= start_ns))

    rt = runtime.start()
    rt.pm.register(Recorder())
    RLInsightLogger.register_rollout_metrics(["127.0.0.1:8000"], "vllm", [{"replica": 0}])
    with RLInsightLogger.trace_state("vllm_generate", state_lane_id="replica_0"):
        pass
    assert ("target", "127.0.0.1:8000", "vllm", {"replica": "0"}) in seen
    assert ("span", "vllm_generate", "replica_0", True) in seen


OLD_VERL_SCRIPT = """
import json, os
import verl
from verl.utils.tracking import Tracking
assert verl.__version__ == {version!r}, verl.__version__
tracking = Tracking("proj", "exp-{version}", default_backend=["console", "rl_insight"])
steps = json.loads(os.environ["VERL_STEPS"])  # what verl's trainer logs at a step (built by the test)
for step in (1, 2, 3):
    tracking.log({{**steps[str(step)], "actor/pg_loss": 0.5 / step, "critic/vf_loss": 2.0}}, step=step)
print("LOGGED")
# no finish(): verl < 0.9 has none; the backend must flush at interpreter exit
"""


@pytest.mark.parametrize("version", ["0.6.0", "0.8.0"])
def test_older_verl_accepts_rl_insight_and_flushes_at_exit(hub_server, version):
    server = hub_server()
    target = old_verl(version)
    steps = json.dumps({step: {k: float(v) for k, v in step_metrics(step, 3).items()} for step in (1, 2, 3)})
    result = run_python(
        OLD_VERL_SCRIPT.format(version=version),
        pythonpath=target,
        env={"RL_INSIGHT_SERVER_URL": server.url, "VERL_STEPS": steps},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LOGGED" in result.stdout
    [stream] = server.hub.streams()
    assert stream["labels"] == {"project": "proj", "experiment_name": f"exp-{version}"}
    assert stream["step"] == 3
    assert (
        f'rl_insight_monitor_actor_pg_loss{{experiment_name="exp-{version}",project="proj"}} {0.5 / 3!r}\n'
    ) in series(server)


def test_training_goes_on_when_no_server_url_is_set(caplog):
    from verl.utils.tracking import Tracking

    tracking = Tracking("proj", "no-url", default_backend=["rl_insight"])
    tracking.log(step_metrics(1), step=1)
    tracking.finish()
    assert "RL_INSIGHT_SERVER_URL is not set" in caplog.text


def test_a_failing_plugin_does_not_reach_the_training_loop(hub_server, monkeypatch, caplog):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    from verl.utils.tracking import Tracking

    from verl_rl_insight.trainer import runtime
    from verl_rl_insight.trainer.hookspecs import hookimpl

    class Broken:
        @hookimpl
        def rl_insight_log_metrics(self, run, metrics, step, timestamp):
            raise RuntimeError("plugin bug")

    tracking = Tracking("proj", "broken-plugin", default_backend=["rl_insight"])
    runtime.get_runtime().pm.register(Broken())
    for step in (1, 2):
        tracking.log(step_metrics(step), step=step)
    runtime.get_runtime().logs.drain()  # the plugins run on the log thread: both logs have reached them
    assert caplog.text.count("a plugin failed while logging metrics") == 1
    tracking.finish()


def test_streams_endpoint_lists_what_the_hub_holds(hub_server, monkeypatch):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    from verl.utils.tracking import Tracking

    tracking = Tracking("proj", "listed", default_backend=["rl_insight"])
    metrics = step_metrics(5)
    tracking.log(metrics, step=5)
    tracking.finish()
    body = json.loads(wait_for(lambda: http("GET", server.url + "/api/v1/streams")[1], what="streams"))
    # every key (training/global_step is the global step gauge), the step's time and rl_insight_run_finished
    assert body["streams"][0]["step"] == 5 and body["streams"][0]["series"] == len(metrics) + 2
    # and what it counts is what the hub exposes for the run
    exposed = [line for line in series(server).splitlines() if 'experiment_name="listed"' in line]
    assert body["streams"][0]["series"] == len(exposed), exposed


def test_monitoring_that_cannot_start_does_not_stop_tracking(monkeypatch, caplog):
    from verl.utils.tracking import Tracking

    from verl_rl_insight.trainer import runtime

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(runtime, "start", broken)
    tracking = Tracking("proj", "broken-start", default_backend=["console", "rl_insight"])
    tracking.log(step_metrics(1), step=1)  # console still logs, nothing raises
    assert "rl_insight" not in tracking.logger
    assert "monitoring could not start" in caplog.text
    tracking.finish()


def test_a_tracking_keyword_this_package_does_not_know_reaches_verl_untouched(hub_server, monkeypatch):
    """A newer verl may add keywords to Tracking; the wrapper must pass them on, with or without rl_insight."""
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    from verl_rl_insight.trainer.patches.tracking import _tracking_init

    calls = []

    def newer_init(project_name, experiment_name, default_backend="console", config=None, run_id=None):
        calls.append((project_name, default_backend, run_id))

    class Instance:
        def __init__(self):
            self.logger = {}

    plain, monitored = Instance(), Instance()
    _tracking_init(newer_init, plain, ("p", "e"), {"default_backend": ["console"], "run_id": "r1"})
    _tracking_init(newer_init, monitored, ("p", "e"), {"default_backend": ["rl_insight"], "run_id": "r2"})
    assert calls == [("p", ["console"], "r1"), ("p", ["rl_insight"], "r2")]
    assert "rl_insight" in monitored.logger and not plain.logger
