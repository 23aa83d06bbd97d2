"""No key costs a step: a ``data_source`` of about 200 characters (a dataset named by its full
path) makes keys whose metric names pass the server's 200 characters, in verl's own validation keys
(``val-core/<source>/reward/mean@1``) and in the plugin's ``rl_insight/source/<source>/...``. The
server leaves out each such key alone, names it in the answer and counts it; the plugin names a long
source by its start and a stable hash, so its own keys always fit. Every other key of the step, as
verl's own metric functions make it, reaches the hub's /metrics (what Prometheus scrapes)."""

import json
import logging
import time

import numpy as np
import pytest

from tests.helpers import http, push
from verl_rl_insight.commands.demo.verl_step import rollout_batch, step_metrics
from verl_rl_insight.contract.naming import metric_name
from verl_rl_insight.contract.wire import MAX_NAME
from verl_rl_insight.trainer.plugins import metric_push
from verl_rl_insight.trainer.plugins.group_stats import short_source

PREFIX = "rl_insight_monitor_"
LONG = "hf://datasets/" + "/".join(f"an-organisation-with-a-long-name-{i}" for i in range(5)) + "/gsm8k-train"


def exposed(text: str, name: str) -> float | None:
    lines = [x for x in text.splitlines() if x.startswith(name + "{")]
    return float(lines[-1].split()[1]) if lines else None


def long_source_step(step: int) -> dict[str, object]:
    """fit's dict at ``step`` for a batch half of whose prompts come from ``LONG``: the advantage
    through verl's (patched) compute_advantage, then verl's own metric functions and its validation
    keys for the same two sources."""
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    batch = rollout_batch(step)
    n = len(batch)
    batch.non_tensor_batch["data_source"] = np.array(
        [LONG if i // 4 % 2 else "openai/gsm8k" for i in range(n)], dtype=object
    )

    class Trainer:  # the patch reads the step from the caller's global_steps, as in verl's fit
        global_steps = step

        def advantage(self):
            return ray_trainer.compute_advantage(batch, adv_estimator=AdvantageEstimator.GRPO, num_repeat=4)

    out = Trainer().advantage()
    metrics = step_metrics(step, batch=out)
    sources = np.array([LONG, "openai/gsm8k"] * 8, dtype=object)
    scores = [float(i % 3 == 0) for i in range(16)]
    uids = [f"val-{i}" for i in range(16)]
    metrics.update(ray_trainer.RayPPOTrainer._val_metrics_update(None, sources, uids, {"reward": scores}, []))
    return metrics


def test_a_200_character_data_source_costs_its_long_keys_only_every_other_key_reaches_metrics(
    hub_server, monkeypatch, caplog
):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    caplog.set_level(logging.INFO, logger="verl_rl_insight")
    from verl.utils.tracking import Tracking

    assert len(LONG) >= 190
    tracking = Tracking("p", "long-source", default_backend=["rl_insight"])
    steps = {step: long_source_step(step) for step in (1, 2)}
    for step, metrics in steps.items():
        tracking.log(data=metrics, step=step)
    sender = metric_push.sender()
    assert sender is not None and sender.flush(15)
    assert sender.stats["rejected_batches"] == 0
    tracking.finish()
    text = http("GET", server.url + "/metrics")[1].decode()

    too_long = [k for k in steps[2] if len(metric_name(PREFIX, k)) > MAX_NAME]
    assert too_long and all(k.startswith("val-") and LONG in k for k in too_long)  # verl's own, not ours
    kept = {k: v for k, v in steps[2].items() if k not in too_long}
    assert len(kept) > 60
    for key, value in kept.items():
        name = metric_name(PREFIX, key)
        assert exposed(text, name) == pytest.approx(float(value), rel=1e-6, nan_ok=True), f"{key} of step 2"
    assert exposed(text, metric_name(PREFIX, "training/global_step")) == 2.0
    # the plugin's keys of the long source: present, short, under a stable name
    short = short_source(LONG)
    assert short != LONG and short == short_source(LONG) and len(short) <= 48
    for stat in ("count", "score/mean", "response_length/mean", "clip_ratio"):
        assert exposed(text, metric_name(PREFIX, f"rl_insight/source/{short}/{stat}")) is not None, stat
    assert exposed(text, metric_name(PREFIX, "rl_insight/source/openai/gsm8k/count")) is not None
    assert f"data_source {LONG!r} is logged as rl_insight/source/{short}/..." in caplog.text
    # the full name, for a user who sees the hash: a label of its own series, beside the short key
    named = [x for x in text.splitlines() if x.startswith("rl_insight_source_name{")]
    assert len(named) == 1 and f'data_source="{LONG}"' in named[0] and f'source_key="{short}"' in named[0], named
    assert 'experiment_name="long-source"' in named[0] and float(named[0].split()[1]) == 1.0
    # the long keys: named in the sender's log once, counted by the hub, never on /metrics
    assert sender.stats["dropped_keys"] >= len(too_long)
    assert f"leaves metric {metric_name(PREFIX, too_long[0])[:200]}" in caplog.text
    assert f'rl_insight_hub_keys_dropped_total{{reason="too_long"}} {2 * len(too_long)}' in text


def test_a_push_with_one_over_long_name_is_applied_without_it_and_the_answer_names_it(hub_server):
    """Straight through the HTTP API, as any client: 200, the other keys applied, the long one named."""
    server = hub_server()
    long_name = "m_" + "x" * 298
    batch = {"project": "p", "experiment_name": "e", "step": 4, "time": time.time(), "metrics": {"a": 1.0}}
    batch["metrics"][long_name] = 2.0
    status, body = push(server.url, {"batches": [batch]})
    answer = json.loads(body)
    assert status == 200 and answer["accepted"] == 1, body[:300]
    assert "over the limit of 200" in answer["dropped_keys"][long_name[: 2 * MAX_NAME]]
    text = http("GET", server.url + "/metrics")[1].decode()
    assert exposed(text, "a") == 1.0 and long_name not in text
    assert json.loads(http("GET", server.url + "/api/v1/hub")[1])["keys_dropped_total"]["too_long"] == 1
