"""Batch statistics (plugin group_stats): verl's real compute_advantage (GRPO) on a real DataProto
with known groups, scores, lengths and data sources; every statistic against the value worked out
by hand, then through verl's real Tracking into a real hub and its /metrics."""

import math
import statistics

import numpy as np
import pytest
import torch

from tests.helpers import http

R, P = 8, 4  # max response length, prompt length
# (uid, data source, score of each response, response length of each); rewards are the scores
GROUPS = [
    ("g1", "math", [1, 1, 1, 1], [3, 8, 5, 2]),  # all solved
    ("g2", "math", [0, 0, 0, 0], [8, 8, 4, 0]),  # none solved; the last response was aborted (length 0)
    ("g3", "openai/gsm8k", [1, 0, 1, 0], [1, 2, 3, 4]),  # mixed
    ("g4", "openai/gsm8k", [0.5, 1, 0, 0], [6, 7, 8, 5]),  # mixed
    ("g5", "openai/gsm8k", [0.5, 0.5, 0.5, 0.5], [2, 2, 2, 2]),  # all equal, neither all nor none solved
]


def grpo_batch(groups=GROUPS):
    """A DataProto as verl's trainer holds it before advantage estimation: prompts, responses,
    the attention and response masks, a score at each response's last token, uid and data_source."""
    from verl import DataProto

    rows = [(uid, source, s, n) for uid, source, scores, lengths in groups for s, n in zip(scores, lengths)]
    lengths = torch.tensor([n for *_, n in rows])
    mask = (torch.arange(R)[None, :] < lengths[:, None]).long()
    scores = torch.zeros(len(rows), R)
    for i, (_, _, s, n) in enumerate(rows):
        if n:
            scores[i, n - 1] = s
    return DataProto.from_dict(
        tensors={
            "prompts": torch.randint(0, 100, (len(rows), P)),
            "responses": torch.randint(0, 100, (len(rows), R)),
            "attention_mask": torch.cat([torch.ones(len(rows), P, dtype=torch.long), mask], dim=1),
            "response_mask": mask,
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
        },
        non_tensors={
            "uid": np.array([uid for uid, *_ in rows], dtype=object),
            "data_source": np.array([source for _, source, *_ in rows], dtype=object),
        },
    )


