"""Async trainers: verl's fully_async keys (named as verl 0.9.1's rollouter builds them) on panels of
their own, the staleness beside the limit it pauses at, evaluated by Prometheus' promtool as
Grafana sends the queries; separate_async's phases (``switch_to_rollout``, ``switch_wait``,
``switch_to_trainer``, timed by verl's own ``marked_timer`` in trainer_separate_async) in the phase
shares and in the timeline: spans with their own names, summed per step by ``timeline summary``."""

import re
import subprocess
import time
from pathlib import Path

import yaml

from tests.helpers import wait_for
from tests.server.managed.test_promql_parses import (
    PROJECT,
    as_grafana_sends,
    attempt_series,
    joined_labels,
    promtool,
    series,
)
from verl_rl_insight.contract.naming import metric_name
from verl_rl_insight.dashboards import DASHBOARDS_DIR, async_keys
from verl_rl_insight.dashboards.panels import M, every_panel

MAIN_ONLY = {"fully_async/monitor/queue/cancel_queue_size"}  # verl main's rollouter; 0.9.1 does not log it


def panel(title):
    import json

    dashboard = json.loads((DASHBOARDS_DIR / "verl_trainer_v1_with_vllm_engine.json").read_text())
    [found] = [p for p in every_panel(dashboard) if p.get("title") == title]
    return found


def test_each_async_key_is_one_verl_0_9_1s_rollouter_builds():
    """``f"fully_async/{key}"`` of the statistics verl 0.9.1 spells in its fully_async_policy source."""
    import verl

    source = "".join(
        p.read_text() for p in (Path(verl.__file__).parent / "experimental" / "fully_async_policy").rglob("*.py")
    )
    for key in async_keys.ASYNC_KEYS - MAIN_ONLY:
        assert f'"{key.removeprefix("fully_async/")}"' in source, key


def test_the_staleness_is_drawn_beside_the_limit_it_pauses_at_as_prometheus_evaluates_it(tmp_path):
    staleness = panel("Stale samples against their limit")
    threshold = panel("Staleness threshold")
    assert panel("Rollouter queues")["gridPos"]["y"] == staleness["gridPos"]["y"] == threshold["gridPos"]["y"]
    values = {
        "fully_async/count/staleness_samples": 96,
        "fully_async/static/max_required_samples": 128,
        "fully_async/static/required_samples": 64,
        "fully_async/static/staleness_threshold": 1,
        "fully_async/processing_time/tp99": 41.5,
    }
    exprs = [t["expr"] for p in (staleness, threshold, panel("Processing time of a sample")) for t in p["targets"]]
    shown = {}
    for expr in exprs:
        [name] = set(re.findall(r"rl_insight_monitor_\w+", expr))
        shown[name] = expr
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": series(k), "values": f"{v} {v} {v}"} for k, v in values.items()]
                + [{"series": attempt_series(), "values": "1 1 1"}],
                "promql_expr_test": [
                    {
                        "expr": as_grafana_sends(shown[metric_name(M, k)]),
                        "eval_time": "2m",
                        "exp_samples": [{"labels": joined_labels(), "value": v}],  # named by the run's attempt
                    }
                    for k, v in values.items()
                ],
            }
        ],
    }
    path = tmp_path / "async.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert panel("Processing time of a sample")["fieldConfig"]["defaults"]["unit"] == "s"


def test_separate_asyncs_phases_are_in_the_phase_shares(tmp_path):
    [expr] = [t["expr"] for t in panel("Trainer: share of each step per phase")["targets"]]
    steps = {"timing_s/switch_to_rollout": 1.0, "timing_s/switch_wait": 2.5, "timing_s/switch_to_trainer": 0.5}
    phase = '{experiment_name="qwen2.5_0.5b_grpo",phase="%s",project="' + PROJECT + '"}'
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": series(k), "values": f"{v} {v} {v}"} for k, v in {**steps, "timing_s/step": 10}.items()
                ],
                "promql_expr_test": [
                    {
                        "expr": as_grafana_sends(expr),
                        "eval_time": "2m",
                        "exp_samples": [
                            {"labels": phase % k.removeprefix("timing_s/"), "value": v / 10} for k, v in steps.items()
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "phases.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_separate_asyncs_phases_are_timeline_spans_of_their_own_and_in_the_summary(receiver):
    """verl's trainer_separate_async times its hand-overs with its own marked_timer: one span each,
    named for what it is, on the trainer lane, summed per step by the timeline summary."""
    from verl.trainer.ppo.v1 import trainer_separate_async as module

    from verl_rl_insight.server.timeline.summary import summarize
    from verl_rl_insight.trainer import runtime

    class Trainer:
        global_steps = 4

        def fit_step(self):
            timing_raw = {}
            with module.marked_timer("step", timing_raw):
                for phase in ("switch_to_rollout", "gen", "switch_wait", "switch_to_trainer"):
                    with module.marked_timer(phase, timing_raw, color="cyan"):
                        time.sleep(0.02)
            return timing_raw

    runtime.start().run("proj", "separate-async")
    timing = Trainer().fit_step()
    runtime.shutdown()
    assert {"switch_to_rollout", "switch_wait", "switch_to_trainer"} <= set(timing)  # verl's timing intact
    spans = wait_for(lambda: receiver.by_state("switch_to_trainer") and receiver.spans, 10, what="the spans")
    named = {s["attributes"]["state_name"]: s["name"] for s in spans}
    assert (named["switch_to_rollout"], named["switch_wait"], named["switch_to_trainer"]) == (
        "switch to rollout",
        "switch wait",
        "switch to trainer",
    )
    [step] = summarize(spans)
    assert step.step == 4 and {"switch_to_rollout", "switch_wait", "switch_to_trainer"} <= set(step.phases)
    assert step.phases["switch_wait"] >= 0.02
