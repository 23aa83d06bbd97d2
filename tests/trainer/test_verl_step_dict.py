"""What verl's trainer really logs at a step (``commands/demo/verl_step.py``: fit's dict, by verl's
own metric functions, ``training/global_step`` and ``training/epoch`` included) arrives whole: stock
verl ``Tracking`` with the ``rl_insight`` back end puts every step in a real Prometheus; a key the
server keeps for itself costs that key only, never the step; ``training/global_step`` is the step."""

import json
import logging
import time

from tests.helpers import Prometheus, free_port, http, push, start_hub_process, stop_group, wait_for
from verl_rl_insight.commands.demo.verl_step import step_metrics, trainer_steps
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, STEP_TIME_METRIC, metric_name
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.client.sender import BatchSender
from verl_rl_insight.trainer.plugins import metric_push

PREFIX = "rl_insight_monitor_"


def test_the_step_dict_is_verls_own_with_the_keys_fit_adds():
    """The positive control of every test below: the dict carries what made the hub refuse real runs."""
    steps = dict(trainer_steps(5, test_freq=5))
    assert sorted(steps) == [0, 1, 2, 3, 4, 5]
    assert all(k.startswith("val-core/") or k.startswith("val-aux/") for k in steps[0])  # val_before_train
    for step in range(1, 6):
        assert steps[step]["training/global_step"] == step and steps[step]["training/epoch"] == 0
        assert {"actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/lr"} <= set(steps[step])
        assert {"critic/score/mean", "global_seqlen/mean", "training/rollout_probs_diff_mean"} <= set(steps[step])
        assert {"timing_s/gen", "timing_s/step", "perf/throughput", "response_length/mean"} <= set(steps[step])
    assert any(k.startswith("val-core/") for k in steps[5]) and not any(k.startswith("val-") for k in steps[4])
    assert metric_name(PREFIX, "training/global_step") == GLOBAL_STEP_METRIC  # the name the hub had reserved


def test_stock_verl_tracking_with_the_real_step_dict_puts_every_step_in_prometheus_once_in_order(monkeypatch, tmp_path):
    """Stock verl ``Tracking(..., default_backend=["rl_insight"])`` logs fit's dict (with
    ``training/global_step``) for 8 steps and the validation before them: none is refused, and a
    real Prometheus holds each step once, in order, every value beside its own step."""
    port = free_port()
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"])
    hub = start_hub_process(port, tmp_path)
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"http://127.0.0.1:{port}")
        from verl.utils.tracking import Tracking

        tracking = Tracking("verl-run", "real-dict", default_backend=["rl_insight"])
        t0 = time.time()
        logged = {}
        for step, metrics in trainer_steps(8, test_freq=4):
            logged[step] = metrics
            tracking.log(data=metrics, step=step)
            time.sleep(0.3)
        sender = metric_push.sender()
        assert sender.flush(15)
        assert sender.stats["rejected_batches"] == 0 and sender.stats["sent_batches"] >= 9
        tracking.finish()

        def samples(key):
            name = metric_name(PREFIX, key)
            found = prometheus.raw_samples(f'{name}{{experiment_name="real-dict"}}', time.time() - t0 + 30)
            return sorted((t, v) for values in found.values() for v, t in values)

        steps = wait_for(
            lambda: (s := samples("training/global_step")) and {int(v) for _, v in s} == set(range(9)) and s,
            20,
            what="every step in prometheus",
        )
        folded = [int(v) for i, (_, v) in enumerate(steps) if i == 0 or steps[i - 1][1] != v]  # live repeats
        assert folded == list(range(9)), folded
        step_at = {t: int(v) for t, v in steps}
        # each logged value sits at a timestamp whose global step is the step that logged it
        for key in ("actor/entropy", "actor/pg_loss", "critic/score/mean", "timing_s/step", "training/epoch"):
            for t, value in samples(key):
                assert t in step_at, (key, t)
                assert value == float(logged[step_at[t]][key]), (key, step_at[t], value)
        validation = [k for k in logged[4] if k.startswith("val-core/")]
        assert validation and {step_at[t] for t, _ in samples(validation[0])} >= {0, 4, 8}
    finally:
        stop_group(hub)
        prometheus.stop()


RESERVED = {
    "rl_insight_health_finding": 1.0,  # a detector's finding: the alert rules fire on these
    "rl_insight_health_findings_total": 300.0,
    "rl_insight_hub_series": 5.0,
    STEP_TIME_METRIC: 1.0,
    "rl_insight_timeline_idle_ratio": 0.99,
}