def percentile(values, q):
    """Linear interpolation between the closest ranks (numpy's and torch's default), by hand."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def expected():
    """Every statistic worked out from GROUPS with plain Python."""
    rows = [(source, s, n) for _, source, scores, lengths in GROUPS for s, n in zip(scores, lengths)]
    scored = [s for _, s, n in rows if n > 0]  # verl's score statistics leave aborted responses out
    top, bottom = max(s for _, s, _ in rows), min(s for _, s, _ in rows)
    out = {
        "rl_insight/group/zero_variance_share": 3 / 5,  # g1, g2, g5
        "rl_insight/group/solve_all_share": 1 / 5,  # g1
        "rl_insight/group/solve_none_share": 1 / 5,  # g2
        "rl_insight/group/reward_std/mean": statistics.mean(statistics.stdev(g[2]) for g in GROUPS),
        "rl_insight/advantage/nonzero_share": 8 / 20,  # the responses of g3 and g4
    }
    assert [g[0] for g in GROUPS if max(g[2]) == min(g[2])] == ["g1", "g2", "g5"]
    assert [g[0] for g in GROUPS if min(g[2]) == top] == ["g1"] and [g[0] for g in GROUPS if max(g[2]) == bottom] == [
        "g2"
    ]
    for q in (10, 50, 90):
        out[f"rl_insight/score/p{q}"] = percentile(scored, q / 100)
        out[f"rl_insight/response_length/p{q}"] = percentile([n for *_, n in rows], q / 100)
    for source in ("math", "openai/gsm8k"):
        mine = [(s, n) for src, s, n in rows if src == source]
        key = f"rl_insight/source/{source}/"
        out[key + "count"] = len(mine)
        out[key + "score/mean"] = statistics.mean(s for s, n in mine if n > 0)
        out[key + "response_length/mean"] = statistics.mean(n for _, n in mine)
        out[key + "clip_ratio"] = sum(n == R for _, n in mine) / len(mine)
    assert out["rl_insight/source/math/score/mean"] == 4 / 7 and out["rl_insight/source/math/clip_ratio"] == 3 / 8
    return out


def grpo(batch):
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    return ray_trainer.compute_advantage(batch, adv_estimator=AdvantageEstimator.GRPO)


@pytest.mark.parametrize("on", ["the helper thread", "the calling thread"])
def test_each_statistic_of_a_grpo_batch_equals_the_value_worked_out_by_hand(on, monkeypatch):
    """The length's pass runs on the helper thread where the process may use two CPUs, on the
    calling thread where it may use one (affinity as ``taskset -c 0`` would leave it)."""
    import threading

    from verl_rl_insight.trainer.plugins.group_stats import HelperThread, batch_metrics

    if on == "the calling thread":
        monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    else:
        monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    helper = HelperThread()
    out = grpo(grpo_batch())
    ours = batch_metrics(out, {}, helper=helper)
    started = [t for t in threading.enumerate() if t.name.startswith("rl-insight-group-stats")]
    assert (helper.pool is not None and bool(started)) == (on == "the helper thread")
    if helper.pool is not None:
        helper.pool.shutdown()
    want = expected()
    assert set(ours) == set(want)
    for key, value in want.items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key


def _statistics_in_a_forked_child(batch, answers):
    from verl_rl_insight.trainer.plugins.group_stats import batch_metrics

    answers.put(batch_metrics(batch, {}))


def test_a_forked_child_whose_parent_had_the_helper_thread_still_gets_its_statistics():
    """A forked child inherits the executor but not its thread: a job handed to it would wait
    forever; the child makes a helper of its own."""
    import multiprocessing

    from verl_rl_insight.trainer.plugins.group_stats import HELPER, batch_metrics

    out = grpo(grpo_batch())
    in_parent = batch_metrics(out, {})
    if HELPER.pool is None:
        pytest.skip("this machine gives the process one CPU: no helper thread to inherit")
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_statistics_in_a_forked_child, args=(out, answers))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0, "the forked child hung on its parent's helper thread"
    assert answers.get(timeout=5) == in_parent


def test_a_batch_without_advantages_or_groups_gives_what_it_can_and_no_error():
    from verl_rl_insight.trainer.plugins.group_stats import batch_metrics

    batch = grpo_batch()
    del batch.non_tensor_batch["uid"]
    ours = batch_metrics(batch, {})  # before compute_advantage: no advantages; no uid: no groups
    assert not [k for k in ours if k.startswith(("rl_insight/group/", "rl_insight/advantage/"))]
    assert ours["rl_insight/score/p50"] == pytest.approx(expected()["rl_insight/score/p50"])
    assert batch_metrics(object(), {}) is None


def test_33_sources_in_a_run_give_32_of_them_keys_and_the_rest_other():
    from verl_rl_insight.trainer.plugins.group_stats import batch_metrics

    known: dict = {}
    first = batch_metrics(grpo(grpo_batch([(f"u{i}", f"src{i:02d}", [1, 0], [2, 4]) for i in range(33)])), known)
    sources = {k.split("/")[2] for k in first if k.startswith("rl_insight/source/")}
    assert sources == {f"src{i:02d}" for i in range(32)} | {"other"}
    assert first["rl_insight/source/other/count"] == 2 and first["rl_insight/source/src00/count"] == 2
    # a later step: the 32 keep their keys, a new source goes to "other" with the 33rd
    later = batch_metrics(
        grpo(grpo_batch([("a", "src32", [1], [3]), ("b", "new", [0], [8]), ("c", "src05", [1], [1])])), known
    )
    assert {k.split("/")[2] for k in later if k.startswith("rl_insight/source/")} == {"other", "src05"}
    assert later["rl_insight/source/other/count"] == 2
    assert later["rl_insight/source/other/clip_ratio"] == 0.5


def test_the_plugin_is_on_by_default_and_off_with_its_hydra_override():
    from verl_rl_insight.trainer.config import load_config
    from verl_rl_insight.trainer.manager import build_plugin_manager

    on = build_plugin_manager(load_config(environ={}), environ={})
    assert on.get_plugin("group_stats") is not None
    off = {
        "rl_insight": {"plugins": {"group_stats": {"enabled": False}}}
    }  # +rl_insight.plugins.group_stats.enabled=false
    assert (
        build_plugin_manager(load_config(trainer_config=off, environ={}), environ={}).get_plugin("group_stats") is None
    )


def test_through_compute_advantage_and_tracking_prometheus_shows_each_value(hub_server, monkeypatch):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    from verl.trainer.ppo.metric_utils import compute_data_metrics
    from verl.utils.tracking import Tracking

    tracking = Tracking("proj", "groups", default_backend=["rl_insight"])

    class Trainer:  # the wrap reads the step from the caller's global_steps, as in verl's fit
        global_steps = 7

        def step(self):
            return grpo(grpo_batch())

    out = Trainer().step()
    # fit's dict for the step: the keys fit adds, then verl's compute_data_metrics on the step's batch
    step_metrics = {"training/global_step": 7, "training/epoch": 0, **compute_data_metrics(out, use_critic=False)}
    tracking.log(step_metrics, step=7)
    tracking.finish()
    text = http("GET", server.url + "/metrics")[1].decode()

    def value(name):  # the live value: the last line of the series (earlier ones carry timestamps)
        lines = [x for x in text.splitlines() if x.startswith(name + "{")]
        assert lines, f"{name} not in /metrics"
        return float(lines[-1].split()[1])

    from verl_rl_insight.contract.naming import metric_name

    for key, want in expected().items():
        assert value(metric_name("rl_insight_monitor_", key)) == pytest.approx(want, abs=1e-9), key
    assert "rl_insight_monitor_rl_insight_source_openai_gsm8k_score_mean{" in text
    # verl's own keys stand as verl computed them
    assert value("rl_insight_monitor_response_length_clip_ratio") == pytest.approx(
        step_metrics["response_length/clip_ratio"]
    )
    assert value("rl_insight_monitor_critic_score_mean") == pytest.approx(step_metrics["critic/score/mean"])


def test_a_failing_statistic_never_fails_verls_compute_advantage(hub_server, monkeypatch):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    from verl.utils.tracking import Tracking

    from verl_rl_insight.trainer import runtime
    from verl_rl_insight.trainer.hookspecs import hookimpl

    tracking = Tracking("proj", "broken", default_backend=["rl_insight"])

    calls = []

    class Broken:
        @hookimpl
        def rl_insight_advantage_batch(self, batch):
            calls.append(batch)
            raise RuntimeError("a broken plugin")

    runtime.get_runtime().pm.register(Broken(), name="broken")
    try:
        out = grpo(grpo_batch())
    finally:
        tracking.finish()
    assert calls == [out]  # the hook saw the batch with its advantages, raised, and verl went on
    assert "advantages" in out.batch.keys()


def test_the_signal_and_per_source_panels_show_those_values_in_a_real_prometheus(hub_server, monkeypatch, tmp_path):
    """The dashboards' own queries (the signal row, one line per data source with the source as
    label ``source``) run in a real Prometheus scraping the hub, after one real step."""
    from tests.helpers import Prometheus, grafana_legend, wait_for
    from verl_rl_insight.dashboards.build import build
    from verl_rl_insight.dashboards.panels import every_panel
    from verl_rl_insight.server.stores.run_attempts import RunAttempts

    server = hub_server(attempts=RunAttempts())  # as the server builds its hub: the panels join on the attempt
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{server.port}"])
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
        from verl.trainer.ppo.metric_utils import compute_data_metrics
        from verl.utils.tracking import Tracking

        tracking = Tracking("proj", "panels", default_backend=["rl_insight"])
        out = grpo(grpo_batch())
        fit_keys = {"training/global_step": 1, "training/epoch": 0}
        tracking.log({**fit_keys, **compute_data_metrics(out, use_critic=False)}, step=1)
        tracking.finish()
        panels = {p["title"]: p for p in every_panel(build()["verl_trainer_v1_with_vllm_engine.json"])}

        def shown(title):
            results = {}
            for t in panels[title]["targets"]:
                expr = t["expr"].replace("$project", "proj").replace("$experiment_name", "panels")
                for r in prometheus.query(expr):
                    results[grafana_legend(t["legendFormat"], r["metric"])] = float(r["value"][1])
            return results

        want = expected()
        wait_for(lambda: shown("Responses per data source"), 30, what="the step scraped")
        assert shown("Groups with no signal") == pytest.approx(
            {
                "all rewards equal panels #1": want["rl_insight/group/zero_variance_share"],
                "all solved panels #1": want["rl_insight/group/solve_all_share"],
                "none solved panels #1": want["rl_insight/group/solve_none_share"],
            }
        )
        assert shown("Responses with a non-zero advantage") == {"non-zero advantage panels #1": 0.4}
        assert shown("Score p10 / p50 / p90") == pytest.approx(
            {f"p{q} panels #1": want[f"rl_insight/score/p{q}"] for q in (10, 50, 90)}
        )
        for title, stat in (
            ("Score mean per data source", "score/mean"),
            ("Response length mean per data source", "response_length/mean"),
            ("Clipped at max length, per data source", "clip_ratio"),
            ("Responses per data source", "count"),
        ):
            assert shown(title) == pytest.approx(
                {
                    "math panels #1": want[f"rl_insight/source/math/{stat}"],
                    "openai_gsm8k panels #1": want[f"rl_insight/source/openai/gsm8k/{stat}"],
                }
            ), title
    finally:
        prometheus.stop()


def test_the_v1_trainers_few_fields_still_give_groups_advantages_and_percentiles():
    """verl's v1 trainer (trainer_base._compute_advantage) hands compute_advantage a DataProto of a
    few fields: uid, response_mask, the scores as rm_scores; no responses, attention mask or data_source."""
    from verl import DataProto

    from verl_rl_insight.trainer.plugins.group_stats import batch_metrics

    full = grpo_batch()
    data = DataProto.from_dict(
        tensors={"response_mask": full.batch["response_mask"], "rm_scores": full.batch["token_level_scores"]},
        non_tensors={"uid": full.non_tensor_batch["uid"]},
    )
    data.batch["token_level_scores"] = data.batch["rm_scores"]
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]  # use_kl_in_reward off, as in v1
    ours = batch_metrics(grpo(data), {})
    want = expected()
    for key in [k for k in want if not k.startswith("rl_insight/source/")]:
        assert ours[key] == pytest.approx(want[key], abs=1e-9), key  # the response mask is the length here
    assert not [k for k in ours if k.startswith("rl_insight/source/")]