def test_a_batch_with_reserved_names_applies_every_other_key_counts_them_and_the_sender_names_each_once(
    hub_server, caplog
):
    """A step's real dict with five names the server makes itself, for six steps: every other
    key of every step is applied, the five are not (no fake finding, no fake hub figure), the hub
    counts each time it dropped one, and the sender's log names each name once, not per step."""
    server = hub_server()
    sender = BatchSender(server.url + "/api/v1/push", linger_s=0.02)
    caplog.set_level(logging.WARNING, logger="verl_rl_insight")
    logged = {}
    for step in range(1, 7):
        metrics = step_metrics(step, 6)
        logged[step] = metrics
        raw = {metric_name(PREFIX, k): v for k, v in metrics.items()} | RESERVED
        raw["rl_insight_timeline_exported_spans_total"] = 12.0  # the trainer's span counter: not the server's
        sender.submit(MetricBatch("p", "reserved", step, 1.7e9 + step, raw))
        assert sender.flush(10)
    assert sender.stats["rejected_batches"] == 0 and sender.stats["sent_batches"] == 6

    [stream] = [s for s in server.hub.streams() if s["labels"]["experiment_name"] == "reserved"]
    assert stream["step"] == 6
    body = http("GET", server.url + "/metrics")[1].decode()
    for key, value in logged[6].items():
        assert f'{metric_name(PREFIX, key)}{{experiment_name="reserved",project="p"}} {float(value)!r}' in body, key
    for name in ("rl_insight_health_finding", "rl_insight_health_findings_total", "rl_insight_timeline_idle_ratio"):
        assert name not in body
    assert "rl_insight_hub_series 5.0" not in body
    assert 'rl_insight_timeline_exported_spans_total{experiment_name="reserved",project="p"} 12.0' in body  # trainer's
    assert f'{STEP_TIME_METRIC}{{experiment_name="reserved",project="p"}} {1.7e9 + 6!r}' in body  # the hub's own
    assert 'rl_insight_hub_keys_dropped_total{reason="reserved"} 30' in body
    assert json.loads(http("GET", server.url + "/api/v1/hub")[1])["keys_dropped_total"]["reserved"] == 30
    for name in RESERVED:
        assert caplog.text.count(f"leaves metric {name} out") == 1, name
    sender.close(2)


def test_a_credential_cannot_push_findings_the_answer_names_what_it_dropped(hub_server):
    """Straight through the HTTP API, as any client: the batch is applied without the server's
    names, and the 200 answer says which it left out and why."""
    server = hub_server()
    metrics = {metric_name(PREFIX, k): float(v) for k, v in step_metrics(3, 10).items()} | RESERVED
    batch = {"project": "p", "experiment_name": "fake", "step": 3, "time": time.time(), "metrics": metrics}
    status, body = push(server.url, {"batches": [batch]})
    answer = json.loads(body)
    assert status == 200 and answer["accepted"] == 1
    assert set(answer["dropped_keys"]) == set(RESERVED)
    assert "server's own name" in answer["dropped_keys"]["rl_insight_health_finding"]
    exposed = http("GET", server.url + "/metrics")[1].decode()
    assert 'rl_insight_monitor_actor_pg_loss{experiment_name="fake"' in exposed
    assert "rl_insight_health_finding" not in exposed
    # the sender's copy of that step (resent after an outage) is not counted again
    status, body = push(server.url, {"batches": [batch]})
    assert status == 200 and json.loads(body)["duplicates"] == 1 and "dropped_keys" not in json.loads(body)
    assert json.loads(http("GET", server.url + "/api/v1/hub")[1])["keys_dropped_total"]["reserved"] == len(RESERVED)


def test_training_global_step_that_disagrees_with_the_step_wins_and_is_counted(hub_server, monkeypatch, caplog):
    """verl logs ``training/global_step`` = 7 at ``step=3`` (a wrapper that counts steps its own
    way): the step is 7 in the hub and on /metrics, the disagreement counted once per batch and
    named once in the sender's log; an agreeing step is not counted."""
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    caplog.set_level(logging.WARNING, logger="verl_rl_insight")
    from verl.utils.tracking import Tracking

    tracking = Tracking("p", "disagree", default_backend=["rl_insight"])
    tracking.log(data=step_metrics(2, 10), step=2)  # agrees
    tracking.log(data=step_metrics(7, 10), step=3)
    tracking.log(data=step_metrics(8, 10), step=4)
    sender = metric_push.sender()
    assert sender.flush(10) and sender.stats["rejected_batches"] == 0
    [stream] = [s for s in server.hub.streams() if s["labels"]["experiment_name"] == "disagree"]
    assert stream["step"] == 8
    body = http("GET", server.url + "/metrics")[1].decode()
    assert f'{GLOBAL_STEP_METRIC}{{experiment_name="disagree",project="p"}} 8.0' in body
    assert "rl_insight_hub_step_disagreements_total 2" in body
    assert sender.stats["step_disagreements"] == 2
    assert caplog.text.count("differs from the step it was logged at") == 1
    tracking.finish()


def test_a_global_step_key_that_is_no_step_costs_that_key_only(hub_server):
    """``training/global_step`` of 2.5 (or NaN): the batch keeps its ``step`` field and every other
    key; the key is dropped and counted as not a step."""
    server = hub_server()
    metrics = {metric_name(PREFIX, k): float(v) for k, v in step_metrics(2, 10).items()}
    run = {"project": "p", "experiment_name": "odd"}
    batches = [
        {**run, "step": 2, "time": 1.7e9 + 2, "metrics": metrics | {GLOBAL_STEP_METRIC: 2.5}},
        {**run, "step": 3, "time": 1.7e9 + 3, "metrics": {GLOBAL_STEP_METRIC: "NaN"}},
    ]
    status, body = push(server.url, {"batches": batches})
    assert status == 200 and json.loads(body)["accepted"] == 2
    assert "is the step" in json.loads(body)["dropped_keys"][GLOBAL_STEP_METRIC]
    exposed = http("GET", server.url + "/metrics")[1].decode()
    assert f'{GLOBAL_STEP_METRIC}{{experiment_name="odd",project="p"}} 3.0' in exposed
    assert 'rl_insight_monitor_actor_pg_loss{experiment_name="odd"' in exposed
    assert 'rl_insight_hub_keys_dropped_total{reason="not_a_step"} 2' in exposed
